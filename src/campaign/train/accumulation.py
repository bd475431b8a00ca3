"""Effective batch and gradient accumulation: does the gradient accumulated over micro-batches (and processes) equal
the gradient of the whole update computed at once, under the loss normalization the training loop uses?

Every token of an update should weigh the same: the reference is the full batch's summed token loss divided by its
token count. Accumulating `sum_i loss_sum_i / N_update` gives it exactly; the common `mean_i / steps` (each
micro-batch's mean, divided by the accumulation steps) weighs a token of a short micro-batch more than one of a long
one, and differs as soon as micro-batches hold different token counts. Across processes, DDP averages gradients, so
the per-token loss must be divided by the token count of the whole update (all processes) times the world size;
dividing by the local count is the same error again between processes.

The token losses come from the model's logits and the batch's labels (`labels`, or the target the model's forward
takes: nanoGPT's `targets`; every negative label is ignored, transformers' -100 as nanoGPT's -1; whether the model
shifts them is read from its own loss), so the check is about the normalization, whatever loss function wraps it.
Dropout is off (eval mode) so that two computations of one update see the same network.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import Check
from ..errors import InputError, user_frame
from ..results import Result
from .setup import Setup, first_line, load_setup
from .step import first_rows

SCHEMA = "campaign.batch/1"
DONE_RECORD = "done.rank{rank}"  # beside OUT: this rank passed the last barrier (ddp_worker)
ERROR_RECORD = "error.rank{rank}.json"  # beside the worker's OUT: a failing rank's own line and time (ddp_worker)
NORMALIZATIONS = {"accumulate": "your accumulation step (the setup's accumulate), run on the micro-batches",
                  "token": "every token weighs the same: summed token losses / tokens of the whole update",
                  "micro_batch_mean": "each micro-batch's mean loss / accumulation steps",
                  "token_local": "summed token losses / this process's tokens (DDP then averages the processes)"}
PAD_KEYS = {"input_ids": 0, "attention_mask": 0, "labels": -100, "token_type_ids": 0}
# Relative error under which two gradients of one update are the same up to float arithmetic (fp32: summation order
# changes ~1e-7 relative per add; a wrong normalization errs by the spread of token counts, percents).
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "bfloat16": 2e-2, "float16": 1e-2}


@dataclass(frozen=True)
class Variant:
    """One way of normalizing the accumulated loss, against the full-batch gradient."""

    normalization: str
    relative_error: float
    cosine: float
    meaning: str


@dataclass(frozen=True)
class BatchReport(Result):
    """Effective batch, tokens per update, and each normalization's gradient against the whole update's."""

    micro_batch: int
    accumulation: int
    processes: int
    effective_batch: int
    tokens_per_micro_batch: tuple[int, ...]
    tokens_per_update: int
    tokens_per_process: tuple[int, ...]
    normalization: str                  # what was checked: 'accumulate' (the loop's own), a declared one, '' (none)
    variants: tuple[Variant, ...]
    tolerance: float
    dtype: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    source: str = ""
    schema: str = SCHEMA


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("torch", "torch") from e
    return torch


# The names a forward's target goes by (transformers: labels; nanoGPT: targets; other loops: target, label, y): the
# field scored against the logits when the batch has no `labels`, if the model's forward takes it.
TARGETS = ("labels", "targets", "target", "label", "y")
IGNORED = -100        # a label position that is not scored: every negative label is (transformers -100, nanoGPT -1)


@dataclass(frozen=True)
class _Convention:
    """How a model is called and scored, decided once per model from what it does on a micro-batch."""

    label: str            # the batch's field of the targets
    with_target: bool     # the forward is given the target: it needs it, or without it its logits miss positions
    shifts: bool          # token t's logits are scored against label t + 1


_CONVENTIONS: dict[tuple[int, tuple[str, ...]], tuple[Any, _Convention]] = {}


def _convention(model: Any, batch: Mapping[str, Any]) -> _Convention:
    """The model's calling convention on batches of these fields, decided on the plain module (not its DDP wrapper)
    in eval mode without gradient, once per model."""
    import weakref

    inner = getattr(model, "module", model)                      # DDP
    key = (id(inner), tuple(sorted(batch)))
    known = _CONVENTIONS.get(key)
    if known is not None and known[0]() is inner:
        return known[1]
    label = label_field(inner, batch)
    found = _Convention(label, _needs_target(inner, batch, label), _shifts_by_own_loss(inner, batch, label))
    _CONVENTIONS[key] = (weakref.ref(inner), found)
    return found


def _signature(model: Any) -> tuple[tuple[str, ...], bool] | None:
    """(the parameters the model's forward takes by name, whether it also takes **kwargs); None when unreadable."""
    import inspect

    inner = getattr(model, "module", model)
    if inner is None:
        return None
    try:
        params = list(inspect.signature(inner.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    named = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def _forward_text(model: Any) -> str:
    """'GPT.forward(idx, targets=None)', for messages."""
    import inspect

    inner = getattr(model, "module", model)
    try:
        text = str(inspect.signature(inner.forward))
    except (AttributeError, TypeError, ValueError):
        text = "(...)"
    return f"{type(inner).__name__}.forward{text if len(text) <= 120 else text[:117] + '...)'}"


def label_field(model: Any, batch: Mapping[str, Any]) -> str:
    """The batch's field the logits are scored against: `labels` when the batch has it, else the first of TARGETS
    that the model's forward takes as a parameter (any of them, for a forward that takes **kwargs).

    Raises:
        InputError: no such field.
    """
    if "labels" in batch:
        return "labels"
    sig = _signature(model)
    for name in TARGETS:
        if name in batch and (sig is None or sig[1] or name in sig[0]):
            return name
    raise InputError(f"the micro-batches hold {', '.join(map(repr, batch))}, none of them a target the model's "
                     f"forward takes ({_forward_text(model)}); name the targets' field 'labels' (or one of "
                     f"{', '.join(TARGETS[1:])} that the forward takes)")


@contextlib.contextmanager
def _evaluating(model: Any) -> Any:
    torch = _torch()
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was)


def _covers(logits: Any, labels: Any) -> bool:
    """Whether the logits hold one row of scores per label position."""
    return logits is not None and logits.dim() == labels.dim() + 1 and \
        tuple(logits.shape[:labels.dim()]) == tuple(labels.shape)


def _needs_target(model: Any, batch: Mapping[str, Any], label: str) -> bool:
    """Whether the forward must be given the target to return logits for every label position: it requires it
    (a TypeError without it), or without it returns fewer positions (nanoGPT: the last position only)."""
    from .step import output_tensor

    with _evaluating(model):
        try:
            out = model(**{k: v for k, v in batch.items() if k != label})
        except TypeError:
            return True
        except Exception:
            return False      # the forward's own error is reported by the check's first forward (_logits)
    return not _covers(output_tensor(out), batch[label])


def _own_loss(out: Any) -> Any:
    """The loss a forward returned: .loss, ["loss"], or a tuple's scalar among its first two elements (nanoGPT's
    (logits, loss))."""
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if loss is None and isinstance(out, (tuple, list)):
        loss = next((t for t in out[:2] if hasattr(t, "dim") and t.dim() == 0), None)
    return loss


def _scored(labels: Any) -> Any:
    """The labels as cross-entropy targets: int64, every negative label set to IGNORED."""
    labels = labels.long()
    return labels.masked_fill(labels < 0, IGNORED)


def _shifts_by_own_loss(model: Any, batch: Mapping[str, Any], label: str) -> bool:
    """Whether token t's logits are scored against label t + 1: decided from the model's own loss on the batch (its
    loss against the cross-entropy of its logits with and without the shift), never from its class name
    (GPT2LMHeadModel shifts and its name does not end in ForCausalLM; nanoGPT's targets come shifted). A model that
    returns no loss of its own is scored unshifted: the labels are taken as given per position."""
    torch = _torch()
    labels = batch[label]
    if labels.dim() != 2 or labels.shape[1] < 2:
        return False
    with _evaluating(model):
        try:
            out = model(**batch)
        except Exception:
            return False      # the forward's own error is reported by the check's first forward (_logits)
    loss = _own_loss(out)
    from .step import output_tensor

    logits = output_tensor(out)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not _covers(logits, labels) or logits.dim() != 3:
        return False
    ce = torch.nn.functional.cross_entropy
    flat, kept = logits.float(), _scored(labels)
    shifted = float(ce(flat[:, :-1].reshape(-1, flat.shape[-1]), kept[:, 1:].reshape(-1), ignore_index=IGNORED))
    plain = float(ce(flat.reshape(-1, flat.shape[-1]), kept.reshape(-1), ignore_index=IGNORED))
    own = float(loss.float())
    return abs(own - shifted) < abs(own - plain)


def _logits(model: Any, batch: Mapping[str, Any]) -> Any:
    """The per-token output of a forward on the batch without its target (with it, for a forward that needs it or
    without it scores fewer positions): .logits, a tuple's first element, or the tensor itself.

    Raises:
        InputError: the forward raises (naming the model's class and the error), or returns no logits.
    """
    from .step import output_tensor

    conv = _convention(model, batch)
    name = type(getattr(model, "module", model)).__name__
    try:
        out = model(**batch) if conv.with_target else model(**{k: v for k, v in batch.items() if k != conv.label})
    except InputError:
        raise
    except Exception as e:
        raise InputError(f"the model's forward ({name}) raised {type(e).__name__}: {first_line(e)}; campaign batch "
                         "calls model(**micro_batch) as your loop does") from None
    logits = output_tensor(out)
    labels = batch[conv.label]
    if not _covers(logits, labels):
        raise InputError(f"the model's forward ({name}) returned {type(out).__name__}"
                         f"{tuple(logits.shape) if logits is not None else ''}, not logits with one row of scores per "
                         f"label ({conv.label} {tuple(labels.shape)}); return .logits, or a tuple whose first element "
                         "is them")
    return logits


def _token_loss_sum(model: Any, batch: Mapping[str, Any]) -> tuple[Any, int]:
    """(sum of token losses, tokens counted) of one batch from the model's logits; negative labels are ignored."""
    torch = _torch()
    conv = _convention(model, batch)
    logits = _logits(model, batch)
    labels = _scored(batch[conv.label])
    if conv.shifts:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                             ignore_index=IGNORED, reduction="sum")
    return loss, tokens(model, batch)


def tokens(model: Any, batch: Mapping[str, Any]) -> int:
    """Tokens whose loss counts in a batch (labels >= 0, after the causal shift)."""
    conv = _convention(model, batch)
    labels = batch[conv.label][:, 1:] if conv.shifts else batch[conv.label]
    return int((labels >= 0).sum())


def _pad_value(key: str, label: str) -> int | None:
    return IGNORED if key == label else PAD_KEYS.get(key)


def concatenate(batches: Sequence[Mapping[str, Any]], label: str = "labels") -> dict[str, Any]:
    """One batch holding every row of the micro-batches (checked by check_fields): the whole update at once. A
    field whose sequence width differs between micro-batches is right-padded to the longest (input ids 0, masks 0,
    the targets IGNORED); one of the same width in every micro-batch is concatenated as it is."""
    torch = _torch()
    out = {}
    for k in batches[0]:
        parts = [b[k] for b in batches]
        widths = {tuple(p.shape[1:]) for p in parts}
        if len(widths) > 1:
            value = _pad_value(k, label)
            if value is None:
                raise InputError(_unpaddable(k, parts))
            length = max(int(p.shape[1]) for p in parts)
            parts = [torch.nn.functional.pad(p, (0, length - p.shape[1]), value=value) for p in parts]
        out[k] = torch.cat(parts, dim=0)
    return out


def _unpaddable(key: str, parts: Sequence[Any]) -> str:
    widths = sorted({int(p.shape[1]) for p in parts})
    return (f"the micro-batches' field {key!r} has sequence widths {', '.join(map(str, widths))} and campaign knows no "
            f"pad value for it (it pads {', '.join(k for k in PAD_KEYS if k != 'labels')} and the targets); give "
            "micro-batches of one width (then no field is padded), or pad them yourself to one width")


def check_fields(batches: Sequence[Mapping[str, Any]], model: Any = None) -> set[str]:
    """The micro-batches' fields, after checking them: the same in every batch, each a tensor with one row per
    example that the model's forward takes (by name, or through **kwargs; not checked without the model), the
    targets (label_field) integer, and a field whose sequence width differs between micro-batches one that campaign
    knows how to pad (PAD_KEYS, the targets). Checked before any process is launched, so that a field such as
    "source": [...] is named here rather than failing inside a rank."""
    torch = _torch()
    keys = set(batches[0])
    for i, b in enumerate(batches):
        if set(b) != keys:
            raise InputError(f"micro-batches hold different fields ({sorted(keys)} vs {sorted(b)}); give the same "
                             "fields in every batch")
        for k, v in b.items():
            if not isinstance(v, torch.Tensor) or v.dim() == 0:
                what = "a 0-dim tensor" if isinstance(v, torch.Tensor) else f"a {type(v).__name__}"
                raise InputError(f"micro-batch {i + 1}'s field {k!r} is {what}, not a tensor with one row per "
                                 "example: the accumulation check concatenates each field into the whole update and "
                                 "calls model(**micro_batch) as your loop does; leave it out of the setup's batches")
    label = label_field(model, batches[0])
    sig = _signature(model) if model is not None else None
    if sig is not None and not sig[1]:
        other = next((k for k in batches[0] if k != label and k not in sig[0]), None)
        if other is not None:
            raise InputError(f"the micro-batches' field {other!r} is not a parameter of the model's forward "
                             f"({_forward_text(model)}); campaign batch calls model(**micro_batch) as your loop "
                             "does: leave it out of the setup's batches, or name it as the forward does")
    for i, b in enumerate(batches):
        t = b[label]
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise InputError(f"micro-batch {i + 1}'s {label!r} is {str(t.dtype).removeprefix('torch.')}, not integer "
                             "class indices: the accumulation check scores the logits against them by "
                             "cross-entropy; give the targets as token or class ids (negative ones ignored)")
    for k in batches[0]:
        parts = [b[k] for b in batches]
        if len({tuple(p.shape[1:]) for p in parts}) == 1:
            continue
        if any(p.dim() != 2 for p in parts):
            raise InputError(f"the micro-batches' field {k!r} has shapes "
                             f"{', '.join(str(tuple(p.shape)) for p in parts)}: rows of different shapes beyond "
                             "the batch dimension cannot be concatenated into the whole update; give micro-batches "
                             "of one shape")
        if _pad_value(k, label) is None:
            raise InputError(_unpaddable(k, parts))
    return keys


def _grads(model: Any) -> Any:
    torch = _torch()
    return torch.cat([p.grad.detach().double().reshape(-1) if p.grad is not None else
                      torch.zeros(p.numel(), dtype=torch.float64) for p in model.parameters() if p.requires_grad])


def _compare(g: Any, ref: Any) -> tuple[float, float]:
    torch = _torch()
    rel = float(torch.linalg.vector_norm(g - ref) / torch.linalg.vector_norm(ref))
    cos = float(torch.nn.functional.cosine_similarity(g, ref, dim=0))
    return rel, cos


def _zero(model: Any) -> None:
    for p in model.parameters():
        p.grad = None


def check_accumulation(setup: str | Setup | Any, *, accumulation: int | None = None, processes: int = 1,
                       normalization: str | None = None, timeout: float = 600,
                       progress: Callable[[str], None] | None = None) -> BatchReport:
    """Effective batch and the accumulation check for a setup (see the module docstring).

    Args:
        setup: 'setup.py:make_setup', a factory, or a Setup; its batches are the micro-batches, in order.
        accumulation: micro-batches per update on each process (default: all the batches, split over processes).
        processes: 1 here, or 2+ run for real under torchrun with DDP (gloo on the CPU).
        normalization: what the training loop does: 'token' or 'micro_batch_mean' (default: the setup's, else
            'micro_batch_mean', what `loss / steps` with an HF model's own mean loss gives).
        progress: called with each phase as it starts ('gradient 2/3: accumulated, token normalization').
    Raises:
        InputError: a bad setup, too few batches, unequal batch fields, an unknown normalization.
    """
    tell = progress or (lambda _phase: None)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:   # before the setup is built
        raise InputError(f"processes {processes!r} must be a whole number >= 1")
    if processes > 1:
        check_processes(processes)
    if accumulation is not None and (isinstance(accumulation, bool) or not isinstance(accumulation, int)
                                     or accumulation < 1):
        raise InputError(f"accumulation {accumulation!r} must be a whole number >= 1")
    if normalization is not None and normalization not in ("token", "micro_batch_mean"):
        raise InputError(f"normalization {normalization!r} must be 'token' or 'micro_batch_mean'")
    tell(f"building the setup{f' ({setup})' if isinstance(setup, str) else ''}")
    s = load_setup(setup)
    n = len(s.batches)
    accumulation = accumulation if accumulation is not None else n // processes
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise InputError(f"accumulation {accumulation!r} must be a whole number >= 1")
    if accumulation * processes > n:
        raise InputError(f"{accumulation} accumulation steps x {processes} process(es) need {accumulation * processes} "
                         f"micro-batches; the setup gives {n}")
    check_fields(s.batches, s.model)
    label = label_field(s.model, s.batches[0])
    declared = normalization or s.normalization
    if declared is not None and declared not in ("token", "micro_batch_mean"):
        raise InputError(f"normalization {declared!r} must be 'token' or 'micro_batch_mean'")
    loop = s.accumulate
    batches = s.batches[:accumulation * processes]
    model = s.model
    if processes > 1:
        if not isinstance(setup, str):
            raise InputError("a check over several processes runs the setup file in each: give 'setup.py:make_setup'")
        tell(f"gradients under torchrun: {processes} processes x {accumulation} micro-batches (DDP, "
             f"{'your accumulate on each rank and ' if loop is not None else ''}each normalization against the whole "
             "update)")
        measured = run_torchrun(setup, f"accumulate:{accumulation}", processes, timeout)
        per_process = tuple(measured["tokens_per_process"])
        variants_raw = measured["variants"]
    else:
        measured, per_process = None, ()
        variants_raw = _one_process(model, batches, tell, loop=loop, where=s.source or "the setup")
    counts = tuple(measured["tokens_per_micro_batch"]) if measured is not None else \
        tuple(tokens(model, b) for b in batches)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    tol = TOLERANCE.get(dtype, 1e-4)
    variants = tuple(Variant(k, v["relative_error"], v["cosine"], NORMALIZATIONS[k]) for k, v in variants_raw.items())
    micro = first_rows(batches[0])
    rows = {first_rows(b) for b in batches}
    checks, notes = [], []
    differ = len(set(counts)) > 1 or len(set(per_process)) > 1
    chosen = "accumulate" if loop is not None else declared or ""
    what = {"accumulate": "your accumulation step", "token": "declared normalization token",
            "micro_batch_mean": "declared normalization micro batch mean"}.get(chosen, "")
    right = next(v for v in variants if v.normalization == "token")
    if not all(math.isfinite(v.relative_error) for v in variants):
        checks.append(Check(
            "batch.accumulation_equivalence", "fail", "the gradients are not finite (a NaN or infinite loss on these "
            "micro-batches): there is nothing to compare", "nothing trains from a non-finite loss",
            "look for log(0), a division by a zero token count (every label -100) or fp16 overflow; `campaign "
            "check` on the same setup says which"))
    elif not chosen and differ:
        mean = next(v for v in variants if v.normalization == "micro_batch_mean")
        checks.append(Check(
            "batch.accumulation_equivalence", "skipped",
            f"your loop was not given and its normalization not declared: per-token normalization errs "
            f"{right.relative_error:.1e} against the whole update's gradient, loss / steps {mean.relative_error:.2%}",
            "which one your loop does decides whether the update is the batch you think you train with",
            "return accumulate(model, micro_batches) from the setup (your loop's forwards and backwards of one "
            "update), or declare --normalization token | micro-batch-mean"))
    elif not chosen:
        checks.append(Check("batch.accumulation_equivalence", "pass",
                            f"every micro-batch holds the same tokens: per-token normalization and loss / steps both "
                            f"give the whole update's gradient (relative error {right.relative_error:.1e})"))
    else:
        user = next(v for v in variants if v.normalization == chosen)
        if user.relative_error <= tol:
            checks.append(Check("batch.accumulation_equivalence", "pass",
                                f"{what}: relative error {user.relative_error:.1e}, cosine {user.cosine:.6f} against "
                                "the whole update's gradient"))
        else:
            checks.append(Check(
                "batch.accumulation_equivalence", "fail",
                f"{what}: relative error {user.relative_error:.2%} (cosine {user.cosine:.4f}) against the whole "
                f"update's gradient (every token of the update weighing the same); per-token normalization errs "
                f"{right.relative_error:.1e}",
                "the update is not the batch you think you train with: micro-batches with more tokens count less "
                "per token, or a sum never divided scales the step by the token count; changing the accumulation "
                "steps changes the training",
                "sum the token losses and divide by the tokens of the whole update (transformers: pass "
                "num_items_in_batch, as Trainer does since 4.46, huggingface/transformers#34191); across processes, "
                "by the all-reduced count x world size"))
    if not differ:
        checks.append(Check("batch.token_counts_vary", "warn",
                            f"every micro-batch has {counts[0]} tokens: the normalizations coincide, so this check "
                            "cannot tell them apart", "real batches vary in length",
                            "give micro-batches of different lengths (as your data has)"))
    if len(rows) > 1:
        notes.append(f"micro-batches hold {sorted(rows)} rows; the effective batch uses the first ({micro})")
    if processes > 1:
        notes.append("DDP keeps a full replica of the model on each process and averages gradients; it does not "
                     "share weights across cards (that is FSDP/ZeRO), and each process needs its own shard of the "
                     "data (a DistributedSampler), or the processes train on the same rows")
    notes.append(f"the whole update's gradient from the model's logits and {label!r} (negative labels ignored), "
                 "dropout off"
                 + ("; your accumulate ran on the micro-batches in eval mode" + (
                     " on each rank, given the model wrapped in DDP and that rank's share of them"
                     if processes > 1 else "") if loop is not None else
                    "; your loss function only decides the normalization"))
    return BatchReport(micro_batch=micro, accumulation=accumulation, processes=processes,
                       effective_batch=micro * accumulation * processes, tokens_per_micro_batch=counts,
                       tokens_per_update=sum(counts), tokens_per_process=per_process, normalization=chosen,
                       variants=variants, tolerance=tol, dtype=dtype, checks=tuple(checks), notes=tuple(notes),
                       source=s.source)


def _one_process(model: Any, batches: Sequence[Mapping[str, Any]],
                 tell: Callable[[str], None] = lambda _phase: None, *, loop: Callable[..., Any] | None = None,
                 where: str = "the setup") -> dict[str, dict[str, float]]:
    """Each normalization's accumulated gradient (and the loop's own, when given) against the whole update computed
    at once, on this process."""
    was_training = model.training
    model.eval()
    total = 4 if loop is not None else 3
    try:
        conv = _convention(model, batches[0])            # decided on a micro-batch as the loop gives it
        _zero(model)
        tell(f"gradient 1/{total}: the whole update at once ({len(batches)} micro-batches)")
        loss, n_total = _token_loss_sum(model, concatenate(batches, conv.label))
        (loss / n_total).backward()
        ref = _grads(model)
        out = {}
        if loop is not None:
            tell(f"gradient 2/{total}: your accumulation step over {len(batches)} micro-batches")
            _zero(model)
            try:
                loop(model, [dict(b) for b in batches])
            except InputError:
                raise
            except Exception as e:
                raise InputError(f"{where}: accumulate raised {type(e).__name__}: {first_line(e)}") from None
            if not any(p.grad is not None for p in model.parameters()):
                raise InputError(f"{where}: accumulate left no gradient; it runs the forwards and backwards of one "
                                 "update (loss.backward()) and does not zero them after")
            rel, cos = _compare(_grads(model), ref)
            out["accumulate"] = {"relative_error": rel, "cosine": cos}
        for i, norm in enumerate(("token", "micro_batch_mean"), total - 1):
            tell(f"gradient {i}/{total}: accumulated over {len(batches)} micro-batches, {norm.replace('_', ' ')} "
                 "normalization")
            _zero(model)
            for b in batches:
                s, k = _token_loss_sum(model, b)
                (s / n_total if norm == "token" else (s / k) / len(batches)).backward()
            rel, cos = _compare(_grads(model), ref)
            out[norm] = {"relative_error": rel, "cosine": cos}
        _zero(model)
        return out
    finally:
        model.train(was_training)


def run_torchrun(setup: str, task: str, processes: int, timeout: float) -> dict[str, Any]:
    """Run the worker (train/ddp_worker.py) under torchrun (gloo) on `task` ('accumulate:K' for batch, 'check' for
    check's one update) and read what rank 0 wrote. A failure is one line: the rank that failed first with its own
    error (see root_cause)."""
    with tempfile.TemporaryDirectory(prefix="campaign-batch-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               "-m", "campaign.train.ddp_worker", setup, task, str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        code, stderr = launch(cmd, env, timeout, f"the {processes}-process check")
        done = all((Path(tmp) / DONE_RECORD.format(rank=r)).is_file() for r in range(processes))
        if done and out.is_file():              # every rank passed the last barrier: a teardown crash changes nothing
            return json.loads(out.read_text(encoding="utf-8"))
        cause = root_cause(Path(tmp), stderr, processes)
        if cause is not None:
            raise InputError(cause)
        if code != 0 or not out.is_file():
            raise InputError(f"the {processes}-process check failed under torchrun (exit {code}): "
                             f"{_cause(stderr)[:300]}")
        return json.loads(out.read_text(encoding="utf-8"))


def check_processes(processes: int) -> None:
    """Refuse more ranks than the machine runs at once, before anything is launched: one per GPU where one is
    visible (the worker then takes NCCL), else one per CPU core this process may run on (gloo)."""
    torch = _torch()
    if torch.cuda.is_available():
        limit = torch.cuda.device_count()
        what = f"{limit} GPU(s) visible: NCCL runs one rank per GPU"
    else:
        limit = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        what = f"{limit} CPU core(s) this process may use: gloo on the CPU runs one rank per core"
    if processes > limit:
        raise InputError(f"--processes {processes}: this machine runs {limit} at once ({what}); give --processes "
                         f"{limit} or fewer")


def launch(cmd: Sequence[str], env: Mapping[str, str], timeout: float, what: str) -> tuple[int, str]:
    """Run a launcher (torchrun) in a session of its own: (its exit code, its stderr). On a timeout, or any other
    way out before it ends (an error, Ctrl-C), it and every process under it are killed and waited for: torchrun
    starts each worker in a session of its own, so killing its group alone would leave the workers running (and,
    on a GPU, holding its memory).

    Raises:
        InputError: it did not end within `timeout` seconds.
    """
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(env), start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise InputError(f"{what} did not finish in {timeout:.0f} s; its processes were stopped") from None
        finally:
            if proc.returncode is None:
                _end_tree(proc)
        err.seek(0)
        return code, err.read().decode("utf-8", errors="replace")


def _end_tree(proc: subprocess.Popen[Any]) -> None:
    """Kill a process started in a session of its own and every process under it, then wait until they are gone.
    Each group found is stopped (SIGSTOP) before the tree is read again, so that none starts another meanwhile."""
    import signal

    groups, seen = {proc.pid}, set[int]()
    while True:
        for group in groups:
            _signal_group(group, signal.SIGSTOP)
        found = set(_descendants(proc.pid))
        if found <= seen:
            break
        seen |= found
        groups |= {g for g in map(_group_of, found) if g is not None and g != os.getpgrp()}
    for group in groups:
        _signal_group(group, signal.SIGKILL)
    for pid in seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    _wait_gone(seen)


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc (Linux); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1])


