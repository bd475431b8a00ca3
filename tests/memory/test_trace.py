"""The trace: real transformers code on fake tensors; per-phase bytes checked against counts made in the test."""
from __future__ import annotations

import json

import pytest

from campaign import estimate_memory, make_workload
from campaign.errors import InputError
from tests.conftest import tiny_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from campaign.memory.trace import trace_memory  # noqa: E402


def r512(nbytes: int) -> int:
    """The CUDA caching allocator's granularity: every block is a multiple of 512 bytes."""
    return -(-nbytes // 512) * 512


def _real_tiny(cfg: dict):
    config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    return transformers.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)


def _stored(model) -> tuple[int, int]:
    """(parameter bytes, buffer bytes) of a real model, each tensor rounded to the allocator's 512 B."""
    return (sum(r512(p.numel() * p.element_size()) for p in model.parameters()),
            sum(r512(b.numel() * b.element_size()) for b in model.buffers()))


def _items(phase):
    return {i.name: i.bytes for i in phase.items}


@pytest.fixture
def tiny_dir(write_config):
    return write_config(tiny_llama(), "tiny")


def test_full_step_weights_grads_and_adamw_states_by_count(tiny_dir):
    est = trace_memory(str(tiny_dir), make_workload(batch=2, seq_len=32))
    model = _real_tiny(tiny_llama())
    params = list(model.parameters())
    weights, buffers = _stored(model)  # buffers: RoPE inverse frequencies
    phases = {p.name: p for p in est.phases}
    assert _items(phases["load"])["weights"] == weights + buffers
    step = _items(phases["optimizer step"])
    assert step["gradients"] == weights  # bf16 gradients, one per parameter
    # exp_avg and exp_avg_sq in bf16 per parameter; foreach AdamW keeps its step counters on the host
    assert step["optimizer states"] == 2 * weights
    assert step["temporaries"] >= weights  # foreach: sqrt(exp_avg_sq) for every parameter at once
    assert est.method == "traced" and sum(i.bytes for i in est.items) == est.required_bytes
    # fused AdamW keeps one fp32 step counter per parameter on the device: one 512 B block each
    fused = trace_memory(str(tiny_dir), make_workload(batch=2, seq_len=32, optimizer_impl="fused"))
    fused_step = _items(next(p for p in fused.phases if p.name == "optimizer step"))
    assert fused_step["optimizer states"] == 2 * weights + len(params) * 512


def test_lora_trains_only_fp32_adapters(tiny_dir):
    est = trace_memory(str(tiny_dir), make_workload(method="lora", lora_rank=4, lora_targets=("q_proj", "v_proj"),
                                                    batch=2, seq_len=32))
    # q_proj 64->64, v_proj 64->32 in two layers: A (r x in) and B (out x r), fp32
    shapes = [(4, 64), (64, 4), (4, 64), (32, 4)] * 2
    adapters = sum(r512(a * b * 4) for a, b in shapes)
    step = _items(next(p for p in est.phases if p.name == "optimizer step"))
    assert step["gradients"] == adapters
    assert step["optimizer states"] == 2 * adapters
    base, buffers = _stored(_real_tiny(tiny_llama()))
    assert step["weights"] == base + buffers + adapters


def test_inference_kv_matches_a_real_dynamic_cache(tiny_dir):
    est = trace_memory(str(tiny_dir), make_workload(mode="infer", batch=3, seq_len=40, prefill_chunk=64))
    model = _real_tiny(tiny_llama()).eval()
    ids = torch.randint(0, 1000, (3, 40))
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    decode = _items(next(p for p in est.phases if p.name == "decode"))
    assert decode["KV cache"] == real


def test_traced_and_analytic_agree_on_a_real_size_model():
    w = make_workload(batch=1, seq_len=1024)
    traced = trace_memory("llama-3.2-1b", w)
    analytic = estimate_memory("llama-3.2-1b", make_workload(batch=1, seq_len=1024))
    t, a = ({p.name: _items(p) for p in e.phases} for e in (traced, analytic))
    # parameters, gradients and optimizer moments agree (the trace rounds each tensor to 512 B)
    assert t["load"]["weights"] == pytest.approx(a["load"]["weights"], rel=1e-3)
    assert t["optimizer step"]["gradients"] == pytest.approx(a["optimizer step"]["gradients"], rel=1e-3)
    assert t["optimizer step"]["optimizer states"] == pytest.approx(a["optimizer step"]["optimizer states"], rel=1e-3)
    assert traced.peak_allocated_bytes == pytest.approx(analytic.peak_allocated_bytes, rel=0.05)


def test_untraceable_workloads_say_why(tiny_dir):
    with pytest.raises(InputError, match="adamw-8bit cannot be traced"):
        trace_memory(str(tiny_dir), make_workload(optimizer="adamw-8bit"))


