"""A LLaMA-Factory training YAML (`llamafactory-cli train FILE`) as the workload.

The file is one mapping that HfArgumentParser splits into LLaMA-Factory's ModelArguments, DataArguments,
FinetuningArguments, GeneratingArguments and its TrainingArguments (the HF Seq2SeqTrainingArguments). What the
estimate reads, each from LLaMA-Factory's source at ff6d4d12 (src/llamafactory/...):

- `finetuning_type` (lora unless given: hparams/finetuning_args.py), `lora_rank` (8), `lora_target` (all: every
  linear layer but the head, model/model_utils/misc.py find_all_linear_modules, peft's all-linear);
  `quantization_bit` 4 with bitsandbytes (nf4, double quantization on: model/model_utils/quantization.py) is QLoRA,
  and LLaMA-Factory never calls peft's prepare_model_for_kbit_training (norms stay in the load dtype).
- Trainable parameters in fp32 (model/adapter.py): a full fine-tune without `pure_bf16` holds fp32 weights under
  bf16/fp16 autocast, unless DeepSpeed trains it (its bf16 engine keeps 16-bit weights and an fp32 master);
  peft's adapters are fp32 in every mode.
- Activation checkpointing is on unless `disable_gradient_checkpointing` (model/model_utils/checkpointing.py);
  `use_unsloth_gc` moves each checkpointed layer's input to the CPU.
- `cutoff_len` (2048) bounds every sequence; batches pad to their longest, to a multiple of 8 (the estimate counts
  the bound); `per_device_train_batch_size` is HF's (8 when absent).
- `stage`: sft and pt train through the model's own loss (fp32 logits); dpo's trainer upcasts the logits and takes
  a full log_softmax over chosen and rejected (2 rows a pair), with a reference model: the adapters disabled for
  LoRA, a frozen copy for a full fine-tune, none for orpo and simpo (train/trainer_utils.py create_ref_model).
- `enable_liger_kernel` on sft/pt: Liger's defaults (fused linear cross-entropy, RMSNorm, SwiGLU, RoPE); on dpo
  without the fused loss (model/model_utils/liger_kernel.py).
- `deepspeed`: a path LLaMA-Factory opens from the folder the command runs in.
Every other key is accounted for (recipe_keys.py): changing no memory, or named as not modelled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from . import recipe_accelerate, recipe_deepspeed, recipe_read as rd

LF = "LLaMA-Factory"
# LLaMA-Factory's own keys that only its files hold (a TrainingArguments or TRL file has none of them)
MARKS = ("finetuning_type", "cutoff_len", "template", "lora_target", "stage", "quantization_bit", "pref_beta")
STAGES = ("sft", "pt", "dpo", "kto", "rm", "ppo")
# model/model_utils/liger_kernel.py: the model types LLaMA-Factory applies Liger to
LIGER_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text", "glm", "glm4", "glm4v", "granite", "llama", "llava",
               "mistral", "mixtral", "mllama", "olmo2", "paligemma", "phi3", "qwen2", "qwen2_vl", "qwen2_5_vl",
               "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gpt_oss")
FP32_CAST = ("LLaMA-Factory casts the trainable parameters to fp32 (model/adapter.py) unless pure_bf16: fp32 "
             "weights under autocast")


def is_llamafactory(doc: dict[str, Any]) -> bool:
    """A LLaMA-Factory train YAML: model_name_or_path beside one of LLaMA-Factory's own keys."""
    return "model_name_or_path" in doc and any(k in doc for k in MARKS)