def _descendants(pid: int) -> list[int]:
    """Every process under pid, read from /proc (Linux; elsewhere none is found, and only the launcher's own group
    is killed)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc/self") else ():
        stat = _stat(int(name)) if name.isdigit() else None
        if stat is not None:
            children.setdefault(stat[1], []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _wait_gone(pids: set[int], limit: float = 10.0) -> None:
    """Until every pid has ended (gone, or a zombie left for its new parent to reap), at most `limit` seconds."""
    import time

    def running(pid: int) -> bool:
        stat = _stat(pid)
        return stat is not None and stat[0] != "Z"

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and any(running(pid) for pid in pids):
        time.sleep(0.01)


# What a rank raises when another rank's process is gone: the consequence, never the root cause.
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote process exited",
             "NCCL communicator was aborted")
_REPORTED = re.compile(r"time\s*:\s*(?P<time>\S+)\s+host\s*:[^\n]*\s+rank\s*:\s*(?P<rank>\d+)[^\n]*\s+"
                       r"exitcode\s*:\s*(?P<code>-?\d+)")


def root_cause(folder: Path, stderr: str, processes: int) -> str | None:
    """The line naming the rank that failed first, with its own error, or None when no rank failed.

    Each worker that raises records its rank, the time and its line (ERROR_RECORD, ddp_worker); a rank that died
    without raising (killed by a signal, os._exit, a crash in native code) records nothing, and is known from
    torchrun's report of its exit code. Its own error comes first: a rank's own exception, or a death that was not
    torchrun's SIGTERM to the ranks left; then a rank ended by SIGTERM; last, a rank that only lost its connection
    to another (PEER_LOST: 'Connection closed by peer' is what rank 0 says when rank 1 dies). Within each, the
    earliest by time.
    """
    import signal

    records = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(folder.glob(ERROR_RECORD.format(rank="*")))]
    recorded = {r["rank"] for r in records}
    ended = []
    for m in _REPORTED.finditer(stderr):
        rank, code = int(m["rank"]), int(m["code"])
        if rank not in recorded and code != 0:
            recorded.add(rank)
            ended.append({"rank": rank, "time": _reported_time(m["time"]), "line": _died(rank, processes, code),
                          "terminated": code == -signal.SIGTERM})
    own = [r for r in records if not any(p in r["line"] for p in PEER_LOST)] + [e for e in ended
                                                                                  if not e["terminated"]]
    tiers = (own, [e for e in ended if e["terminated"]], records)
    first = next((tier for tier in tiers if tier), [])
    return str(min(first, key=lambda r: r["time"])["line"]) if first else None


def _reported_time(text: str) -> float:
    """torchrun's 'time : 2026-12-05_12:38:20' (local, whole seconds) as seconds since the epoch."""
    from datetime import datetime

    try:
        return datetime.strptime(text, "%Y-%m-%d_%H:%M:%S").timestamp()
    except ValueError:
        return math.inf


