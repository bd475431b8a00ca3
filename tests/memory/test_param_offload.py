"""Parameter offload (--offload-params cpu): DeepSpeed ZeRO-3's offload_param {"device": "cpu"} (with or without
offload_optimizer cpu, ZeRO-Infinity's CPU case) and FSDP's CPUOffload(offload_params=True) (accelerate
fsdp_offload_params, torchtune fsdp_cpu_offload). What leaves the card and what host RAM takes, each figure worked out
here from GPT-2's shapes; each recipe form read from a file written here; the refusals; check memory.host."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory.estimate import estimate_memory
from campaign.memory.offload import host_memory
from campaign.memory.phases import step_items
from campaign.memory.workload import make_workload
from campaign.models import load_spec

from ..cli.test_fuzz import named, refused

# GPT-2 small: 12 layers, hidden 768, vocabulary 50257, 1024 positions, tied head
H, L, V, POS = 768, 12, 50257, 1024
P = V * H + POS * H + L * (2 * 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + (H * 4 * H + 4 * H) + (4 * H * H + H)) \
    + 2 * H
# ZeRO-3 keeps whole on every card the tensors of at most stage3_param_persistence_threshold (1e5) elements: every
# norm weight and bias, and every bias (c_attn's 3H, c_proj's H, c_fc's 4H, the MLP c_proj's H), + ln_f
K = L * (2 * 2 * H + 3 * H + H + 4 * H + H) + 2 * H
ROOT = V * H + POS * H + 2 * H  # FSDP's root unit: token and position embeddings, final norm
BLOCK = (P - ROOT) // L
N = 4
Q = P // N  # 124,439,808 divides by 4


def _w(shard, **kw):
    return make_workload(mode="train", seq_len=512, shard=shard, gpus=N, **kw)


def _phase(est, name):
    return next(p.bytes for p in est.phases if p.name == name)


def test_shapes_by_hand():
    assert (P, K, ROOT, BLOCK) == (124_439_808, 121_344, 39_385_344, 7_087_872)
    spec = load_spec("gpt2")
    assert spec.inventory_params == P
    assert sum(g.params for g in spec.groups if g.numel <= 100_000) == K


def test_zero3_param_offload_moves_the_16bit_partitions_but_the_persistent_ones_to_host_ram():
    """Each phase loses the card's 16-bit partition of the non-persistent parameters, 2 B x (P - K) / N; host RAM
    gains exactly that; the fp32 master, the states and the gradient partition stay on the card."""
    spec = load_spec("gpt2")
    on = _w("zero3", mixed_precision=True, offload_params="cpu")
    off = _w("zero3", mixed_precision=True)
    moved = 2 * (P - K) // N
    for name in ("load", "forward", "backward"):
        assert _phase(estimate_memory(spec, off), name) - _phase(estimate_memory(spec, on), name) == moved, name
    host = host_memory(spec, on)
    assert host is not None and {i.name: i.bytes for i in host.items} == {"16-bit parameter partitions (host)": moved}
    assert moved == 62_159_232


def test_zero3_optimizer_offload_moves_master_states_and_gradient_partition():
    """offload_optimizer cpu at stage 3: the fp32 master (4 B), AdamW's two states (8 B) and the 16-bit gradient
    partition (2 B, grad_partitions_flat_buffer made on the CPU) leave the card, per parameter / N; host RAM holds
    those and the fp32 gradients (4 B): 18 B per parameter / N."""
    spec = load_spec("gpt2")
    on = _w("zero3", mixed_precision=True, offload_optimizer="cpu")
    off = _w("zero3", mixed_precision=True)
    for name in ("forward", "backward"):
        assert _phase(estimate_memory(spec, off), name) - _phase(estimate_memory(spec, on), name) == 14 * Q, name
    host = host_memory(spec, on)
    assert host is not None and {i.name: i.bytes for i in host.items} == {
        "fp32 master weights (host)": 4 * Q, "optimizer states (host)": 8 * Q,
        "fp32 gradient partition (host)": 4 * Q, "16-bit gradient partition (host)": 2 * Q}
    assert host.bytes == 18 * Q == 559_979_136
    step = next(p for p in estimate_memory(spec, on).phases if p.name == "optimizer step")
    assert not {i.name for i in step.items} & {"fp32 master weights", "optimizer states", "gradients",
                                               "ZeRO fp32 gradient copy", "optimizer temporaries"}


def test_zero3_both_offloads_host_ram_by_hand():
    host = host_memory(load_spec("gpt2"), _w("zero3", mixed_precision=True, offload_params="cpu",
                                             offload_optimizer="cpu"))
    assert host is not None and host.bytes == 18 * Q + 2 * (P - K) // N == 622_138_368


def test_fsdp_param_offload_moves_weights_gradients_and_states_to_host_ram():
    """FSDP CPUOffload in bf16 (torchtune: no fp32 master): the card loses its shard of the weights (2 B) and of the
    states (2 x 2 B) in the forward; host RAM holds them and the sharded gradients (2 B): 8 B per parameter / N.
    The card keeps the units' unsharded gradients until their reduce-scatter: the root unit's and one block's."""
    spec = load_spec("gpt2")
    on = _w("fsdp", offload_params="cpu")
    off = _w("fsdp")
    assert _phase(estimate_memory(spec, off), "forward") - _phase(estimate_memory(spec, on), "forward") == 6 * Q
    host = host_memory(spec, on)
    assert host is not None and {i.name: i.bytes for i in host.items} == {
        "sharded parameters (host)": 2 * Q, "sharded gradients (host)": 2 * Q, "optimizer states (host)": 4 * Q}
    assert host.bytes == 8 * Q == 248_879_616
    assert step_items(spec, on).grads.bytes == 2 * (ROOT + BLOCK) == 92_946_432
    assert _phase(estimate_memory(spec, on), "optimizer step") == 0  # the step runs on the CPU
    amp = host_memory(spec, _w("fsdp", offload_params="cpu", mixed_precision=True))
    assert amp is not None and amp.bytes == 16 * Q  # fp32 weights, gradients and AdamW states


