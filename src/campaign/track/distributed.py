"""A run under a launcher (torchrun, accelerate launch, deepspeed): one run per job, not one per process.

The job is told apart by what the launcher sets: torchrun's rendezvous id (TORCHELASTIC_RUN_ID, `--rdzv-id`) with
the master's address and port; without one (`--standalone`, a single node), the master's address and port, the host
and the launcher process (the parent every local rank shares) with its start time, so two jobs never share a run.
Across nodes, give torchrun an --rdzv-id: ranks on other hosts then find the same run.

Rank 0 writes the run (its manifest records world size, local world size, the job and the backend); every other
rank waits for that manifest and appends its records with its rank; a rank that fails records why, and rank 0
ends the run failed with that rank's reason, the root cause, rather than the signal the launcher then sent it.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError


@dataclass(frozen=True)
class Job:
    """A launched job as one process sees it."""

    key: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InputError(f"${name} is {value!r}, not a whole number: the launcher's environment is broken") from None


def _started(pid: int) -> str:
    """A process's start time in clock ticks since boot (Linux /proc), '' elsewhere: with its pid, unique."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


def launched_job() -> Job | None:
    """The job this process belongs to, from the launcher's environment; None outside a launcher of 2 or more."""
    world = _int("WORLD_SIZE", 1)
    if world <= 1:
        return None
    rank = _int("RANK", 0)
    master = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    rendezvous = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if rendezvous and rendezvous != "none":
        key = f"{rendezvous}|{master}"
    else:
        parent = os.getppid()
        key = f"{socket.gethostname()}|{master}|{parent}|{_started(parent)}"
    return Job(key, rank, world, _int("LOCAL_RANK", 0), _int("LOCAL_WORLD_SIZE", world), master)


def job_run_id(name: str, job: Job) -> str:
    """The run id every rank of the job computes alike: '<name>-job-<12 hex of the job's key>'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "run"
    return f"{slug}-job-{hashlib.sha256(job.key.encode()).hexdigest()[:12]}"


def backend() -> str | None:
    """torch.distributed's backend when a process group is up (gloo, nccl...), else None."""
    import sys

    dist = sys.modules.get("torch.distributed")  # never imports torch for this
    try:
        return str(dist.get_backend()) if dist is not None and dist.is_available() and dist.is_initialized() else None
    except (RuntimeError, ValueError):
        return None


__all__ = ["Job", "backend", "job_run_id", "launched_job"]
