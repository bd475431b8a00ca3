"""KV cache: hand-computed sizes, and a second method, transformers' own DynamicCache on a real tiny model."""
from __future__ import annotations

import pytest

from campaign.errors import InputError
from campaign.memory.kv import estimate_kv, max_context_for, max_sequences_for
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama


def test_llama_31_8b_gqa_per_token():
    # K and V x 8 KV heads x 128 dims x 2 B x 32 layers = 131,072 B/token (vLLM logs the same figure)
    kv = estimate_kv(load_spec("llama-3.1-8b"), seq_len=8192, batch=4)
    assert kv.bytes_per_token == 2 * 8 * 128 * 2 * 32 == 131_072
    assert kv.bytes == 131_072 * 8192 * 4
    assert kv.kind == "gqa"


def test_fp8_cache_halves_it():
    spec = load_spec("llama-3.1-8b")
    assert estimate_kv(spec, seq_len=1000, dtype="fp8").bytes * 2 == estimate_kv(spec, seq_len=1000).bytes


def test_mla_caches_the_latent():
    kv = estimate_kv(load_spec("deepseek-v3"), seq_len=1000)
    assert kv.bytes_per_token == (512 + 64) * 2 * 61 and kv.kind == "mla"


def test_gemma2_sliding_layers_cap_at_the_window():
    spec = load_spec("gemma-2-9b")  # 42 layers alternate sliding (4096) and full; 8 KV heads x 256 dims
    per_layer_token = 2 * 8 * 256 * 2
    kv = estimate_kv(spec, seq_len=8192)
    assert kv.bytes == 21 * per_layer_token * 8192 + 21 * per_layer_token * 4096
    short = estimate_kv(spec, seq_len=1000)
    assert short.bytes == 42 * per_layer_token * 1000


def test_static_cache_is_preallocated_and_paged_blocks_round_up():
    spec = load_spec("llama-3.1-8b")
    static = estimate_kv(spec, seq_len=100, batch=2, static=True, max_seq_len=4096, max_batch=8)
    assert static.bytes == 131_072 * 4096 * 8
    paged = estimate_kv(spec, seq_len=100, batch=2, block_size=16)
    assert paged.bytes == 131_072 * 112 * 2
    with pytest.raises(InputError, match="cannot hold"):
        estimate_kv(spec, seq_len=5000, static=True, max_seq_len=4096)


def test_tensor_parallel_splits_heads_then_replicates():
    spec = load_spec("llama-3.1-8b")
    assert estimate_kv(spec, seq_len=10, tp=4).bytes * 4 == estimate_kv(spec, seq_len=10).bytes
    # 8 KV heads over 16 cards: one head per card, not half a head
    assert estimate_kv(spec, seq_len=10, tp=16).bytes * 8 == estimate_kv(spec, seq_len=10).bytes


def test_inverse_solves_are_the_largest_that_fit():
    spec = load_spec("llama-3.1-8b")
    budget = 10 * 2**30
    n = max_context_for(spec, budget, batch=2)
    assert estimate_kv(spec, seq_len=n, batch=2).bytes <= budget < estimate_kv(spec, seq_len=n + 1, batch=2).bytes
    assert n == budget // (131_072 * 2)
    m = max_sequences_for(spec, budget, seq_len=4096)
    assert m == budget // (131_072 * 4096)


@pytest.mark.parametrize("bad", [{"seq_len": 0}, {"seq_len": -1}, {"batch": 0}, {"dtype": "nf4"}])
def test_bad_kv_input(bad):
    with pytest.raises(Exception, match="positive integer|weight format"):
        estimate_kv(load_spec("gpt2"), **({"seq_len": 10} | bad))


def test_an_encoder_has_no_kv_cache(cli):
    with pytest.raises(InputError, match="encoder .* keeps no KV cache"):
        estimate_kv(load_spec("bert-base-uncased"), seq_len=512)
    r = cli("kv", "roberta-base", "--context", "512")
    assert r.code == 2 and "no KV cache" in r.err
    # its inference is one forward: the weights plus the larger of one layer's temporaries and the MLM scores
    from campaign import estimate_memory, make_workload

    est = estimate_memory("bert-base-uncased", make_workload(mode="infer", batch=8, seq_len=512))
    assert [p.name for p in est.phases] == ["load", "forward"] and not any(i.category == "kv" for i in est.items)
    spec = load_spec("bert-base-uncased")
    assert est.peak_allocated_bytes - est.phases[0].bytes == 8 * 512 * spec.vocab_size * 2


@pytest.mark.parametrize("cfg_overrides, model_cls", [
    ({}, "LlamaForCausalLM"),
    ({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "head_dim": 16, "sliding_window": 8,
      "num_hidden_layers": 4}, "Gemma2ForCausalLM"),
])
def test_matches_transformers_dynamic_cache(cfg_overrides, model_cls):
    torch = pytest.importorskip("torch")
    import transformers

    cfg = tiny_llama(**cfg_overrides)
    config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    model = getattr(transformers, model_cls)(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 1000, (3, 20))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    spec = spec_from_config(cfg, name="tiny", source="test")
    est = estimate_kv(spec, seq_len=20, batch=3)
    if spec.model_type == "gemma2":
        # transformers' sliding layers keep window - 1 tokens once full; we count the window (1 token/layer more)
        assert 0 <= est.bytes - real <= 2 * 3 * 2 * 16 * 2 * 2
    else:
        assert est.bytes == real
