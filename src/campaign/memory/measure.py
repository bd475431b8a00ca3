"""Measure memory phase by phase on a real device: `with meter.phase("forward"): ...`.

On CUDA and ROCm (torch.cuda covers both) each phase records allocated and reserved at its end, their peaks
(peak stats reset at phase start) and the device total in use from the driver, which includes the context.
Without a GPU the same protocol runs on the CPU with real tensors, counted from the CPU allocator's own records
of each allocation and free (read through the PyTorch profiler: _CpuCounters), a mechanism independent of the
storage tracker `campaign trace` counts with, so "measured agrees with traced" on the CPU compares two counts.
The CPU has no caching allocator, so reserved equals allocated there.
"""
from __future__ import annotations

import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from .constants import MIN_BLOCK
from .measurement import Environment, Measurement, PhaseMeasurement


def environment(device: str) -> Environment:
    """The versions and device actually used (torch, CUDA or HIP, driver, GPU name and memory)."""
    import torch

    name, total, driver = platform.processor() or platform.machine(), None, None
    if device != "cpu":
        props = torch.cuda.get_device_properties(0)
        name, total = props.name, props.total_memory
        driver = driver_version()
    return Environment(device=device, device_name=name, total_memory_bytes=total, torch=torch.__version__,
                       cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None), driver=driver,
                       python=sys.version.split()[0], platform=platform.platform())


DRIVER_FILES = (Path("/proc/driver/nvidia/version"), Path("/sys/module/amdgpu/version"))


def driver_version(files: tuple[Path, ...] = DRIVER_FILES) -> str | None:
    """The kernel driver's version as nvidia-smi shows it (NVIDIA: '550.54.15'), or amdgpu's (ROCm); None if
    neither is readable. Read from the files the drivers publish, so nothing extra needs installing."""
    import re

    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        nvidia = re.search(r"Kernel Module(?: for \S+)?\s+([0-9][0-9.]*)", text)
        if nvidia:
            return nvidia.group(1)
        if path.name == "version" and "amdgpu" in str(path) and text.strip():
            return f"amdgpu {text.strip()}"
    return None