def test_cli_trace_json_has_the_memory_shape(cli, tiny_dir):
    r = cli("trace", str(tiny_dir), "--batch", "2", "--seq-len", "32", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["method"] == "traced"
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes", "required_bytes", "phases", "items"):
        assert key in d


def test_fsdp_over_fake_ranks_holds_one_shard_per_card(tiny_dir):
    n = 4
    est = trace_memory(str(tiny_dir), make_workload(batch=2, seq_len=32, gpus=n, shard="fsdp"))
    model = _real_tiny(tiny_llama())
    # FSDP2 shards every parameter on dim 0 in equal, padded chunks: rank 0 keeps ceil(rows / n) rows
    shard = sum(r512(-(-p.shape[0] // n) * (p.numel() // p.shape[0]) * 2) for p in model.parameters())
    buffers = _stored(model)[1]
    phases = {p.name: _items(p) for p in est.phases}
    assert phases["load"]["weights"] == shard + buffers
    # gradient shards are views of one reduce-scatter buffer per FSDP unit, so the 512 B rounding is per unit
    assert phases["optimizer step"]["gradients"] == pytest.approx(shard, rel=0.02)
    with pytest.raises(InputError, match="zero1 over 4 cards is not supported"):
        trace_memory(str(tiny_dir), make_workload(gpus=4, shard="zero1"))


@pytest.mark.parametrize("model, kw", [
    ("gpt2", dict(batch=2, seq_len=512)),
    ("qwen2.5-0.5b", dict(batch=1, seq_len=512, method="lora")),
    ("qwen2.5-0.5b", dict(batch=2, seq_len=1024, mode="infer")),
    ("qwen2.5-0.5b", dict(batch=2, seq_len=512, method="frozen")),     # a loss without autograd
    ("bert-base-uncased", dict(batch=8, seq_len=512, mode="infer")),   # an encoder: one forward, no cache
])
def test_trace_and_formula_agree_per_phase(model, kw):
    """Two independent methods (the formula and the real code on fake tensors) agree within 3% per phase (the
    largest gap here is 2.6%, BERT's inference forward)."""
    traced = trace_memory(model, make_workload(**kw))
    analytic = estimate_memory(model, make_workload(**kw))
    for t, a in zip(traced.phases, analytic.phases, strict=True):
        assert t.name == a.name
        assert a.bytes == pytest.approx(t.bytes, rel=0.03), t.name


def test_classification_heads_get_labels_of_their_shape(write_config):
    cfg = dict(model_type="bert", architectures=["BertForSequenceClassification"], hidden_size=64,
               intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=500,
               max_position_embeddings=128, id2label={"0": "neg", "1": "neutral", "2": "pos"})
    d = write_config(cfg, "tiny-bert")
    est = trace_memory(str(d), make_workload(batch=4, seq_len=32))
    assert [p.name for p in est.phases] == ["load", "forward", "backward", "optimizer step"]
    from campaign.memory.protocol import measure_workload

    m = measure_workload(str(d), make_workload(batch=4, seq_len=32), device="cpu")
    assert m.outcome == "ok" and m.peak_allocated_bytes > 0
    infer = make_workload(mode="infer", batch=4, seq_len=32)
    assert [p.name for p in trace_memory(str(d), infer).phases] == ["load", "forward"]
    assert [p.name for p in measure_workload(str(d), infer, device="cpu").phases] == ["load", "forward"]


def test_fp8_kv_cache_is_the_traced_cache_at_one_byte_per_element(tiny_dir):
    """A cache narrower than the compute dtype cannot run on fake tensors: it is traced in bf16 and scaled."""
    kw = dict(mode="infer", batch=3, seq_len=40, prefill_chunk=64)
    bf16 = trace_memory(str(tiny_dir), make_workload(**kw))
    fp8 = trace_memory(str(tiny_dir), make_workload(kv_dtype="fp8", **kw))
    model = _real_tiny(tiny_llama()).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 1000, (3, 40)), use_cache=True).past_key_values
    elements = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    kv = {e: _items(next(p for p in e.phases if p.name == "decode"))["KV cache"] for e in (bf16, fp8)}
    assert kv[bf16] == 2 * elements and kv[fp8] == elements
    decode = {e: next(p for p in e.phases if p.name == "decode").bytes for e in (bf16, fp8)}
    assert decode[bf16] - decode[fp8] == elements
    assert any("scaled to fp8" in n for n in fp8.notes)


def test_frozen_model_evaluates_its_loss_without_autograd(tiny_dir):
    b, s, vocab = 2, 32, 1000
    est = trace_memory(str(tiny_dir), make_workload(method="frozen", batch=b, seq_len=s))
    assert [p.name for p in est.phases] == ["load", "forward"] and est.workload.optimizer == "none"
    load, forward = (_items(p) for p in est.phases)
    assert set(load) == {"weights"} and "gradients" not in forward and "optimizer states" not in forward
    # at the loss: the bf16 logits and their fp32 upcast are alive together
    assert forward["activations"] >= r512(b * s * vocab * 2) + r512(b * s * vocab * 4)
    analytic = estimate_memory(str(tiny_dir), make_workload(method="frozen", batch=b, seq_len=s))
    assert [p.name for p in analytic.phases] == ["load", "forward"]


def test_qlora_sharded_over_fsdp_keeps_a_shard_of_the_quantized_weights(tiny_dir):
    kw = dict(method="qlora", lora_rank=4, batch=2, seq_len=32)
    one = _items(trace_memory(str(tiny_dir), make_workload(**kw)).phases[0])
    two = _items(trace_memory(str(tiny_dir), make_workload(gpus=2, shard="fsdp", **kw)).phases[0])
    nf4 = "weights, nf4 linear layers"
    assert two[nf4] == one[nf4] // 2
    # counted here: every parameter of the LoRA model (bf16 base, fp32 adapters) as FSDP shards it on dim 0 (rank 0
    # keeps ceil(rows / 2) rows, one 512 B-rounded block each), the RoPE buffer whole, less half the bf16 bytes of
    # the linear layers the quantizer converts
    import peft

    base = _real_tiny(tiny_llama())
    buffers = _stored(base)[1]
    linears = sum(m.weight.numel() * 2 for name, m in base.named_modules()
                  if isinstance(m, torch.nn.Linear) and ".layers." in f".{name}")
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    for name, param in lora.named_parameters():
        if "lora_" in name:
            param.data = param.data.float()
    shards = sum(r512(-(-p.shape[0] // 2) * (p.numel() // p.shape[0]) * p.element_size()) for p in lora.parameters())
    assert two["weights (traced, quantized linears excluded)"] == shards + buffers - linears // 2


def test_an_architecture_without_sdpa_asks_for_eager(write_config):
    cfg = dict(model_type="gemma2", architectures=["Gemma2ForCausalLM"], hidden_size=64, intermediate_size=128,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=500,
               max_position_embeddings=256, sliding_window=16)
    d = write_config(cfg, "tiny-gemma2")
    if getattr(transformers.Gemma2ForCausalLM, "_supports_sdpa", True):
        pytest.skip("this transformers runs Gemma-2 under SDPA")
    with pytest.raises(InputError, match="--attention eager"):
        trace_memory(str(d), make_workload(mode="infer", seq_len=16))
    est = trace_memory(str(d), make_workload(mode="infer", seq_len=16, attention="eager"))
    assert [p.name for p in est.phases] == ["load", "prefill", "decode"]


_FAMILY = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048, vocab_size=8000,
               max_position_embeddings=2048)
FAMILY_CONFIGS = {
    "gpt_neox": dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], rotary_pct=0.25, **_FAMILY),
    "gpt_bigcode": dict(model_type="gpt_bigcode", architectures=["GPTBigCodeForCausalLM"], n_embd=512, n_layer=4,
                        n_head=8, vocab_size=8000, n_positions=2048),
    "phi": dict(model_type="phi", architectures=["PhiForCausalLM"], partial_rotary_factor=0.4, resid_pdrop=0.1,
                hidden_size=640, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2560, vocab_size=8000),
    "falcon": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=512, num_hidden_layers=4,
                   num_attention_heads=8, vocab_size=8000),
    "falcon-new-architecture": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=512,
                                    num_hidden_layers=4, num_attention_heads=8, vocab_size=8000,
                                    new_decoder_architecture=True, num_kv_heads=2),
    "starcoder2": dict(model_type="starcoder2", architectures=["Starcoder2ForCausalLM"], num_key_value_heads=2,
                       sliding_window=256, **_FAMILY),
    "olmo2": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"], num_key_value_heads=2, **_FAMILY),
    "gemma3_text": dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], num_key_value_heads=2,
                        head_dim=64, sliding_window=128, sliding_window_pattern=2, **_FAMILY),
    # encoder-decoders: 4 encoder + 4 decoder layers, dropout_rate 0.1 (T5Config's default) on
    "t5": dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=512, num_layers=4, num_heads=8,
               d_kv=64, d_ff=2048, vocab_size=8000),
    "t5-v1.1": dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=512, num_layers=4,
                    num_heads=8, d_kv=64, d_ff=1024, vocab_size=8000, feed_forward_proj="gated-gelu",
                    tie_word_embeddings=False),
}


