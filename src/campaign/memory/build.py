"""Build a transformers model for a workload from its config (never remote code): shared by trace and measure."""
from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import CampaignError, ConfigError, InputError
from ..models.architectures import spec_from_config
from ..models.meta import model_class_and_config
from ..models.resolve import resolve_config
from ..models.safetensors_header import weight_files
from ..models.spec import ModelSpec
from .workload import Workload

ATTENTION_DROPOUT = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")


def model_config(model: str | Path | ModelSpec) -> tuple[dict[str, Any], ModelSpec, Path | None]:
    """(config.json dict, ModelSpec, model dir or None) of `model` as every memory call takes it: a catalog name, a
    model dir, a config.json, a cached repo id, or a ModelSpec (whose config is read again from its source: trace
    and measure build the model from the config)."""
    if isinstance(model, ModelSpec):
        # where load_spec read it: a path, 'catalog:REPO' or 'hf-cache:SNAPSHOT_DIR'
        ref = model.source.split(":", 1)[1] if model.source.startswith(("catalog:", "hf-cache:")) else model.source
        try:
            cfg, _source, _name, directory = resolve_config(ref)
        except CampaignError:
            raise InputError(f"{model.name}: its config is not at {model.source!r}, and building the model needs it; "
                             "pass the model's name, model dir or config.json") from None
        return cfg, model, directory
    cfg, source, name, directory = resolve_config(str(model))
    return cfg, spec_from_config(cfg, name=name, source=source), directory


def torch_dtype(torch: Any, w: Workload) -> Any:
    """The dtype weights are built in: fp32 for fp32 or mixed precision, fp16, else bf16 (a quantized base too)."""
    if w.dtype == "fp32" or (w.mixed_precision and w.base_trainable):
        return torch.float32
    return torch.float16 if w.dtype == "fp16" else torch.bfloat16


def workload_class_and_config(transformers: Any, cfg: dict[str, Any], w: Workload, *,
                              no_attention_dropout: bool = False) -> tuple[Any, Any]:
    """(model class named in `architectures`, transformers config) from a config.json dict, by the one rule of
    models.meta, with the workload's attention implementation."""
    cls, config = model_class_and_config(cfg, transformers=transformers)
    if no_attention_dropout:  # on the config object: a class default (GPT-BigCode's attn_pdrop 0.1) counts too
        for sub in {id(c): c for c in (config, config.get_text_config())}.values():
            for key in ATTENTION_DROPOUT:
                if getattr(sub, key, None):
                    setattr(sub, key, 0.0)
    config._attn_implementation = w.attention
    if w.attention == "sdpa" and getattr(cls, "_supports_sdpa", True) is False:
        raise InputError(f"{cls.__name__} has no SDPA attention in transformers {transformers.__version__}; "
                         "use --attention eager (and the same option with campaign memory)")
    return cls, config


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' info-level chatter (a default loss chosen, a cache created) off while steps run; what it says
    while loading weights (keys missing or unexpected) stays visible."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def instantiate(cls: Any, config: Any, dtype: Any, w: Workload, *, weights_dir: Path | None = None,
                device: str | None = None) -> Any:
    """The model with random weights in the current device context, or loaded from weights_dir's safetensors onto
    `device` (never remote code, never pickles); the base frozen unless it trains; LoRA."""
    if weights_dir is None:
        net = cls._from_config(config, dtype=dtype)
    else:
        from transformers.utils import logging as hf_logging

        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()            # the caller shows its own progress
        try:
            net = cls.from_pretrained(weights_dir, config=config, dtype=dtype, use_safetensors=True,
                                      local_files_only=True, trust_remote_code=False,
                                      device_map={"": device} if device else None)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
    if not w.training or w.method in ("lora", "qlora", "frozen"):
        net.requires_grad_(False)
    if w.training and w.adapters:
        import peft

        from .states import lora_regex

        pattern = lora_regex(w)  # peft takes one string as a regular expression over module paths
        targets: Any = (pattern if pattern is not None else "all-linear" if "all-linear" in w.lora_targets
                        else list(w.lora_targets))
        with warnings.catch_warnings():  # peft reads transformers' deprecated name; nothing the user can act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            net = peft.get_peft_model(net, peft.LoraConfig(r=w.lora_rank, target_modules=targets,
                                                               lora_dropout=w.lora_dropout))
    return net


def weights_to_load(cfg: dict[str, Any], directory: Path | None, weights: str) -> Path | None:
    """The model dir whose safetensors to load, or None for random weights built from the config.

    weights: "random"; "load" (the dir's safetensors, or a clear error); "auto" (load when the dir has
    safetensors and is not a quantized checkpoint, else random).
    """
    if weights not in ("auto", "random", "load"):
        raise InputError(f"unknown weights {weights!r}; use auto, random or load")
    if weights == "random":
        return None
    try:
        found = bool(directory and weight_files(directory))
    except ConfigError:                 # an index naming shards not on disk (a partial download): none to load
        if weights == "load":
            raise
        found = False
    quantized = "quantization_config" in cfg
    if weights == "load":
        if not found:
            where = f"in {directory}" if directory else "for a catalog model (it ships its config only)"
            raise InputError(f"no .safetensors weights {where}; use --weights random (.bin files are never "
                             "unpickled: convert them to safetensors to load them)")
        if quantized:
            raise InputError(f"{directory} is a quantized checkpoint, which loads through its own kernels: measure "
                             "your loading code with --script, or use --weights random for the bf16 model")
    return directory if found and not quantized else None


