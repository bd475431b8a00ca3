"""Estimate vs measurement: side by side per phase, the gap attributed, a safety margin and a verdict per card."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .estimate import SCHEMA as ESTIMATE_SCHEMA
from .estimate import MemoryEstimate
from .measure import Measurement

SCHEMA = "campaign.explain/1"
RUN_TO_RUN = 0.05  # added to the observed error: batches vary in length, allocator state varies between runs


@dataclass(frozen=True)
class Headlines:
    """The four headline figures and per-phase allocated bytes of an estimate (analytic or traced)."""

    method: str
    phases: dict[str, int]
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_bytes: int
    required_bytes: int

    @classmethod
    def of(cls, est: MemoryEstimate | dict[str, Any]) -> Headlines:
        d = est.to_dict() if isinstance(est, MemoryEstimate) else est
        if d.get("schema") != ESTIMATE_SCHEMA:
            raise InputError(f"not a campaign memory estimate (schema {d.get('schema')!r}); "
                             "write one with campaign memory --json or campaign trace --json")
        return cls(d.get("method", "formula"), {p["name"]: p["bytes"] for p in d["phases"]},
                   d["peak_allocated_bytes"], d["peak_reserved_bytes"], d["device_bytes"], d["required_bytes"])


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
class Gap:
    """One attributed part of the difference between what was estimated and what was measured."""

    name: str
    estimated_bytes: int
    measured_bytes: int
    meaning: str

    @property
    def difference_bytes(self) -> int:
        return self.measured_bytes - self.estimated_bytes


@dataclass(frozen=True)
class Explanation:
    label: str
    device: str
    rows: tuple[PhaseRow, ...]
    gaps: tuple[Gap, ...]
    margin: float
    margin_reason: str
    planned_device_bytes: int
    verdicts: tuple[tuple[str, int, str], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "label": self.label, "device": self.device,
                "phases": [asdict(r) | {"ratio": r.ratio} for r in self.rows],
                "gaps": [asdict(g) | {"difference_bytes": g.difference_bytes} for g in self.gaps],
                "margin": self.margin, "margin_reason": self.margin_reason,
                "planned_device_bytes": self.planned_device_bytes,
                "verdicts": [{"card": c, "memory_bytes": m, "verdict": v} for c, m, v in self.verdicts],
                "notes": list(self.notes)}


def load_estimate(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read an estimate ({e})") from None


def explain(analytic: MemoryEstimate | dict[str, Any], measured: Measurement, *,
            traced: MemoryEstimate | dict[str, Any] | None = None, cards: list[Any] | None = None) -> Explanation:
    """Compare per phase, attribute the gap at the peak, and recommend a margin for the campaign.

    The margin is the largest relative excess of a measured phase over the analytic one (and of the device
    total over the estimate on a GPU), rounded up to a whole percent, plus 5 points for run-to-run variation.
    """
    a = Headlines.of(analytic)
    t = Headlines.of(traced) if traced is not None else None
    rows = []
    for p in measured.phases:
        rows.append(PhaseRow(p.name, a.phases.get(p.name), t.phases.get(p.name) if t else None,
                             p.peak_allocated_bytes, p.peak_reserved_bytes))
    if not any(r.analytic_bytes for r in rows):
        raise InputError("no measured phase matches an estimated phase (load, forward, backward, optimizer step, "
                         "prefill, decode); name the measured phases the same way")
    gpu = measured.device_bytes is not None
    est_overhead = a.peak_reserved_bytes - a.peak_allocated_bytes
    est_context = a.device_bytes - a.peak_reserved_bytes
    gaps = [Gap("tensors at the peak (activation model, workspaces, what the estimate left out)",
                a.peak_allocated_bytes, measured.peak_allocated_bytes,
                "peak allocated: the estimate's items against torch.cuda.max_memory_allocated")]
    if gpu:
        gaps.append(Gap("allocator fragmentation (reserved - allocated)", est_overhead,
                        measured.peak_reserved_bytes - measured.peak_allocated_bytes,
                        "memory the caching allocator holds in blocks it cannot reuse for the next request"))
        gaps.append(Gap("CUDA context and libraries (device - reserved)", est_context,
                        measured.device_bytes - measured.peak_reserved_bytes,
                        "outside PyTorch's allocator: context, cuBLAS/cuDNN workspaces, NCCL, kernels"))
    excess = [r.measured_bytes / r.analytic_bytes - 1 for r in rows if r.analytic_bytes]
    if gpu:
        excess.append(measured.device_bytes / a.device_bytes - 1)
    worst = max(0.0, *excess)
    margin = math.ceil(worst * 100) / 100 + RUN_TO_RUN
    reason = (f"largest measured excess over the estimate {worst:.1%} (rounded up) + {RUN_TO_RUN:.0%} run-to-run "
              "variation")
    base = max(a.device_bytes, measured.device_bytes or 0)
    planned = int(base * (1 + margin))
    verdicts = []
    for card in cards or []:
        verdict = "fits" if planned <= card.memory_bytes else ("tight" if base <= card.memory_bytes else "does not fit")
        verdicts.append((card.name, card.memory_bytes, verdict))
    notes = []
    if not gpu:
        notes.append("measured on the CPU: no caching allocator and no context, so only allocated bytes compare; "
                     "measure on the rented card for reserved and device totals")
    if measured.status != "ok":
        notes.append(f"the measured run failed in phase {measured.failed_phase!r}: {measured.error}")
    return Explanation(measured.label, measured.environment.device_name, tuple(rows), tuple(gaps), margin, reason,
                       planned, tuple(verdicts), tuple(notes))
