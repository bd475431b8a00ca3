"""The workload a live setup runs, in `campaign memory`'s words, so the step `campaign check` measures can stand
beside the estimate for the same model and workload: the architecture from the model's own config, the method
(full, or LoRA with its rank and targets), the weights' dtype, the optimizer and its implementation, the micro-batch,
the sequence length, gradient checkpointing and the attention kernel.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
OPTIMIZERS = {"AdamW": "adamw", "Adam": "adamw", "SGD": "sgd", "Adafactor": "adafactor"}


def estimate_for(model: Any, optimizer: Any, batch: Mapping[str, Any],
                 loop: Mapping[str, Any] | None = None) -> tuple[Any, list[str]]:
    """campaign memory's estimate of this step (a MemoryEstimate), or None with the reason, and what the workload
    could not say (notes). loop: workload options the training loop states and the model does not show (the HF
    Trainer's or Lightning's mixed precision: {'mixed_precision': True})."""
    from ..errors import CampaignError
    from ..memory.estimate import estimate_memory
    from ..memory.workload import make_workload
    from ..models.architectures import spec_from_config
    from .adapters import is_adapter_model

    notes: list[str] = []
    peft = is_adapter_model(model)
    net = model.get_base_model() if peft else model
    config = getattr(net, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None, ["no estimate: the model has no transformers config to read the architecture from"]
    ids = batch.get("input_ids")
    if ids is None or ids.dim() != 2:
        return None, ["no estimate: the batch has no (rows x tokens) input_ids"]
    params = list(model.parameters())
    dtype = DTYPES.get(str(params[0].dtype).removeprefix("torch."))
    if dtype is None:
        return None, [f"no estimate: weights in {params[0].dtype}"]
    kind = type(optimizer).__name__
    name = OPTIMIZERS.get(kind, "adamw")
    if kind not in OPTIMIZERS:
        notes.append(f"the optimizer {kind} is estimated as AdamW")
    defaults = getattr(optimizer, "defaults", {})
    impl = "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") or (
        defaults.get("foreach") is None and params[0].device.type == "cuda") else "loop"
    options: dict[str, Any] = {"mode": "train", "dtype": dtype, "batch": int(ids.shape[0]),
                               "seq_len": int(ids.shape[1]), "optimizer": name, "optimizer_impl": impl,
                               "grad_checkpointing": _checkpointing(net),
                               "attention": "eager" if getattr(config, "_attn_implementation", "") == "eager"
                               else "sdpa", **(loop or {})}
    if peft:
        adapter = next(iter(model.peft_config.values()))
        targets = adapter.target_modules
        options.update(method="lora", lora_rank=int(adapter.r),
                       lora_targets=(targets,) if isinstance(targets, str) else tuple(sorted(targets)))
    else:
        options["method"] = "full"
        frozen = sum(p.numel() for p in params if not p.requires_grad)
        if frozen:
            notes.append(f"estimated as full fine-tuning: {frozen:,} frozen elements are counted with gradients and "
                         "optimizer state")
    head = type(net).__name__
    if not head.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "ForMaskedLM")):
        notes.append(f"the estimate counts a language-model head (logits over the vocabulary); {head} has another "
                     "head, so its logits and their gradient are smaller than estimated")
    cfg = config.to_dict()
    try:
        spec = spec_from_config(cfg, name=str(cfg.get("_name_or_path") or type(net).__name__),
                                source="the setup's model config")
        return estimate_memory(spec, make_workload(**options)), notes
    except CampaignError as e:
        return None, [f"no estimate: {e}"]


def _checkpointing(net: Any) -> bool:
    """Whether activation checkpointing is on (transformers 5 renamed is_gradient_checkpointing, which warns)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(net), name) or name in getattr(net, "__dict__", {}):
            return bool(getattr(net, name))
    return False


__all__ = ["estimate_for"]