# Per-phase gaps (formula - trace) / trace above the 3% of the catalog models, each with what the formula leaves out
# as far as it is known; the gaps were measured on these configs (benchmarks/ has no published figure for them).
FAMILY_TOLERANCE = {
    # -5.2% in forward and backward: the traced self_attn keeps about 5 MB per layer more than q, k, v, the output
    # and logsumexp the formula counts (likely SDPA's masked path for the 256-token sliding window; not verified)
    ("starcoder2", "train"): 0.06,
    # -5.7% in prefill: the sliding-window layers' cache holds the whole 512-token prompt while it is prefilled
    # (cropped to the 128-token window afterwards); the formula counts the window only
    ("gemma3_text", "infer"): 0.06,
    # transformers < 5.25: +4.2% decode, -4.0% prefill: Falcon's attention runs the math SDPA kernel here; the
    # formula's fp32 q, k, v for it overstate a decode step and understate a prefill (not attributed further);
    # 5.25 on (the shared sdpa_attention_forward, the fused kernel): +4.1% prefill, -0.1% decode
    ("falcon", "infer"): 0.05,
    # -3.2% / -3.5% / +3.5% / -3.7%: not attributed yet (gemma3 and olmo2 forward and backward, gpt_neox's prefill,
    # starcoder2's decode step)
    ("gemma3_text", "train"): 0.04,
    ("olmo2", "train"): 0.04,
    ("gpt_neox", "infer"): 0.04,
    ("starcoder2", "infer"): 0.04,
}


