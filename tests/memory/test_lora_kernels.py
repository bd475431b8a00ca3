"""axolotl's fused LoRA functions (`--lora-kernels qkv,o,mlp`; lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel). From
axolotl's kernels/lora.py at f5ff7a9: LoRA_QKV saves its input X once (no cast copy, no lora_A output: the adapters
run as X @ A.to(dtype)), LoRA_O its input (the attention output, which SDPA keeps), LoRA_MLP its input and the gate
and up outputs; monkeypatch/lora_kernels.py applies each only where all of its projections carry LoRA without a bias,
and none with lora_dropout > 0. Bytes per token and layer worked out here from Llama 3.1 8B's shapes (h 4096,
intermediate 14336, rank 16, bf16 activations, fp32 adapters as peft makes them)."""
from __future__ import annotations

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.activations import layer_saved
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec

H, INTER, R = 4096, 14336, 16


def terms(kernels: str, model: str = "llama-3.1-8b", **kw) -> dict[str, float]:
    return dict(layer_saved(load_spec(model), make_workload(method="lora", lora_kernels=kernels, **kw)).terms)


def test_each_kernel_replaces_peft_s_saved_tensors_by_its_own():
    peft = terms("")
    # peft: each adapter keeps an fp32 cast of its input and its fp32 lora_A output
    assert peft["LoRA on attention inputs (fp32 casts, lora_A outputs)"] == 3 * (4 * H + 4 * R)
    assert peft["LoRA on o_proj (fp32 casts, lora_A outputs)"] == 4 * H + 4 * R
    assert peft["LoRA on MLP inputs (fp32 casts, lora_A outputs)"] == 2 * (4 * H + 4 * R) + 4 * INTER + 4 * R
    assert peft["MLP gate/up/activation/product"] == 3 * 2 * INTER  # gate, activation, up outputs (bf16)
    fused = terms("qkv,o,mlp")
    assert fused["LoRA on q/k/v (axolotl's LoRA_QKV: their shared input)"] == 2 * H
    assert fused["LoRA on o_proj (axolotl's LoRA_O: its input)"] == 0  # SDPA's output, kept already
    assert fused["MLP input (axolotl's LoRA_MLP)"] == 2 * H
    assert fused["MLP gate and up outputs (axolotl's LoRA_MLP)"] == 2 * 2 * INTER
    assert not any(name.startswith(("LoRA on attention inputs", "LoRA on MLP inputs", "MLP gate/up"))
                   for name in fused)
    # one kernel at a time touches its own terms only
    assert terms("o") == {**{k: v for k, v in peft.items() if not k.startswith("LoRA on o_proj")},
                          "LoRA on o_proj (axolotl's LoRA_O: its input)": 0}
    # the estimate's activations, no checkpointing, 2 x 2048 tokens, 32 layers: the difference by hand
    a = estimate_memory("llama-3.1-8b", make_workload(method="lora", batch=2, seq_len=2048))
    b = estimate_memory("llama-3.1-8b", make_workload(method="lora", batch=2, seq_len=2048, lora_kernels="qkv,o,mlp"))
    removed = 3 * (4 * H + 4 * R) + (4 * H + 4 * R) + 2 * (4 * H + 4 * R) + 4 * INTER + 4 * R + 3 * 2 * INTER
    added = 2 * H + 2 * H + 2 * 2 * INTER
    acts = [{i.name: i.bytes for i in p.items}["activations"] for p in (a.phases[1], b.phases[1])]
    assert acts[0] - acts[1] == 32 * 4096 * (removed - added)


def test_a_kernel_whose_projections_do_not_all_carry_lora_is_skipped():
    # Qwen2's q/k/v have biases: axolotl skips LoRA_QKV; LoRA_MLP needs gate, up and down all targeted
    qwen = terms("qkv,mlp", model="Qwen/Qwen2.5-7B")
    assert not any("axolotl's LoRA_QKV" in n for n in qwen) and "MLP input (axolotl's LoRA_MLP)" in qwen
    est = estimate_memory("llama-3.1-8b", make_workload(method="lora", lora_kernels="mlp",
                                                        lora_targets=("q_proj", "up_proj", "down_proj")))
    assert any("--lora-kernels mlp: not applied" in n and "gate_proj" in n for n in est.notes)


def test_bad_uses_are_refused():
    with pytest.raises(InputError, match="--method lora or qlora"):
        make_workload(lora_kernels="mlp")
    with pytest.raises(InputError, match="not one of axolotl's LoRA kernels"):
        make_workload(method="lora", lora_kernels="swiglu")


def _write(tmp_path, doc):
    path = tmp_path / "a.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_axolotl_keys(tmp_path):
    doc = {"base_model": "meta-llama/Llama-3.1-8B", "adapter": "lora", "lora_target_linear": True, "bf16": True,
           "micro_batch_size": 2, "sequence_len": 2048, "lora_mlp_kernel": True, "lora_qkv_kernel": True,
           "lora_o_kernel": False}
    cfg = workload_from_configs([_write(tmp_path, doc)], model_type="llama")
    assert cfg.options["lora_kernels"] == "qkv,mlp" and not cfg.unmodelled
    # each key on and off moves the estimate by its term (per token and layer, x 32 layers x 4096 tokens)
    on = estimate_memory("llama-3.1-8b", make_workload(**cfg.options))
    off_doc = dict(doc, lora_mlp_kernel=False)
    off = estimate_memory("llama-3.1-8b", make_workload(**workload_from_configs([_write(tmp_path, off_doc)],
                                                                                 model_type="llama").options))
    mlp_peft = 2 * (4 * H + 4 * R) + 4 * INTER + 4 * R + 3 * 2 * INTER
    acts = [{i.name: i.bytes for i in p.items}["activations"] for p in (off.phases[1], on.phases[1])]
    assert acts[0] - acts[1] == 32 * 4096 * (mlp_peft - (2 * H + 2 * 2 * INTER))
    # axolotl patches nothing with dropout, nor without an adapter
    for other in (dict(doc, lora_dropout=0.05), {k: v for k, v in doc.items() if k != "adapter"}):
        cfg = workload_from_configs([_write(tmp_path, other)], model_type="llama")
        assert "lora_kernels" not in cfg.options and not cfg.unmodelled
        assert any("patches no LoRA kernel" in n for n in cfg.notes)