def _died(rank: int, processes: int, code: int) -> str:
    """One line for a rank that ended without raising: the signal that killed it, or its exit code."""
    import signal

    if code > 0:
        return (f"rank {rank} of {processes} exited with code {code} without reporting an error (os._exit, native "
                "code ending the process, or a failure before campaign's worker started)")
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "an unknown signal"
    why = {"SIGKILL": ": the kernel's out-of-memory killer sends SIGKILL (see dmesg, or the container's memory "
                      "limit)",
           "SIGSEGV": ": a crash in native code (a C extension, the CUDA driver)",
           "SIGBUS": ": a crash in native code (a C extension, the CUDA driver)",
           "SIGABRT": ": native code aborted (a C++ exception or a failed assertion in a library)"}.get(name, "")
    return f"rank {rank} of {processes} died of signal {-code} ({name}) without raising an exception{why}"


def _cause(stderr: str) -> str:
    """The line of torchrun's output that says what went wrong: a worker's own exception (the last line of its
    traceback, 'ValueError: ...'), not torchrun's wrapper ('ChildFailedError', its framed report); else the last
    error line; else the last line with text."""
    lines = [re.sub(r"^\[(default)?rank\d+\]:\s*", "", line.strip()) for line in stderr.splitlines()
             if line.strip() and set(line.strip()) != {"="}]
    wrapper = ("ChildFailedError", "torch.distributed.elastic", "torch.distributed.run", "[rank", "traceback :")
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b:?", line)
              and not any(w in line for w in wrapper)]
    errors = [line for line in lines if "Error" in line or "error:" in line or "Exception" in line]
    return (raised or errors or lines or ["no output"])[-1]