def finish(net: Any, w: Workload) -> Any:
    """Activation checkpointing as asked, and train or eval mode."""
    if w.training and w.grad_checkpointing:
        enable_checkpointing(net)
    net.train(w.training)
    return net


def enable_checkpointing(net: Any) -> None:
    """Non-reentrant activation checkpointing of every layer, by the name this transformers knows (the
    gradient_ name is a deprecated alias since transformers 5.2x, to be removed in v6)."""
    if hasattr(net, "activation_checkpointing_enable"):
        net.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def optimizer_for(torch: Any, w: Workload, params: list[Any]) -> Any:
    """The torch optimizer the workload names (adamw, sgd with momentum, adafactor), in its implementation."""
    if w.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=w.optimizer_impl == "foreach")
    if w.optimizer == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-3)
    impl = {"foreach": dict(foreach=True), "fused": dict(fused=True), "loop": dict(foreach=False)}[w.optimizer_impl]
    return torch.optim.AdamW(params, lr=1e-4, **impl)


def labels_for(torch: Any, arch: str, cfg: dict[str, Any], ids: Any) -> Any:
    """Training targets shaped for the model's head: one class per sequence, per token, or the next tokens."""
    classes = len(cfg.get("id2label") or {}) or int(cfg.get("num_labels") or 2)
    if arch.endswith(("ForSequenceClassification", "ForMultipleChoice")):
        return torch.randint(0, classes, (ids.shape[0],))
    if arch.endswith("ForTokenClassification"):
        return torch.randint(0, classes, tuple(ids.shape))
    return ids


def step_inputs(torch: Any, arch: str, cfg: dict[str, Any], ids: Any, vocab: int, *, encdec: bool) -> dict[str, Any]:
    """The keyword inputs of one training forward, shaped (batch, seq_len): input_ids and labels; an
    encoder-decoder (T5) also gets decoder_input_ids as long as the encoder's input (the decoder length this
    tool assumes), with labels of that shape, so no decoder_start_token_id is needed."""
    if encdec:
        decoder = torch.randint(0, vocab, tuple(ids.shape), device=ids.device)
        return dict(input_ids=ids, decoder_input_ids=decoder, labels=decoder)
    return dict(input_ids=ids, labels=labels_for(torch, arch, cfg, ids))


def encoder_decoder_cache(transformers: Any, net: Any) -> Any:
    """Generation's cache of an encoder-decoder: decoder self-attention K/V (grows with each generated token) and
    cross-attention K/V (the encoder output projected once per decoder layer, at the first decoder step). Sized by
    the decoder stack's config, whose num_layers is num_decoder_layers (the model's config counts the encoder's)."""
    config = net.get_decoder().config
    return transformers.EncoderDecoderCache(transformers.DynamicCache(config=config),
                                            transformers.DynamicCache(config=config))


def encode_and_fill(net: Any, ids: Any, cache: Any, chunk: int) -> Any:
    """What generate does up to the last token of an encoder-decoder: the encoder over the whole prompt ids (one
    bidirectional forward: it cannot be chunked), then the decoder stack over seq_len - 1 decoder tokens, `chunk`
    per forward, filling both caches (the cross-attention K/V at the first). Returns the encoder outputs, which
    generate keeps for the whole generation. The decoder tokens are the prompt's ids (only their count matters)."""
    encoded = net.get_encoder()(input_ids=ids)
    name = _cache_argument(type(net.decoder))
    pos, last = 0, ids.shape[1] - 1
    while pos < last:
        end = min(pos + chunk, last)
        net.decoder(input_ids=ids[:, pos:end], encoder_hidden_states=encoded.last_hidden_state, use_cache=True,
                    **{name: cache})
        pos = end
    return encoded


def extend_encoder_decoder(net: Any, ids: Any, encoded: Any, cache: Any) -> None:
    """One generation step of an encoder-decoder: the next decoder token through the decoder and the LM head, with
    both caches and the encoder outputs."""
    net(encoder_outputs=encoded, decoder_input_ids=ids, use_cache=True, **{_cache_argument(type(net)): cache})


def _cache_argument(cls: Any) -> str:
    """transformers 5.2x renamed the forward argument past_key_values to cache (the old name goes in 5.40)."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def prefill_chunk(w: Workload) -> int:
    """Tokens per sequence in one prefill forward: the token budget shared by the batch, within the context."""
    return max(1, min(w.prefill_chunk // max(1, w.batch), w.seq_len - 1))


def prefill(net: Any, ids: Any, cache: Any, chunk: int) -> None:
    """Fill `cache` with all but the last token of ids, `chunk` tokens per forward (chunked prefill)."""
    pos, last = 0, ids.shape[1] - 1
    while pos < last:
        end = min(pos + chunk, last)
        extend(net, ids[:, pos:end], cache)
        pos = end


def extend(net: Any, ids: Any, cache: Any) -> None:
    """One forward that appends ids to `cache` and keeps only the last position's logits, as generation does.

    transformers 5.2x renamed the forward argument past_key_values to cache (the old name goes in 5.40)."""
    name = _cache_argument(type(net))
    net(input_ids=ids, use_cache=True, logits_to_keep=1, **{name: cache})
