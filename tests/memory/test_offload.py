"""ZeRO-Offload (--offload-optimizer cpu, DeepSpeed offload_optimizer {"device": "cpu"} at stage 1 or 2): the fp32
master weights, the AdamW states and the fp32 gradient partition leave the card for host RAM, and the host RAM they
take is checked against --host-memory (check memory.host). Each figure is worked out here from GPT-2's shapes."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory.estimate import estimate_memory
from campaign.memory.offload import host_memory
from campaign.memory.workload import make_workload
from campaign.models import load_spec

from ..cli.test_fuzz import named, refused

# GPT-2 small: 12 layers, hidden 768, vocabulary 50257, 1024 positions, tied head
H, L, V, POS = 768, 12, 50257, 1024
P = V * H + POS * H + L * (2 * 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + (H * 4 * H + 4 * H) + (4 * H * H + H)) \
    + 2 * H
N = 4
BASE = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--shard", "zero2", "--gpus", str(N),
        "--mixed-precision")


def _w(shard="zero2", **kw):
    return make_workload(mode="train", seq_len=512, shard=shard, gpus=N, mixed_precision=True, **kw)


def test_gpt2_params_by_hand():
    assert P == 124_439_808
    assert load_spec("gpt2").inventory_params == P


@pytest.mark.parametrize("shard", ["zero1", "zero2"])
def test_offload_moves_master_and_states_off_the_card_every_phase_but_the_step(shard):
    """Load, forward and backward hold the 16-bit weights, gradients and buckets on the card either way; with the
    optimizer offloaded they lose exactly the fp32 master partition (4 B) and the AdamW states (2 x 4 B) per
    parameter / N."""
    spec = load_spec("gpt2")
    on = estimate_memory(spec, _w(shard, offload_optimizer="cpu"))
    off = estimate_memory(spec, _w(shard))
    per_card = -(-4 * P // N) + -(-8 * P // N)
    phases_on = {p.name: p.bytes for p in on.phases}
    phases_off = {p.name: p.bytes for p in off.phases}
    for name in ("forward", "backward"):
        assert phases_off[name] - phases_on[name] == per_card, name
    # the step runs on the CPU: no fp32 gradient copy, no flattened partition, no optimizer state on the card
    step = next(p for p in on.phases if p.name == "optimizer step")
    names = {i.name for i in step.items}
    assert not names & {"fp32 master weights", "optimizer states", "ZeRO fp32 gradient copy",
                        "ZeRO flattened gradient partition", "optimizer temporaries"}
    assert on.peak_allocated_bytes < off.peak_allocated_bytes


def test_host_ram_per_process_by_hand():
    host = host_memory(load_spec("gpt2"), _w(offload_optimizer="cpu"))
    part = P // N  # 124,439,808 divides by 4
    assert host is not None
    assert {i.name: i.bytes for i in host.items} == {
        "fp32 master weights (host)": 4 * part, "optimizer states (host)": 8 * part,
        "fp32 gradient partition (host)": 4 * part}
    assert host.bytes == 16 * part == 497_759_232
    assert host_memory(load_spec("gpt2"), _w()) is None  # no offload, no host figure


def _host_check(r):
    return next(c for c in r.json()["checks"] if c["id"] == "memory.host")


def test_host_memory_too_small_does_not_fit_and_exits_1(cli):
    r = cli(*BASE, "--offload-optimizer", "cpu", "--card", "80GiB", "--host-memory", "400MiB", "--json")
    assert r.code == 1, r.err
    check = _host_check(r)
    assert check["status"] == "fail" and "does not fit" in check["seen"]
    assert r.json()["host"]["bytes_per_process"] == 16 * (P // N)
    text = cli(*BASE, "--offload-optimizer", "cpu", "--card", "80GiB", "--host-memory", "400MiB")
    assert text.code == 1 and "does not fit" in text.out


def test_host_memory_large_enough_passes_and_without_it_the_check_is_skipped(cli):
    r = cli(*BASE, "--offload-optimizer", "cpu", "--card", "80GiB", "--host-memory", "475MiB", "--json")
    assert r.code == 0, r.err  # 497,759,232 B = 474.7 MiB
    assert _host_check(r)["status"] == "pass"
    r = cli(*BASE, "--offload-optimizer", "cpu", "--card", "80GiB", "--json")
    assert _host_check(r)["status"] == "skipped" and "--host-memory" in _host_check(r)["fix"]
    assert r.json()["status"] == "not verified"
    plain = cli(*BASE, "--card", "80GiB", "--json")  # no offload: no host check, no host figure
    assert plain.code == 0 and "host" not in plain.json()
    assert all(c["id"] != "memory.host" for c in plain.json()["checks"])


@pytest.mark.parametrize("args, fragment", [
    (("--offload-optimizer", "nvme"), "nvme offload is not modelled"),
    (("--offload-optimizer", "gpu"), "give cpu (ZeRO-Offload) or none"),
    (("--offload-optimizer", "cpu", "--shard", "fsdp"), "modelled with --shard zero1, zero2 or zero3"),
    (("--offload-optimizer", "cpu", "--host-memory", "lots"), "--host-memory 'lots' is not a size"),
    (("--offload-optimizer", "cpu", "--host-memory", "-1GiB"), "is negative"),
])
def test_bad_values_are_one_line_exit_2(cli, args, fragment):
    base = list(BASE)
    if "--shard" in args:               # the case's own shard in place of the base's zero2
        del base[base.index("--shard"):base.index("--shard") + 2]
    refused(cli(*base, *args), fragment)


def test_offload_without_mixed_precision_is_refused():
    with pytest.raises(InputError, match="add --mixed-precision"):
        make_workload(mode="train", shard="zero2", gpus=2, offload_optimizer="cpu")


def _said(r) -> dict[str, str]:
    return {line.strip().split(" = ", 1)[0]: line.strip().split(" = ", 1)[1]
            for line in r.err.splitlines() if line.startswith("  ") and " = " in line}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_ds_config_with_cpu_offload_sets_the_option_and_without_it_does_not(cli, tmp_path):
    on = _write(tmp_path, "ds_config.json", json.dumps({"bf16": {"enabled": True}, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}))
    off = _write(tmp_path, "plain.json", json.dumps({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    common = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--gpus", str(N), "--mixed-precision")
    r_on = cli(*common, "--deepspeed", on, "--host-memory", "1GiB", "--json")
    r_off = cli(*common, "--deepspeed", off, "--json")
    assert r_on.code == 0 and r_off.code == 0, (r_on.err, r_off.err)
    assert r_on.json()["host"]["bytes_per_process"] == 16 * (P // N)
    assert "host" not in r_off.json()
    keys = {k["key"]: k["use"] for k in r_on.json()["config_keys"]}
    assert keys["zero_optimization.offload_optimizer"] == "modelled"
    said = _said(cli(*common, "--deepspeed", on))
    assert said["offload_optimizer"] == "cpu (ds_config.json: zero_optimization.offload_optimizer)"
    # the card drops by the master and the states: the backward phase of each, by hand
    back = {tag: next(p["bytes"] for p in r.json()["phases"] if p["name"] == "backward")
            for tag, r in (("on", r_on), ("off", r_off))}
    assert back["off"] - back["on"] == 12 * (P // N)
    # nvme is named as not modelled, the rest of the file read (stage 3 with cpu offload: test_param_offload.py)
    for stage, device in ((3, "nvme"), (2, "nvme")):
        bad = _write(tmp_path, "bad.json", json.dumps({"zero_optimization": {
            "stage": stage, "offload_optimizer": {"device": device}}}))
        named(cli(*common, "--deepspeed", bad), "zero_optimization.offload_optimizer", f"offload to {device}",
              "counted on the card")


def test_an_accelerate_deepspeed_yaml_with_cpu_offload_sets_the_option(cli, tmp_path):
    text = ("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 4\n"
            "deepspeed_config: {zero_stage: 2, offload_optimizer_device: %s}\n")
    common = ("memory", "gpt2", "--no-solve", "--seq-len", "512", "--json")
    r_on = cli(*common, "--config", _write(tmp_path, "acc.yaml", text % "cpu"))
    r_off = cli(*common, "--config", _write(tmp_path, "acc_none.yaml", text % "none"))
    assert r_off.code == 0, r_off.err
    assert r_on.json()["status"] == "not verified" and _host_check(r_on)["status"] == "skipped"  # no --host-memory
    assert r_on.json()["host"]["bytes_per_process"] == 16 * (P // N)
    assert "host" not in r_off.json()
    keys = {k["key"]: k["use"] for k in r_on.json()["config_keys"]}
    assert keys["deepspeed_config.offload_optimizer_device"] == "modelled"
    assert cli(*common, "--config", _write(tmp_path, "acc.yaml", text % "cpu"), "--host-memory", "1GiB").code == 0
    named(cli(*common, "--config", _write(tmp_path, "acc_nvme.yaml", text % "nvme")),
          "deepspeed_config.offload_optimizer_device", "offload to nvme")
