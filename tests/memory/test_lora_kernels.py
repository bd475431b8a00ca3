"""axolotl's fused LoRA functions (`--lora-kernels qkv,o,mlp`; lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel). From
axolotl's kernels/lora.py at 067b021c: LoRA_QKV saves its input X once (no cast copy, no lora_A output: the adapters
run as X @ A.to(dtype)), LoRA_O its input (the attention output, which SDPA keeps), LoRA_MLP its input and the gate
and up outputs; with dropout each also keeps X_drop, dropout's output made outside the function (one per group, a
shared bool mask). monkeypatch/lora_kernels.py applies each where all of its projections carry LoRA (bias, dropout
and DoRA supported), and the config turns all three on for LoRA and QLoRA when no lora_*_kernel key is set. Bytes
per token and layer worked out here from Llama 3.1 8B's shapes (h 4096, intermediate 14336, rank 16, bf16
activations, fp32 adapters as peft makes them)."""
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
    # Qwen2's biased q/k/v take the kernel (bias supported); an MoE block has no gate_proj of its own: its attention's
    # kernels apply, the MLP's does not; LoRA_MLP needs gate, up and down all targeted
    qwen = terms("qkv,mlp", model="Qwen/Qwen2.5-7B")
    assert "LoRA on q/k/v (axolotl's LoRA_QKV: their shared input)" in qwen and "MLP input (axolotl's LoRA_MLP)" in qwen
    moe = estimate_memory("mistralai/Mixtral-8x7B-Instruct-v0.1", make_workload(method="lora", lora_kernels="qkv,mlp",
                                                                                 batch=1, seq_len=256))
    assert any("--lora-kernels mlp: not applied" in n and "no gate_proj" in n for n in moe.notes)
    assert not any("--lora-kernels qkv" in n for n in moe.notes)
    est = estimate_memory("llama-3.1-8b", make_workload(method="lora", lora_kernels="mlp",
                                                        lora_targets=("q_proj", "up_proj", "down_proj")))
    assert any("--lora-kernels mlp: not applied" in n and "gate_proj" in n for n in est.notes)


def test_with_dropout_each_kernel_keeps_its_dropped_input_and_mask():
    # X_drop (bf16) and its bool mask once per group: q/k/v's and gate/up's read h features, o_proj's h (4096 = 32
    # heads x 128); peft's path instead keeps a dropout output and a mask per adapter (states.LoraInputs)
    fused = terms("qkv,o,mlp", lora_dropout=0.05)
    assert fused["LoRA on q/k/v (axolotl's LoRA_QKV: their shared input)"] == 2 * H + 3 * H
    assert fused["LoRA on o_proj (axolotl's LoRA_O: its input)"] == 3 * H
    assert fused["MLP input (axolotl's LoRA_MLP)"] == 2 * H + 3 * H
    assert fused["MLP gate and up outputs (axolotl's LoRA_MLP)"] == 2 * 2 * INTER


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
    # no kernel key: axolotl turns all three on for LoRA (check_auto_enable_lora_kernels); not for an rl trainer, nor
    # without an adapter
    auto = {k: v for k, v in doc.items() if not k.endswith("_kernel")}
    assert workload_from_configs([_write(tmp_path, auto)], model_type="llama").options["lora_kernels"] == "qkv,o,mlp"
    for other in (dict(auto, rl="dpo"), {k: v for k, v in auto.items() if k != "adapter"}):
        assert "lora_kernels" not in workload_from_configs([_write(tmp_path, other)], model_type="llama").options