class MemoryMeter:
    """The measuring protocol. Wrap each phase; read `result()`; save it for `campaign explain`.

    Example:
        meter = MemoryMeter()
        with meter.phase("load"): model = build().to(meter.device)
        with meter.phase("forward"): loss = model(**batch).loss
        with meter.phase("backward"): loss.backward()
        with meter.phase("optimizer step"): opt.step(); opt.zero_grad()
        meter.result().save("measured.json")

    A phase that raises is still recorded, marked incomplete, with the peak it reached (an out-of-memory error's
    phase shows how far it got); the exception goes on.
    """

    def __init__(self, device: str | None = None) -> None:
        try:
            import torch
        except ImportError:
            raise MissingDependencyError("torch", "torch") from None
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise InputError(f"device {device!r} is not measurable; use cuda (NVIDIA or AMD ROCm) or cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise InputError("no CUDA/ROCm device is visible to torch; measure on cpu or check the driver")
        self._torch = torch
        self.device = device
        self.kind = "cpu" if device == "cpu" else ("rocm" if getattr(torch.version, "hip", None) else "cuda")
        self.phases: list[PhaseMeasurement] = []
        self.current: str | None = None
        self._backend: _CudaCounters | _CpuCounters = _CudaCounters(torch) if device == "cuda" else _CpuCounters()
        self._depth = 0

    def track(self, *objects: Any) -> None:
        """CPU only: count tensors the CPU allocator did not hand out while measuring (a model's parameters made
        before the meter, safetensors weights memory-mapped from the file), from now until they are freed;
        tensors it did hand out are already counted and are not counted twice."""
        if not isinstance(self._backend, _CpuCounters):
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
                self._backend.track(t)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure one phase. Peaks are reset at its start, so each phase has its own peak; phases do not nest."""
        if self.current is not None:
            raise InputError(f"phase {name!r} started inside phase {self.current!r}: phases do not nest (each "
                             "resets the peak); end one before the next")
        self.current = name
        try:
            with self._measured(name):
                yield
        finally:
            self.current = None

    @contextmanager
    def around(self, name: str) -> Iterator[None]:
        """Measure a whole run; phases marked inside it are kept, and if none is, the run is one phase `name`."""
        before = len(self.phases)
        with self._measured(name, keep=lambda: len(self.phases) == before):
            yield

    @contextmanager
    def _measured(self, name: str, keep: Any = None) -> Iterator[None]:
        """Reset the peaks, run the block, record it (also when it raises, marked incomplete) if keep() says so."""
        start = time.perf_counter()
        with self._session():
            self._backend.start()
            try:
                yield
            except BaseException as e:
                if keep is None or keep():  # sys.exit(0) ends the work normally
                    done = isinstance(e, SystemExit) and e.code in (None, 0)
                    self.phases.append(self._backend.stop(name, time.perf_counter() - start, complete=done))
                raise
            if keep is None or keep():
                self.phases.append(self._backend.stop(name, time.perf_counter() - start))

    @contextmanager
    def _session(self) -> Iterator[None]:
        """CPU: the allocator's records are collected over the outermost measured block (a run, or a lone phase)
        and its phases are read off them when it ends. Frees between two lone phases are not seen: measure a
        sequence of phases inside around() (measure_workload and measure_script do)."""
        self._depth += 1
        cpu = self._backend if self._depth == 1 and isinstance(self._backend, _CpuCounters) else None
        try:
            if cpu is not None:
                cpu.open()
            yield
        finally:
            self._depth -= 1
            if cpu is not None:
                done = cpu.close()
                self.phases = [done.get(id(p), p) for p in self.phases]

    def result(self, *, label: str = "", workload: dict[str, Any] | None = None, outcome: str = "ok",
               failed_phase: str | None = None, error: str | None = None, weights: str | None = None) -> Measurement:
        return Measurement(tuple(self.phases), environment(self.kind), label, workload, outcome, failed_phase, error,
                           weights)

    def failure(self, error: BaseException, *, label: str = "", workload: dict[str, Any] | None = None,
                weights: str | None = None) -> Measurement:
        """The record of a run that raised: the phases so far, the phase it failed in, the error's first line."""
        failed = self.phases[-1].name if self.phases and not self.phases[-1].complete else None
        text = str(error).strip().splitlines()
        message = f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__
        return self.result(label=label, workload=workload, outcome="failed", failed_phase=failed, error=message,
                           weights=weights)


class _CudaCounters:
    """torch.cuda's allocator statistics (CUDA and ROCm) and the driver's view of the whole device."""

    def __init__(self, torch: Any) -> None:
        self.cuda = torch.cuda

    def start(self) -> None:
        self.cuda.synchronize()
        self.cuda.reset_peak_memory_stats()

    def stop(self, name: str, seconds: float, complete: bool = True) -> PhaseMeasurement:
        cuda = self.cuda
        used: int | None = None
        try:
            cuda.synchronize()
            free, total = cuda.mem_get_info()
            used = total - free
        except RuntimeError:  # a failed kernel leaves the context unusable: the driver is not asked, the
            pass              # allocator's own counters (host-side) still read
        return PhaseMeasurement(name, cuda.memory_allocated(), cuda.max_memory_allocated(), cuda.memory_reserved(),
                                cuda.max_memory_reserved(), used, seconds, complete)


class _CpuCounters:
    """The CPU allocator's own record of every allocation and free, read through the PyTorch profiler.

    With `profile_memory=True`, c10's CPU allocator reports each allocation (pointer, bytes) and each free of a
    block it handed out while profiling to the profiler (c10/core/CPUAllocator.cpp, ProfiledCPUMemoryReporter).
    That counts what the allocator hands out: every tensor's storage, and the buffers kernels allocate inside
    themselves, which the storage tracker `campaign trace` uses (a TorchDispatchMode that sees the tensors ops
    return, freed by weak references) never sees. Each allocation counts at the 512-byte granularity of the CUDA
    caching allocator (kMinBlockSize), so a CPU measurement compares with a GPU's. Phase boundaries are profiler
    annotations, so each phase's peak and end are read off the allocator's records in order when the session
    ends. Not seen: memory the allocator did not hand out (memory-mapped safetensors: register with track()),
    allocations on threads without the profiler's state, and frees outside a session. The CPU has no caching
    allocator: reserved equals allocated.
    """

    MARK = "campaign.meter.mark"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self._profiler: Any = None
        self._marks = 0
        self._start = 0
        self._pending: list[tuple[PhaseMeasurement, int, int]] = []
        self._tracked: list[tuple[int, str, int, int]] = []   # (mark, "track" | "untrack", key, bytes)
        self._live: dict[Any, int] = {}   # pointer (or ("tracked", pointer)) -> bytes, kept between sessions
        self._span: dict[int, int] = {}   # pointer -> bytes requested, of the blocks the allocator handed out

    # -- session ------------------------------------------------------------------------------------------
    def open(self) -> None:
        if self.torch.autograd._profiler_enabled():
            raise InputError("the CPU meter counts allocations with the PyTorch profiler, which is already running; "
                             "measure outside torch.profiler.profile()")
        profiler = self.torch.profiler.profile(activities=[self.torch.profiler.ProfilerActivity.CPU],
                                               profile_memory=True)
        with _quiet_stderr():  # kineto prints a line at start and stop
            profiler.start()
        self._profiler = profiler

    def close(self) -> dict[int, PhaseMeasurement]:
        """End the session: replay the allocator's records; the measured phases by id of their placeholders."""
        profiler, self._profiler = self._profiler, None
        if profiler is None:  # the session did not start (open refused)
            self._pending = []
            return {}
        with _quiet_stderr():
            profiler.stop()
        events: list[tuple[int, int, Any, int]] = []   # (time, order, what, value)
        for node in _walk(profiler.profiler.kineto_results.experimental_event_tree()):
            extra = node.extra_fields
            if type(extra).__name__ == "_ExtraFields_Allocation":
                if str(extra.device) == "cpu":
                    events.append((node.start_time_ns, 1, extra.ptr, int(extra.alloc_size)))
            elif node.name.startswith(self.MARK):
                events.append((node.start_time_ns, 0, "mark", int(node.name.rsplit(".", 1)[1])))
        events.sort(key=lambda e: (e[0], e[1]))
        tracked: dict[int, list[tuple[str, int, int]]] = {}
        for mark, op, key, nbytes in self._tracked:
            tracked.setdefault(mark, []).append((op, key, nbytes))
        self._tracked = []
        at: dict[int, tuple[int, int]] = {}            # mark -> (live bytes then, peak since the previous mark)
        total = sum(self._live.values())
        peak = total
        for _, _, what, value in events:
            if what == "mark":
                inside = _Blocks(self._span) if any(op == "track" for op, _, _ in tracked.get(value, ())) else None
                for op, key, nbytes in tracked.get(value, ()):
                    if op == "track" and inside is not None and not inside.holds(key) \
                            and ("tracked", key) not in self._live:
                        self._live[("tracked", key)] = nbytes
                        total += nbytes
                    elif op == "untrack" and ("tracked", key) in self._live:
                        total -= self._live.pop(("tracked", key))
                peak = max(peak, total)
                at[value] = (total, peak)
                peak = total
            elif value > 0:
                total -= self._live.pop(what, 0)       # a block freed unseen (outside a session) was reused
                self._live[what] = _rounded(value)
                self._span[what] = value
                total += self._live[what]
                peak = max(peak, total)
            else:
                total -= self._live.pop(what, 0)
                self._span.pop(what, None)
        done = {}
        for placeholder, start, end in self._pending:
            # a phase's peak: what was live at its start, or the highest point reached before any later mark of it
            high = max([at[start][0]] + [at[m][1] for m in range(start + 1, end + 1)])
            now = at[end][0]
            done[id(placeholder)] = replace(placeholder, allocated_bytes=now, peak_allocated_bytes=high,
                                            reserved_bytes=now, peak_reserved_bytes=high)
        self._pending = []
        return done

    def _mark(self) -> int:
        self._marks += 1
        with self.torch.profiler.record_function(f"{self.MARK}.{self._marks}"):
            pass
        return self._marks

    # -- phases ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._start = self._mark()

    def stop(self, name: str, seconds: float, complete: bool = True) -> PhaseMeasurement:
        """A placeholder for the phase; its figures are filled in when the session ends (see close)."""
        placeholder = PhaseMeasurement(name, 0, 0, 0, 0, None, seconds, complete)
        self._pending.append((placeholder, self._start, self._mark()))
        return placeholder

    def track(self, tensor: Any) -> None:
        """Count a tensor's storage from now on, unless the allocator handed it out (then it is counted already)."""
        import weakref

        storage = tensor.untyped_storage()
        key, nbytes = storage.data_ptr(), _rounded(storage.nbytes())
        if not nbytes:
            return
        if self._profiler is None:          # between sessions: counted from the next one on
            if not _Blocks(self._span).holds(key):
                self._live[("tracked", key)] = nbytes
        else:
            self._tracked.append((self._mark(), "track", key, nbytes))

        def untrack(_ref: Any, key: int = key) -> None:
            if self._profiler is not None:
                self._tracked.append((self._mark(), "untrack", key, 0))
            else:
                self._live.pop(("tracked", key), None)

        self._refs = getattr(self, "_refs", [])
        self._refs.append(weakref.ref(storage, untrack))


class _Blocks:
    """The blocks the allocator handed out (pointer -> bytes), to ask whether an address lies inside one: a
    loaded checkpoint's tensors are views into the one buffer the file was read into."""

    def __init__(self, span: dict[int, int]) -> None:
        self.starts = sorted(span)
        self.span = span

    def holds(self, address: int) -> bool:
        import bisect

        i = bisect.bisect_right(self.starts, address) - 1
        return i >= 0 and address < self.starts[i] + self.span[self.starts[i]]


def _rounded(nbytes: int) -> int:
    """Bytes as the CUDA caching allocator would hand them out: rounded up to its 512-byte blocks."""
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def _walk(nodes: Any) -> Iterator[Any]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (C++ logging) for a moment; Python's own stderr is flushed first."""
    import os

    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
