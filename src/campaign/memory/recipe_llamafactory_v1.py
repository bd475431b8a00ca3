"""A LLaMA-Factory v1 train YAML (examples/v1/*: `model`, `micro_batch_size`, `cutoff_len` and plugin sections
`peft_config`, `dist_config`, `kernel_config`, `quant_config`, `optim_config`) as the workload. The v1 engine is
LLaMA-Factory's own trainer, not HF's; what the estimate reads, each from its source at ff6d4d12
(src/llamafactory/v1/...):

- config/training_args.py: `micro_batch_size` (1), `cutoff_len` (2048), `enable_activation_checkpointing` (true;
  core/base_trainer.py gradient_checkpointing_enable, non-reentrant), `bf16` (true), `global_batch_size` (micro x
  the data-parallel cards: the accumulation is their quotient).
- core/model_engine.py: the model loaded with dtype "auto" (the checkpoint's, 16-bit); a full fine-tune casts it to
  fp32 (model.to(torch.float32)) and nothing autocasts: without FSDP2 it trains in fp32, under FSDP2 with bf16 its
  MixedPrecisionPolicy computes in bf16 over fp32 shards (plugins/trainer_plugins/distributed/fsdp2.py).
- plugins/model_plugins/peft.py: `peft_config.name: lora`, peft's LoraConfig of `r` (8), `lora_dropout` (0.05) and
  `target_modules` ("all": every Linear but the head; one other string is one name, not a pattern).
- trainers/sft_trainer.py, core/base_trainer.py compute_log_probs: the model's logits upcast (logits.float()), the
  shifted copy made contiguous, F.cross_entropy over it (transformers' float-logits path); only the loss is kept.
- core/base_trainer.py _init_optimizer: torch.optim.AdamW without an `optim_config`.
- `dist_config: {name: deepspeed, config_file}`: the ds_config read as DeepSpeed's (accelerate's DeepSpeedPlugin
  takes it), in bf16 unless it turns bf16 or fp16 off (plugins/model_plugins/deepspeed_utils.py).
- `kernel_config.name` (plugins/model_plugins/kernels/): `auto` is the Ascend NPU kernels only, none on a CUDA card;
  `liger_kernel` Liger's defaults on Qwen3's types, its fused loss swapped for Liger's cross_entropy in training.
Every other key is accounted for (recipe_keys.py): changing no memory, or named as not modelled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from . import recipe_read as rd

V1 = "LLaMA-Factory v1"
# the v1 arguments only its files hold (config/*_args.py); the older LLaMA-Factory YAML has model_name_or_path
MARKS = ("model_class", "peft_config", "dist_config", "kernel_config", "quant_config", "micro_batch_size",
         "train_dataset")


def is_v1(doc: dict[str, Any]) -> bool:
    """A v1 train YAML: `model` (a name or path) beside one of v1's own arguments."""
    return isinstance(doc.get("model"), str) and "model_name_or_path" not in doc and any(k in doc for k in MARKS)


