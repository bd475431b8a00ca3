"""--device-map auto: the layer split is accelerate's own (checked against infer_auto_device_map on a real tiny Llama
built on the meta device), each card's bytes are worked out by hand from shapes, and the fit is judged per card."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory import make_workload
from campaign.memory.device_map import balanced_memory, device_map_estimates, layer_split, module_tree, split_modules
from campaign.memory.plan import plan_memory
from campaign.models.resolve import model_spec
from tests.conftest import tiny_llama

LAYERS = 8


def _config_dir(tmp_path, **overrides):
    cfg = tiny_llama(num_hidden_layers=LAYERS, **overrides)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path, cfg


def _meta_model(cfg: dict):
    import torch
    import transformers
    from accelerate import init_empty_weights

    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.tie_weights()
    return model


# hand count of the tiny Llama in bf16 (h 64, I 160, 4 heads of 16, 2 KV heads, vocab 1000): one decoder layer is
# q, o 64x64, k, v 32x64, gate, up, down 160x64, two norms of 64, all x 2 B
LAYER_BYTES = (2 * 64 * 64 + 2 * 32 * 64 + 3 * 160 * 64 + 2 * 64) * 2  # 86,272
EMBED_BYTES = 1000 * 64 * 2  # 128,000 (the LM head the same when untied)
# + the final norm + the rotary inv_freq and original_inv_freq buffers (8 fp32 each)
MODEL_BYTES = 8 * LAYER_BYTES + 2 * EMBED_BYTES + 64 * 2 + 2 * 8 * 4


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("low_zero", [False, True])
@pytest.mark.parametrize("cards", [(420_000, 420_000, 420_000), (300_000, 300_000, 300_000, 300_000),
                                   (700_000, 420_000), (350_000, 350_000), (200_000, 200_000, 200_000)])
def test_layer_split_is_accelerates(tmp_path, tie, low_zero, cards):
    """The same max_memory per card and the same decoder layers per card (or on the CPU) as accelerate's
    get_balanced_memory + infer_auto_device_map with the decoder layer as the no-split module."""
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    path, cfg = _config_dir(tmp_path, tie_word_embeddings=tie)
    model = _meta_model(cfg)
    given = {i: size for i, size in enumerate(cards)} | {"cpu": 10**12}
    balanced = get_balanced_memory(model, max_memory=dict(given), no_split_module_classes=["LlamaDecoderLayer"],
                                   low_zero=low_zero)
    theirs = infer_auto_device_map(model, max_memory=balanced, no_split_module_classes=["LlamaDecoderLayer"])

    spec = model_spec(path)
    tree = module_tree(spec, make_workload(mode="infer", dtype="bf16"))
    assert sum(n.bytes for n in tree) == MODEL_BYTES - (EMBED_BYTES if tie else 0)
    ours = balanced_memory(tree, list(cards), low_zero=low_zero, rule="accelerate")
    assert ours == [balanced[i] for i in range(len(cards))]
    placed = split_modules(tree, ours)
    expected = layer_split(theirs, LAYERS)
    assert layer_split(placed, LAYERS) == expected
    assert len(set(expected)) > 1 or expected[0] == "cpu"  # a real split, not one card taking everything


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("low_zero", [False, True])
@pytest.mark.parametrize("cards", [(420_000, 420_000, 420_000), (300_000, 300_000, 300_000, 300_000),
                                   (700_000, 420_000), (350_000, 350_000), (200_000, 200_000, 200_000)])
def test_layer_split_is_transformers_5s(tmp_path, tie, low_zero, cards):
    """transformers 5's from_pretrained balances with its own copy of get_balanced_memory (a buffer of the largest
    layer or leaf module, not accelerate's first layer or mean leaf) and splits with its own infer_auto_device_map:
    --balance transformers (the default) gives the same caps and the same layers per card."""
    ta = pytest.importorskip("transformers.integrations.accelerate")
    if not hasattr(ta, "get_balanced_memory"):
        pytest.skip("transformers before 5 calls accelerate's balancing (test_layer_split_is_accelerates)")
    path, cfg = _config_dir(tmp_path, tie_word_embeddings=tie)
    model = _meta_model(cfg)
    given = {i: size for i, size in enumerate(cards)} | {"cpu": 10**12}
    balanced = ta.get_balanced_memory(model, max_memory=dict(given), no_split_module_classes={"LlamaDecoderLayer"},
                                      low_zero=low_zero)
    theirs = ta.infer_auto_device_map(model, max_memory=balanced, no_split_module_classes={"LlamaDecoderLayer"})
    tree = module_tree(model_spec(path), make_workload(mode="infer", dtype="bf16"))
    ours = balanced_memory(tree, list(cards), low_zero=low_zero)
    assert ours == [balanced[i] for i in range(len(cards))]
    assert layer_split(split_modules(tree, ours), LAYERS) == layer_split(theirs, LAYERS)


def test_the_two_balancings_differ_by_their_buffer(tmp_path):
    """By hand, untied, 2 cards of 700,000 B: the model / 2 + 1.25 x the buffer; accelerate's buffer is the first
    layer (86,272 B, above the mean leaf module), transformers 5's the largest leaf module, the embedding
    (128,000 B)."""
    path, cfg = _config_dir(tmp_path)
    tree = module_tree(model_spec(path), make_workload(mode="infer", dtype="bf16"))
    half = MODEL_BYTES // 2
    assert balanced_memory(tree, [700_000, 420_000], rule="accelerate")[0] == half + int(1.25 * LAYER_BYTES)
    assert balanced_memory(tree, [700_000, 420_000])[0] == half + int(1.25 * EMBED_BYTES)


def test_balanced_low_0_gives_card_0_less(tmp_path):
    path, _ = _config_dir(tmp_path)
    spec = model_spec(path)
    tree = module_tree(spec, make_workload(mode="infer", dtype="bf16"))
    balanced = layer_split(split_modules(tree, balanced_memory(tree, [600_000] * 3)), LAYERS)
    low = layer_split(split_modules(tree, balanced_memory(tree, [600_000] * 3, low_zero=True)), LAYERS)
    assert low.count(0) < balanced.count(0)
    assert "cpu" not in low and "cpu" not in balanced


def test_bytes_per_card_by_hand(tmp_path):
    """Two cards of 700,000 B free each. Balanced: every card but the last capped at model / 2 + 1.25 x one layer
    (larger than the mean leaf) = 946,368 // 2 + 107,840 = 581,024; card 0 keeps the largest layer (the 128,000 B
    embedding) free, so it takes the embedding and 3 layers (386,816 B; a 4th would make 473,088 > 453,024); card 1
    the other 5, the final norm, the rotary buffers and the LM head (559,552 B <= 700,000), with the logits. That is
    accelerate's balancing (--balance accelerate); transformers 5's buffer is 1.25 x the embedding: card 0 capped at
    473,184 + 160,000 = 633,184, so 4 layers (473,088 <= 633,184 - 128,000), card 1 the other 4 and the head."""
    path, _ = _config_dir(tmp_path)
    spec = model_spec(path)
    five = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=128, batch=3)
    dm5, _ = device_map_estimates(spec, five, 700_000 + (1 << 20), context_bytes=1 << 20, fragmentation=0.0)
    assert [s.layers for s in dm5.cards] == [(0, 3), (4, 7)]
    assert [s.max_memory_bytes for s in dm5.cards] == [633_184, 700_000]
    w = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=128, batch=3, balance="accelerate")
    context = 1 << 20
    dm, ests = device_map_estimates(spec, w, 700_000 + context, context_bytes=context, fragmentation=0.0)
    assert sum(n.bytes for n in module_tree(spec, w)) == MODEL_BYTES == 946_368
    assert [s.layers for s in dm.cards] == [(0, 2), (3, 7)]
    assert [s.max_memory_bytes for s in dm.cards] == [581_024, 700_000]
    assert [s.embedding for s in dm.cards] == [True, False] and [s.head for s in dm.cards] == [False, True]
    assert dm.cards[0].weights_bytes == 3 * LAYER_BYTES + EMBED_BYTES
    assert dm.cards[1].weights_bytes == 5 * LAYER_BYTES + EMBED_BYTES + 64 * 2 + 2 * 8 * 4
    kv_per_layer = 2 * 2 * 16 * 2 * 128 * 3  # K and V x 2 KV heads x head_dim 16 x 2 B x 128 tokens x 3 sequences
    assert [s.kv_bytes for s in dm.cards] == [3 * kv_per_layer, 5 * kv_per_layer]
    logits = next(i.bytes for i in ests[1].phases[1].items if i.category == "logits")
    assert not any(i.category == "logits" for i in ests[0].phases[1].items)
    tmp = 3 * 128 * 2 * (3 * 160 + 2 * 64)  # one layer's MLP temporaries over the 384 prefill tokens
    assert ests[0].phases[1].bytes == dm.cards[0].weights_bytes + 3 * kv_per_layer + tmp
    assert ests[1].phases[1].bytes == dm.cards[1].weights_bytes + 5 * kv_per_layer + tmp + logits
    assert dm.deciding == 1 and not dm.offloaded


def test_generate_prefills_the_whole_batch_unless_a_chunk_is_given(tmp_path):
    """transformers' generate runs one prefill forward over every sequence: 8 x 2,048 = 16,384 tokens (more than
    the 8,192 of the vLLM-style default chunk); --prefill-chunk 4096 caps it."""
    path, _ = _config_dir(tmp_path)
    spec = model_spec(path)

    def temporaries(**chunk):
        w = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=2048, batch=8, **chunk)
        _, ests = device_map_estimates(spec, w, 1 << 30, context_bytes=1 << 20)
        return next(i.bytes for i in ests[0].phases[1].items if i.name == "prefill temporaries")

    per_token = 2 * (3 * 160 + 2 * 64)  # one layer's MLP temporaries per token: (3 x I + 2 x h) x 2 B
    assert temporaries() == 16_384 * per_token
    assert temporaries(prefill_chunk=4096) == 4096 * per_token


def test_tied_head_sits_with_the_embedding(tmp_path):
    path, _ = _config_dir(tmp_path, tie_word_embeddings=True)
    w = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=128)
    dm, ests = device_map_estimates(model_spec(path), w, 600_000 + (1 << 20), context_bytes=1 << 20)
    assert dm.cards[0].head and dm.cards[0].embedding and not dm.cards[1].head
    assert any(i.category == "logits" for i in ests[0].phases[1].items)


def test_fit_per_card_pass_and_offload_fail():
    """A 70B in bf16 (141 GB) fits 4 x 80 GB with every card under its size; on 2 x 40 GB accelerate puts layers on
    the CPU, and the fit fails naming them."""
    w = make_workload(mode="infer", gpus=4, device_map="auto", seq_len=8192, batch=8)
    ok = plan_memory("llama-3.1-70b", w, card="H100-SXM-80GB")
    # transformers 5's own balancing, run on the real 70B built on the meta device: 19, 22, 22, 17 (accelerate's,
    # which transformers 4 calls: 19, 21, 21, 19)
    assert ok.status == "pass" and [c.layer_count for c in ok.device_map.cards] == [19, 22, 22, 17]
    four = plan_memory("llama-3.1-70b", make_workload(mode="infer", gpus=4, device_map="auto", seq_len=8192, batch=8,
                                                      balance="accelerate"), card="H100-SXM-80GB")
    assert [c.layer_count for c in four.device_map.cards] == [19, 21, 21, 19]
    assert all(c.required_bytes <= ok.device_map.card_bytes for c in ok.device_map.cards)
    assert ok.estimate.required_bytes == max(c.required_bytes for c in ok.device_map.cards)
    small = plan_memory("llama-3.1-70b", make_workload(mode="infer", gpus=2, device_map="auto"), card="A100-40GB")
    check = next(c for c in small.checks if c.id == "memory.fits")
    assert check.status == "fail" and "CPU or disk" in check.seen and small.device_map.offloaded_layers > 0


def test_a_card_whose_cache_overflows_fails():
    """The weights fit each card (accelerate only counts weights) but the KV cache of 64 x 32k tokens does not."""
    w = make_workload(mode="infer", gpus=4, device_map="auto", seq_len=32768, batch=64)
    p = plan_memory("llama-3.1-70b", w, card="H100-SXM-80GB")
    assert not p.device_map.offloaded and p.status == "fail"


def test_refused_in_one_line(cli):
    for args, what in ((["--gpus", "2", "--device-map", "auto", "--card", "H100"], "--infer"),
                       (["--infer", "--shard", "tp", "--gpus", "2", "--device-map", "auto", "--card", "H100"],
                        "tensor parallel"),
                       (["--infer", "--gpus", "2", "--device-map", "auto"], "--card"),
                       (["--infer", "--gpus", "2", "--device-map", "sequential", "--card", "H100"], "balanced_low_0")):
        r = cli("memory", "llama-3.1-8b", *args)
        assert r.code == 2 and what in r.err and len(r.err.strip().splitlines()) == 1, (args, r.err)
    with pytest.raises(InputError):
        make_workload(mode="train", device_map="auto")


def test_cli_rows_and_json(cli):
    r = cli("memory", "llama-3.1-70b", "--infer", "--gpus", "4", "--device-map", "auto", "--card", "H100-SXM-80GB",
            "--json")
    assert r.code == 0
    cards = r.json()["device_map"]["cards"]
    assert [c["layers"] for c in cards] == [[0, 18], [19, 40], [41, 62], [63, 79]]
    text = cli("memory", "llama-3.1-70b", "--infer", "--gpus", "4", "--device-map", "auto", "--card", "H100",
               "--balance", "accelerate")
    assert text.code == 0 and "19-39 (21)" in text.out and "lm_head" in text.out


def test_dynamic_cache_copies_one_layer_on_each_card(tmp_path):
    """HF generate's DynamicCache: each card's decode holds one of its layers' K or V twice while torch.cat grows it
    (one layer's K: 2 KV heads x head_dim 16 x 2 B x 128 tokens x 3 sequences)."""
    path, _ = _config_dir(tmp_path)
    spec = model_spec(path)
    options = dict(context_bytes=1 << 20, fragmentation=0.0)
    static = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=128, batch=3)
    dynamic = make_workload(mode="infer", dtype="bf16", gpus=2, device_map="auto", seq_len=128, batch=3,
                            kv_cache="dynamic", new_tokens=16)
    _, before = device_map_estimates(spec, static, 700_000 + (1 << 20), **options)
    _, after = device_map_estimates(spec, dynamic, 700_000 + (1 << 20), **options)
    one_k = 2 * 16 * 2 * 128 * 3
    assert [a.phases[2].bytes - b.phases[2].bytes for a, b in zip(after, before, strict=True)] == [one_k, one_k]
