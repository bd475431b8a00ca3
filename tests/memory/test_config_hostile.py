"""The user's training configs (memory/training_config.py) against hostile and mistaken files: each is read once (a
pipe too), and every way a file can be wrong is exit 2 with one line naming the file and the key, never an internal
error, a hang, or a setting dropped in silence; the forms the tools accept keep working."""
from __future__ import annotations

import json
import os

import pytest

from ..cli.test_fuzz import named, refused

MODEL = ("memory", "llama-3.1-8b", "--no-solve")


def _write(tmp_path, name, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(path)


def _pipe(text: str) -> str:
    """A real pipe holding `text`, named as bash's process substitution names one (/dev/fd/N): it can be read once,
    and opened again it reads empty. The write end is closed, so no read can block."""
    r, w = os.pipe()
    os.write(w, text.encode("utf-8"))
    os.close(w)
    return f"/dev/fd/{r}"


def _said(r) -> dict[str, str]:
    """The `from your config:` lines on stderr as {option: 'value (file: key)'}."""
    out = {}
    for line in r.err.splitlines():
        if line.startswith("  ") and " = " in line:
            option, value = line.strip().split(" = ", 1)
            out[option] = value
    return out


# ------------------------------------------------------------------------------- read once: pipes (finding 3)

DS = {"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e7}, "train_micro_batch_size_per_gpu": 2}


def test_a_deepspeed_config_through_a_pipe_is_read_once(cli, tmp_path):
    """`--deepspeed <(cat ds.json)` was opened twice (a format check, then the read): the second read of the pipe
    was empty, 'not valid JSON'."""
    fd_path = _pipe(json.dumps(DS))
    try:
        r = cli(*MODEL, "--gpus", "8", "--deepspeed", fd_path, "--json")
    finally:
        os.close(int(fd_path.rsplit("/", 1)[1]))
    assert r.code == 0, r.err
    from_file = cli(*MODEL, "--gpus", "8", "--deepspeed", _write(tmp_path, "ds_config.json", json.dumps(DS)),
                    "--json")
    assert r.json()["required_bytes"] == from_file.json()["required_bytes"]
    by_hand = cli(*MODEL, "--gpus", "8", "--shard", "zero3", "--batch", "2", "--zero-reduce-bucket", "50000000",
                  "--json")
    assert r.json()["required_bytes"] == by_hand.json()["required_bytes"]


def test_a_yaml_config_through_a_pipe_is_read_as_yaml(cli):
    """A pipe has no suffix: a text that does not open with '{' is YAML (an axolotl file through <(cat x.yaml))."""
    fd_path = _pipe("base_model: x\nadapter: lora\nmicro_batch_size: 3\nsequence_len: 512\n")
    try:
        r = cli(*MODEL, "--config", fd_path)
    finally:
        os.close(int(fd_path.rsplit("/", 1)[1]))
    assert r.code == 0, r.err
    said = _said(r)
    assert said["batch"] == f"3 ({fd_path}: micro_batch_size)"
    assert said["seq_len"] == f"512 ({fd_path}: sequence_len)"


def test_a_file_given_as_deepspeed_must_be_one(cli, tmp_path):
    args = _write(tmp_path, "args.json", json.dumps({"output_dir": "o", "per_device_train_batch_size": 2}))
    refused(cli(*MODEL, "--deepspeed", args), "args.json: not a DeepSpeed config")


# ------------------------------------------------------------------- DeepSpeed forms (finding 2)

@pytest.mark.parametrize("stage", [True, 2.0, "2", 4, -1])
def test_a_zero_stage_that_is_not_a_whole_number_0_to_3_is_refused_naming_the_file(cli, tmp_path, stage):
    """`"stage": true` became shard 'zeroTrue' and 2.0 'zero2.0', in a message without the file."""
    path = _write(tmp_path, "ds_config.json", json.dumps({"zero_optimization": {"stage": stage}}))
    r = cli(*MODEL, "--gpus", "8", "--deepspeed", path)
    refused(r, "ds_config.json: zero_optimization.stage", "write 0, 1, 2 or 3")
    assert "zeroTrue" not in r.err and "zero2.0" not in r.err


@pytest.mark.parametrize("key", ["offload_optimizer", "offload_param"])
@pytest.mark.parametrize("form", ["cpu", ["cpu"], True, "none"])
def test_an_offload_in_a_form_deepspeed_does_not_read_is_refused_with_the_form_it_does(cli, tmp_path, key, form):
    """`"offload_optimizer": "cpu"` was dropped and the estimate made as if nothing were offloaded."""
    path = _write(tmp_path, "ds_config.json", json.dumps({"zero_optimization": {"stage": 3, key: form}}))
    refused(cli(*MODEL, "--gpus", "8", "--deepspeed", path), f"ds_config.json: zero_optimization.{key}",
            '{"device": "cpu"}')


def test_offload_to_nvme_is_named_and_none_is_no_offload(cli, tmp_path):
    cpu = _write(tmp_path, "cpu.json", json.dumps({"zero_optimization": {"stage": 3,
                                                                           "offload_optimizer": {"device": "nvme"}}}))
    named(cli(*MODEL, "--gpus", "8", "--deepspeed", cpu), "zero_optimization.offload_optimizer", "offload to nvme")
    nvme = "distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 2, offload_optimizer_device: nvme}\n"
    named(cli(*MODEL, "--config", _write(tmp_path, "acc.yaml", nvme)), "deepspeed_config.offload_optimizer_device",
          "offload to nvme")
    plain = cli(*MODEL, "--gpus", "8", "--shard", "zero3", "--json")
    for none in ({"device": "none"}, {}, None):
        path = _write(tmp_path, "none.json", json.dumps({"zero_optimization": {
            "stage": 3, "offload_optimizer": none, "offload_param": none}}))
        r = cli(*MODEL, "--gpus", "8", "--deepspeed", path, "--json")
        assert r.code == 0, (none, r.err)
        assert r.json()["required_bytes"] == plain.json()["required_bytes"], none


@pytest.mark.parametrize("section, value", [("zero_optimization", [3]), ("zero_optimization", True),
                                            ("bf16", True), ("fp16", "auto"), ("optimizer", "AdamW"),
                                            ("data_types", "fp32"), ("activation_checkpointing", True)])
def test_a_deepspeed_section_that_is_not_an_object_is_refused(cli, tmp_path, section, value):
    """`"bf16": true` (DeepSpeed reads {"enabled": true}) dropped the mixed precision it meant."""
    doc = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1, section: value}
    path = _write(tmp_path, "ds_config.json", json.dumps(doc))
    refused(cli(*MODEL, "--gpus", "8", "--deepspeed", path), f"ds_config.json: {section} is", "not a mapping")


def test_zero_optimization_false_is_stage_0_as_deepspeed_reads_it(cli, tmp_path):
    path = _write(tmp_path, "ds_config.json", json.dumps({"zero_optimization": False,
                                                          "train_micro_batch_size_per_gpu": 2}))
    r = cli(*MODEL, "--gpus", "8", "--deepspeed", path)
    assert r.code == 0, r.err
    assert _said(r)["shard"] == "none (ds_config.json: zero_optimization.stage)"


@pytest.mark.parametrize("text", ['{"zero_optimization": {"stage": 3, "reduce_bucket_size": Infinity}}',
                                  '{"zero_optimization": {"stage": 3, "reduce_bucket_size": 1e400}}',
                                  '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": -Infinity}}'])
def test_infinite_deepspeed_sizes_are_refused_naming_the_key(cli, tmp_path, text):
    """Python's JSON reads Infinity and 1e400 as float('inf'): int() of it was an OverflowError, exit 3."""
    path = _write(tmp_path, "ds_config.json", text)
    r = cli(*MODEL, "--gpus", "8", "--deepspeed", path)
    refused(r, "ds_config.json: zero_optimization.", "is not a whole number of elements")


def test_an_infinite_zero_size_on_the_command_line_is_refused(cli):
    refused(cli(*MODEL, "--gpus", "8", "--shard", "zero3", "--zero-reduce-bucket", "inf"), "zero-reduce-bucket")


# ------------------------------------------------------------------ hostile YAML and JSON (finding 4)

LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 12))