def _section(d: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    return rd.section(d, key, name, "LLaMA-Factory v1 reads a plugin section (name: ..., and its settings)")


def read(r: rd.Reader, path: Path, d: dict[str, Any]) -> None:
    name = rd.label(path)
    r.model = d["model"].strip()
    r.use(name, "model")
    r.set("batch", rd.whole(d.get("micro_batch_size", 1), f"{name}: micro_batch_size"),
          f"{name}: micro_batch_size" if "micro_batch_size" in d else f"{name} (no micro_batch_size: v1's 1)")
    r.set("seq_len", rd.whole(d.get("cutoff_len", 2048), f"{name}: cutoff_len"),
          f"{name}: cutoff_len" if "cutoff_len" in d else f"{name} (no cutoff_len: v1's 2048)")
    checkpointing = d.get("enable_activation_checkpointing", True) is not False
    r.set("grad_checkpointing", checkpointing, f"{name}: enable_activation_checkpointing" if
          "enable_activation_checkpointing" in d else f"{name} (v1 checkpoints every layer by default)")
    r.set("hf_loss", "float-logits", f"{name} (v1's compute_log_probs: logits.float(), a contiguous shifted copy)")
    r.set("logits_held", False, f"{name} (v1's trainer keeps the loss only)")
    peft = _section(d, "peft_config", name)
    dist = _section(d, "dist_config", name)
    fsdp, deepspeed = dist.get("name") == "fsdp2", dist.get("name") == "deepspeed"
    bf16 = d.get("bf16", True) is not False
    if deepspeed:  # read first: its stage and precision decide how the model trains
        _deepspeed(r, path, dist)
    _kernels(r, name, _section(d, "kernel_config", name))
    kind = peft.get("name")
    if kind == "lora":
        r.set("method", "lora", f"{name}: peft_config.name")
        r.set("lora_rank", rd.whole(peft.get("r", 8), f"{name}: peft_config.r"),
              f"{name}: peft_config.r" if "r" in peft else f"{name} (no peft_config.r: 8)")
        rd.lora_dropout(r, name, {"lora_dropout": peft.get("lora_dropout", 0.05)}, shown="peft_config.lora_dropout")
        targets = peft.get("target_modules", "all")
        if targets == "all":
            r.set("lora_targets", ("all-linear",), f"{name}: peft_config.target_modules (every Linear but the head)")
        else:  # one string is one name (peft.py wraps it in a list)
            r.set("lora_targets", rd.modules([targets] if isinstance(targets, str) else targets,
                                             f"{name}: peft_config.target_modules"),
                  f"{name}: peft_config.target_modules")
        if peft.get("use_dora"):
            r.refuse(f"{name}: peft_config.use_dora", "DoRA (a magnitude vector per target, and the weight norm in "
                     "the step)", "counted as LoRA, which is low")
        if peft.get("modules_to_save"):
            r.refuse(f"{name}: peft_config.modules_to_save", f"fully trained modules {peft['modules_to_save']}",
                     "the adapters are counted without them, which is low")
        r.use(name, "peft_config.lora_alpha", "peft_config.use_rslora", "peft_config.name", "peft_config.r",
              "peft_config.lora_dropout", "peft_config.target_modules", "bf16")
        if fsdp and bf16:
            r.refuse(f"{name}: dist_config.name", "FSDP2's bf16 compute of the fp32 adapters (MixedPrecisionPolicy "
                     "over every parameter)", "counted with peft's fp32 adapter compute, an upper bound")
    elif peft:
        r.refuse(f"{name}: peft_config.name", f"the {kind!r} tuning plugin",
                 "counted as a full fine-tune, an upper bound")
        for key in (k for k in peft if k != "name"):  # the plugin's own settings (freeze_trainable_layers...)
            r.refuse(f"{name}: peft_config.{key}", f"a setting of the {kind!r} tuning plugin", "counted as a full "
                     "fine-tune, an upper bound")
    if kind != "lora":  # model_engine.py: a full fine-tune in fp32, bf16 only as FSDP2's compute dtype
        r.set("dtype", "fp32", f"{name} (v1 casts a fully tuned model to fp32)")
        if not deepspeed:  # DeepSpeed's engine casts it to bf16 over an fp32 master (its config decides)
            r.set("mixed_precision", fsdp and bf16, f"{name}: bf16 (" + (
                "FSDP2's bf16 compute over fp32 shards)" if fsdp else "no autocast without FSDP2: fp32)"))
        r.use(name, "bf16")
    if fsdp:
        if (r.gpus or 1) > 1:
            r.set("shard", "fsdp", f"{name}: dist_config.name (FSDP2 over {r.gpus} cards)")
        rd.reshard(r, name, dist.get("reshard_after_forward"), "dist_config.reshard_after_forward")
        if dist.get("offload_params") is True:
            r.set("offload_params", "cpu", f"{name}: dist_config.offload_params")
        r.use(name, "dist_config.name", "dist_config.offload_params", "dist_config.pin_memory",
              "dist_config.dcp_path")
    elif dist and not deepspeed:
        r.refuse(f"{name}: dist_config.name", f"the {dist.get('name')!r} engine", "counted as one replica a card")
    micro = r.options["batch"]
    cards = r.gpus or 1
    total = d.get("global_batch_size")
    if total is not None:
        steps, rest = divmod(rd.whole(total, f"{name}: global_batch_size"), micro * cards)
        if rest == 0 and steps >= 1:
            r.set("grad_accumulation", steps, f"{name}: global_batch_size (over micro_batch_size {micro} x {cards} "
                                              "card(s))")
        else:
            r.refuse(f"{name}: global_batch_size", f"{total} sequences a step over {micro} x {cards} card(s)",
                     "counted without accumulation")
    attention = d.get("flash_attn")
    if attention == "eager":
        r.set("attention", "eager", f"{name}: flash_attn")
    elif attention in ("sdpa", "flash_attention_2", "flash_attention_3", None):
        r.use(name, "flash_attn")
    if d.get("model_class", "llm") == "llm":
        r.use(name, "model_class")
    if r.reference is None and not any(k in d for k in ("pref_loss", "pref_beta")):
        # launcher.py: `llamafactory-cli sft|dpo|rm FILE` picks the trainer; a DPO file may hold no key of its own
        key = "train_dataset" if "train_dataset" in d else "model"
        r.refuse(f"{name}: {key}", "the trainer that runs it (llamafactory-cli sft, dpo or rm: the command's word, "
                 "not the file's)", "counted as sft (say so with --reference none); for dpo give --reference "
                 "adapters-off (LoRA) or copy, --loss logps and twice the batch")
    r.account(name, V1, d)


def _deepspeed(r: rd.Reader, path: Path, dist: dict[str, Any]) -> None:
    """`dist_config: {name: deepspeed, config_file: ...}`: the ds_config read as DeepSpeed receives it from v1
    (plugins/trainer_plugins/distributed/deepspeed.py, plugins/model_plugins/deepspeed_utils.py): bf16 unless its bf16
    or fp16 says false (infer_deepspeed_mixed_precision, which refuses fp16 on and reads "true"/"false" strings), the
    micro-batch v1's own (its dataloader feeds micro_batch_size; the ds value is filled only where "auto")."""
    from . import recipe_deepspeed

    name = rd.label(path)
    value = dist.get("config_file")
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name}: dist_config.config_file is {rd.short(value)}; LLaMA-Factory v1 needs the path of a "
                         "DeepSpeed config there (examples/deepspeed/ds_z3_config.json)")
    r.use(name, "dist_config.name", "dist_config.config_file")

    def launched(ds_name: str, doc: dict[str, Any]) -> dict[str, Any]:
        def enabled(key: str) -> Any:
            section = doc.get(key)
            on = section.get("enabled", "auto") if isinstance(section, dict) else "auto"
            return {"true": True, "false": False}.get(on.lower(), on) if isinstance(on, str) else on

        if enabled("fp16") is True:
            raise InputError(f"{ds_name}: fp16.enabled is true; LLaMA-Factory v1 refuses fp16 under DeepSpeed (bf16 or "
                             "none only): set it to false or auto")
        bf16 = enabled("bf16") is not False and enabled("fp16") is not False
        view = {k: v for k, v in doc.items() if k not in ("train_micro_batch_size_per_gpu", "train_batch_size")}
        for key in ("fp16", "bf16"):
            section = doc.get(key)
            view[key] = {**(section if isinstance(section, dict) else {}), "enabled": bf16 and key == "bf16"}
        r.use(ds_name, "train_micro_batch_size_per_gpu", "train_batch_size", "fp16.enabled", "bf16.enabled")
        r.notes.append(f"{ds_name}: read as v1 hands it to DeepSpeed: {'bf16' if bf16 else 'no mixed precision'} "
                       "(infer_deepspeed_mixed_precision), the micro-batch v1's micro_batch_size")
        return view

    recipe_deepspeed.open_config(r, path, value.strip(), "dist_config.config_file", "LLaMA-Factory v1", launched)


