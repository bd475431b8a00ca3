"""Cut Cross-Entropy (`--loss cce`; axolotl's CutCrossEntropyPlugin): the loss runs the LM head block by block in
its kernel, so no logits exist in memory. What it allocates, from cut_cross_entropy's cce.py, cce_backward.py and
utils.py at 100a077: forward, per position the fp32 log-sum-exp and target logit and the int64 offset of each scored
position (_build_flat_valids), per vocabulary row the fp32 average logit; backward, the hidden states' gradient, the
head weight's when the head trains, and an int32 vocabulary order.

Checked against the figures its authors published (apple/ml-cross-entropy README, `python -m benchmark` on an A100
SXM4, PyTorch 2.4.1: Gemma 2 2B's classifier, 8,192 tokens; op_mem_mb, in MiB as 4000.1 for 8192 x 256000 bf16
logits shows): cce loss-fw 1.1, loss-bw 1163.0, loss-fw-bw 1164.0."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from campaign.memory import estimate_memory, make_workload
from campaign.memory.loss import backward_loss, forward_loss
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config

RECIPE = Path(__file__).parent / "recipes" / "axolotl_qwen3_32b_qlora.yaml"
MiB = 2**20
V, H = 128_256, 4096  # Llama 3.1 8B's vocabulary and width
TOKENS = 2 * 4096


def items(est):
    return {i.name: i.bytes for p in est.phases for i in p.items if i.category == "logits"}


def phase(est, name):
    return next(p.bytes for p in est.phases if p.name == name)


def test_the_published_gemma2_benchmark():
    # google/gemma-2-2b's config.json: hidden 2304, vocabulary 256000 (the rest shapes no loss term)
    spec = spec_from_config({"model_type": "gemma2", "hidden_size": 2304, "vocab_size": 256000,
                             "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                             "num_key_value_heads": 4, "head_dim": 256}, name="gemma-2-2b", source="test")
    w = make_workload(loss="cce", batch=1, seq_len=8192)  # full fine-tuning: e and c both take gradients
    fwd = forward_loss(spec, w, 2).bytes
    saved, grads = backward_loss(spec, w, 2, 0)
    # by hand: 8192 x (4 + 4 + 8) + 256000 x 4 = 1,155,072 B; de 8192 x 2304 x 2 + dc 256000 x 2304 x 2 + order
    # 256000 x 4
    assert fwd == 8192 * 16 + 256000 * 4
    assert grads.bytes == 8192 * 2304 * 2 + 256000 * 2304 * 2 + 256000 * 4
    assert fwd / MiB == pytest.approx(1.1, abs=0.01)
    assert grads.bytes / MiB == pytest.approx(1163.0, rel=0.005)
    assert (saved.bytes + grads.bytes) / MiB == pytest.approx(1164.0, rel=0.005)


def test_cce_keeps_no_vocabulary_sized_tensor_of_the_tokens():
    kw = dict(batch=2, seq_len=4096, logits_held=False)
    lora = items(estimate_memory("llama-3.1-8b", make_workload(loss="cce", method="lora", **kw)))
    # a frozen head: CCE saves its input, which a frozen Linear would not keep; no head gradient
    assert lora["cce loss over the vocabulary"] == TOKENS * 16 + V * 4
    assert lora["cce loss: saved for backward"] == TOKENS * 12 + V * 4 + TOKENS * H * 2
    assert lora["cce loss: hidden and head gradients"] == TOKENS * H * 2 + V * 4
    full = items(estimate_memory("llama-3.1-8b", make_workload(loss="cce", **kw)))
    assert full["cce loss: saved for backward"] == TOKENS * 12 + V * 4  # the input is the activations' already
    assert full["cce loss: hidden and head gradients"] == TOKENS * H * 2 + V * 4 + V * H * 2
    # against the full loss at the start of backward: the fp32 log_softmax output and the logits' two fp32
    # gradients (4 + 8 B x tokens x V) give way to CCE's terms
    a = estimate_memory("llama-3.1-8b", make_workload(method="lora", **kw))
    b = estimate_memory("llama-3.1-8b", make_workload(loss="cce", method="lora", **kw))
    cce = TOKENS * 12 + V * 4 + TOKENS * H * 2 + TOKENS * H * 2 + V * 4
    assert phase(a, "backward") - phase(b, "backward") == TOKENS * V * 12 - cce


def test_a_preference_trainer_gets_no_cce(cli):
    r = cli("memory", "llama-3.1-8b", "--loss", "cce", "--reference", "copy", "--no-solve")
    assert r.code == 2 and "--loss logps" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("args, fix", [(("--method", "qlora"), "--no-kbit-upcast"),
                                       (("--mixed-precision",), "load the model in bf16"),
                                       (("--dtype", "fp32"), "load the model in bf16")])
def test_fp32_heads_and_hidden_states_which_ccE_rejects_are_refused(cli, args, fix):
    """cce_backward_kernel asserts bf16/fp16 embeddings and classifier: a k-bit-prepared base (fp32 head), a trained
    fp32 head under autocast, an fp32 model fail there; with a bf16 head they run."""
    r = cli("memory", "llama-3.2-1b", "--loss", "cce", *args, "--no-solve")
    assert r.code == 2 and fix in r.err and "Traceback" not in r.err
    ok = cli("memory", "llama-3.2-1b", "--loss", "cce", "--method", "qlora", "--no-kbit-upcast", "--no-solve")
    assert ok.code == 0, ok.err


def _write(tmp_path, doc):
    path = tmp_path / "a.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_published_qwen3_example_reads_the_plugin(cli, tmp_path):
    """examples/qwen3/32b-qlora.yaml lists the CutCrossEntropyPlugin: the loss is CCE's, and without the plugin the
    HF loss's full logits come back, by the amount worked out from Qwen3 32B's shapes."""
    common = ("memory", "Qwen/Qwen3-32B", "--json", "--no-solve")
    on = cli(*common, "--config", str(RECIPE)).json()
    assert on["workload"]["loss"] == "cce"
    uses = {k["key"]: k["use"] for k in on["config_keys"]}
    assert uses["plugins"] == uses["optimizer"] == "modelled" and on["workload"]["optimizer"] == "adamw-4bit"
    # named, the rest: axolotl's offloading of every saved tensor with an adapter; its LoRA kernels are read
    # (test_lora_kernels.py), the MLP's skipped: the recipe puts no LoRA on gate_proj
    assert {k["key"] for k in on["config_keys"] if k["use"] == "not modelled"} == {"gradient_checkpointing"}
    assert on["workload"]["lora_kernels"] == "qkv,o,mlp"
    assert any(n.startswith("--lora-kernels mlp: not applied") for n in on["notes"])
    doc = yaml.safe_load(RECIPE.read_text())
    del doc["plugins"]
    off = cli(*common, "--config", str(_write(tmp_path, doc))).json()
    assert off["workload"]["loss"] == "full"
    # at the start of backward, from the workloads the two files give: Qwen3 32B's vocabulary 151,936 and width
    # 5,120, one sequence of 2,048 tokens, bf16 hidden states (axolotl casts the embeddings back to bf16)
    a, b = (estimate_memory("Qwen/Qwen3-32B", make_workload(**workload_from_configs([f], model_type="qwen3").options))
            for f in (_write(tmp_path, doc), RECIPE))
    tokens, v, h = 2048, 151_936, 5120
    full = tokens * v * (4 + 8)  # fp32 log_softmax output + the logits' two fp32 gradients (logits freed)
    cce = tokens * 12 + v * 4 + tokens * h * 2 + tokens * h * 2 + v * 4
    assert items(a)["logits (saved for backward)"] + items(a)["logits gradients"] == full
    saved, grads = backward_loss(load_spec("Qwen/Qwen3-32B"), b.workload, 2, 0)
    assert saved.bytes + grads.bytes == cce  # (a moment below the last layer's recompute, so not listed)
    # the peak moves from the start of backward (the logits' gradients) to the last layer's recompute
    assert a.peak_phase == b.peak_phase == "backward" and a.peak_allocated_bytes - b.peak_allocated_bytes > 1.9e9


def test_the_plugins_keys(tmp_path):
    base = {"base_model": "meta-llama/Llama-3.1-8B", "micro_batch_size": 1, "sequence_len": 1024, "bf16": True,
            "plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"]}
    cfg = workload_from_configs([_write(tmp_path, base)], model_type="llama")
    assert cfg.options["loss"] == "cce" and not cfg.unmodelled
    # off: the HF loss, the plugin read
    cfg = workload_from_configs([_write(tmp_path, dict(base, cut_cross_entropy=False))], model_type="llama")
    assert "loss" not in cfg.options and not cfg.unmodelled
    # the head's fp32 accumulation: named for a full fine-tune, no memory with an adapter (no head gradient)
    fp32 = dict(base, cut_cross_entropy_accum_c_fp32=True)
    cfg = workload_from_configs([_write(tmp_path, fp32)], model_type="llama")
    assert [k.key for k in cfg.unmodelled] == ["cut_cross_entropy_accum_c_fp32"]
    cfg = workload_from_configs([_write(tmp_path, dict(fp32, adapter="lora"))], model_type="llama")
    assert not cfg.unmodelled and any("no head gradient" in n for n in cfg.notes)
    # DPO: TRL passes no labels, CCE's patch does not run: the log-probabilities as TRL takes them
    cfg = workload_from_configs([_write(tmp_path, dict(base, rl="dpo", adapter="lora"))], model_type="llama")
    assert cfg.options["loss"] == "logps" and any("passes none" in n for n in cfg.notes)
    # a plugin campaign does not model beside it leaves the list named
    other = dict(base, plugins=base["plugins"] + ["axolotl.integrations.kernels.KernelsPlugin"])
    cfg = workload_from_configs([_write(tmp_path, other)], model_type="llama")
    assert cfg.options["loss"] == "cce" and [k.key for k in cfg.unmodelled] == ["plugins"]
