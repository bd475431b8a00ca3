"""What `campaign quant` is given besides the setup, checked before the setup (the user's code, the models) is
loaded: a typo in a guard, a format, a KV precision, the price file or an output path answers at once, in one line,
instead of after the models are built. What depends on the setup (a calibrated format without calibration data, a
guard's metric against the setup's metric, class names) is checked in compress/quant.py once the setup is built,
before any model.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UnknownNameError
from ..evaluate.regress import parse_guard
from ..memory.dtypes import parse_dtype
from ..plan.prices import load_prices
from ..plots.canvas import check_path
from ..train.setup import writable_file
from .formats import BUILT, REFERENCES, Format, machine, parse_format, refusal

# The metric names a guard can take, by metric: `campaign regress`'s reports' metrics() (classification:
# evaluate/analysis.py; extraction: evaluate/extraction.py) and perplexity's own. A name ending in '[' takes a class
# or a field in brackets ('f1[refund]').
GUARD_METRICS = {
    "perplexity": ("perplexity", "nll"),
    "classification": ("accuracy", *(f"{avg}_{m}" for avg in ("macro", "micro", "weighted")
                                     for m in ("precision", "recall", "f1")), "f1[", "precision[", "recall["),
    "extraction": ("valid_json", "accuracy", "schema_valid", "required_all", "required[", "exact[", "match["),
}


@dataclass(frozen=True)
class QuantInputs:
    """The command's own inputs, checked and parsed before the setup is built: formats and reference (None: from
    the machine and the model), the KV precisions (None: the default), the guards, the price file (loaded)."""

    formats: tuple[Format, ...] | None
    reference: Format | None
    kv_dtypes: tuple[str, ...] | None
    guards: tuple[str, ...]
    prices: Any
    machine: dict[str, Any] | None       # what this machine runs, when a format needed asking (torch imported)


def check_inputs(*, formats: Sequence[str] | None = None, reference: str | None = None, guards: Sequence[str] = (),
                 group_size: int = 128, context: int | None = None, sequences: int = 1,
                 kv_dtypes: Sequence[str] | None = None, confidence: float = 0.95,
                 prices: str | Path | None = None, margin: float | None = None) -> QuantInputs:
    """Every input of `compare_quant` that does not depend on the setup, checked before the setup (the user's code,
    the models) is loaded, so a typo costs no loading: numbers, guards (syntax, and a metric name some metric
    has), format names and whether this machine runs them, the reference, the KV precisions, the equivalence
    margin and the price file.
    What depends on the setup (a calibrated format without calibration data, a guard's metric against the
    setup's metric, class names) is checked once the setup is built, before any variant.

    Raises:
        InputError: one line, the first bad input.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise InputError(f"group size must be a positive integer, got {group_size!r}")
    if not isinstance(sequences, int) or isinstance(sequences, bool) or sequences <= 0:
        raise InputError(f"sequences must be a positive integer, got {sequences!r}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence {confidence!r} must be between 0 and 1, e.g. 0.95")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float)) or
                               not math.isfinite(margin) or margin <= 0):
        raise InputError(f"margin {margin!r}: give the largest difference that does not matter, a positive number in "
                         "the metric's units (accuracy: 0.01 = one point; perplexity: nats of per-example mean NLL, "
                         "0.01 = about 1% perplexity)")
    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context <= 0):
        raise InputError(f"context must be a positive integer (tokens per sequence), got {context!r}")
    if isinstance(guards, str):
        guards = [guards]
    for g in guards:
        guard_metric(g, None)
    ref = parse_format(reference) if reference is not None else None
    if ref is not None and ref.name not in REFERENCES:
        raise InputError(f"reference {reference!r} is a quantized format; the reference is fp32, bf16 or fp16")
    chosen = tuple(parse_format(f) for f in formats) if formats is not None else None
    here = None
    for f in chosen or ():
        if f.calibrated:       # refused without calibration data first: known once the setup is built
            continue
        if here is None and (f.gpu or f.library == "bitsandbytes" or f.name not in BUILT):
            here = machine()
        why = refusal(f, here or {"device": "cpu", "name": "CPU", "capability": None}, calibration=True)
        if why:
            raise InputError(why)
    if kv_dtypes is not None and not list(kv_dtypes):
        raise InputError("--kv-dtype names no precision; give one or more of " + ", ".join(KV_DTYPES) +
                         " (comma-separated), or leave it out for the default")
    kv = tuple(kv_name(k) for k in kv_dtypes) if kv_dtypes else None
    return QuantInputs(chosen, ref, kv, tuple(guards), load_prices(prices), here)


def guard_metric(guard: str, metric: str | None) -> None:
    """A guard's syntax, and a metric name that `metric` (any metric when None) has."""
    name, _, _ = parse_guard(guard)
    family = name.split("[", 1)[0] + "[" if "[" in name else name
    metrics = [metric] if metric is not None else list(GUARD_METRICS)
    if any(family in GUARD_METRICS[m] for m in metrics):
        return
    known = ", ".join(n + ("...]" if n.endswith("[") else "") for n in dict.fromkeys(
        n for m in metrics for n in GUARD_METRICS[m]))
    what = f"{metric} has no metric" if metric is not None else "no metric is called"
    raise InputError(f"guard {guard!r}: {what} {name!r}; the names are {known} (class and field names in "
                     "brackets)")


KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")


def kv_name(name: str) -> str:
    """The canonical KV cache precision for what the user typed; a weight-only format, or a name that is no
    precision at all, is refused with the nearest KV precision."""
    try:
        dtype = parse_dtype(name, what="kv dtype")
    except UnknownNameError:
        raise UnknownNameError("kv dtype", str(name), KV_DTYPES, "KV caches use " + ", ".join(KV_DTYPES) + ".") \
            from None
    if dtype not in KV_DTYPES:
        raise InputError(f"kv dtype {name!r} is a weight format; KV caches use fp32, bf16, fp16, fp8 or int8")
    return dtype


def check_outputs(*, csv: str | os.PathLike[str] | None = None, plot: str | os.PathLike[str] | None = None) -> None:
    """The files `campaign quant` writes at the end (--csv, --plot), checked before anything runs: a plot's format,
    and for each a file name in a folder that exists (or can be made) and is writable.

    Raises:
        InputError: one line naming the file.
    """
    if plot is not None:
        check_path(plot)
    for what, path in (("--csv", csv), ("--plot", plot)):
        if path is not None:
            writable_file(path, what)


__all__ = ["GUARD_METRICS", "KV_DTYPES", "QuantInputs", "check_inputs", "check_outputs", "guard_metric", "kv_name"]
