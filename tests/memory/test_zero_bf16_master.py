"""DeepSpeed's low-precision master (bf16.bf16_master_weights_and_grads with bf16_optimizer_states; --zero-bf16-master):
the master partition, the gradient the optimizer steps and the Adam moments in bf16. Each figure is a hand count from
the trainable parameters, the cards and DeepSpeed's source (stage_1_and_2.py and stage3.py clone the bit16 partition
in master_weights_and_grads_dtype; _prepare_fp32_grad_for_sub_group's .to(master dtype) of a bf16 gradient is no copy;
FusedAdam's moments are zeros_like the master)."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.recipe_deepspeed import deepspeed_options
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec

N = 4
SUB = 1_000_000_000  # DeepSpeed's default sub_group_size


def _items(est, phase):
    return {i.name: i.bytes for p in est.phases if p.name == phase for i in p.items}


def _run(shard, master):
    spec = load_spec("llama-3.2-1b")
    w = make_workload(batch=1, seq_len=256, gpus=N, shard=shard, mixed_precision=True, optimizer_impl="fused",
                      grad_checkpointing=True, zero_bf16_master=master)
    return spec.params, estimate_memory(spec, w)


@pytest.mark.parametrize("shard", ["zero2", "zero3"])
def test_the_master_and_the_moments_in_bf16(shard):
    Pt, bf16 = _run(shard, True)
    _, fp32 = _run(shard, False)
    part = -(-Pt // N)
    step, base = _items(bf16, "optimizer step"), _items(fp32, "optimizer step")
    assert step["bf16 master weights"] == -(-2 * Pt // N) and "fp32 master weights" not in step
    assert base["fp32 master weights"] == -(-4 * Pt // N)
    assert step["optimizer states"] == -(-2 * 2 * Pt // N) and base["optimizer states"] == -(-2 * 4 * Pt // N)
    # no fp32 copy of the gradient partition for the step; the flattened partition is there in both
    sub = min(part, SUB) if shard == "zero3" else part
    assert "ZeRO fp32 gradient copy" not in step and base["ZeRO fp32 gradient copy"] == 4 * sub
    assert step["ZeRO flattened gradient partition"] == base["ZeRO flattened gradient partition"] == 2 * sub
    # everything else at the step is the same: the difference is those three terms
    saved = (-(-4 * Pt // N) - -(-2 * Pt // N)) + (-(-8 * Pt // N) - -(-4 * Pt // N)) + 4 * sub
    assert sum(base.values()) - sum(step.values()) == saved


def test_the_ds_config_s_bf16_keys_are_read_one_by_one(tmp_path):
    both = {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True,
                     "immediate_grad_update": True, "bf16_new_thing": 1},
            "fp16": {"enabled": False, "loss_scale": 0}, "zero_optimization": {"stage": 3}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(both))
    cfg = workload_from_configs([path])
    assert cfg.options["zero_bf16_master"] is True and cfg.options["mixed_precision"] is True
    uses = {k.key: k.use for k in cfg.keys}
    assert uses["bf16.bf16_master_weights_and_grads"] == uses["bf16.bf16_optimizer_states"] == "modelled"
    assert uses["bf16.enabled"] == "modelled" and uses["bf16.immediate_grad_update"] == "no memory"
    assert uses["fp16.loss_scale"] == "no memory"
    assert uses["bf16.bf16_new_thing"] == "unknown"  # named, not swallowed by the bf16 section
    # the master alone (DeepSpeed then needs ZeRO-Offload's CPU Adam): named as not modelled, fp32 master counted;
    # a benchmark row with it is not compared (deepspeed_options), and neither is fp16's master
    alone = {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}, "zero_optimization": {"stage": 2}}
    path.write_text(json.dumps(alone))
    cfg = workload_from_configs([path])
    assert "zero_bf16_master" not in cfg.options
    assert [k.key for k in cfg.unmodelled] == ["bf16.bf16_master_weights_and_grads"]
    with pytest.raises(InputError, match=r"bf16\.bf16_master_weights_and_grads: a 16-bit master"):
        deepspeed_options(alone)
    with pytest.raises(InputError, match=r"fp16\.fp16_master_weights_and_grads"):
        deepspeed_options({"fp16": {"enabled": True, "fp16_master_weights_and_grads": True},
                           "zero_optimization": {"stage": 2}})


def test_the_flag_needs_zero_and_bf16():
    with pytest.raises(InputError, match="--zero-bf16-master .* --shard zero1, zero2 or zero3"):
        make_workload(zero_bf16_master=True, mixed_precision=True)
    with pytest.raises(InputError, match="--zero-bf16-master .* --mixed-precision"):
        make_workload(zero_bf16_master=True, shard="zero3", gpus=2)
    with pytest.raises(InputError, match="--offload-optimizer cpu"):
        make_workload(zero_bf16_master=True, shard="zero3", gpus=2, mixed_precision=True, offload_optimizer="cpu")


def test_the_flag_on_the_command_line(cli):
    args = ("memory", "llama-3.2-1b", "--shard", "zero3", "--gpus", "4", "--mixed-precision", "--batch", "1",
            "--seq-len", "256", "--json", "--no-solve")
    plain, low = cli(*args), cli(*args, "--zero-bf16-master")
    assert plain.code == low.code == 0, low.err
    names = [i["name"] for p in low.json()["phases"] if p["name"] == "optimizer step" for i in p["items"]]
    assert "bf16 master weights" in names and "fp32 master weights" not in names
    assert low.json()["peak_allocated_bytes"] < plain.json()["peak_allocated_bytes"]
    bad = cli("memory", "llama-3.2-1b", "--zero-bf16-master")
    assert bad.code == 2 and bad.err.count("\n") == 1 and "Traceback" not in bad.err


def test_the_published_bf16_recipe_is_read_whole_and_its_autocast_named(cli):
    """DeepSpeedExamples' bf16_full.json: the low-precision master read, torch_autocast (not modelled) named, the
    estimate made without it and "not verified" (it was a refusal of the whole file, exit 2)."""
    from pathlib import Path

    recipe = Path(__file__).parent / "recipes" / "deepspeedexamples_bf16_full.json"
    r = cli("memory", "llama-3.2-1b", "--deepspeed", str(recipe), "--gpus", "4", "--batch", "1", "--seq-len", "512",
            "--card", "H100-SXM-80GB", "--json", "--no-solve")
    assert r.code == 1, r.err  # fits the card, but not verified: exit 1
    doc = r.json()
    assert doc["status"] == "not verified" and doc["workload"]["zero_bf16_master"] is True
    named = {k["key"]: k["why"] for k in doc["config_keys"] if k["use"] == "not modelled"}
    assert list(named) == ["torch_autocast"] and "counted without it" in named["torch_autocast"]


def test_auto_is_the_trainer_s_bf16_and_a_master_it_leaves_off_is_named(tmp_path, cli):
    """A ds_config's bf16 "enabled": "auto" is filled by the HF Trainer from its own bf16: a TrainingArguments file
    with bf16 on makes it mixed precision (fp32 master under ZeRO); alone, "auto" is named as not modelled. The bf16
    master where bf16 is not on, or with the optimizer on the CPU, is named too, and fp32 master and states are
    counted: never a refusal of the recipe."""
    ds = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}
    (tmp_path / "ds_auto.json").write_text(json.dumps(ds))
    (tmp_path / "args.json").write_text(json.dumps({"output_dir": "o", "per_device_train_batch_size": 1,
                                                    "max_length": 256, "bf16": True, "deepspeed": "ds_auto.json"}))
    cfg = workload_from_configs([tmp_path / "args.json"])
    assert cfg.options["mixed_precision"] is True
    assert dict((o, w) for o, _, w in cfg.sources)["mixed_precision"] == \
        "args.json: bf16 (fills ds_auto.json: bf16.enabled auto)"
    (tmp_path / "off.json").write_text(json.dumps({"output_dir": "o", "per_device_train_batch_size": 1,
                                                   "bf16": False, "deepspeed": "ds_auto.json"}))
    off = workload_from_configs([tmp_path / "off.json"])  # the Trainer's bf16 off fills "auto" with off
    assert "mixed_precision" not in off.options
    assert {k.key: k.use for k in off.keys if k.file == "ds_auto.json"}["bf16.enabled"] == "modelled"
    alone = workload_from_configs([tmp_path / "ds_auto.json"])
    assert "mixed_precision" not in alone.options
    assert {k.key: k.use for k in alone.keys}["bf16.enabled"] == "not modelled"

    master = {"bf16": {"enabled": "auto", "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
              "zero_optimization": {"stage": 3}}
    offloaded = {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
                 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    for name, doc in (("master_auto.json", master), ("master_offload.json", offloaded)):
        (tmp_path / name).write_text(json.dumps(doc))
        cfg = workload_from_configs([tmp_path / name])
        assert "zero_bf16_master" not in cfg.options
        uses = {k.key: k.use for k in cfg.keys}
        assert uses["bf16.bf16_master_weights_and_grads"] == uses["bf16.bf16_optimizer_states"] == "not modelled"
        r = cli("memory", "llama-3.2-1b", "--deepspeed", str(tmp_path / name), "--gpus", "4", "--card", "h100",
                "--json", "--no-solve")
        assert r.code == 1 and r.json()["status"] == "not verified", r.err
        names = [i["name"] for p in r.json()["phases"] if p["name"] == "optimizer step" for i in p["items"]]
        assert "bf16 master weights" not in names
    # the offloaded one keeps its fp32 master and states on the host: the same as the flags without the master
    flags = cli("memory", "llama-3.2-1b", "--shard", "zero2", "--gpus", "4", "--mixed-precision",
                "--offload-optimizer", "cpu", "--card", "h100", "--json", "--no-solve").json()
    assert r.json()["required_bytes"] == flags["required_bytes"]


def test_a_setting_inside_an_inline_ds_config_is_named_under_its_own_file(tmp_path):
    """An inline ds_config's name holds ': ' ('args.json: deepspeed'); its unmodelled settings are still named."""
    ds = {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}}
    (tmp_path / "args.json").write_text(json.dumps({"output_dir": "o", "per_device_train_batch_size": 1,
                                                    "deepspeed": ds}))
    cfg = workload_from_configs([tmp_path / "args.json"])
    named = {(k.file, k.key): k.use for k in cfg.keys}
    assert named[("args.json: deepspeed", "zero_optimization.offload_param")] == "not modelled"
    # a benchmark row with it is not compared
    with pytest.raises(InputError, match="row 7: ds_config: zero_optimization.offload_param: offload to nvme"):
        deepspeed_options(ds, "row 7: ds_config")
