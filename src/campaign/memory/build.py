"""Build a transformers model for a workload from its config (never remote code): shared by trace and measure."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .workload import Workload

ATTENTION_DROPOUT = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")


def torch_dtype(torch: Any, w: Workload) -> Any:
    """The dtype weights are built in: fp32 for fp32 or mixed precision, fp16, else bf16 (a quantized base too)."""
    if w.dtype == "fp32" or (w.mixed_precision and w.base_trainable):
        return torch.float32
    return torch.float16 if w.dtype == "fp16" else torch.bfloat16


def model_class_and_config(transformers: Any, cfg: dict[str, Any], w: Workload, *,
                           no_attention_dropout: bool = False) -> tuple[Any, Any]:
    """(model class named in `architectures`, transformers config) from a config.json dict."""
    cfg = {k: v for k, v in cfg.items() if k not in ("auto_map", "quantization_config")}
    if no_attention_dropout:
        cfg.update({k: 0.0 for k in ATTENTION_DROPOUT if cfg.get(k)})
    model_type = cfg.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as e:
        raise ConfigError(f"transformers cannot build model_type {model_type!r} ({e})") from None
    config._attn_implementation = w.attention
    arch = (cfg.get("architectures") or [None])[0]
    cls = (getattr(transformers, arch, None) if arch else None) or transformers.AutoModelForCausalLM
    return cls, config


def instantiate(cls: Any, config: Any, dtype: Any, w: Workload) -> Any:
    """The model with random weights in the current device context; the base frozen unless it trains; LoRA."""
    net = cls._from_config(config, dtype=dtype)
    if not w.training or w.method in ("lora", "qlora", "frozen"):
        net.requires_grad_(False)
    if w.training and w.adapters:
        import peft

        targets: Any = "all-linear" if "all-linear" in w.lora_targets else list(w.lora_targets)
        net = peft.get_peft_model(net, peft.LoraConfig(r=w.lora_rank, target_modules=targets, lora_dropout=0.0))
    return net


def finish(net: Any, w: Workload) -> Any:
    """Activation checkpointing as asked, and train or eval mode."""
    if w.training and w.grad_checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train(w.training)
    return net


def labels_for(torch: Any, arch: str, cfg: dict[str, Any], ids: Any) -> Any:
    """Training targets shaped for the model's head: one class per sequence, per token, or the next tokens."""
    classes = len(cfg.get("id2label") or {}) or int(cfg.get("num_labels") or 2)
    if arch.endswith(("ForSequenceClassification", "ForMultipleChoice")):
        return torch.randint(0, classes, (ids.shape[0],))
    if arch.endswith("ForTokenClassification"):
        return torch.randint(0, classes, tuple(ids.shape))
    return ids