@pytest.mark.parametrize("name, payload, fragment", [
    # the classic alias bomb, 10^11 strings under a key the reader reads (fsdp, joined into one string)
    ("laughs.yaml", "output_dir: o\nl0: &l0 lol\n" + LAUGHS + "fsdp: *l11\n",
     "a YAML alias (*l0) at line 3, key l1[0]"),
    ("cycle.yaml", "output_dir: o\nfsdp: &a [*a]\n", "a YAML alias (*a) at line 2, key fsdp[0]"),
    ("latin1.yaml", "output_dir: caf\xe9\n".encode("latin-1"), "not valid UTF-8 (byte 16)"),
    ("utf16.yaml", "output_dir: o\n".encode("utf-16"), "not valid UTF-8 (byte 1)"),
    ("binary.yaml", bytes(range(256)), "not valid UTF-8"),
    ("digits.yaml", "output_dir: o\nper_device_train_batch_size: " + "9" * 5000 + "\n",
     "an integer of 5,000 digits at line 2, key per_device_train_batch_size"),
    ("deep.yaml", "output_dir: o\nfsdp: " + "[" * 20000 + "]" * 20000 + "\n",
     "nested more than 100 levels deep at line 2, key fsdp[0]..."),
    ("deep_map.yaml", "output_dir: o\nfsdp: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n", "key fsdp.a..."),
])
def test_hostile_yaml_is_one_line_naming_the_file_and_where(cli, tmp_path, name, payload, fragment):
    r = cli(*MODEL, "--config", _write(tmp_path, name, payload))
    refused(r, f"{name}: ", fragment)


