"""Exact parameter counts from transformers itself, building the model on the meta device (no memory, no weights)."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError, MissingDependencyError


def build_meta_model(cfg: dict[str, Any]) -> Any:
    """Instantiate the architecture of a config on torch's meta device; never runs code from a model dir."""
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError("transformers", "torch") from None
    cfg = {k: v for k, v in cfg.items() if k not in ("auto_map", "quantization_config")}
    model_type = cfg.pop("model_type", None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as e:
        raise ConfigError(f"transformers does not know model_type {model_type!r} ({e})") from None
    arch = (cfg.get("architectures") or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    with torch.device("meta"):
        if cls is not None:
            return cls(config)
        return transformers.AutoModelForCausalLM.from_config(config)


def count_with_transformers(cfg: dict[str, Any]) -> int:
    """Parameters as transformers builds them (tied weights counted once)."""
    model = build_meta_model(cfg)
    return sum(p.numel() for p in model.parameters())