@pytest.mark.parametrize("family, kw", [
    (family, kw) for family in FAMILY_CONFIGS
    for kw in (dict(batch=4, seq_len=512), dict(batch=2, seq_len=512, mode="infer"))
] + [("gpt_neox", dict(batch=4, seq_len=512, method="lora")), ("olmo2", dict(batch=4, seq_len=512, method="lora")),
       ("t5", dict(batch=4, seq_len=512, method="lora"))])
def test_trace_and_formula_agree_per_phase_for_each_family(write_config, family, kw):
    """The same rule as the catalog models above: formula and trace within 3% per phase unless FAMILY_TOLERANCE
    says why not, at sizes where the activations are most of the training peak (batch 4 x 512 of 4 layers against
    a 8,000-token vocabulary)."""
    d = write_config(FAMILY_CONFIGS[family], family)
    traced = trace_memory(str(d), make_workload(**kw))
    analytic = estimate_memory(str(d), make_workload(**kw))
    tolerance = FAMILY_TOLERANCE.get((family, kw.get("mode", "train")), 0.03)
    for t, a in zip(traced.phases, analytic.phases, strict=True):
        assert t.name == a.name
        assert a.bytes == pytest.approx(t.bytes, rel=tolerance), t.name
    if kw.get("mode") != "infer":  # the activations themselves, not only phases that weights could dominate
        t_fwd, a_fwd = (_items(next(p for p in e.phases if p.name == "forward")) for e in (traced, analytic))
        assert a_fwd["activations"] + a_fwd["logits and loss"] == pytest.approx(t_fwd["activations"], rel=0.08)


def test_fragmentation_share_replaces_the_traced_replay(tiny_dir):
    w = make_workload(batch=2, seq_len=32)
    replayed = trace_memory(str(tiny_dir), w)
    flat = trace_memory(str(tiny_dir), w, fragmentation=0.0)
    # a zero share: reserved is the peak allocated itself (the share was ignored before: the replay always won)
    assert flat.peak_reserved_bytes == flat.peak_allocated_bytes == replayed.peak_allocated_bytes
    # the replay packs small tensors into 2 MiB segments: it reserves at least one whole segment more than it uses
    assert replayed.peak_reserved_bytes > replayed.peak_allocated_bytes


def test_lora_dropout_traced_as_a_gpu_runs_it_matches_the_estimate(tiny_dir):
    """The trace runs the GPU's native_dropout (a bool mask): with peft's fp32 adapters, lora_dropout adds one byte
    per input feature of each adapter, 6 x 64 + 160 = 544 a token and layer, where the cast copy becomes dropout's
    output. Layer 0's q, k and v read an input that needs no gradient (the frozen embeddings'), whose dropout keeps no
    mask: the trace counts 3 x 64 bytes a token fewer than the estimate, which counts every layer's."""
    tokens = 4 * 64
    kw = dict(method="lora", batch=4, seq_len=64)
    traced = {p: {ph.name: ph.bytes for ph in trace_memory(str(tiny_dir), make_workload(lora_dropout=p, **kw)).phases}
              for p in (0.0, 0.1)}
    est = {p: {ph.name: ph.bytes for ph in estimate_memory(str(tiny_dir), make_workload(lora_dropout=p, **kw)).phases}
           for p in (0.0, 0.1)}
    assert est[0.1]["forward"] - est[0.0]["forward"] == tokens * 2 * 544
    assert traced[0.1]["forward"] - traced[0.0]["forward"] == tokens * (2 * 544 - 3 * 64)
