"""TRL's command-line config file (`trl sft --config FILE`) read as the workload, with what TRL's CLI fills in where
the file is silent (TRL at f2cd577: gradient checkpointing and bf16 on, the model in ModelConfig's float32, HF's 8
sequences a card, max_length 1024) and TRL's accelerate profiles (accelerate_config: zero2...). It was refused as
"not a training config campaign reads". The example file is TRL's own (tests/memory/recipes, SOURCES.md)."""
from __future__ import annotations

from pathlib import Path

import yaml

from campaign.memory.training_config import workload_from_configs

EXAMPLE = Path(__file__).parent / "recipes" / "trl_cli_example_config.yaml"


def _write(tmp_path, doc, name="cli.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_trls_example_cli_file_is_read_with_trls_defaults(cli):
    cfg = workload_from_configs([EXAMPLE])
    assert cfg.options == {"grad_checkpointing": True, "batch": 8, "seq_len": 1024, "dtype": "fp32",
                           "mixed_precision": True, "logits_held": False}
    # the trainer is `trl sft|dpo|grpo`'s word: counted as SFT, named
    assert [k.key for k in cfg.unmodelled] == ["dataset_name"]
    read = cli("memory", "qwen2.5-0.5b", "--config", str(EXAMPLE), "--json", "--no-solve")
    flags = cli("memory", "qwen2.5-0.5b", "--batch", "8", "--seq-len", "1024", "--dtype", "fp32", "--mixed-precision",
                "--grad-checkpointing", "--no-logits-held", "--json", "--no-solve")
    assert read.code == 1 and read.json()["status"] == "not verified"
    assert read.json()["required_bytes"] == flags.json()["required_bytes"]


def test_what_the_file_says_replaces_the_defaults(tmp_path):
    doc = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "d", "per_device_train_batch_size": 2,
           "max_length": 4096, "gradient_checkpointing": False, "dtype": "bfloat16", "beta": 0.1}
    o = workload_from_configs([_write(tmp_path, doc)]).options
    # beta: DPO's pairs, two rows each; the model loaded in bf16 (no fp32 master)
    assert (o["batch"], o["seq_len"], o["grad_checkpointing"], o["dtype"], o["loss"]) == (4, 4096, False, "bf16",
                                                                                        "logps")
    assert "mixed_precision" not in o


def test_accelerate_profiles_by_name(tmp_path):
    base = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "d", "beta": 0.1}
    zero2 = workload_from_configs([_write(tmp_path, base | {"accelerate_config": "zero2"})])
    assert (zero2.options["shard"], zero2.options["gpus"]) == ("zero2", 8)  # trl/accelerate_configs/zero2.yaml
    four = workload_from_configs([_write(tmp_path, base | {"accelerate_config": "zero3", "num_processes": 4})])
    assert (four.options["shard"], four.options["gpus"], four.options["zero_init"]) == ("zero3", 4, True)
    fsdp2 = workload_from_configs([_write(tmp_path, base | {"accelerate_config": "fsdp2"})])
    assert fsdp2.options["shard"] == "fsdp" and fsdp2.options["reshard_after_forward"] is True
    assert not [k for k in fsdp2.unmodelled if k.file == "fsdp2.yaml"]
    fsdp1 = workload_from_configs([_write(tmp_path, base | {"accelerate_config": "fsdp1"})])
    assert fsdp1.options["shard"] == "fsdp"  # fsdp_reshard_after_forward: FULL_SHARD, FSDP1's strategy by name
    assert {k.key for k in fsdp1.unmodelled if k.file == "fsdp1.yaml"} == {
        "fsdp_config.fsdp_backward_prefetch", "fsdp_config.fsdp_forward_prefetch"}
    missing = workload_from_configs([_write(tmp_path, base | {"accelerate_config": "zero9"})])
    assert "shard" not in missing.options and "accelerate_config" in {k.key for k in missing.unmodelled}
    own = _write(tmp_path, {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 1}}, "mine.yaml")
    by_path = workload_from_configs([_write(tmp_path, base | {"accelerate_config": str(own)})])
    assert by_path.options["shard"] == "zero1"


def test_grpo_without_its_generation_settings_is_named(tmp_path):
    doc = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "d", "reward_funcs": ["accuracy_reward"]}
    cfg = workload_from_configs([_write(tmp_path, doc)])
    assert {k.key for k in cfg.unmodelled} == {"reward_funcs"} and "seq_len" not in cfg.options
    given = workload_from_configs([_write(tmp_path, doc | {"num_generations": 4, "max_completion_length": 256,
                                                           "max_prompt_length": 256, "beta": 0.0})])
    assert given.options["completion_tokens"] == 256 and given.options["rollouts"] == 8  # 8 a card x 1 step
    assert not given.unmodelled


def test_what_a_real_trl_cli_file_combines_reads_without_a_false_conflict(tmp_path):
    """num_processes beside an accelerate file (the flag wins over the file's), 8-bit LoRA (no fp32 load), an
    output_dir beside accelerate's flags (still a CLI file), the allocator setting exported by env, and FSDP's
    activation checkpointing beside gradient_checkpointing: false (which the HF Trainer requires beside it)."""
    acc = _write(tmp_path, {"distributed_type": "FSDP", "num_processes": 8, "mixed_precision": "bf16",
                            "fsdp_config": {"fsdp_activation_checkpointing": True, "fsdp_version": 2}}, "acc.yaml")
    doc = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "d", "output_dir": "out", "num_processes": 2,
           "accelerate_config": str(acc), "gradient_checkpointing": False, "use_peft": True, "load_in_8bit": True,
           "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}
    o = workload_from_configs([_write(tmp_path, doc)]).options
    assert (o["gpus"], o["shard"], o["grad_checkpointing"], o["dtype"], o["expandable_segments"], o["batch"]) == \
        (2, "fsdp", True, "int8", True, 8)
    single = workload_from_configs([_write(tmp_path, {"model_name_or_path": "m", "dataset_name": "d",
                                                      "accelerate_config": "single_gpu"})])
    assert "gpus" not in single.options  # distributed_type NO: accelerate launches one process, whatever it says


def test_grpos_beta_is_not_a_preference_pair(tmp_path):
    doc = {"model_name_or_path": "m", "dataset_name": "d", "reward_funcs": ["accuracy_reward"], "beta": 0.04,
           "per_device_train_batch_size": 4}
    o = workload_from_configs([_write(tmp_path, doc)]).options
    assert o["batch"] == 4 and "reference" not in o and o.get("loss") != "logps"
