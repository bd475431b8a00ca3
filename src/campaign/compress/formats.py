"""The variants `campaign quant` can build: the reference precisions and the weight formats, which library applies
each, which machine runs it, and which memory/dtypes.py layout estimates it.

Every quantized format converts the Linear layers and leaves the embeddings, the output embeddings (LM head) and
classification heads in the reference precision, as bitsandbytes, GPTQ and AWQ leave them and as `campaign memory`
counts them. torchao and bitsandbytes are imported here only, when a format is applied.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, MissingDependencyError, UnknownNameError

REFERENCES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Format:
    """name: what the user types; memory_dtype: the layout `campaign memory` estimates it with; gpu: needs a CUDA
    device; calibrated: needs calibration data; library: who applies it."""

    name: str
    memory_dtype: str
    library: str
    gpu: bool
    calibrated: bool
    description: str


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("fp32", "fp32", "torch", False, False, "fp32: every floating-point weight and buffer cast to float32"),
    Format("bf16", "bf16", "torch", False, False, "bf16: every floating-point weight and buffer cast to bfloat16"),
    Format("fp16", "fp16", "torch", False, False, "fp16: every floating-point weight and buffer cast to float16"),
    Format("int8", "int8", "torchao", False, False,
           "torchao int8 weight-only: int8 per element, a scale and a zero point per output row"),
    Format("int4", "int4", "torchao", False, False,
           "torchao int4 weight-only, a scale and a zero point per group of input columns"),
    Format("awq-int8", "int8", "torchao", False, True,
           "torchao AWQ over int8 weight-only: per-channel input scales searched on the calibration batches"),
    Format("fp8", "fp8", "torchao", True, False, "torchao float8 (e4m3) weight-only, a scale per row"),
    Format("nf4", "nf4", "bitsandbytes", True, False, "bitsandbytes NF4, blocks of 64"),
    Format("bnb-int8", "int8", "bitsandbytes", True, False, "bitsandbytes LLM.int8, a scale per row"),
    Format("gptq", "gptq", "gptqmodel", True, True, "GPTQ 4-bit, calibrated"),
    Format("awq", "awq", "autoawq", True, True, "AWQ 4-bit, calibrated"),
)}
_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "int8-weight-only": "int8",
            "int4-weight-only": "int4", "float8": "fp8", "llm.int8": "bnb-int8", "bnb-nf4": "nf4"}
# What campaign applies itself; gptq and awq are calibrated by their own libraries (not run here yet).
BUILT = ("fp32", "bf16", "fp16", "int8", "int4", "awq-int8", "fp8", "nf4", "bnb-int8")


def parse_format(name: str) -> Format:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise UnknownNameError("format", str(name), list(FORMATS), "Choose from: " + ", ".join(FORMATS) + ".")
    return FORMATS[key]


def machine() -> dict[str, Any]:
    """What this machine can run: {'device': 'cuda' | 'cpu', 'name': ..., 'capability': (major, minor) | None}."""
    import torch

    if torch.cuda.is_available():
        return {"device": "cuda", "name": torch.cuda.get_device_name(0),
                "capability": tuple(torch.cuda.get_device_capability(0))}
    return {"device": "cpu", "name": "CPU", "capability": None}


def available(here: dict[str, Any]) -> tuple[str, ...]:
    """The quantized formats campaign can apply on this machine (default variants after the reference)."""
    out = ["int8", "int4"]
    if here["device"] == "cuda":
        if here["capability"] and tuple(here["capability"]) >= (8, 9):
            out.append("fp8")
        if _installed("bitsandbytes"):
            out += ["nf4", "bnb-int8"]
    return tuple(out)


def refusal(fmt: Format, here: dict[str, Any], *, calibration: bool) -> str | None:
    """Why this machine cannot run `fmt` (one line), or None when it can."""
    if fmt.calibrated and not calibration:
        return (f"format {fmt.name} calibrates on data, and the setup gives no calibration batches; return "
                "calibration=[...] (and calibration_name) from the setup, or drop the format")
    if fmt.gpu and here["device"] != "cuda":
        return (f"format {fmt.name} ({fmt.library}) needs a CUDA GPU, and this machine has none (torch sees no "
                f"CUDA device); run it on the rented card, or compare the CPU formats: int8, int4, awq-int8")
    if fmt.name == "fp8" and tuple(here["capability"] or (0, 0)) < (8, 9):
        return (f"format fp8 needs compute capability 8.9 or higher (Ada, Hopper); {here['name']} has "
                f"{here['capability']}: compare int8 or int4 instead")
    if fmt.library == "bitsandbytes" and not _installed("bitsandbytes"):
        return f"format {fmt.name} needs bitsandbytes, which is not installed; pip install bitsandbytes"
    if fmt.name not in BUILT:
        return (f"format {fmt.name} is calibrated by {fmt.library}, which campaign quant does not run yet; "
                "quantize with it and compare the saved model with campaign regress")
    return None


def _installed(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


@contextmanager
def quiet_torchao() -> Iterator[None]:
    """torchao logs a warning per C++ extension built for another torch (its Python kernels still work) and torch
    warns about enums it registers: neither concerns the user's comparison."""
    names = ("torchao", "torch.utils._pytree")
    before = [logging.getLogger(n).level for n in names]
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for n, level in zip(names, before, strict=True):
            logging.getLogger(n).setLevel(level)


def torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def quantizable(model: Any, keep: tuple[str, ...]) -> list[str]:
    """Qualified names of the Linear modules a format converts: every Linear except the output embeddings and the
    modules named in `keep` (or inside them)."""
    import torch

    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    heads = ("lm_head", "score", "classifier", "qa_outputs")
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is out_emb:
            continue
        last = name.rsplit(".", 1)[-1]
        if last in heads or any(name == k or name.startswith(k + ".") or last == k for k in keep):
            continue
        names.append(name)
    return names


def apply(fmt: Format, model: Any, *, keep: tuple[str, ...], group_size: int, device: str,
          calibration: list[Any] | None = None) -> Any:
    """Convert `model` (already in the reference precision, on `device`) to `fmt` in place; returns the model.
    A precision (fp32, bf16, fp16) casts the model to it: a no-op for the reference itself, a real conversion for
    another precision listed as a variant. A calibrated format (awq-int8) runs the calibration batches through the
    model between its two steps.

    Raises:
        InputError: a group size that does not divide a layer's input features.
        MissingDependencyError: torchao not installed (the quant extra).
    """
    if fmt.name in REFERENCES:
        return model.to(torch_dtype(fmt.name))
    targets = set(quantizable(model, keep))
    if not targets:
        raise InputError("the model has no Linear layer to quantize (outside the output embeddings and heads)")
    if fmt.name == "int4":
        if device == "cuda" and next(model.parameters()).dtype != torch_dtype("bf16"):
            raise InputError("int4 on the GPU (torchao's tinygemm layout) quantizes bf16 weights; "
                             "pass --reference bf16")
        for name, module in model.named_modules():
            if name in targets and module.in_features % group_size:
                raise InputError(f"group size {group_size} does not divide the {module.in_features} input features "
                                 f"of {name}; pass --group-size with a divisor (e.g. 32)")
    if fmt.library == "bitsandbytes":
        return _bitsandbytes(fmt, model, targets)
    try:
        with quiet_torchao():
            import torchao  # noqa: F401
    except ImportError:
        raise MissingDependencyError("torchao", "quant") from None
    with quiet_torchao():
        from torchao.quantization import quantize_

        config = _torchao_config(fmt, group_size, device)
        if fmt.name == "awq-int8":
            _awq(model, config, targets, calibration or [], device)
        else:
            quantize_(model, config, filter_fn=lambda module, fqn: fqn in targets)
    return model


def _awq(model: Any, base: Any, targets: set[str], calibration: list[Any], device: str) -> None:
    """torchao's AWQ: observers on the targets, the calibration batches through the model, then each weight
    quantized with the input scales that minimize its output error on what the observers saw."""
    import torch
    from torchao.prototype.awq import AWQConfig
    from torchao.quantization import quantize_

    quantize_(model, AWQConfig(base, step="prepare"), filter_fn=lambda module, fqn: fqn in targets)
    with torch.no_grad():
        for batch in calibration:
            model(**{k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items() if k != "labels"})
    quantize_(model, AWQConfig(base, step="convert"), filter_fn=lambda module, fqn: fqn in targets)
    import gc

    gc.collect()   # the observers' records of the calibration activations go with them


