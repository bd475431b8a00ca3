"""An axolotl YAML (`axolotl train FILE`) as the workload: the adapter (LoRA, QLoRA), its rank and targets, the
sequence length and micro-batch, preference training (`rl`), checkpointing, the load dtype, the optimizer, Liger's
kernels and loss, attention, and a DeepSpeed config it names."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import recipe_accelerate, recipe_deepspeed, recipe_read as rd

# axolotl's `rl` trainers of chosen and rejected pairs -> whether each runs a reference model
AXOLOTL_PAIRS = {"dpo": True, "ipo": True, "orpo": False, "simpo": False}


AXOLOTL_LIGER = {"liger_rope": "rope", "liger_rms_norm": "rms_norm", "liger_glu_activation": "glu"}  # glu: rd.glu


def read(r: rd.Reader, path: Path, d: dict[str, Any]) -> None:
    name = rd.label(path)
    r.set("logits_held", False, f"{name} (axolotl trains through the HF Trainer: {rd.TRAINER_FREES_LOGITS})")
    r.model = str(d["base_model"])
    adapter = str(d.get("adapter") or "").lower()
    if adapter not in ("", "lora", "qlora"):
        r.refuse(f"{name}: adapter", f"{adapter!r}", "counted as a full fine-tune (an upper bound; campaign reads "
                 "lora and qlora)")
    method = "qlora" if adapter == "qlora" or (adapter == "lora" and d.get("load_in_4bit")) else \
        "lora" if adapter == "lora" else "full"
    r.set("method", method, f"{name}: adapter" + (" + load_in_4bit" if d.get("load_in_4bit") else ""))
    if d.get("load_in_8bit"):
        r.set("dtype", "int8", f"{name}: load_in_8bit")
    if method in ("lora", "qlora") and (d.get("load_in_8bit") or d.get("load_in_4bit")):
        _kbit_recast(r, name, d)
    if d.get("lora_r") is not None:
        r.set("lora_rank", rd.whole(d["lora_r"], f"{name}: lora_r"), f"{name}: lora_r")
    if method != "full":
        rd.lora_dropout(r, name, d)
    if d.get("lora_target_linear"):
        r.set("lora_targets", ("all-linear",), f"{name}: lora_target_linear")
        # with lora_target_modules too axolotl targets the union (loaders/adapter.py), all-linear (every Linear but
        # lm_head) holding any other linear layer's name: read, unless it names the head or the embeddings
        extra = d.get("lora_target_modules")
        names = [extra] if isinstance(extra, str) else extra if isinstance(extra, list) else []
        if names and not {str(n) for n in names} & {"lm_head", "embed_tokens"}:
            r.use(name, "lora_target_modules")
        elif names:
            r.refuse(f"{name}: lora_target_modules", "LoRA on the head or the embeddings beside every linear layer",
                     "counted on the linear layers only, which is low")
    elif d.get("lora_target_modules") is not None:  # axolotl hands it to peft's LoraConfig as it is
        r.set("lora_targets", rd.modules(d["lora_target_modules"], f"{name}: lora_target_modules"),
              f"{name}: lora_target_modules")
    if d.get("lora_modules_to_save"):
        r.refuse(f"{name}: lora_modules_to_save", f"fully trained modules {d['lora_modules_to_save']}",
                 "the adapters are counted without them, which is low")
    if d.get("sequence_len") is not None:
        r.set("seq_len", rd.whole(d["sequence_len"], f"{name}: sequence_len"), f"{name}: sequence_len")
    rl = str(d.get("rl") or "").lower()
    pairs = rl in AXOLOTL_PAIRS
    if d.get("micro_batch_size") is not None:
        per = rd.whole(d["micro_batch_size"], f"{name}: micro_batch_size")
        r.set("batch", 2 * per if pairs else per, f"{name}: micro_batch_size" + (f" ({rd.PAIRS})" if pairs else ""))
    if pairs:  # axolotl's DPO loads a reference model for a full fine-tune; with an adapter TRL disables it
        reference = ("adapters-off" if method in ("lora", "qlora") else "copy") if AXOLOTL_PAIRS[rl] else "none"
        r.set("reference", reference, f"{name}: rl")
        if d.get("liger_fused_linear_cross_entropy") is not True:
            rd.loss(r, "logps", f"{name}: rl ({rd.LOGPS})", f"{name}: rl")
    _checkpointing(r, name, d, method)
    if method != "qlora" and not d.get("load_in_8bit"):  # the model is loaded in that dtype (QLoRA's base: nf4)
        if d.get("bf16") in (True, "auto"):
            r.set("dtype", "bf16", f"{name}: bf16 (the model loaded in bf16)")
        elif d.get("fp16") is True:
            r.set("dtype", "fp16", f"{name}: fp16 (the model loaded in fp16)")
    if d.get("optimizer") is not None:
        rd.optim(r, d["optimizer"], f"{name}: optimizer", rd.OPTIM)
    rd.accumulation(r, d, name)
    if d.get("liger_fused_linear_cross_entropy") is True:
        rd.loss(r, "fused", f"{name}: liger_fused_linear_cross_entropy", f"{name}: liger_fused_linear_cross_entropy")
    elif d.get("liger_fused_linear_cross_entropy") is not None:
        if not pairs:
            r.set("loss", "full", f"{name}: liger_fused_linear_cross_entropy")
        r.use(name, "liger_fused_linear_cross_entropy")
    liger = {k: rd.glu(r) if kernel == "glu" else kernel for k, kernel in AXOLOTL_LIGER.items() if d.get(k) is not None}
    if liger:
        if rd.liger_layers(r, tuple(kernel for k, kernel in liger.items() if d[k] is True),
                         " + ".join(f"{name}: {k}" for k in liger)):
            r.use(name, *liger)
            if d.get("liger_rms_norm") is True and r.model_type in ("qwen3", "qwen3_moe"):
                # axolotl patches Liger's RMSNorm class before the model loads (LigerPlugin.pre_model_load), so
                # Qwen3's q_norm/k_norm are Liger's too; campaign counts them as the Trainer's patch of a loaded
                # model leaves them, HF's
                r.notes.append(f"{name}: liger_rms_norm: axolotl's Liger patch reaches Qwen3's q/k norms too; they "
                               "are counted as HF's (fp32 copies of q and k): the activations are an upper bound")
    cce = _cce(r, name, d, method, bool(rl))
    _lora_kernels(r, name, d, method)
    rd.attention(r, name, d)
    _fsdp(r, name, d)
    recipe_deepspeed.recipe_key(r, path, d)
    rd.auto_half(r, name, "bf16" if d.get("bf16") in (True, "auto") else "fp16" if d.get("fp16") is True else None)
    r.use(name, *(k for k in ("base_model", "adapter", "load_in_4bit", "load_in_8bit", "lora_target_linear",
                              "bf16", "fp16") if k in d))
    _axolotl_liger_inert(r, name, d)
    _plugins(r, name, d, cce)
    r.account(name, "axolotl", d)


LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
CCE_HEAD_KEYS = ("cut_cross_entropy_accum_c_fp32", "cut_cross_entropy_c_grad_chunk_size")


def _cce(r: rd.Reader, name: str, d: dict[str, Any], method: str, rl: bool) -> bool:
    """Cut Cross-Entropy: the CutCrossEntropyPlugin in `plugins` patches the model's forward (cce_patch, impl cce)
    unless `cut_cross_entropy: false` (its default is true: integrations/cut_cross_entropy/args.py); without the
    plugin the key is left to the account. The patch runs only where the model gets labels, which TRL's trainers
    of `rl` (DPO, KTO, GRPO...) do not pass: their log-probabilities stay as counted. The head-gradient keys
    (accumulated in fp32, chunked) change nothing with a frozen head, which makes no head gradient; with a trained
    one they are named.
    Whether the plugin was read (modelled, or off)."""
    if CCE_PLUGIN not in _plugin_list(d):
        return False
    if d.get("cut_cross_entropy") is False:
        r.use(name, "cut_cross_entropy", *(k for k in CCE_HEAD_KEYS if k in d))
        return True
    keys = [k for k in ("cut_cross_entropy",) if k in d]
    if rl:
        r.notes.append(f"{name}: CutCrossEntropyPlugin: CCE's patch runs only when the model gets labels; axolotl's "
                       f"{d['rl']} trainer (TRL) passes none, so its log-probabilities are counted as TRL takes them")
        r.use(name, *keys, *(k for k in CCE_HEAD_KEYS if k in d))
        return True
    rd.loss(r, "cce", f"{name}: plugins[CutCrossEntropyPlugin]", f"{name}: plugins")
    r.use(name, *keys)
    head = [k for k in CCE_HEAD_KEYS if d.get(k) not in (None, False, 0)]
    if method != "full":
        r.use(name, *(k for k in CCE_HEAD_KEYS if k in d))
        if head:
            r.notes.append(f"{name}: {', '.join(head)}: the head does not train (an adapter), CCE makes no head "
                           "gradient: no memory changes")
    else:
        r.use(name, *(k for k in CCE_HEAD_KEYS if k in d and k not in head))
        for k in head:
            r.refuse(f"{name}: {k}", "CCE's head gradient accumulated in fp32 (V x h x 4 B, or a chunk of it, beside "
                     "the 16-bit gradient)", "counted in the weights' dtype, which is low")
    return r.options.get("loss") == "cce"


# the model types whose norms have "norm" in their names and whose embeddings are embed_tokens and lm_head, which
# axolotl casts back by name (loaders/model.py _convert_embedding_modules_dtype, loaders/utils.py
# get_linear_embedding_layers)
RECAST_BY_NAME = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                  "gemma3_text", "phi3", "olmo2")


def _kbit_recast(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """After peft's prepare_model_for_kbit_training (skipped for QLoRA under FSDP) axolotl casts every module with
    "norm" in its name and the embeddings and LM head back to the 16-bit dtype (loaders/model.py
    _configure_embedding_dtypes at 067b021c: should_convert for an adapter, and for Cut Cross-Entropy): for the
    Llama-like model types, whose names those are, no k-bit upcast is left (--no-kbit-upcast). fp32_norms keeps the
    norms fp32 and embeddings_skip_upcast leaves the embeddings out of the cast back: named."""
    if r.model_type not in RECAST_BY_NAME:
        return  # GPT-2's ln_1/wpe, OPT's embed_positions... stay fp32: peft's upcast as counted
    for key in ("fp32_norms", "embeddings_skip_upcast"):
        if d.get(key):
            r.refuse(f"{name}: {key}", "norms or embeddings kept in fp32 beside a 16-bit base",
                     "counted with everything cast back to the 16-bit dtype, which is low")
    r.set("kbit_upcast", False, f"{name}: adapter (axolotl casts the norms, embeddings and LM head back to the "
                                "16-bit dtype after the k-bit preparation)")


AXOLOTL_LORA_KERNELS = {"lora_qkv_kernel": "qkv", "lora_o_kernel": "o", "lora_mlp_kernel": "mlp"}
KERNEL_KEYS = (*AXOLOTL_LORA_KERNELS, "lora_embedding_kernel")


def _lora_kernels(r: rd.Reader, name: str, d: dict[str, Any], method: str) -> None:
    """lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel: axolotl's fused LoRA functions (--lora-kernels), patched in
    on a PEFT model (monkeypatch/lora_kernels.py apply_lora_kernel_patches at 067b021c: dropout, bias and DoRA
    supported; which layers they reach is the estimate's to say). With an adapter and none of the lora_*_kernel keys
    set, axolotl turns them all on (utils/schemas/config.py check_auto_enable_lora_kernels), except for an rl
    trainer, 8-bit LoRA, remote code, and several cards under FSDP1. lora_embedding_kernel (the embeddings' LoRA)
    changes no saved tensor campaign counts. Read for the Llama-like model types (RECAST_BY_NAME), whose q_proj...
    layers they patch."""
    r.use(name, *(k for k in KERNEL_KEYS if k in d))
    if method == "full" or r.model_type not in RECAST_BY_NAME:  # the kernels patch Llama-like layers only
        return
    if any(d.get(k) is not None for k in KERNEL_KEYS):
        on = [k for k in AXOLOTL_LORA_KERNELS if d.get(k) is True]
        if on:
            r.set("lora_kernels", ",".join(AXOLOTL_LORA_KERNELS[k] for k in on), f"{name}: {' + '.join(on)}")
        return
    fsdp1 = d.get("fsdp_config") is not None and str(d.get("fsdp_version")) != "2" and (r.gpus or 1) > 1
    if d.get("rl") or (method == "lora" and d.get("load_in_8bit")) or d.get("trust_remote_code") or fsdp1:
        return
    r.set("lora_kernels", "qkv,o,mlp", f"{name}: adapter (no lora_*_kernel key: axolotl turns its LoRA kernels on, "
                                       "check_auto_enable_lora_kernels)")


def _plugin_list(d: dict[str, Any]) -> list[str]:
    plugins = d.get("plugins")
    return [str(p) for p in plugins] if isinstance(plugins, list) else []


def _plugins(r: rd.Reader, name: str, d: dict[str, Any], cce: bool) -> None:
    """The plugins list is read when each plugin in it is modelled: LigerPlugin on a model whose Liger patches are
    modelled, once its kernels or its fused loss were read; CutCrossEntropyPlugin when _cce read it (`cce`)."""
    from .activations import LIGER_MODEL_TYPES

    plugins = _plugin_list(d)
    if not plugins:
        return
    liger = r.model_type in LIGER_MODEL_TYPES and ("liger_kernels" in r.options or r.options.get("loss") == "fused")
    if all((p == LIGER_PLUGIN and liger) or (p == CCE_PLUGIN and cce) for p in plugins):
        r.use(name, "plugins")


def _axolotl_liger_inert(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """axolotl's LigerPlugin passes a liger_* key only where the model's apply_liger_kernel_to_<type> takes that
    keyword: liger_layer_norm changes nothing on the RMSNorm models campaign models Liger for (no layer_norm keyword),
    read as such."""
    from .activations import LIGER_MODEL_TYPES

    if r.model_type not in LIGER_MODEL_TYPES:
        return
    if d.get("liger_layer_norm") is not None:
        r.use(name, "liger_layer_norm")
        if d["liger_layer_norm"] is True:
            r.notes.append(f"{name}: liger_layer_norm: Liger's apply_liger_kernel_to_{r.model_type} takes no "
                           "layer_norm (the model's norms are RMSNorms): axolotl's plugin passes nothing, no memory "
                           "changes")


def _checkpointing(r: rd.Reader, name: str, d: dict[str, Any], method: str) -> None:
    """gradient_checkpointing (true, false, offload, offload_disk) and activation_offloading (true, legacy, disk,
    hidden_states), as axolotl resolves them (utils/schemas/validation.py check_gradient_checkpointing_w_offload:
    offload is checkpointing with activation_offloading; core/builders/base.py, loaders/model.py): hidden_states, and
    any offloading of a full fine-tune, keeps the checkpointed layers and moves each one's input to the CPU (the
    estimate's --activation-offloading); with an adapter, offloading replaces the recompute (TRL's OffloadActivations
    over every saved tensor), which is named as not modelled and counted as the full fine-tune's path."""
    ckpt, offload = d.get("gradient_checkpointing"), d.get("activation_offloading")
    if ckpt in ("offload", "offload_disk"):
        offload, key = ("disk" if ckpt == "offload_disk" else True), "gradient_checkpointing"
    else:
        key = "activation_offloading"
    if ckpt is not None:
        r.set("grad_checkpointing", bool(ckpt), f"{name}: gradient_checkpointing")
    rd.checkpointing_kwargs(r, name, d)
    if offload in (None, False):
        r.use(name, *(k for k in ("activation_offloading",) if k in d))
        return
    where = f"{name}: {key}"
    if offload == "disk":
        r.refuse(where, "activations offloaded to disk", "counted as offloaded to the CPU (the card holds the same)")
    elif method != "full" and offload != "hidden_states":
        r.refuse(where, "TRL's activation offloading of every saved tensor in place of the recompute (axolotl's "
                 "adapter path)", "counted as checkpointing with each layer's input on the CPU")
    r.set("grad_checkpointing", True, where)
    r.set("activation_offloading", True, where)


def _fsdp(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """FSDP: fsdp_config turns it on (core/builders/base.py; the fsdp list is its deprecated form, the HF Trainer's
    words), read as accelerate's plugin (recipe_accelerate.fsdp_plugin); fsdp_version 2 is the FSDP the estimate
    models, 1 (axolotl's default: utils/schemas/validation.py check_fsdp_version_in_fsdp_config) is named."""
    config = rd.section(d, "fsdp_config", name, "axolotl reads a mapping of FSDP settings (offload_params: true, ...)")
    if d.get("fsdp"):
        recipe_accelerate.fsdp_trainer_option(r, name, "fsdp", d["fsdp"])
    elif "fsdp" in d:
        r.use(name, "fsdp")
    if config:
        switch = "fsdp" if d.get("fsdp") else f"fsdp_config.{next(iter(config))}"
        version = ("fsdp_version", d["fsdp_version"]) if d.get("fsdp_version") is not None else None
        recipe_accelerate.fsdp_plugin(r, name, config, switch=switch, version=version)
    elif d.get("fsdp_version") is not None:
        r.use(name, "fsdp_version")  # without fsdp_config axolotl turns no FSDP on