def test_yaml_with_an_anchor_and_no_alias_or_a_byte_order_mark_is_read(cli, tmp_path):
    path = _write(tmp_path, "args.yaml", "\ufeffoutput_dir: &out o\nper_device_train_batch_size: 3\n")
    r = cli(*MODEL, "--config", path)
    assert r.code == 0, r.err
    assert _said(r)["batch"] == "3 (args.yaml: per_device_train_batch_size)"


@pytest.mark.parametrize("name, text, fragment", [
    ("acc.yaml", "distributed_type: FSDP\nfsdp_config: [fsdp_offload_params]\n", "acc.yaml: fsdp_config is"),
    ("acc.yaml", "distributed_type: FSDP\nfsdp_config: FULL_SHARD\n", "acc.yaml: fsdp_config is 'FULL_SHARD'"),
    ("acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config: [zero_stage]\n", "acc.yaml: deepspeed_config is"),
    ("acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 2.0}\n",
     "acc.yaml: deepspeed_config.zero_stage: 2.0 is not a ZeRO stage"),
    ("ax.yaml", "base_model: x\nadapter: lora\nlora_target_modules: 5\n",
     "ax.yaml: lora_target_modules: 5 is not a list of module names"),
    ("ax.yaml", "base_model: x\nadapter: lora\nlora_target_modules: [q_proj, 5]\n", "ax.yaml: lora_target_modules"),
    ("ax.yaml", "base_model: x\nadapter: lora\nlora_target_modules: []\n", "ax.yaml: lora_target_modules: []"),
    ("ax.yaml", "base_model: x\nadapter: lora\nlora_target_modules: q_proj\n",
     "ax.yaml: lora_target_modules: 'q_proj' is one string, which peft matches as a regular expression"),
    ("ax.yaml", "base_model: x\nadapter: lora\ndeepspeed: 3\n", "ax.yaml: deepspeed is 3"),
    ("args.json", '{"output_dir": "o", "deepspeed": ["ds.json"]}', "args.json: deepspeed is ['ds.json']"),
    ("adapter_config.json", '{"peft_type": "LORA", "target_modules": "q_proj"}',
     "adapter_config.json: target_modules: 'q_proj' is one string"),
    ("adapter_config.json", '{"peft_type": "LORA", "target_modules": 7}',
     "adapter_config.json: target_modules: 7 is not a list"),
    ("tune.yaml", "model:\n  _component_: torchtune.models.llama3.lora_llama3_8b\n  lora_attn_modules: 5\n",
     "tune.yaml: model.lora_attn_modules: 5 is not a list of q_proj, k_proj, v_proj, output_proj"),
    ("tune.yaml", "model:\n  _component_: torchtune.models.llama3.lora_llama3_8b\n  lora_attn_modules: q_proj\n",
     "tune.yaml: model.lora_attn_modules: 'q_proj'"),
    ("tune.yaml", "model:\n  _component_: torchtune.models.llama3.lora_llama3_8b\noptimizer: AdamW\n",
     "tune.yaml: optimizer is 'AdamW', not a mapping"),
])
def test_a_setting_of_the_wrong_shape_is_refused_naming_the_file_and_key(cli, tmp_path, name, text, fragment):
    """A list or a string where a mapping is read was an AttributeError (exit 3); a string where a list of module
    names is read was split into its characters ('q', '_', 'p', ...), or a number a TypeError."""
    refused(cli(*MODEL, "--config", _write(tmp_path, name, text)), fragment)


def test_module_lists_and_all_linear_keep_working(cli, tmp_path):
    by_hand = cli(*MODEL, "--method", "lora", "--lora-targets", "q_proj,v_proj", "--no-logits-held", "--json")
    for name, text in (("ax.yaml", "base_model: x\nadapter: lora\nlora_target_modules: [q_proj, v_proj]\n"),
                       ("adapter_config.json", '{"peft_type": "LORA", "target_modules": ["q_proj", "v_proj"]}')):
        r = cli(*MODEL, "--config", _write(tmp_path, name, text), "--no-logits-held", "--json")
        assert r.code == 0, (name, r.err)
        assert r.json()["required_bytes"] == by_hand.json()["required_bytes"], name
    # torchtune builds its adapters in the recipe's dtype: peft's fp32 autocast does not apply
    tune = cli(*MODEL, "--config", _write(tmp_path, "tune.yaml", "model:\n  _component_: torchtune.models.llama3."
                                          "lora_llama3_8b\n  lora_attn_modules: [q_proj, v_proj]\n"), "--json")
    assert tune.code == 0, tune.err
    no_autocast = cli(*MODEL, "--method", "lora", "--lora-targets", "q_proj,v_proj", "--no-logits-held",
                      "--no-peft-autocast", "--json")
    assert tune.json()["required_bytes"] == no_autocast.json()["required_bytes"]
    every = cli(*MODEL, "--method", "lora", "--no-logits-held", "--json")
    r = cli(*MODEL, "--config", _write(tmp_path, "adapter_config.json",
                                       '{"peft_type": "LORA", "target_modules": "all-linear"}'), "--no-logits-held",
            "--json")
    assert r.code == 0, r.err
    assert r.json()["required_bytes"] == every.json()["required_bytes"]