def awq_scales(model: Any) -> tuple[int, int]:
    """(converted Linear layers whose searched AWQ input scales are all exactly 1, converted layers with AWQ scales):
    a layer whose scales are all 1 is the plain int8 weight bit for bit (torchao multiplies the input by 1)."""
    import torch

    ones = total = 0
    for module in model.modules():
        scale = getattr(getattr(module, "weight", None), "act_pre_scale", None)
        if scale is None:
            continue
        total += 1
        ones += bool(torch.all(scale == 1))
    return ones, total


def _torchao_config(fmt: Format, group_size: int, device: str) -> Any:
    import torch
    from torchao.quantization import (
        Float8WeightOnlyConfig,
        Int4WeightOnlyConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerGroup

    if fmt.name in ("int8", "awq-int8"):
        return Int8WeightOnlyConfig()
    if fmt.name == "int4":
        if device == "cuda":   # packed two per byte, tinygemm's tiled layout
            return Int4WeightOnlyConfig(group_size=group_size, int4_packing_format="tile_packed_to_4d")
        # the CPU layout torchao runs without its C++ kernels: int4 values stored one per int8 byte
        return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size))
    if fmt.name == "fp8":
        return Float8WeightOnlyConfig()
    raise InputError(f"format {fmt.name} is not applied by torchao")


def _bitsandbytes(fmt: Format, model: Any, targets: set[str]) -> Any:
    """Replace each target Linear with bitsandbytes' Linear4bit (nf4) or Linear8bitLt (LLM.int8); the weights are
    quantized when moved to the GPU."""
    import bitsandbytes as bnb
    import torch

    for name in sorted(targets):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        bias = old.bias is not None
        if fmt.name == "nf4":
            new = bnb.nn.Linear4bit(old.in_features, old.out_features, bias=bias, compute_dtype=old.weight.dtype,
                                    quant_type="nf4")
            new.weight = bnb.nn.Params4bit(old.weight.data.cpu(), requires_grad=False, quant_type="nf4")
        else:
            new = bnb.nn.Linear8bitLt(old.in_features, old.out_features, bias=bias, has_fp16_weights=False,
                                      threshold=6.0)
            new.weight = bnb.nn.Int8Params(old.weight.data.cpu(), requires_grad=False, has_fp16_weights=False)
        if bias:
            new.bias = torch.nn.Parameter(old.bias.data.cpu(), requires_grad=False)
        setattr(parent, child, new.to("cuda"))
    return model


def stored_bytes(model: Any) -> dict[str, int]:
    """Bytes the model's parameters and buffers hold, counted from the tensors themselves (a quantized weight by
    the tensors inside it: data, scales, zero points), split into 'quantized' (the converted weights) and 'dense'.
    Storage shared by several names (tied embeddings) counts once."""
    import torch

    seen: set[int] = set()
    out = {"quantized": 0, "dense": 0}

    def leaves(t: Any) -> list[Any]:
        if type(t) in (torch.Tensor, torch.nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
            return [t]
        names, _ = t.__tensor_flatten__()
        return [x for n in names if (v := getattr(t, n, None)) is not None for x in leaves(v)]

    for t in [*model.parameters(), *model.buffers()]:
        parts = leaves(t)
        kind = "quantized" if len(parts) > 1 or type(t).__name__ not in ("Tensor", "Parameter") or \
            t.dtype in (torch.int8, torch.uint8) else "dense"
        for p in parts:
            key = p.untyped_storage().data_ptr() if p.device.type != "meta" else id(p)
            if key in seen:
                continue
            seen.add(key)
            extra = _bnb_state(t) if p is t else 0
            out[kind] += p.untyped_storage().nbytes() + extra
    return out


def _bnb_state(t: Any) -> int:
    """bitsandbytes keeps a 4-bit weight's absmax (and nested scales) on its quant_state, not as tensors of the
    module; an 8-bit weight's row scales on SCB."""
    total = 0
    state = getattr(t, "quant_state", None)
    for obj in (state, getattr(state, "state2", None)):
        for attr in ("absmax", "code"):
            v = getattr(obj, attr, None) if obj is not None else None
            if v is not None and hasattr(v, "nbytes") and attr == "absmax":
                total += int(v.nbytes)
    scb = getattr(t, "SCB", None)
    if scb is not None and hasattr(scb, "nbytes"):
        total += int(scb.nbytes)
    return total
