"""An axolotl YAML (`axolotl train FILE`) as the workload: the adapter (LoRA, QLoRA), its rank and targets, the
sequence length and micro-batch, preference training (`rl`), checkpointing, the load dtype, the optimizer, Liger's
kernels and loss, attention, and a DeepSpeed config it names; the cards it names (dp_shard_size, Ray's workers) read
against --gpus, and its plugins."""
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
    _bnb_config(r, name, d)
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
        loaded = _load_dtype(d)
        if loaded is not None:
            dtype, key = loaded
            r.set("dtype", dtype, f"{name}: {key} (" + ("off, with no fp16, float16 or bfloat16: " if dtype == "fp32"
                                                       else "") + f"the model loaded in {dtype})")
    if d.get("optimizer") is not None:
        rd.optim(r, d["optimizer"], f"{name}: optimizer", rd.OPTIM)
    rd.accumulation(r, d, name)
    _batch_size(r, name, d)
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
    rd.auto_half(r, name, _trainer_half(d))
    r.use(name, *(k for k in ("base_model", "adapter", "load_in_4bit", "load_in_8bit", "lora_target_linear",
                              "bf16", "fp16", "bfloat16", "float16") if k in d))
    _axolotl_liger_inert(r, name, d)
    _plugins(r, name, d, cce)
    _streaming(r, name, d)
    _placement(r, name, d)
    _accelerator_config(r, name, d)
    r.account(name, "axolotl", d)


def _bf16(d: dict[str, Any]) -> Any:
    """bf16 as axolotl resolves it (utils/config/__init__.py resolve_dtype at 067b021c): auto (the schema's default)
    gives way to fp16: true, else is bf16 on a card that has it, the estimate's default."""
    return False if d.get("bf16") == "auto" and d.get("fp16") else d.get("bf16")


def _load_dtype(d: dict[str, Any]) -> tuple[str, str] | None:
    """The dtype axolotl loads the model in (cfg.torch_dtype, resolve_dtype; loaders/model.py passes it as dtype) and
    the key that says it: bf16 (true or auto) or bfloat16 (bf16 without AMP) -> bf16; else fp16 or float16 -> fp16;
    else, bf16 written false or empty, fp32. None where nothing is said: bf16 auto, the estimate's default."""
    if _bf16(d) in (True, "auto"):
        return "bf16", "bf16"
    for key, dtype in (("bfloat16", "bf16"), ("fp16", "fp16"), ("float16", "fp16")):
        if d.get(key) is True:
            return dtype, key
    return ("fp32", "bf16") if "bf16" in d else None


def _trainer_half(d: dict[str, Any]) -> str | None:
    """The Trainer's bf16 or fp16 (core/builders/base.py: bf16 = cfg.bf16 or cfg.bfloat16, fp16 = cfg.fp16 and not
    bf16), which fills a ds_config's "auto"."""
    if _bf16(d) in (True, "auto") or d.get("bfloat16") is True:
        return "bf16"
    return "fp16" if d.get("fp16") is True else None


