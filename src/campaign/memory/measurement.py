"""What a measurement is: per phase allocated, peak allocated, reserved, peak reserved and the device total, with
the environment it was taken in; saved as JSON (complete or absent) and read back field by field."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..checks import Check
from ..io import atomic_write_json, load_json
from ..results import Result
from ..validate import JsonObject

SCHEMA = "campaign.measurement/1"


@dataclass(frozen=True)
class PhaseMeasurement:
    """One phase: bytes at its end and peaks within it; device_used_bytes includes the context (GPU only)."""

    name: str
    allocated_bytes: int
    peak_allocated_bytes: int
    reserved_bytes: int
    peak_reserved_bytes: int
    device_used_bytes: int | None
    seconds: float
    complete: bool = True           # False: the phase raised (an out-of-memory error, a crash) before its end


@dataclass(frozen=True)
class Environment:
    """What actually ran: versions and the device as the driver reports it."""

    device: str
    device_name: str
    total_memory_bytes: int | None
    torch: str
    cuda: str | None
    hip: str | None
    driver: str | None
    python: str
    platform: str


@dataclass(frozen=True)
class Measurement(Result):
    """Phases measured in order; `outcome` is 'failed' with the phase reached when the work raised (its check
    measure.completed fails then, so that the status is fail)."""

    phases: tuple[PhaseMeasurement, ...]
    environment: Environment
    label: str = ""
    workload: dict[str, Any] | None = None
    outcome: str = "ok"             # ok | failed (written as "status" before campaign_version was; still read)
    failed_phase: str | None = None
    error: str | None = None
    weights: str | None = None      # a built model's weights: "random (from the config)" or "loaded from DIR"
    schema: str = SCHEMA

    @property
    def peak_allocated_bytes(self) -> int:
        return max((p.peak_allocated_bytes for p in self.phases), default=0)

    @property
    def peak_reserved_bytes(self) -> int:
        return max((p.peak_reserved_bytes for p in self.phases), default=0)

    @property
    def device_bytes(self) -> int | None:
        used = [p.device_used_bytes for p in self.phases if p.device_used_bytes is not None]
        return max(used) if used else None

    @property
    def peak_phase(self) -> str | None:
        return max(self.phases, key=lambda p: p.peak_allocated_bytes).name if self.phases else None

    @property
    def checks(self) -> tuple[Check, ...]:
        if self.outcome == "ok":
            return (Check("measure.completed", "pass", f"{len(self.phases)} phase(s) measured to their end"),)
        where = f"in phase {self.failed_phase!r}" if self.failed_phase else "outside the phases"
        return (Check("measure.completed", "fail", f"the run failed {where}: {self.error}",
                      "the phases after it were not measured, and no margin comes from an incomplete run",
                      "fix the run, or measure a smaller batch or context first"),)

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the measurement file's format (load_measurement reads it): the derived peaks before the phases
        return {"label": self.label, "outcome": self.outcome, "failed_phase": self.failed_phase,
                "error": self.error, "peak_phase": self.peak_phase,
                "peak_allocated_bytes": self.peak_allocated_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
                "device_bytes": self.device_bytes, "phases": [asdict(p) for p in self.phases],
                "environment": asdict(self.environment), "workload": self.workload, "weights": self.weights}

    def save(self, path: str | Path) -> Path:
        """Write JSON atomically (complete or absent)."""
        return atomic_write_json(path, self.to_dict())


def load_measurement(path: str | Path) -> Measurement:
    """Read a saved measurement, checked field by field: one-line errors for files that are not one."""
    fix = "write one with campaign measure --out or MemoryMeter.result().save()"
    d = JsonObject(load_json(path, "a measurement"), str(path), fix=fix)
    if d.raw("schema", None) != SCHEMA:
        d.fail(f"not a campaign measurement (schema {d.raw('schema', None)!r})")
    phases = []
    for p in d.items("phases"):
        phases.append(PhaseMeasurement(
            name=p.str("name"), allocated_bytes=p.count("allocated_bytes"),
            peak_allocated_bytes=p.count("peak_allocated_bytes"), reserved_bytes=p.count("reserved_bytes"),
            peak_reserved_bytes=p.count("peak_reserved_bytes"), device_used_bytes=p.count("device_used_bytes", None),
            seconds=p.number("seconds", 0.0, minimum=0.0), complete=p.raw("complete", True) is not False))
    env = d.obj("environment")
    text = lambda k: env.str(k, None)  # noqa: E731
    environment = Environment(device=env.str("device"), device_name=text("device_name") or "",
                              total_memory_bytes=env.count("total_memory_bytes", None), torch=text("torch") or "",
                              cuda=text("cuda"), hip=text("hip"), driver=text("driver"), python=text("python") or "",
                              platform=text("platform") or "")
    workload = d.obj("workload", None)
    # 'outcome' since the results carry a status; before that the file's 'status' was ok | failed
    old = {"ok": "ok", "failed": "failed", "pass": "ok", "fail": "failed"}.get(str(d.raw("status", "ok")))
    outcome = d.str("outcome", None) or old
    if outcome not in ("ok", "failed"):
        d.fail(f"field 'outcome' must be 'ok' or 'failed', got {outcome or d.raw('status', None)!r}")
    return Measurement(phases=tuple(phases), environment=environment, label=d.str("label", ""),
                       workload=workload.data if workload is not None else None, outcome=outcome,
                       failed_phase=d.str("failed_phase", None), error=d.str("error", None),
                       weights=d.str("weights", None))
