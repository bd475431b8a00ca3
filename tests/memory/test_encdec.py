"""T5 (encoder-decoder): the KV cache of generation and the activations of a step, against counts made here from
shapes and from a real transformers model."""
from __future__ import annotations

import pytest

from campaign.memory import make_workload
from campaign.memory.kv import estimate_kv
from campaign.models.architectures import spec_from_config

T5 = dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, num_layers=2, num_heads=4,
          d_kv=16, d_ff=256, vocab_size=1000)


def _spec(**change):
    return spec_from_config(T5 | change, name="t5", source="test")


def test_kv_counts_self_and_cross_attention_by_hand():
    # per decoder layer and token: K and V, 4 heads x 16 (d_kv) x 2 B = 256 B; 3 decoder layers
    spec = _spec(num_decoder_layers=3)
    kv = estimate_kv(spec, seq_len=10, batch=3, encoder_seq_len=7)
    self_attention = 3 * 256 * 10 * 3      # grows with the 10 decoder tokens of each of 3 sequences
    cross_attention = 3 * 256 * 7 * 3      # the 7 encoder tokens, projected once per sequence in each layer
    assert kv.cross_attention_bytes == cross_attention
    assert kv.bytes == self_attention + cross_attention
    assert any("cross-attention K/V of the encoder output" in n for n in kv.notes)
    # without an encoder length, the encoder reads as many tokens as the context
    assert estimate_kv(spec, seq_len=10, batch=3).bytes == 2 * self_attention


def test_kv_equals_a_real_encoder_decoder_cache():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(**{k: v for k, v in T5.items() if k not in ("model_type", "architectures")},
                                   num_decoder_layers=3)
    model = transformers.T5ForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    b, s_enc, s_dec = 2, 12, 5
    decoder = model.decoder.config  # num_layers: the decoder's 3
    cache = transformers.EncoderDecoderCache(transformers.DynamicCache(config=decoder),
                                             transformers.DynamicCache(config=decoder))
    with torch.no_grad():
        model(input_ids=torch.randint(0, 1000, (b, s_enc)), decoder_input_ids=torch.randint(0, 1000, (b, s_dec)),
              cache=cache, use_cache=True)
    real = sum(t.nbytes for c in (cache.self_attention_cache, cache.cross_attention_cache) for layer in c.layers
               for t in (layer.keys, layer.values))
    kv = estimate_kv(_spec(num_decoder_layers=3), seq_len=s_dec, batch=b, encoder_seq_len=s_enc)
    assert kv.bytes == real


def test_memory_infer_counts_the_cross_attention_cache_in_its_formula():
    from campaign.memory import estimate_memory

    spec = _spec()
    est = estimate_memory(spec, make_workload(mode="infer", batch=3, seq_len=10))
    kv = next(i for i in est.items if i.name == "KV cache")
    # 2 decoder layers x 256 B x (10 decoder + 10 encoder tokens) x 3 sequences
    assert kv.bytes == 2 * 256 * 20 * 3
    assert "cross-attention K/V of the encoder output" in kv.formula


def test_one_encoder_layer_and_one_decoder_layer_by_hand():
    """Adding a layer to a stack adds exactly what that layer saves (h 64, 4 heads x 16, d_ff 256, bf16, b 2 x s 32,
    dropout 0.1), counted from the tensors autograd keeps in modeling_t5 (as a GPU's memory-efficient SDPA runs)."""
    from campaign.memory.activations import training_activations

    b, s, h, inner, ff, heads = 2, 32, 64, 64, 256, 4
    w = make_workload(batch=b, seq_len=s)
    base = training_activations(_spec(num_decoder_layers=2), w)[0]
    t = b * s
    norm = 4 * h + 4 + 2 * h + 2 * h + 2 * h  # fp32 upcast, rsqrt, bf16 input, normalized, output (Linear input)
    attention = 4 * 2 * inner                  # q, k, v, output
    ffn = 2 * ff + ff + 2 * ff                 # relu output, dropout mask (1 B), dropout output (wo's input)
    masks = h                                  # one residual dropout mask per sublayer
    lse = 4 * heads * 32 * b                   # fp32 logsumexp, rows padded to 32
    bias = heads * s * s * 2                   # the layer's contiguous copy of the position bias
    encoder_layer = t * (2 * norm + attention + 2 * masks + ffn) + lse + bias
    more_encoder = training_activations(_spec(num_layers=3, num_decoder_layers=2), w)[0]
    assert more_encoder - base == encoder_layer
    # a decoder layer adds a norm, cross-attention's q and output per decoder token and its K and V of the encoder
    # output per encoder token, a second logsumexp, and the causal where()'s bool s x s mask
    decoder_layer = t * (3 * norm + attention + 2 * 2 * inner + 3 * masks + ffn) + t * 2 * 2 * inner \
        + 2 * lse + bias + s * s
    more_decoder = training_activations(_spec(num_decoder_layers=3), w)[0]
    assert more_decoder - base == decoder_layer


def test_t5_loss_stays_in_the_compute_dtype():
    from campaign.memory import estimate_memory

    est = estimate_memory(_spec(), make_workload(batch=2, seq_len=16))
    forward = next(p for p in est.phases if p.name == "forward")
    logits = next(i for i in forward.items if i.name == "logits and loss")
    assert logits.bytes == 2 * 16 * 1000 * (2 + 2)  # bf16 logits and bf16 log_softmax output, no fp32 upcast


def test_a_dynamic_cache_copies_one_self_attention_layer_not_the_cross_attention():
    """During decode, torch.cat copies one decoder layer's K (or V): 2 sequences x 512 tokens x 8 heads x 64 x 2 B,
    by hand; the cross-attention K/V (made once from the encoder output) does not grow and is not copied."""
    import transformers

    from campaign.memory import estimate_memory, make_workload
    from campaign.models.architectures import spec_from_config

    cfg = transformers.T5Config(d_model=512, d_kv=64, num_heads=8, num_layers=4, num_decoder_layers=4, d_ff=1024,
                                vocab_size=8000).to_dict()
    spec = spec_from_config(cfg, name="t5", source="test")
    est = estimate_memory(spec, make_workload(mode="infer", batch=2, seq_len=512, kv_cache="dynamic", new_tokens=256))
    decode = next(p for p in est.phases if p.name == "decode")
    copy = next(i for i in decode.items if i.name.startswith("cache copy"))
    assert copy.bytes == 2 * 512 * 8 * 64 * 2


@pytest.mark.parametrize("loss", ["chunked", "fused", "logps"])
def test_a_decoder_s_loss_option_on_an_encoder_is_refused_not_ignored(loss):
    """The chunked, fused and log-probability losses replace a causal LM's cross-entropy; an encoder's or an
    encoder-decoder's loss is counted as transformers computes it, so the option would change nothing: one line."""
    from campaign.errors import InputError
    from campaign.memory import estimate_memory
    from campaign.models import load_spec

    for spec, kind in ((_spec(), "an encoder-decoder"), (load_spec("bert-base-uncased"), "an encoder")):
        with pytest.raises(InputError, match=f"--loss {loss} is modelled for a decoder's causal-LM loss; .* is {kind}"):
            estimate_memory(spec, make_workload(batch=1, seq_len=128, loss=loss))
