"""Measure memory phase by phase on a real device: `with meter.phase("forward"): ...`.

On CUDA and ROCm (torch.cuda covers both) each phase records allocated and reserved at its end, their peaks
(peak stats reset at phase start) and the device total in use from the driver, which includes the context.
Without a GPU the same protocol runs on the CPU with real tensors and a real allocation tracker (every
storage's lifetime), so the protocol itself is tested in CI; the CPU has no caching allocator, so reserved
equals allocated there.
"""
from __future__ import annotations

import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..io import atomic_write_json

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
class Measurement:
    """Phases measured in order; `status` is 'failed' with the phase reached when the work raised."""

    phases: tuple[PhaseMeasurement, ...]
    environment: Environment
    label: str = ""
    workload: dict[str, Any] | None = None
    status: str = "ok"
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

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "label": self.label, "status": self.status, "failed_phase": self.failed_phase,
                "error": self.error, "peak_phase": self.peak_phase,
                "peak_allocated_bytes": self.peak_allocated_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
                "device_bytes": self.device_bytes, "phases": [asdict(p) for p in self.phases],
                "environment": asdict(self.environment), "workload": self.workload, "weights": self.weights}

    def save(self, path: str | Path) -> Path:
        """Write JSON atomically (complete or absent)."""
        return atomic_write_json(path, self.to_dict())


def load_measurement(path: str | Path) -> Measurement:
    """Read a saved measurement; one-line errors for files that are not one."""
    import json

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        if d.get("schema") != SCHEMA:
            raise InputError(f"{path}: not a campaign measurement (schema {d.get('schema')!r}); "
                             "write one with campaign measure or MemoryMeter.result().save()")
        return Measurement(phases=tuple(PhaseMeasurement(**p) for p in d["phases"]),
                           environment=Environment(**d["environment"]), label=d.get("label", ""),
                           workload=d.get("workload"), status=d.get("status", "ok"),
                           failed_phase=d.get("failed_phase"), error=d.get("error"), weights=d.get("weights"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: cannot read a measurement ({e})") from None


def environment(device: str) -> Environment:
    """The versions and device actually used (torch, CUDA or HIP, driver, GPU name and memory)."""
    import torch

    name, total, driver = platform.processor() or platform.machine(), None, None
    if device != "cpu":
        props = torch.cuda.get_device_properties(0)
        name, total = props.name, props.total_memory
        try:
            import pynvml  # optional: the driver version as nvidia-smi shows it

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
        except Exception:
            driver = None
    return Environment(device=device, device_name=name, total_memory_bytes=total, torch=torch.__version__,
                       cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None), driver=driver,
                       python=sys.version.split()[0], platform=platform.platform())


@contextmanager
def _noop() -> Iterator[None]:
    yield


class MemoryMeter:
    """The measuring protocol. Wrap each phase; read `result()`; save it for `campaign explain`.

    Example:
        meter = MemoryMeter()
        with meter.phase("load"): model = build().to(meter.device)
        with meter.phase("forward"): loss = model(**batch).loss
        with meter.phase("backward"): loss.backward()
        with meter.phase("optimizer step"): opt.step(); opt.zero_grad()
        meter.result().save("measured.json")
    """

    def __init__(self, device: str | None = None) -> None:
        try:
            import torch
        except ImportError:
            raise MissingDependencyError("torch", "torch") from None
        self._torch = torch
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise InputError(f"device {device!r} is not measurable; use cuda (NVIDIA or AMD ROCm) or cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise InputError("no CUDA/ROCm device is visible to torch; measure on cpu or check the driver")
        self.device = device
        self.kind = "cpu" if device == "cpu" else ("rocm" if getattr(torch.version, "hip", None) else "cuda")
        self.phases: list[PhaseMeasurement] = []
        self.current: str | None = None
        self._tracker: Any = None
        self._inside = False
        if device == "cpu":
            from .tracker import StorageTracker

            self._tracker = StorageTracker()

    def track(self, *objects: Any) -> None:
        """CPU only: count tensors made before the meter (a model's parameters and buffers, an optimizer's state)."""
        if self._tracker is None:
            return
        torch = self._torch
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                tensors = [*obj.parameters(), *obj.buffers()]
            elif isinstance(obj, torch.optim.Optimizer):
                tensors = [v for s in obj.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
            else:
                tensors = [obj]
            for t in tensors:
                self._tracker.register(t, "weights")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure one phase. Peaks are reset at its start, so each phase has its own peak."""
        torch = self._torch
        self.current = name
        start = time.perf_counter()
        if self._tracker is None:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            yield
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            self.phases.append(PhaseMeasurement(
                name, torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved(),
                torch.cuda.max_memory_reserved(), total - free, time.perf_counter() - start))
        else:
            self._tracker.phase("activations")
            if self._inside:
                yield
            else:
                with self._tracker:
                    yield
            peak, _, _ = self._tracker.snapshot()
            now = self._tracker.total
            self.phases.append(PhaseMeasurement(name, now, peak, now, peak, None, time.perf_counter() - start))
        self.current = None

    @contextmanager
    def around(self, name: str) -> Iterator[None]:
        """Measure a whole run; phases marked inside it are kept, and if none is, the run is one phase `name`."""
        if self._tracker is None:
            with self.phase(name) if not self.phases else _noop():
                yield
            return
        self._inside = True
        try:
            with self._tracker:
                before = len(self.phases)
                self._tracker.phase("activations")
                start = time.perf_counter()
                yield
                if len(self.phases) == before:
                    peak, _, _ = self._tracker.snapshot()
                    now = self._tracker.total
                    self.phases.append(PhaseMeasurement(name, now, peak, now, peak, None, time.perf_counter() - start))
        finally:
            self._inside = False

    def result(self, *, label: str = "", workload: dict[str, Any] | None = None, status: str = "ok",
               failed_phase: str | None = None, error: str | None = None, weights: str | None = None) -> Measurement:
        return Measurement(tuple(self.phases), environment(self.kind), label, workload, status, failed_phase, error,
                           weights)