def _batch_size(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """batch_size (deprecated: utils/schemas/training.py): normalize_config sets gradient_accumulation_steps to
    batch_size // micro_batch_size only where it is empty, which the schema's default of 1 leaves it only when the
    file writes it empty (null); elsewhere it changes no memory (recipe_keys' table)."""
    size, micro = d.get("batch_size"), d.get("micro_batch_size") or 1
    if "gradient_accumulation_steps" not in d or d["gradient_accumulation_steps"] is not None or not size:
        return
    steps = rd.whole(size, f"{name}: batch_size") // rd.whole(micro, f"{name}: micro_batch_size")
    if steps >= 1:
        r.set("grad_accumulation", steps, f"{name}: batch_size (over micro_batch_size {micro}: "
                                          "gradient_accumulation_steps empty, utils/config normalize_config)")


def _streaming(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """pretraining_dataset and streaming: a streamed dataset (utils/data/sft.py _prepare_streaming_dataset). Packed
    (sample_packing), each row is a bin of micro_batch_size x sequence_len tokens and the micro-batch that one row
    (utils/data/streaming.py wrap_streaming_dataset sets micro_batch_size 1); unpacked, rows of sequence_len at most.
    The tokens the estimate counts either way, and SDPA's or flash attention's memory follows the tokens; eager
    attention's scores follow the row's length squared, micro_batch_size times the estimate's: named there."""
    keys = [k for k in ("pretraining_dataset", "streaming") if d.get(k)]
    if not keys:
        return
    micro = d.get("micro_batch_size") or 1
    if d.get("sample_packing") and r.options.get("attention") == "eager" and isinstance(micro, int) and micro > 1:
        r.refuse(f"{name}: {keys[0]}", f"packed streamed rows of micro_batch_size x sequence_len tokens ({micro} x "
                 f"{d.get('sequence_len')}), whose eager attention scores grow with the row squared",
                 f"counted as {micro} rows of sequence_len, which is low")
    else:
        r.use(name, *keys)


def _placement(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """Where the cards come from and the model goes, read against what the estimate counts:
    - dp_shard_size (utils/schemas/config.py): FSDP's cards, modelled where they are --gpus's (FSDP on, or one card).
    - use_ray: axolotl's Ray Train launch (cli/train.py: ray_num_workers workers of resources_per_worker, one GPU
      each by default): the run's cards, modelled where they are --gpus's; without use_ray the ray keys do nothing.
    - experimental_skip_move_to_device (utils/schemas/model.py, default true): false moves the whole model to each
      card before FSDP shards it (loaders/model.py _apply_post_lora_load_setup), a load-time peak the estimate does
      not count; without FSDP the Trainer moves it there anyway.
    - model_quantization_config Mxfp4Config with dequantize true (loaders/model.py _set_quantization_config):
      MXFP4 weights dequantized on load, the 16-bit model the estimate counts."""
    cards = r.gpus or 1
    fsdp = r.options.get("shard") == "fsdp"
    shard = d.get("dp_shard_size")
    if isinstance(shard, int) and not isinstance(shard, bool) and shard == cards and (fsdp or cards == 1):
        r.use(name, "dp_shard_size")
    ray = [k for k in ("ray_num_workers", "resources_per_worker") if k in d]
    if not d.get("use_ray"):
        r.use(name, *ray)
    elif ray:
        workers, per = d.get("ray_num_workers", 1), d.get("resources_per_worker")
        if workers == cards and per in (None, {"GPU": 1}):
            r.use(name, *ray)
        else:
            r.refuse(f"{name}: {ray[0]}", f"{workers} Ray workers of {per or {'GPU': 1}}",
                     f"the estimate's {cards} card(s) of --gpus: give --gpus {workers} for one GPU a worker")
    if d.get("experimental_skip_move_to_device") is False and fsdp:
        r.refuse(f"{name}: experimental_skip_move_to_device", "the whole model moved to each card before FSDP shards "
                 "it (axolotl's legacy placement)", "a load-time peak the training step's estimate does not count")
    elif "experimental_skip_move_to_device" in d:
        r.use(name, "experimental_skip_move_to_device")
    quant, kwargs = d.get("model_quantization_config"), d.get("model_quantization_config_kwargs")
    if quant == "Mxfp4Config" and isinstance(kwargs, dict) and kwargs.get("dequantize") is True:
        r.use(name, "model_quantization_config", "model_quantization_config_kwargs")
    elif quant is None and "model_quantization_config_kwargs" in d:
        r.use(name, "model_quantization_config_kwargs")  # kwargs of no quantization config: unused


def _accelerator_config(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """accelerator_config: transformers' AcceleratorConfig (core/builders/base.py _configure_accelerator_config).
    gradient_accumulation_kwargs' sync_each_batch reduces the gradients every micro-batch (--sync-each-batch: under
    FSDP they stay sharded between micro-batches); adjust_scheduler and sync_with_dataloader change no memory;
    num_steps (the accumulation itself) is left named."""
    config = d.get("accelerator_config")
    kwargs = config.get("gradient_accumulation_kwargs") if isinstance(config, dict) else None
    if not isinstance(kwargs, dict) or not set(kwargs) <= {"sync_each_batch", "adjust_scheduler",
                                                           "sync_with_dataloader"}:
        return
    where = f"{name}: accelerator_config.gradient_accumulation_kwargs"
    if kwargs.get("sync_each_batch") is not None:
        r.set("sync_each_batch", bool(kwargs["sync_each_batch"]), f"{where} (sync_each_batch)")
    else:
        r.use(name, "accelerator_config.gradient_accumulation_kwargs")


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


# axolotl's BitsAndBytesConfig for QLoRA (loaders/model.py _set_quantization_config at 067b021c), which
# bnb_config_kwargs updates: the values that are the NF4 with double quantization the estimate counts
BNB_COUNTED = {"bnb_4bit_use_double_quant": True, "bnb_4bit_quant_type": "nf4", "load_in_4bit": True}


def _bnb_config(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """bnb_config_kwargs: read where it leaves the 4-bit format the estimate counts (BNB_COUNTED), or where axolotl
    does not use it (no adapter qlora with load_in_4bit); another setting (the quant storage, fp4...) is named."""
    kwargs = d.get("bnb_config_kwargs")
    if kwargs is None:
        return
    qlora = str(d.get("adapter") or "").lower() == "qlora" and d.get("load_in_4bit")
    if not qlora or isinstance(kwargs, dict) and all(BNB_COUNTED.get(k, object()) == v for k, v in kwargs.items()):
        r.use(name, "bnb_config_kwargs")


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


# plugins that change no GPU memory of the step: SwanLab's logging (integrations/swanlab/plugins.py: swanlab.init on
# rank 0, callbacks that log the metrics, timings and the rl trainers' logged completions)
INERT_PLUGINS = ("axolotl.integrations.swanlab.SwanLabPlugin",)
# what the others do, to name them (integrations/*/plugin.py at 067b021c)
PLUGINS = {
    LIGER_PLUGIN: "Liger's kernels, modelled on Llama, Mistral, Qwen2/3, Gemma 1-3, Mixtral, Qwen3-MoE once a "
                  "liger_* key is read",
    CCE_PLUGIN: "Cut Cross-Entropy, modelled for a decoder's causal-LM loss",
    "axolotl.integrations.kernels.KernelsPlugin": "MoE experts kernels (ScatterMoE, SonicMoE), the kernels hub's "
                                                  "layers",
    "axolotl.integrations.expert_parallel.ExpertParallelPlugin": "expert parallelism (DeepEP)",
    "axolotl.integrations.diffusion.DiffusionPlugin": "diffusion LM training",
    "axolotl.integrations.llm_compressor.LLMCompressorPlugin": "llm-compressor's sparse fine-tuning",
    "axolotl.integrations.spectrum.SpectrumPlugin": "Spectrum's choice of the trained layers",
    "axolotl.integrations.kd.KDPlugin": "knowledge distillation (a teacher's logits)",
}


def _plugins(r: rd.Reader, name: str, d: dict[str, Any], cce: bool) -> None:
    """The plugins list is read when each plugin in it is modelled or changes no memory (INERT_PLUGINS): LigerPlugin
    on a model whose Liger patches are modelled, once its kernels or its fused loss were read; CutCrossEntropyPlugin
    when _cce read it (`cce`). Otherwise the plugins not modelled are named with what they do."""
    from .activations import LIGER_MODEL_TYPES

    plugins = _plugin_list(d)
    if not plugins:
        return
    liger = r.model_type in LIGER_MODEL_TYPES and ("liger_kernels" in r.options or r.options.get("loss") == "fused")
    read = {LIGER_PLUGIN: liger, CCE_PLUGIN: cce}
    left = [p for p in plugins if p not in INERT_PLUGINS and not read.get(p)]
    if not left:
        r.use(name, "plugins")
    else:
        r.refuse(f"{name}: plugins", "axolotl plugins: " + "; ".join(
            f"{p.rsplit('.', 1)[-1]}: {PLUGINS.get(p, 'unknown to campaign')}" for p in left),
            "counted without them (read: CutCrossEntropyPlugin, LigerPlugin, SwanLabPlugin)")


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
