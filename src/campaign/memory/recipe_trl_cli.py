"""TRL's command-line config file (`trl sft --config FILE`, `trl dpo`, `trl grpo`) as the workload.

The file holds the trainer's config fields (SFTConfig, DPOConfig, GRPOConfig: HF TrainingArguments' and TRL's), its
ModelConfig (model_name_or_path, dtype, use_peft, lora_r...) and ScriptArguments (dataset_name...); every other key
is an `accelerate launch` flag (num_processes, accelerate_config), and `env` is exported (trl/scripts/utils.py
TrlParser.parse_args_and_config). Read as recipe_trainer reads a TrainingArguments file, with what TRL's CLI fills in
where the file is silent (TRL at f2cd577):

- gradient_checkpointing True and bf16 unless fp16 (trl/trainer/base_config.py _BaseConfig);
- the model loaded in ModelConfig's dtype, float32 (trl/trainer/model_config.py), so bf16 is autocast over fp32
  weights (mixed precision);
- per_device_train_batch_size 8 (HF TrainingArguments'); max_length 1024 (SFTConfig and DPOConfig);
- accelerate_config: a file, or the name of one of TRL's accelerate profiles (trl/accelerate_configs/*.yaml, read
  below as they are written; num_processes in the file overrides the profile's 8, as an accelerate flag does).

The trainer is the command's word (trl sft, dpo, grpo), not the file's: a file without DPO's beta or GRPO's
generation settings is counted as SFT, and says so as not modelled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import recipe_accelerate, recipe_read as rd, recipe_trainer

SOURCE = "TRL at f2cd577"
# keys only a TRL CLI file holds beside model_name_or_path (ScriptArguments, DatasetMixtureConfig, accelerate flags)
MARKS = ("dataset_name", "datasets", "dataset_mixture", "accelerate_config", "num_processes", "reward_funcs",
         "reward_model_name_or_path", "env")
# keys that only a TRL CLI file holds, output_dir or not: accelerate launch's flags, the exported environment, GRPO's
LAUNCH = ("accelerate_config", "num_processes", "env", "reward_funcs", "reward_model_name_or_path")
# keys that say which trainer runs it: DPO's (a pair trainer, recipe_trainer.is_pairs) or GRPO's
GRPO = ("reward_funcs", "reward_model_name_or_path", "num_generations")
# trl/accelerate_configs/<name>.yaml: each profile's settings (every one bf16 over 8 processes, none offloaded)
_COMMON = {"compute_environment": "LOCAL_MACHINE", "debug": False, "machine_rank": 0, "main_training_function": "main",
           "mixed_precision": "bf16", "num_machines": 1, "num_processes": 8, "rdzv_backend": "static",
           "same_network": True, "tpu_env": [], "tpu_use_cluster": False, "tpu_use_sudo": False, "use_cpu": False}
PROFILES: dict[str, dict[str, Any]] = {
    "zero1": _COMMON | {"distributed_type": "DEEPSPEED", "deepspeed_config": {
        "deepspeed_multinode_launcher": "standard", "gradient_accumulation_steps": 1, "zero3_init_flag": False,
        "zero_stage": 1}, "downcast_bf16": "no"},
    "zero2": _COMMON | {"distributed_type": "DEEPSPEED", "deepspeed_config": {
        "deepspeed_multinode_launcher": "standard", "offload_optimizer_device": "none",
        "offload_param_device": "none", "zero3_init_flag": False, "zero_stage": 2}, "downcast_bf16": "no"},
    "zero3": _COMMON | {"distributed_type": "DEEPSPEED", "deepspeed_config": {
        "deepspeed_multinode_launcher": "standard", "offload_optimizer_device": "none",
        "offload_param_device": "none", "zero3_init_flag": True, "zero3_save_16bit_model": True, "zero_stage": 3},
        "downcast_bf16": "no"},
    "fsdp1": _COMMON | {"distributed_type": "FSDP", "downcast_bf16": "no", "enable_cpu_affinity": False,
                        "fsdp_config": {
        "fsdp_activation_checkpointing": False, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": True, "fsdp_offload_params": False, "fsdp_reshard_after_forward": "FULL_SHARD",
        "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_sync_module_states": True, "fsdp_use_orig_params": True,
        "fsdp_version": 1}},
    "fsdp2": _COMMON | {"distributed_type": "FSDP", "downcast_bf16": "no", "enable_cpu_affinity": False,
                        "fsdp_config": {
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": False, "fsdp_reshard_after_forward": True, "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_activation_checkpointing": False, "fsdp_version": 2}},
    "multi_gpu": _COMMON | {"distributed_type": "MULTI_GPU", "downcast_bf16": "no", "gpu_ids": "all"},
    "single_gpu": _COMMON | {"distributed_type": "NO", "downcast_bf16": "no", "gpu_ids": "all"},
}


def is_trl_cli(doc: dict[str, Any]) -> bool:
    """A TRL CLI file: model_name_or_path beside an `accelerate launch` flag or a key of TRL's scripts only, or
    beside its dataset without the output_dir a TrainingArguments file gives."""
    return "model_name_or_path" in doc and (any(k in doc for k in LAUNCH) or (
        "output_dir" not in doc and any(k in doc for k in MARKS)))


def read(r: rd.Reader, path: Path, doc: dict[str, Any]) -> None:
    name = rd.label(path)
    generating = any(k in doc for k in GRPO)
    pairs = recipe_trainer.is_pairs(doc) and not generating  # GRPO's beta is its KL weight, not DPO's
    if "num_processes" in doc:
        r.set("gpus", rd.whole(doc["num_processes"], f"{name}: num_processes"), f"{name}: num_processes")
    if "gradient_checkpointing" not in doc:
        r.set("grad_checkpointing", True, f"{name} (TRL's default gradient_checkpointing: true, {SOURCE})")
    if "per_device_train_batch_size" not in doc:
        r.set("batch", 16 if pairs else 8, f"{name} (HF's default per_device_train_batch_size: 8"
              + (f" pairs, {rd.PAIRS})" if pairs else ")"))
    if not generating and not any(k in doc for k in ("max_length", "max_seq_length")):
        r.set("seq_len", 1024, f"{name} (TRL's SFT and DPO default max_length: 1024, {SOURCE})")
    kbit = doc.get("use_peft") is True and (doc.get("load_in_4bit") is True or doc.get("load_in_8bit") is True)
    half = "fp16" if doc.get("fp16") else "bf16" if doc.get("bf16", True) else None
    if not kbit and not any(k in doc for k in ("dtype", "torch_dtype")):
        r.set("dtype", "fp32", f"{name} (TRL's ModelConfig dtype: float32, {SOURCE})")
        if half:
            r.set("mixed_precision", True, f"{name} ({half}: " + (f"TRL's default, {SOURCE}" if half == "bf16"
                                                                   and "bf16" not in doc else "the file's") +
                  ", autocast over the fp32 weights)")
    env = doc.get("env")
    conf = str(env.get("PYTORCH_CUDA_ALLOC_CONF", "")) if isinstance(env, dict) else ""
    if "expandable_segments:true" in conf.replace(" ", "").lower():  # exported before the launch
        r.set("expandable_segments", True, f"{name}: env.PYTORCH_CUDA_ALLOC_CONF")
    elif isinstance(env, dict) and env:
        r.notes.append(f"{name}: env: exported before the launch; campaign reads PYTORCH_CUDA_ALLOC_CONF's "
                       "expandable_segments from it, nothing else")
    funcs = doc.get("reward_funcs")
    if isinstance(funcs, list) and all(isinstance(f, str) and "/" not in f for f in funcs):
        r.use(name, "reward_funcs")  # TRL's reward functions by name (accuracy_reward...): no model on the card
    if generating and "num_generations" not in doc:
        key = next(k for k in GRPO if k in doc)
        r.refuse(f"{name}: {key}", "GRPO (trl grpo) with TRL's default generation settings (num_generations 8, "
                 f"max_completion_length 512 in {SOURCE}; they moved between versions)", "counted without the "
                 "generation: give num_generations, max_completion_length and per_device_train_batch_size in the "
                 "file")
    if not generating and not pairs and r.reference is None:
        key = next((k for k in ("dataset_name", "datasets", "dataset_mixture") if k in doc), "model_name_or_path")
        r.refuse(f"{name}: {key}", "the trainer that runs it (trl sft, dpo or grpo: the command's word, not the "
                 "file's)", "counted as trl sft (say so with --reference none); for trl dpo add beta to the file "
                 "(or give --reference copy or adapters-off, and twice the batch)")
    profile = doc.get("accelerate_config")
    if isinstance(profile, str) and profile in PROFILES:
        settings = dict(PROFILES[profile])
        if "num_processes" in doc:  # an accelerate flag overrides the config file's value
            del settings["num_processes"]
        recipe_accelerate.read(r, Path(f"{profile}.yaml"), settings)
        r.use(name, "accelerate_config")
    elif isinstance(profile, str) and profile:
        for file in (Path(profile), path.parent / profile):
            if file.is_file():
                settings = rd.load_config_file(file)
                if "num_processes" in doc:  # an accelerate flag overrides the config file's value
                    settings.pop("num_processes", None)
                recipe_accelerate.read(r, file, settings)
                r.use(name, "accelerate_config")
                break
        else:
            r.refuse(f"{name}: accelerate_config", f"{profile} (neither one of TRL's profiles, "
                     f"{', '.join(PROFILES)}, nor a file found from this folder)", "counted without it")
    recipe_trainer.read(r, path, doc)