# plugins/model_plugins/kernels/liger_kernel_ops.py: the model types v1 applies Liger to (others: a warning only)
V1_LIGER_TYPES = ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def _kernels(r: rd.Reader, name: str, kernel: dict[str, Any]) -> None:
    """`kernel_config.name`, a comma list (kernels/interface.py apply_kernels): `auto` applies the Ascend NPU kernels
    only (_AUTO_KERNELS), none on a CUDA card; `liger_kernel` Liger's apply function of the model's type with its
    defaults, where training forces Liger's unfused cross_entropy in place of the fused loss
    (require_logits: v1's trainer computes its loss from the logits); any other kernel is named."""
    if not kernel:
        return
    names = kernel.get("name")
    if not isinstance(names, str) or not [n for n in names.split(",") if n.strip()]:
        raise InputError(f"{name}: kernel_config.name is {rd.short(names)}; LLaMA-Factory v1 reads kernel names "
                         "separated by commas (auto, liger_kernel)")
    r.use(name, "kernel_config.name", *(["kernel_config.require_logits"] if kernel.get("require_logits") is not False
                                        else []))
    for kernel_name in (n.strip() for n in names.split(",") if n.strip()):
        if kernel_name == "auto":
            r.notes.append(f"{name}: kernel_config.name auto: v1's automatic kernels are Ascend NPU kernels only "
                           "(kernels/interface.py _AUTO_KERNELS); on a CUDA or ROCm card none applies")
        elif kernel_name == "liger_kernel":
            _liger(r, name, kernel)
        else:
            r.refuse(f"{name}: kernel_config.name", f"v1's {kernel_name!r} kernel", "counted without it")


def _liger(r: rd.Reader, name: str, kernel: dict[str, Any]) -> None:
    if r.model_type not in V1_LIGER_TYPES:
        r.notes.append(f"{name}: kernel_config.name liger_kernel: v1 applies Liger to {', '.join(V1_LIGER_TYPES)} "
                       f"only; {r.model_type or 'this model'} trains without it")
        return
    # Liger's defaults (its apply function's signature); v1 reads no use_kernels from the file, only require_logits
    layers = ("rope", "rms_norm", "swiglu")
    rd.liger_layers(r, layers, f"{name}: kernel_config.name (Liger's {', '.join(layers)})")
    if kernel.get("require_logits", True) is not False:
        r.refuse(f"{name}: kernel_config.name", "Liger's cross_entropy, which training swaps in for its fused loss "
                 "(require_logits) and which computes the logits' gradient in their place",
                 "counted with torch's cross-entropy over the fp32 logits, an upper bound")
    else:  # Liger's forward then skips the logits (training, labels passed) and compute_log_probs fails on them
        raise InputError(f"{name}: kernel_config.require_logits false: Liger's fused loss then returns no logits in "
                         "training and v1's trainer fails on logits.float(); remove require_logits")


__all__ = ["V1", "is_v1", "read"]
