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
Every other key is accounted for (recipe_keys.py): changing no memory, or named as not modelled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

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
    fsdp = dist.get("name") == "fsdp2"
    bf16 = d.get("bf16", True) is not False
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
    if kind != "lora":  # model_engine.py: a full fine-tune in fp32, bf16 only as FSDP2's compute dtype
        r.set("dtype", "fp32", f"{name} (v1 casts a fully tuned model to fp32)")
        r.set("mixed_precision", fsdp and bf16, f"{name}: bf16 (" + ("FSDP2's bf16 compute over fp32 shards)" if fsdp
                                                                    else "no autocast without FSDP2: fp32)"))
        r.use(name, "bf16")
    if fsdp:
        if (r.gpus or 1) > 1:
            r.set("shard", "fsdp", f"{name}: dist_config.name (FSDP2 over {r.gpus} cards)")
        rd.reshard(r, name, dist.get("reshard_after_forward"), "dist_config.reshard_after_forward")
        if dist.get("offload_params") is True:
            r.set("offload_params", "cpu", f"{name}: dist_config.offload_params")
        r.use(name, "dist_config.name", "dist_config.offload_params", "dist_config.pin_memory",
              "dist_config.dcp_path")
    elif dist:
        r.refuse(f"{name}: dist_config.name", f"the {dist.get('name')!r} engine", "counted as one replica a card")
        if dist.get("config_file"):
            r.refuse(f"{name}: dist_config.config_file", "DeepSpeed's config (v1's plugin)",
                     "counted without ZeRO")
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


__all__ = ["V1", "is_v1", "read"]
