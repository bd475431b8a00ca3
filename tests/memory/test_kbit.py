"""QLoRA as people run it: peft's prepare_model_for_kbit_training (fp32 embeddings, head and norms, fp32 hidden
states and logits), and eager attention's backward under checkpointing; each term worked out from shapes, and the
k-bit preparation's weights against peft's own function."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from campaign.memory import estimate_memory, make_workload
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")
# Llama-3.2-1B (catalog): vocabulary, hidden size, layers; its embedding is tied to the head
V, H, L = 128_256, 2048, 16


def _item(est, phase: str, name: str) -> int:
    return sum(i.bytes for p in est.phases if p.name == phase for i in p.items if i.name == name)


def test_kbit_preparation_adds_fp32_weights_logits_and_layer_inputs_worked_out_from_shapes():
    kw = dict(method="qlora", batch=1, seq_len=1024, grad_checkpointing=True, lora_targets=QKVO, double_quant=False)
    prepared = estimate_memory("llama-3.2-1b", make_workload(**kw))
    plain = estimate_memory("llama-3.2-1b", make_workload(kbit_upcast=False, **kw))
    # 2 B more for each of: the tied embedding, the 2L + 1 norms, the held logits (1 x 1024 x V), the checkpointed
    # inputs (L x 1024 x H); the peak stays at the start of backward (the logits)
    extra = V * H * 2 + (2 * L + 1) * H * 2 + 1024 * V * 2 + L * 1024 * H * 2
    assert prepared.peak_phase == plain.peak_phase == "backward"
    assert prepared.peak_allocated_bytes - plain.peak_allocated_bytes == extra
    assert _item(prepared, "load", "weights kept fp32 (k-bit preparation)") == (V * H + (2 * L + 1) * H) * 4
    assert any("prepare_model_for_kbit_training" in n for n in prepared.notes)
    assert not any("prepare_model_for_kbit_training" in n for n in plain.notes)


def test_kbit_preparation_under_autocast_keeps_16_bit_logits_and_fp32_layer_inputs():
    kw = dict(method="qlora", batch=2, seq_len=512, grad_checkpointing=True, mixed_precision=True)
    prepared = estimate_memory("llama-3.2-1b", make_workload(**kw))
    plain = estimate_memory("llama-3.2-1b", make_workload(kbit_upcast=False, **kw))
    assert _item(prepared, "backward", "logits (saved for backward)") == \
        _item(plain, "backward", "logits (saved for backward)") == 2 * 512 * V * (2 + 4)
    # the checkpointed layer inputs (the forward's saved activations) are fp32: L x b x s x h x 2 B more
    assert _item(prepared, "forward", "activations") - _item(plain, "forward", "activations") == L * 2 * 512 * H * 2


@pytest.mark.parametrize("kw", [dict(method="full"), dict(method="lora"), dict(method="qlora", dtype="gptq"),
                                dict(method="qlora", gpus=2, shard="fsdp"), dict(mode="infer", dtype="nf4")])
def test_no_kbit_preparation_where_peft_does_not_cast(kw):
    w = make_workload(**kw)
    assert not w.kbit_upcast and not w.kbit_fp32
    assert not any("prepare_model_for_kbit_training" in n for n in w.notes)


def test_the_weights_kept_fp32_are_those_peft_casts(tmp_path):
    """peft's own prepare_model_for_kbit_training on a tiny fp16 model: the parameters a bitsandbytes quantizer does
    not convert (all but the blocks' Linear weights) come out fp32; their bytes are campaign's item."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    cfg = tiny_llama()
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    model = transformers.LlamaForCausalLM(config).to(torch.float16)
    model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    linear = {f"{name}.weight" for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and ".layers." in name}
    kept = [(n, p) for n, p in model.named_parameters() if n not in linear]
    assert kept and all(p.dtype == torch.float32 for _, p in kept)
    expected = sum(p.numel() * p.element_size() for _, p in kept)
    spec = spec_from_config(cfg, name="tiny", source="test")
    est = estimate_memory(spec, make_workload(method="qlora", seq_len=64))
    assert _item(est, "load", "weights kept fp32 (k-bit preparation)") == expected


def test_eager_attention_backward_under_checkpointing_holds_the_score_gradients():
    cfg = dict(tiny_llama(), hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
               max_position_embeddings=4096)
    spec = spec_from_config(cfg, name="tiny", source="test")
    b, s, heads = 2, 2048, 8
    for dtype, ckpt, per in (("fp16", True, 2 + 4 + 2), ("fp16", False, 4), ("nf4", True, 3 * 4)):
        method = "qlora" if dtype == "nf4" else "lora"
        est = estimate_memory(spec, make_workload(method=method, dtype=dtype, batch=b, seq_len=s, attention="eager",
                                                  grad_checkpointing=ckpt))
        assert _item(est, "backward", "eager attention backward (score gradients)") == b * s * heads * s * per
        sdpa = estimate_memory(spec, make_workload(method=method, dtype=dtype, batch=b, seq_len=s,
                                                   grad_checkpointing=ckpt))
        assert _item(sdpa, "backward", "eager attention backward (score gradients)") == 0


def test_fp32_logits_make_no_upcast_copy():
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    est = estimate_memory(spec, make_workload(dtype="fp32", batch=2, seq_len=64))
    vocab = tiny_llama()["vocab_size"]
    assert _item(est, "forward", "logits and loss") == 2 * 64 * vocab * (4 + 4)  # the logits, log_softmax's output


def test_fitcheck_t4_archive_is_met():
    """FitCheck's published T4 archive (benchmarks/fitcheck_t4_data.json): 76 of 79 rows within 10%, median error
    at most 2.5%, no run that ran out of memory called "fits", no run that completed refused past the reserve."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from fitcheck_reference import HERE, score
    finally:
        sys.path.pop(0)
    result = score(json.loads((HERE / "fitcheck_t4_data.json").read_text(encoding="utf-8")))
    assert result["total"] == 79 and result["within"] >= 76 and result["median_error"] <= 0.025
    assert result["false_fits"] == 0
    assert all(n["verdict"] != "does not fit" for n in result["near_limit"] if n["outcome"] == "completed")
    assert sum(n["outcome"] == "oom" for n in result["near_limit"]) == 4
