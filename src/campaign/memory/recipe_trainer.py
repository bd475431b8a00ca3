"""An HF TrainingArguments file (JSON or YAML) as the workload, TRL's configs (SFT, DPO and the other pair
trainers, GRPO and RLOO) and argument files that carry peft keys (fms-hf-tuning's, TRL's ModelConfig) included: the
batch, the length, checkpointing, attention, LoRA, Liger, the dtypes, the optimizer, FSDP and a DeepSpeed config it
names."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import recipe_accelerate, recipe_deepspeed, recipe_read as rd

# Keys of TRL's configs that name a trainer whose memory the file alone does not settle (GRPO, RLOO: generation by
# the trained model; KTO: a KL batch beside each batch): named as not modelled (recipe_keys.NOT_MODELLED)
GENERATING = ("num_generations", "generation_batch_size", "steps_per_generation")


KTO = ("desirable_weight", "undesirable_weight")


# Keys that say a pair trainer keeps no reference model: TRL's CPOConfig (cpo_alpha, simpo_gamma; loss_type simpo)
# and the older DPOConfig's reference_free
REFERENCE_FREE = ("cpo_alpha", "simpo_gamma", "reference_free")


def _generating(r: rd.Reader, name: str, d: dict[str, Any], liger: dict[str, bool]) -> None:
    """TRL's GRPO and RLOO configs (num_generations): each card generates its rollouts with the trained model
    (per_device_train_batch_size x steps_per_generation, which defaults to gradient_accumulation_steps; or
    generation_batch_size over the cards), max_completion_length tokens after each prompt, then trains on the
    completions' log-probabilities. vLLM in server mode generates on other cards (no rollouts here); colocated vLLM
    is left named as not modelled. beta > 0 loads a reference model, 0 none; absent, its default moved between
    TRL versions (0.04, then 0.0): the command line's --reference, or beta's absence is noted and num_generations
    stays named as not modelled. The prompt length is the dataset's unless max_prompt_length bounds it."""
    completion = d.get("max_completion_length")
    if completion is None:
        r.notes.append(f"{name}: no max_completion_length (its default moved between TRL versions): give "
                       "--completion-tokens and --rollouts; num_generations stays not modelled")
        return
    where = f"{name}: max_completion_length"
    r.set("completion_tokens", rd.whole(completion, where), where)
    if d.get("max_prompt_length") is not None:
        prompt = rd.whole(d["max_prompt_length"], f"{name}: max_prompt_length")
        r.set("seq_len", prompt + completion, f"{name}: max_prompt_length + max_completion_length")
    else:
        r.notes.append(f"{name}: no max_prompt_length: --seq-len is the longest prompt + {completion} completion "
                       "tokens (give it)")
    if not liger.get("fused_linear_cross_entropy"):
        rd.loss(r, "logps", f"{name} (num_generations, {rd.LOGPS})", f"{name}: num_generations")
    vllm, mode = d.get("use_vllm") is True, d.get("vllm_mode")
    share = d.get("vllm_gpu_memory_utilization")
    if vllm and mode == "server":  # trl vllm-serve on other cards
        r.set("rollouts", 0, f"{name}: use_vllm + vllm_mode server (generated on other cards)")
        r.use(name, "use_vllm", "vllm_mode")
    elif vllm and mode == "colocate" and isinstance(share, (int, float)) and not isinstance(share, bool) and share > 0:
        r.set("vllm_share", float(share), f"{name}: use_vllm + vllm_mode colocate + vllm_gpu_memory_utilization")
        r.set("rollouts", 0, f"{name}: use_vllm (the colocated vLLM engine generates)")
        r.use(name, "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization")
    elif vllm:  # vllm_mode's default moved (server, then colocate), and so did the share's (0.9, then 0.3)
        r.notes.append(f"{name}: use_vllm without vllm_mode colocate and vllm_gpu_memory_utilization (their defaults "
                       "moved between TRL versions): give --vllm-share for a colocated engine")
        return
    elif not vllm:
        per, per_key = d.get("per_device_train_batch_size"), "per_device_train_batch_size"
        if per is None and "batch" in r.options:  # a default the file's reader filled in (a TRL CLI file: HF's 8)
            per, per_key = r.options["batch"], f"the batch ({r.sources['batch'][1]})"
        if per is None and d.get("generation_batch_size") is None:
            r.notes.append(f"{name}: no per_device_train_batch_size, so no count of the rollouts: give --batch and "
                           "--rollouts")
            return
        if d.get("generation_batch_size") is not None:
            if r.gpus is None:
                r.notes.append(f"{name}: generation_batch_size is over every card: give --gpus to read it")
                return
            total = rd.whole(d["generation_batch_size"], f"{name}: generation_batch_size")
            r.set("rollouts", -(-total // r.gpus), f"{name}: generation_batch_size / {r.gpus} cards")
        else:
            key = next((k for k in ("steps_per_generation", "gradient_accumulation_steps") if d.get(k) is not None),
                       None)
            steps = rd.whole(d[key], f"{name}: {key}") if key else 1
            per = rd.whole(per, f"{name}: per_device_train_batch_size")
            r.set("rollouts", per * steps, f"{name}: {per_key} x {key or 'steps_per_generation 1'}")
        r.use(name, *(k for k in ("use_vllm",) if k in d))
    beta = d.get("beta")
    if isinstance(beta, (int, float)) and not isinstance(beta, bool):
        adapters = r.options.get("method") in ("lora", "qlora")
        r.set("reference", ("adapters-off" if adapters else "copy") if beta > 0 else "none",
              f"{name}: beta" + (" (TRL loads no reference model at 0)" if beta == 0 else ""))
    elif r.reference is None:
        r.notes.append(f"{name}: no beta, whose default moved between TRL versions (0.04, then 0.0): give "
                       "--reference copy, adapters-off or none")
        return
    r.use(name, "num_generations", "temperature")


def is_pairs(d: dict[str, Any]) -> bool:
    """A TRL pair-preference config (DPO, IPO, ORPO, CPO, SimPO): a `beta` without the keys of a generating trainer
    (GRPO, RLOO) or of KTO, whose batches are not pairs."""
    return "beta" in d and not any(k in d for k in GENERATING + KTO + ("reward_funcs", "reward_model_name_or_path"))


def _reference(r: rd.Reader, name: str, d: dict[str, Any], reference: str | None) -> None:
    """A pair trainer's reference model (Workload.reference): none with precompute_ref_log_probs (computed before
    training, the model freed) or in a reference-free loss; else the file does not say (DPO keeps one, ORPO does
    not): `reference`, the command line's word, or `beta` stays named as not modelled. With PEFT a DPO reference is
    the trained model with its adapters disabled (adapters-off: TRL's use_adapter(model, None)), no copy."""
    why = None
    if d.get("precompute_ref_log_probs") is True:
        why = ("the reference log-probs computed before training (TRL: no reference model kept)",
               "precompute_ref_log_probs")
    elif d.get("loss_type") == "simpo" or any(d.get(k) not in (None, False) for k in REFERENCE_FREE):
        key = next((k for k in REFERENCE_FREE if d.get(k) not in (None, False)), "loss_type")
        why = ("a reference-free loss (CPO, SimPO)", key)
    if why is not None:
        r.set("reference", "none", f"{name}: {why[1]} ({why[0]})")
        r.use(name, "beta")
    elif reference is not None:
        r.use(name, "beta")  # the command line says (--reference)


# fms-hf-tuning's argument files (tuning/sft_trainer.py): keys only its DataArguments and PeftMethod hold, and its
# default max_seq_length, to which it truncates (tuning/config/configs.py at d3c30a0: DEFAULT_CONTEXT_LENGTH, line 26)
FMS_MARKS = ("training_data_path", "data_config_path", "peft_method")
FMS_MAX_SEQ_LENGTH = 4096
FMS_DEFAULT = "fms-hf-tuning's default of 4096 tokens, to which it truncates; shorter batches pad to their longest"


def read(r: rd.Reader, path: Path, d: dict[str, Any]) -> None:
    name = rd.label(path)
    r.set("logits_held", False, f"{name} ({rd.TRAINER_FREES_LOGITS})")
    pairs = is_pairs(d)
    if "per_device_train_batch_size" in d:
        per = rd.whole(d["per_device_train_batch_size"], f"{name}: per_device_train_batch_size")
        r.set("batch", 2 * per if pairs else per,
              f"{name}: per_device_train_batch_size" + (f" ({rd.PAIRS})" if pairs else ""))
    for key in ("max_seq_length", "max_length"):  # TRL's SFTConfig
        if d.get(key) is not None:
            r.set("seq_len", rd.whole(d[key], f"{name}: {key}"), f"{name}: {key}")
    if d.get("gradient_checkpointing") is not None:
        r.set("grad_checkpointing", bool(d["gradient_checkpointing"]), f"{name}: gradient_checkpointing")
    rd.checkpointing_kwargs(r, name, d)
    rd.attention(r, name, d)
    _args_peft(r, name, d)
    liger = rd.liger_config(r, name, d)
    generating = "num_generations" in d and not any(k in d for k in KTO)
    if generating:
        _generating(r, name, d, liger)
    if pairs:
        _reference(r, name, d, r.reference)
        if not liger.get("fused_linear_cross_entropy"):  # Liger's fused DPO loss: --loss fused, below
            rd.loss(r, "logps", f"{name} (beta, {rd.LOGPS})", f"{name}: beta")  # beta stays open: _reference
    if "seq_len" not in r.options and any(k in d for k in FMS_MARKS):
        r.set("seq_len", FMS_MAX_SEQ_LENGTH, f"{name} (no max_seq_length: {FMS_DEFAULT})")
    if "seq_len" not in r.options:  # TRL's defaults for it moved between trainers and versions
        r.notes.append(f"{name}: no max_length or max_seq_length: the length counted is --seq-len's (2048 unless "
                       "given); give the longest sequence your data packs or truncates to")
    half = "bf16" if d.get("bf16") else "fp16" if d.get("fp16") else None
    r.use(name, *(k for k in ("bf16", "fp16") if k in d))
    dtype_key = "dtype" if "dtype" in d and "torch_dtype" not in d else "torch_dtype"  # TRL ModelConfig's: dtype
    loaded = rd.torch_dtype(d.get(dtype_key), f"{name}: {dtype_key}")
    r.use(name, *(k for k in (dtype_key,) if k in d))  # QLoRA: the compute dtype of its nf4 base
    if loaded is not None and r.options.get("method") != "qlora":  # QLoRA: the compute dtype, the base nf4
        if loaded == "fp32" and half:
            r.set("mixed_precision", True, f"{name}: {half} (autocast over the fp32 model {dtype_key} loads)")
        r.set("dtype", loaded, f"{name}: {dtype_key} (the model loaded in it)")
    if d.get("optim") is not None:
        rd.optim(r, d["optim"], f"{name}: optim", rd.OPTIM)
    rd.accumulation(r, d, name)
    if d.get("use_liger_kernel") is not None:
        where = f"{name}: use_liger_kernel" + (" + liger_kernel_config" if "liger_kernel_config" in r.used_keys(name)
                                              else "")
        if r.causal is False:  # Liger's apply table (MODEL_TYPE_TO_APPLY_LIGER_FN) holds decoders only
            r.use(name, "use_liger_kernel")
            if liger:
                r.notes.append(f"{where}: Liger has no kernels for {r.model_type or 'this model'} (not a decoder): "
                               "the Trainer's patch changes nothing")
        else:
            if liger.get("fused_linear_cross_entropy"):
                rd.loss(r, "fused", where, f"{name}: use_liger_kernel")
            elif not (pairs or generating):  # theirs take the log-probabilities (logps), set above
                r.set("loss", "full", where)
            rd.liger_layers(r, tuple(k for k in ("rope", "rms_norm", rd.glu(r)) if liger.get(k)), where)
    if d.get("fsdp"):
        recipe_accelerate.fsdp_trainer_option(r, name, "fsdp", d["fsdp"])
    elif "fsdp" in d:
        r.use(name, "fsdp")
    recipe_deepspeed.recipe_key(r, path, d)
    rd.auto_half(r, name, half)
    if half and (loaded is None or r.options.get("method") == "qlora") and "mixed_precision" not in r.options:
        r.notes.append(f"{name}: {half}: autocast over the weights' own dtype (--dtype); add --mixed-precision when "
                       "the model is loaded in fp32 (fp32 master weights, grads and states)")
    name_or_path = d.get("model_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip() and r.model is None:
        r.model = name_or_path.strip()
    r.account(name, "TrainingArguments", d)


def _args_peft(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """LoRA settings carried by an argument file (fms-hf-tuning: peft_method, r, target_modules; TRL's ModelConfig:
    use_peft, lora_r, lora_target_modules, load_in_4bit/8bit), handed by those scripts to peft's LoraConfig."""
    method, use_peft = d.get("peft_method"), d.get("use_peft")
    if str(method).lower() == "alora":  # fms-hf-tuning builds the same peft LoraConfig for activated LoRA
        method = "lora"
    r.use(name, *(k for k in ("peft_method", "use_peft") if k in d))
    if method is not None and str(method).lower() not in ("lora", "none", ""):
        r.refuse(f"{name}: peft_method", f"{method!r}", "counted as --method's (full unless given; campaign reads "
                 "lora)")
    if not (str(method).lower() == "lora" or use_peft is True):
        return
    key = "peft_method" if str(method).lower() == "lora" else "use_peft"
    rd.lora_extras(r, name, d, "modules_to_save", "lora_modules_to_save")
    if d.get("lora_dropout") is None:  # TRL's ModelConfig and fms-hf-tuning's LoraConfig both default to 0.05
        r.set("lora_dropout", 0.05, f"{name}: {key} (no lora_dropout: TRL's ModelConfig and fms-hf-tuning's "
                                    "LoraConfig default, 0.05)")
    four, eight = d.get("load_in_4bit") is True, d.get("load_in_8bit") is True
    r.set("method", "qlora" if four else "lora", f"{name}: {key}" + (" + load_in_4bit" if four else ""))
    if four or eight:  # trl/trainer/sft_trainer.py and dpo_trainer.py since 0.22 (TRL #3882, #3906)
        r.notes.append(f"{name}: a k-bit base: TRL 0.22 and later neither call peft's prepare_model_for_kbit_training "
                       "nor keep the adapters in fp32 (they cast them to bf16): add --no-kbit-upcast "
                       "--no-peft-autocast for those; the estimate without is the older stack's, higher")
    r.use(name, *(k for k in ("load_in_4bit", "load_in_8bit", "use_dora", "modules_to_save", "lora_modules_to_save")
                  if k in d))
    if eight and not four:
        r.set("dtype", "int8", f"{name}: load_in_8bit")
    for rank in ("r", "lora_r"):
        if d.get(rank) is not None:
            r.set("lora_rank", rd.whole(d[rank], f"{name}: {rank}"), f"{name}: {rank}")
    targets = next((t for t in ("target_modules", "lora_target_modules") if d.get(t) is not None), None)
    if targets:
        r.set("lora_targets", rd.modules(d[targets], f"{name}: {targets}"), f"{name}: {targets}")
    else:
        rd.default_targets(r, f"{name}: {key}")