def test_lora_under_fsdp_offload_puts_the_adapters_and_their_states_in_host_ram():
    spec = load_spec("gpt2")
    w = _w("fsdp", offload_params="cpu", method="lora", lora_rank=8, lora_targets=("c_attn",))
    a = L * 8 * (H + 3 * H)  # r x (in + out) of each c_attn
    host = host_memory(spec, w)
    assert host is not None and {i.name: i.bytes for i in host.items} == {
        "sharded parameters (host)": 2 * Q, "sharded LoRA adapter weights (host)": 4 * a // N,
        "sharded gradients (host)": 4 * a // N, "optimizer states (host)": 8 * a // N}  # peft's fp32 adapters
    assert all("LoRA" not in i.name for p in estimate_memory(spec, w).phases for i in p.items)


BASE = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--gpus", str(N))
BOTH = (*BASE, "--shard", "zero3", "--mixed-precision", "--offload-params", "cpu", "--offload-optimizer", "cpu")
BOTH_HOST = 622_138_368  # 593.3 MiB


@pytest.mark.parametrize("args, fragment", [
    (("--offload-params", "cpu", "--shard", "zero2", "--mixed-precision"), "modelled with --shard zero3"),
    (("--offload-params", "cpu"), "got --shard none"),
    (("--offload-params", "nvme", "--shard", "zero3", "--mixed-precision"), "nvme offload is not modelled"),
    (("--offload-params", "gpu", "--shard", "fsdp"), "give cpu (ZeRO-3's offload_param, FSDP's CPUOffload) or none"),
    (("--offload-params", "cpu", "--shard", "zero3"), "add --mixed-precision"),
    (("--offload-optimizer", "cpu", "--shard", "fsdp", "--mixed-precision"), "--offload-params cpu (FSDP offloads"),
])
def test_bad_values_are_one_line_exit_2(cli, args, fragment):
    refused(cli(*BASE, *args), fragment)


def test_offload_params_with_optimizer_in_backward_under_fsdp_is_refused():
    with pytest.raises(InputError, match="drop --optimizer-in-backward"):
        make_workload(mode="train", shard="fsdp", gpus=1, offload_params="cpu", optimizer_in_backward=True)


def _host_check(r):
    return next(c for c in r.json()["checks"] if c["id"] == "memory.host")


def test_memory_host_fails_passes_and_is_skipped(cli):
    r = cli(*BOTH, "--card", "80GiB", "--host-memory", "590MiB", "--json")
    assert r.code == 1, r.err
    assert _host_check(r)["status"] == "fail" and r.json()["host"]["bytes_per_process"] == BOTH_HOST
    r = cli(*BOTH, "--card", "80GiB", "--host-memory", "594MiB", "--json")
    assert r.code == 0, r.err
    assert _host_check(r)["status"] == "pass"
    r = cli(*BOTH, "--card", "80GiB", "--json")
    assert _host_check(r)["status"] == "skipped" and r.json()["status"] == "not verified"
    text = cli(*BOTH, "--card", "80GiB", "--host-memory", "590MiB")
    assert text.code == 1 and "16-bit parameter partitions (host)" in text.out and "does not fit" in text.out


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _keys(r) -> dict[str, str]:
    return {k["key"]: k["use"] for k in r.json()["config_keys"]}


def test_a_ds_config_with_param_offload_at_stage_3(cli, tmp_path):
    doc = {"bf16": {"enabled": True}, "zero_optimization": {
        "stage": 3, "offload_param": {"device": "cpu", "pin_memory": True},
        "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    common = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--gpus", str(N), "--json")
    r = cli(*common, "--deepspeed", _write(tmp_path, "ds_config.json", json.dumps(doc)), "--host-memory", "1GiB")
    assert r.code == 0, r.err
    assert r.json()["host"]["bytes_per_process"] == BOTH_HOST
    assert (r.json()["workload"]["offload_params"], r.json()["workload"]["offload_optimizer"]) == ("cpu", "cpu")
    assert _keys(r)["zero_optimization.offload_param"] == "modelled"
    plain = dict(doc, zero_optimization={"stage": 3})
    r_off = cli(*common, "--deepspeed", _write(tmp_path, "plain.json", json.dumps(plain)))
    assert "host" not in r_off.json()
    # the card: the 16-bit partition but the persistent one, the master, the states, the gradient partition
    moved = 2 * (P - K) // N + 14 * Q
    assert _phase_json(r_off, "forward") - _phase_json(r, "forward") == moved
    # offload_param at stage 2 (DeepSpeed offloads parameters at stage 3 only), nvme: refused by name
    bad = dict(doc, zero_optimization={"stage": 2, "offload_param": {"device": "cpu"}})
    refused(cli(*common, "--deepspeed", _write(tmp_path, "s2.json", json.dumps(bad))),
            "s2.json: zero_optimization.offload_param: offload to cpu at ZeRO stage 2", "stage 3")
    nvme = dict(doc, zero_optimization={"stage": 3, "offload_param": {"device": "nvme"}})
    named(cli(*common, "--deepspeed", _write(tmp_path, "nvme.json", json.dumps(nvme))),
          "zero_optimization.offload_param", "offload to nvme")


def _phase_json(r, name):
    return next(p["bytes"] for p in r.json()["phases"] if p["name"] == name)


def test_accelerate_yamls_with_param_offload(cli, tmp_path):
    common = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--json")
    fsdp = ("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 4\n"
            "fsdp_config: {fsdp_sharding_strategy: FULL_SHARD, fsdp_offload_params: %s}\n")
    r = cli(*common, "--config", _write(tmp_path, "fsdp.yaml", fsdp % "true"), "--host-memory", "1GiB")
    assert r.code == 0, r.err
    assert r.json()["host"]["bytes_per_process"] == 16 * Q  # fp32 weights, gradients, AdamW states / 4
    assert _keys(r)["fsdp_config.fsdp_offload_params"] == "modelled"
    r_off = cli(*common, "--config", _write(tmp_path, "fsdp_off.yaml", fsdp % "false"))
    assert r_off.code == 0 and "host" not in r_off.json()
    ds = ("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 4\n"
          "deepspeed_config: {zero_stage: %d, offload_param_device: cpu, offload_optimizer_device: cpu}\n")
    r = cli(*common, "--config", _write(tmp_path, "ds.yaml", ds % 3), "--host-memory", "1GiB")
    assert r.code == 0, r.err
    assert r.json()["host"]["bytes_per_process"] == BOTH_HOST
    assert _keys(r)["deepspeed_config.offload_param_device"] == "modelled"
    refused(cli(*common, "--config", _write(tmp_path, "ds2.yaml", ds % 2)),
            "ds2.yaml: deepspeed_config.offload_param_device: offload to cpu at ZeRO stage 2")


TORCHTUNE = """model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: 512
batch_size: 1
optimizer:
  _component_: torch.optim.AdamW
  fused: True
dtype: bf16
enable_activation_checkpointing: True
fsdp_cpu_offload: %s
"""


def test_a_torchtune_recipe_with_fsdp_cpu_offload(cli, tmp_path):
    common = ("memory", "gpt2", "--no-solve", "--json")
    r = cli(*common, "--config", _write(tmp_path, "full.yaml", TORCHTUNE % "True"), "--gpus", str(N),
            "--host-memory", "1GiB")
    assert r.code == 0, r.err
    w = r.json()["workload"]
    assert (w["shard"], w["offload_params"], w["dtype"], w["mixed_precision"]) == ("fsdp", "cpu", "bf16", False)
    assert r.json()["host"]["bytes_per_process"] == 8 * Q  # bf16 weights, gradients, 2 states / 4
    assert _keys(r)["fsdp_cpu_offload"] == "modelled"
    # on one card the distributed recipe still wraps with FSDP and offloads: everything in host RAM
    one = cli(*common, "--config", _write(tmp_path, "full.yaml", TORCHTUNE % "True"), "--host-memory", "1GiB")
    assert one.code == 0, one.err
    assert one.json()["host"]["bytes_per_process"] == 8 * P
    r_off = cli(*common, "--config", _write(tmp_path, "off.yaml", TORCHTUNE % "False"), "--gpus", str(N))
    assert r_off.code == 0 and "host" not in r_off.json()
    assert _keys(r_off)["fsdp_cpu_offload"] == "modelled"
    assert _phase_json(r_off, "forward") - _phase_json(r, "forward") == 6 * Q


def test_the_trainers_fsdp_offload_string(cli, tmp_path):
    args = {"output_dir": "o", "per_device_train_batch_size": 1, "bf16": True,
            "fsdp": "full_shard auto_wrap offload"}
    r = cli("memory", "gpt2", "--no-solve", "--seq-len", "512", "--gpus", str(N), "--json", "--config",
            _write(tmp_path, "args.json", json.dumps(args)))
    assert r.code in (0, 1), r.err
    assert r.json()["workload"]["offload_params"] == "cpu" and r.json()["host"]["bytes_per_process"] == 8 * Q
    args["fsdp"] = "shard_grad_op offload"
    named(cli("memory", "gpt2", "--no-solve", "--gpus", str(N), "--config",
              _write(tmp_path, "args.json", json.dumps(args))), "fsdp", "CPU offload with shard_grad_op")


def test_offload_asked_for_inference_is_named_not_dropped():
    w = make_workload(mode="infer", seq_len=512, offload_params="cpu")
    assert any(n.startswith("--offload-params: training offload, not modelled for inference") for n in w.notes)
    assert host_memory(load_spec("gpt2"), w) is None


def test_torchtunes_older_section_form_fsdp_cpu_offload(cli, tmp_path):
    """The first 405B QLoRA config (lora_finetune_fsdp2.py) wrote `fsdp: {cpu_offload: ...}`."""
    text = TORCHTUNE.replace("fsdp_cpu_offload: %s\n", "fsdp:\n  cpu_offload: %s\n")
    common = ("memory", "gpt2", "--no-solve", "--json", "--gpus", str(N))
    r = cli(*common, "--config", _write(tmp_path, "old.yaml", text % "True"), "--host-memory", "1GiB")
    assert r.code == 0, r.err
    assert r.json()["host"]["bytes_per_process"] == 8 * Q and _keys(r)["fsdp"] == "modelled"
    r_off = cli(*common, "--config", _write(tmp_path, "old_off.yaml", text % "False"))
    assert r_off.code == 0 and "host" not in r_off.json() and _keys(r_off)["fsdp"] == "modelled"