def _raised_in(e: BaseException, fn: Callable[..., Any]) -> str:
    """'FILE:FUNCTION (line N)' of the innermost frame of the user's code in e's traceback (errors.user_frame);
    else fn's own."""
    found = user_frame(e)
    if found is not None:
        return found
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{fn.__qualname__}" if code is not None else repr(fn)


def ddp_variants(setup: Setup, accumulation: int) -> dict[str, Any]:
    """In a torchrun process (the process group up): each normalization accumulated under DDP, against the whole
    update computed on rank 0. Returns rank 0's figures (other ranks: {})."""
    torch = _torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    batches = setup.batches[:accumulation * world]
    mine = batches[rank * accumulation:(rank + 1) * accumulation]
    model = setup.model
    model.eval()
    ddp = DistributedDataParallel(model)                 # broadcasts rank 0's weights: every replica starts equal
    local = sum(tokens(model, b) for b in mine)          # decides the model's convention on the plain module
    total = torch.tensor([local], dtype=torch.int64)
    dist.all_reduce(total)
    n_global = int(total.item())
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([local], dtype=torch.int64))
    # the whole update is what the ranks hold: a setup whose loader shards under torchrun (an HF Trainer's
    # DistributedSampler) gives each rank its own batches, so rank 0 gathers every rank's share
    shares: list[Any] = [None] * world
    dist.all_gather_object(shares, [{k: v.cpu() for k, v in b.items()} for b in mine])
    batches = [b for share in shares for b in share]
    ref = None
    if rank == 0:
        _zero(model)
        loss, n = _token_loss_sum(model, concatenate(batches, _convention(model, mine[0]).label))   # no DDP hook
        (loss / n).backward()
        ref = _grads(model)
    out = {}
    if setup.accumulate is not None:               # the loop's own step on this rank's share, the model under DDP
        _zero(model)
        where = setup.source or "the setup"
        try:
            setup.accumulate(ddp, [dict(b) for b in mine])
        except Exception as e:
            raise InputError(f"{where}: accumulate raised {type(e).__name__}: {first_line(e)} in "
                             f"{_raised_in(e, setup.accumulate)} on rank {rank} of {world} (torchrun, "
                             f"{dist.get_backend()})") from None
        if not any(p.grad is not None for p in model.parameters()):
            raise InputError(f"{where}: accumulate left no gradient on rank {rank} of {world}; it runs the forwards "
                             "and backwards of one update (loss.backward()) and does not zero them after")
        if rank == 0:
            rel, cos = _compare(_grads(model), ref)
            out["accumulate"] = {"relative_error": rel, "cosine": cos}
    for norm in ("token", "token_local", "micro_batch_mean"):
        _zero(model)
        for i, b in enumerate(mine):
            sync = i == len(mine) - 1
            ctx = ddp.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                s, k = _token_loss_sum(ddp, b)
                if norm == "token":
                    loss = s / n_global * world          # DDP divides the summed gradients by the world size
                elif norm == "token_local":
                    loss = s / local
                else:
                    loss = (s / k) / len(mine)
                loss.backward()
        if rank == 0:
            rel, cos = _compare(_grads(model), ref)
            out[norm] = {"relative_error": rel, "cosine": cos}
    return {"variants": out, "tokens_per_process": [int(c.item()) for c in counts],
            "tokens_per_micro_batch": [tokens(model, b) for b in batches]} if rank == 0 else {}


__all__ = ["BatchReport", "ERROR_RECORD", "NORMALIZATIONS", "Variant", "check_accumulation", "concatenate",
           "ddp_variants", "label_field", "tokens"]
