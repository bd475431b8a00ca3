"""Estimate vs measurement: side by side per phase, the gap attributed, a safety margin and a verdict per card."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..hardware.cards import find_card
from ..models.spec import ModelSpec
from ..results import Result
from ..units import GiB
from .breakdown import MemoryEstimate
from .constants import PLAUSIBLE_RATIO, RUN_TO_RUN
from .estimate import estimate_memory
from .measurement import Measurement
from .trace import trace_memory
from .workload import Workload

SCHEMA = "campaign.explain/2"
# what must be equal for two records to describe the same workload
SAME_WORKLOAD = ("mode", "method", "dtype", "kv_dtype", "batch", "seq_len", "optimizer", "optimizer_impl",
                 "mixed_precision", "grad_checkpointing", "attention", "lora_rank", "lora_targets", "gpus", "shard",
                 "prefill_chunk")


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    analytic_bytes: int | None
    traced_bytes: int | None
    measured_bytes: int
    measured_reserved_bytes: int

    @property
    def ratio(self) -> float | None:
        """analytic / measured peak allocated (1.0 = exact)."""
        return self.analytic_bytes / self.measured_bytes if self.analytic_bytes and self.measured_bytes else None


@dataclass(frozen=True)
class Level:
    """One level of the memory at the peak, as each method sees it (None: that method cannot see it)."""

    name: str
    analytic_bytes: int
    traced_bytes: int | None
    measured_bytes: int | None


@dataclass(frozen=True)
class Gap:
    """One part of the difference measured - estimated; the parts sum to the whole difference."""

    name: str
    bytes: int
    meaning: str


@dataclass(frozen=True)
class Explanation(Result):
    """`gaps` sum to measured - analytic device bytes on a GPU (peak allocated on the CPU). `margin` is None when
    the measured run failed: a margin needs a complete run. `card`: the one card asked for (its verdict is
    verdicts[0]), else None. Checks: explain.margin (a margin from a complete run), and with a card
    explain.fits (the card holds the plan with its margin; 'tight' fails, as in campaign memory)."""

    label: str
    device: str
    rows: tuple[PhaseRow, ...]
    levels: tuple[Level, ...]
    gaps: tuple[Gap, ...]
    margin: float | None
    margin_reason: str
    planned_device_bytes: int | None
    verdicts: tuple[tuple[str, int, str], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    schema: str = SCHEMA
    card: str | None = None

    @property
    def gap_bytes(self) -> int:
        return sum(g.bytes for g in self.gaps)

    @property
    def checks(self) -> tuple[Check, ...]:
        if self.margin is None:
            out = [Check("explain.margin", "fail", self.margin_reason, "a margin needs a complete measured run",
                         "fix the run, or measure a smaller batch or context first")]
        else:
            out = [Check("explain.margin", "pass", f"margin {self.margin:.0%}: {self.margin_reason}")]
        if self.card is not None and self.verdicts:
            name, memory, verdict = self.verdicts[0]
            planned = f"plan {self.planned_device_bytes / GiB:,.2f} GiB" if self.planned_device_bytes else "no plan"
            out.append(Check("explain.fits", "pass" if verdict == "fits" else "fail",
                             f"{name} ({memory / GiB:,.2f} GiB): {verdict}, {planned}",
                             "" if verdict == "fits" else "the measured run says the step needs more than the card "
                             "holds with the margin", "" if verdict == "fits" else "a larger card, a smaller batch or "
                             "context, or a lighter method"))
        elif self.card is not None:
            out.append(Check("explain.fits", "fail", f"{self.card}: no plan from a failed run",
                             "a card's fit needs the margin of a complete run", "fix the measured run first"))
        return tuple(out)

    def fields_dict(self) -> dict[str, Any]:
        # by hand: each phase row with its derived ratio, the gap's total, and the verdicts as named objects
        return {"label": self.label, "device": self.device, "card": self.card,
                "phases": [asdict(r) | {"ratio": r.ratio} for r in self.rows],
                "levels": [asdict(level) for level in self.levels],
                "gaps": [asdict(g) for g in self.gaps], "gap_bytes": self.gap_bytes,
                "margin": self.margin, "margin_reason": self.margin_reason,
                "planned_device_bytes": self.planned_device_bytes,
                "verdicts": [{"card": c, "memory_bytes": m, "verdict": v} for c, m, v in self.verdicts],
                "notes": list(self.notes)}


def explain(analytic: MemoryEstimate, measured: Measurement, *, traced: MemoryEstimate | None = None,
            cards: Iterable[Any] | None = None, force: bool = False, card: str | None = None) -> Explanation:
    """Compare per phase, attribute the gap at the peak, and recommend a margin for the campaign.

    The gap measured - analytic is split into: the activation model (traced - analytic tensors, with a trace),
    workspaces and GPU kernels (measured - traced tensors), allocator fragmentation and the CUDA context (GPU).
    The margin is the largest relative excess of a measured phase over the analytic one (and of the device total
    over the estimate on a GPU), rounded up to a whole percent, plus 5 points for run-to-run variation; the plan
    is the analytic device bytes times (1 + margin), and a card fits when it holds the plan.

    The records are result objects: estimate_memory's and trace_memory's, and measure_workload's or
    measure_script's (saved ones are read with load_estimate and load_measurement). cards: Card objects or names
    (a name, alias or size, as find_card takes), each given a verdict for the plan. card: the one card asked
    for (instead of cards): its verdict is a check (explain.fits), so that a card without room fails the result.

    Raises InputError when the records describe different workloads, share no phase, or (unless force) a
    measured phase is more than PLAUSIBLE_RATIO times the estimate or less than its inverse: the measurement is
    then of something else (another script, model or batch), and a margin from it would be meaningless.
    """
    a, t = analytic, traced
    cards = [find_card(c) if isinstance(c, str) else c for c in ([card] if card else cards or ())]
    if t is not None and t.method != "traced":
        raise InputError(f"the traced estimate was made by {t.method!r}; give the JSON of campaign trace --json")
    if measured.workload is not None:  # a built model (a script's measurement names neither model nor workload)
        _same_model("the measurement", measured.label, a.model)
    _same_workload("the measurement", measured.workload, a.workload.to_dict())
    if t is not None:
        _same_model("the trace", t.model, a.model)
        _same_workload("the trace", t.workload.to_dict(), a.workload.to_dict())
    estimated = {p.name: p.bytes for p in a.phases}
    traced_phases = {p.name: p.bytes for p in t.phases} if t else {}
    rows = tuple(PhaseRow(p.name, estimated.get(p.name), traced_phases.get(p.name) if t else None,
                          p.peak_allocated_bytes, p.peak_reserved_bytes) for p in measured.phases)
    notes = []
    if not any(r.analytic_bytes for r in rows):
        if [p.name for p in measured.phases] != ["script"]:
            raise InputError("no measured phase matches an estimated phase (load, forward, backward, optimizer "
                             "step, prefill, decode); name the measured phases the same way")
        # a script that marked no phases: its whole-run peak against the estimate's peak
        p = measured.phases[0]
        rows = (PhaseRow("script (whole run) vs the peak", a.peak_allocated_bytes,
                         t.peak_allocated_bytes if t else None, p.peak_allocated_bytes, p.peak_reserved_bytes),)
        notes.append("the script marked no phases: its whole-run peak is compared with the estimate's peak; mark "
                     "phases with campaign.current_meter().phase('forward') to compare them one by one")
    if not force:
        _plausible(rows)
    gpu = measured.device_bytes is not None
    m_alloc, m_res = measured.peak_allocated_bytes, measured.peak_reserved_bytes
    levels = (
        Level("peak allocated (tensors)", a.peak_allocated_bytes, t.peak_allocated_bytes if t else None, m_alloc),
        Level("allocator overhead (reserved - allocated)", a.peak_reserved_bytes - a.peak_allocated_bytes,
              t.peak_reserved_bytes - t.peak_allocated_bytes if t else None, m_res - m_alloc if gpu else None),
        Level("CUDA context and libraries (device - reserved)", a.device_bytes - a.peak_reserved_bytes,
              t.device_bytes - t.peak_reserved_bytes if t else None,
              measured.device_bytes - m_res if measured.device_bytes is not None else None),
        Level("device (nvidia-smi)", a.device_bytes, t.device_bytes if t else None, measured.device_bytes),
    )
    gaps = _attribute(levels, t is not None, gpu)
    if not gpu:
        notes.append("measured on the CPU: no caching allocator and no context, so only allocated bytes compare; "
                     "measure on the rented card for reserved and device totals")
    if t is None:
        notes.append("add --trace to split the tensors' gap into the activation model and GPU workspaces")
    if measured.outcome != "ok":
        where = f"in phase {measured.failed_phase!r}" if measured.failed_phase else "outside the phases"
        notes.append(f"the measured run failed {where}: {measured.error}; a margin needs a complete run: fix it, or "
                     "measure a smaller batch or context first")
        return Explanation(measured.label, measured.environment.device_name, rows, levels, gaps, None,
                           "no margin from a failed run", None, (), tuple(notes), card=card)
    excess = [(r.measured_bytes / r.analytic_bytes - 1, f"phase {r.phase!r}") for r in rows if r.analytic_bytes]
    if measured.device_bytes is not None:
        excess.append((measured.device_bytes / a.device_bytes - 1, "the device total"))
    worst, source = max(excess, key=lambda e: e[0])
    worst = max(worst, 0.0)
    percent = math.ceil(round(worst * 100, 6))  # whole percents, up; round() drops float noise (1.1 / 1 - 1)
    margin = round(percent / 100 + RUN_TO_RUN, 4)
    reason = (f"largest measured excess over the estimate {percent}% (rounded up from {worst:.2%}), in {source}, "
              f"+ {RUN_TO_RUN:.0%} run-to-run variation")
    peak = max(estimated, key=estimated.get) if estimated else None  # type: ignore[arg-type]
    if worst > 0 and peak and source.startswith("phase") and source != f"phase {peak!r}":
        notes.append(f"the margin comes from {source}, not from the estimate's peak phase {peak!r}: that phase is "
                     "underestimated more than the peak; the plan scales the whole estimate by it, so it errs safe")
    planned = int(a.device_bytes * (1 + margin))
    seen = max(a.device_bytes, measured.device_bytes or 0)
    from .fit import training_bytes

    usable = {card.name: training_bytes(card.memory_bytes, a.workload) for card in cards or []}  # less vLLM's share
    verdicts = tuple((card.name, usable[card.name],
                      "fits" if planned <= usable[card.name] else "tight" if seen <= usable[card.name]
                      else "does not fit") for card in cards or [])
    return Explanation(measured.label, measured.environment.device_name, rows, levels, gaps, margin, reason,
                       planned, verdicts, tuple(notes), card=card)


def explain_model(model: str | Path | ModelSpec, workload: Workload, measured: Measurement, *, trace: bool = False,
                  traced: MemoryEstimate | None = None, cards: Iterable[Any] | None = None, force: bool = False,
                  reserve: str | float = "10%", card: str | None = None) -> Explanation:
    """explain for a model's workload: the estimate made now (estimate_memory) and, with trace, the step traced
    now (trace_memory; the torch extra), or a `traced` estimate already made. model: as every memory call takes it."""
    analytic = estimate_memory(model, workload, reserve=reserve)
    if trace:
        traced = trace_memory(model, workload, reserve=reserve)
    return explain(analytic, measured, traced=traced, cards=cards, force=force, card=card)


def _plausible(rows: tuple[PhaseRow, ...]) -> None:
    """Refuse a measurement no estimation error explains (see PLAUSIBLE_RATIO)."""
    for r in rows:
        if r.analytic_bytes and r.measured_bytes:
            ratio = r.measured_bytes / r.analytic_bytes
            if not 1 / PLAUSIBLE_RATIO <= ratio <= PLAUSIBLE_RATIO:
                raise InputError(f"phase {r.phase!r} measured {ratio:.3g}x the estimate: not plausibly the same "
                                 "workload (model, batch, sequence length, method, precision); check what was "
                                 "measured, or pass --force to compare anyway")


def _attribute(levels: tuple[Level, ...], traced: bool, gpu: bool) -> tuple[Gap, ...]:
    """measured - analytic, level by level; with a trace, the tensors' part split at the traced figure."""
    tensors, overhead, context, _device = levels
    gaps = []
    if traced and tensors.traced_bytes is not None:
        gaps.append(Gap("activation model (traced - analytic tensors)", tensors.traced_bytes - tensors.analytic_bytes,
                        "what the formulas miss or overcount of the tensors real code keeps: saved activations, "
                        "logits, temporaries (parameters, gradients and optimizer states agree exactly)"))
        gaps.append(Gap("workspaces and GPU kernels (measured - traced tensors)",
                        (tensors.measured_bytes or 0) - tensors.traced_bytes,
                        "cuBLAS and attention workspaces, CUDA's autocast policy and kernel choices the CPU trace "
                        "does not see, and anything run beyond the workload"))
    else:
        gaps.append(Gap("tensors at the peak (activation model, workspaces, what the estimate left out)",
                        (tensors.measured_bytes or 0) - tensors.analytic_bytes,
                        "peak allocated: the estimate's items against torch.cuda.max_memory_allocated"))
    if gpu:
        gaps.append(Gap("allocator fragmentation (reserved - allocated)",
                        (overhead.measured_bytes or 0) - overhead.analytic_bytes,
                        "memory the caching allocator holds in blocks it cannot reuse for the next request"))
        gaps.append(Gap("CUDA context and libraries (device - reserved)",
                        (context.measured_bytes or 0) - context.analytic_bytes,
                        "outside PyTorch's allocator: context, cuBLAS/cuDNN handles, NCCL, kernels, other processes"))
    return tuple(gaps)


def _same_model(what: str, theirs: str | None, ours: str | None) -> None:
    if theirs and ours and theirs != ours:
        raise InputError(f"{what} is of {theirs!r}, the estimate of {ours!r}: explain one model's records")


def _same_workload(what: str, theirs: dict[str, Any] | None, ours: dict[str, Any] | None) -> None:
    """Refuse to compare records of different workloads (a script's measurement names none: nothing to check)."""
    if not theirs or not ours:
        return
    norm = lambda v: json.loads(json.dumps(v))  # noqa: E731  (tuples and lists alike)
    differ = [k for k in SAME_WORKLOAD if k in theirs and k in ours and norm(theirs[k]) != norm(ours[k])]
    if differ:
        shown = "; ".join(f"{k.replace('_', '-')} {theirs[k]!r} vs {ours[k]!r}" for k in differ[:4])
        raise InputError(f"{what} is of another workload than the estimate ({shown}); explain the same workload: "
                         "give campaign explain the options campaign measure had")