def read(r: rd.Reader, path: Path, doc: dict[str, Any]) -> None:
    """Read a LLaMA-Factory train YAML into the reader `r`; the HF keys it shares with TrainingArguments are read as
    recipe_read reads them."""
    name = rd.label(path)
    d = doc
    stage = str(d.get("stage", "sft"))
    if stage not in STAGES:
        raise InputError(f"{name}: stage {stage!r} is not one of LLaMA-Factory's ({', '.join(STAGES)}); fix it")
    kind = str(d.get("finetuning_type", "lora"))
    four_or_eight = d.get("quantization_bit")
    if four_or_eight is not None and kind not in ("lora", "oft"):  # hparams/parser.py refuses it too
        raise InputError(f"{name}: quantization_bit with finetuning_type {kind}: LLaMA-Factory quantizes a LoRA "
                         "base only; set finetuning_type: lora, or drop quantization_bit")
    r.use(name, *(k for k in ("stage", "finetuning_type") if k in d))
    base = d.get("model_name_or_path")
    if isinstance(base, str) and base.strip():
        r.model = base.strip()

    # the DeepSpeed config (or the HF Trainer's fsdp) first: whether it trains the model decides the dtype of a full
    # fine-tune
    recipe_deepspeed.recipe_key(r, path, d)
    deepspeed = r.options.get("shard", "none") != "none"  # ZeRO from the ds_config (or a file read before)
    if d.get("fsdp"):
        recipe_accelerate.fsdp_trainer_option(r, name, "fsdp", d["fsdp"])
    pure = d.get("pure_bf16") is True
    half = "bf16" if d.get("bf16") is True or pure else "fp16" if d.get("fp16") is True else None
    r.use(name, *(k for k in ("bf16", "fp16", "pure_bf16") if k in d))

    # the method
    if kind == "full":
        r.set("method", "full", f"{name}: finetuning_type")
        if pure:
            r.set("dtype", "bf16", f"{name}: pure_bf16 (no fp32 cast of the trainable parameters)")
        elif not deepspeed or r.options.get("shard") == "fsdp":  # DeepSpeed's engine keeps 16-bit weights
            r.set("dtype", "fp32", f"{name}: finetuning_type full ({FP32_CAST})")
            if half:
                r.set("mixed_precision", True, f"{name}: {half} (autocast over the fp32 weights)")
    elif kind == "lora":
        _lora(r, name, d)
    else:  # freeze, oft: named; the estimate keeps --method's
        r.refuse(f"{name}: finetuning_type", f"{kind} tuning", "counted as --method's (full unless given; campaign "
                 "reads full and lora)")
        for key in ("quantization_bit", "quantization_method", "double_quantization", "quantization_type"):
            if key in d and four_or_eight is not None:  # OFT's quantized base (QOFT): part of the method
                r.refuse(f"{name}: {key}", f"the quantized base of {kind} tuning", "counted as --dtype's")
    rd.auto_half(r, name, half)  # a ds_config's "auto" half precision is this file's

    # the batch, the length
    per = rd.whole(d.get("per_device_train_batch_size", 8), f"{name}: per_device_train_batch_size")
    pairs = stage == "dpo"
    where = f"{name}: per_device_train_batch_size" if "per_device_train_batch_size" in d else \
        f"{name} (no per_device_train_batch_size: HF's default 8)"
    r.set("batch", 2 * per if pairs else per, where + (f" ({rd.PAIRS})" if pairs else ""))
    cutoff = rd.whole(d.get("cutoff_len", 2048), f"{name}: cutoff_len")
    packed = d.get("packing") is True or (d.get("packing") is None and stage == "pt")
    length = cutoff if stage == "pt" else -(-cutoff // 8) * 8
    r.set("seq_len", length, (f"{name}: cutoff_len" if "cutoff_len" in d else f"{name} (no cutoff_len: "
                              "LLaMA-Factory's default 2048)") + ("" if packed or stage == "pt" else
                                                                   " (the bound: batches pad to their longest)"))
    r.use(name, *(k for k in ("packing",) if k in d))
    if d.get("neat_packing") is True and d.get("flash_attn") not in ("fa2", "fa3"):
        r.refuse(f"{name}: neat_packing", "a [batch, 1, L, L] attention mask in the compute dtype",
                 "counted without the mask")
    rd.accumulation(r, d, name)

    # checkpointing and what it keeps
    on = d.get("disable_gradient_checkpointing") is not True or d.get("gradient_checkpointing") is True
    r.set("grad_checkpointing", on, f"{name}: disable_gradient_checkpointing" if "disable_gradient_checkpointing"
          in d else f"{name} (LLaMA-Factory checkpoints every layer unless disable_gradient_checkpointing)")
    r.use(name, *(k for k in ("gradient_checkpointing", "use_reentrant_gc") if k in d))
    if d.get("use_unsloth_gc") is True and on:  # its own checkpoint function: the saved input .to("cpu")
        r.set("activation_offloading", True, f"{name}: use_unsloth_gc (each layer's checkpointed input on the CPU)")
    elif "use_unsloth_gc" in d:
        r.use(name, "use_unsloth_gc")

    # the loss, the kernels, attention
    r.set("logits_held", False, f"{name} ({rd.TRAINER_FREES_LOGITS})")
    liger = d.get("enable_liger_kernel") is True
    if liger and r.model_type is not None and r.model_type not in LIGER_TYPES:
        r.notes.append(f"{name}: enable_liger_kernel: LLaMA-Factory applies Liger to {r.model_type} models not at "
                       "all (a warning): nothing changes")
        r.use(name, "enable_liger_kernel")
    elif liger:
        where = f"{name}: enable_liger_kernel"
        if stage in ("sft", "pt"):
            rd.loss(r, "fused", where, where)
        if rd.liger_layers(r, ("rope", "rms_norm", rd.glu(r)), where):
            r.use(name, "enable_liger_kernel")
    elif "enable_liger_kernel" in d:
        r.use(name, "enable_liger_kernel")
    attention = {"disabled": "eager", "eager": "eager", "sdpa": "sdpa", "fa2": "sdpa", "fa3": "sdpa"}
    flash = d.get("flash_attn")
    if flash in attention:
        r.set("attention", attention[flash], f"{name}: flash_attn" + (" (flash attention keeps no scores, as "
                                                                      "SDPA's kernels)" if flash in ("fa2", "fa3")
                                                                      else ""))
    elif flash not in (None, "auto"):
        raise InputError(f"{name}: flash_attn {flash!r} is not one of LLaMA-Factory's (auto, disabled, sdpa, fa2, "
                         "fa3); fix it")
    else:
        r.use(name, *(k for k in ("flash_attn",) if k in d))
    if d.get("optim") is not None:
        rd.optim(r, d["optim"], f"{name}: optim", rd.OPTIM)

    # the trainer's other models
    if stage == "dpo":
        _reference(r, name, d, kind)
    elif stage in ("kto", "rm", "ppo"):
        r.refuse(f"{name}: stage", {"kto": "KTO (a KL batch beside each batch, and a reference model)",
                                    "rm": "a reward model (a value head)",
                                    "ppo": "PPO (generation, a value head, reference and reward models)"}[stage],
                 "counted as supervised fine-tuning")
    if r.gpus is not None and r.gpus > 1 and "expandable_segments" not in r.options:
        # launcher.py: over several cards llamafactory-cli runs torchrun with expandable segments
        r.set("expandable_segments", True, f"{name} (llamafactory-cli over {r.gpus} cards: torchrun with "
                                           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")
    r.account(name, LF, d)


def _lora(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    bits, method = d.get("quantization_bit"), str(d.get("quantization_method", "bnb"))
    where = f"{name}: finetuning_type" if "finetuning_type" in d else f"{name} (no finetuning_type: lora)"
    if bits is not None and method in ("bnb", "bitsandbytes") and rd.whole(bits, f"{name}: quantization_bit") == 4:
        r.set("method", "qlora", f"{where} + quantization_bit 4")
        r.set("double_quant", d.get("double_quantization", True) is True, f"{name}: double_quantization"
              if "double_quantization" in d else f"{name} (double quantization on: LLaMA-Factory's default)")
        r.set("kbit_upcast", False, f"{name} (LLaMA-Factory never calls prepare_model_for_kbit_training: norms "
                                    "and embeddings in the load dtype)")
        r.use(name, *(k for k in ("quantization_bit", "quantization_method", "quantization_type") if k in d))
    elif bits is not None and method in ("bnb", "bitsandbytes") and rd.whole(bits, f"{name}: quantization_bit") == 8:
        r.set("method", "lora", f"{where} + quantization_bit 8")
        r.set("dtype", "int8", f"{name}: quantization_bit 8 (bitsandbytes LLM.int8)")
        r.use(name, *(k for k in ("quantization_bit", "quantization_method") if k in d))
    else:
        if bits is not None:
            r.refuse(f"{name}: quantization_bit", f"{bits}-bit {method} quantization", "counted as a 16-bit LoRA "
                     "base (an upper bound)")
        r.set("method", "lora", where)
    rank = rd.whole(d.get("lora_rank", 8), f"{name}: lora_rank")
    r.set("lora_rank", rank, f"{name}: lora_rank" if "lora_rank" in d else f"{name} (no lora_rank: 8)")
    target = d.get("lora_target", "all")
    where = f"{name}: lora_target" if "lora_target" in d else f"{name} (no lora_target: all)"
    if target == "all":  # find_all_linear_modules: every Linear but lm_head, as peft's all-linear
        r.set("lora_targets", ("all-linear",), where + " (every linear layer but the head)")
    else:
        names = target.split(",") if isinstance(target, str) else target
        r.set("lora_targets", rd.modules([str(t).strip() for t in names] if isinstance(names, list) else names,
                                          f"{name}: lora_target"), where)
    rd.lora_extras(r, name, d, "additional_target")
    r.use(name, *(k for k in ("use_dora", "additional_target") if k in d))


def _reference(r: Any, name: str, d: dict[str, Any], kind: str) -> None:
    """LLaMA-Factory's DPO: a reference unless pref_loss is orpo or simpo; ref_model names another model."""
    loss = str(d.get("pref_loss", "sigmoid"))
    where = f"{name}: pref_loss" if "pref_loss" in d else f"{name}: stage dpo"
    if loss in ("orpo", "simpo"):
        r.set("reference", "none", f"{where} ({loss}: no reference model)")
    elif d.get("ref_model"):
        r.refuse(f"{name}: ref_model", f"a reference model of its own ({d['ref_model']})",
                 "counted as a frozen copy of the trained one")
        r.set("reference", "copy", f"{name}: ref_model")
    elif kind == "lora":
        r.set("reference", "adapters-off", f"{where} (LoRA: the adapters disabled, no copy)")
    elif kind == "full":
        r.set("reference", "copy", f"{where} (a frozen copy of the model)")
    r.use(name, *(k for k in ("pref_loss",) if k in d))
