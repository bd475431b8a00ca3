"""The KV budget in closed form: a second solver that the kv command's search over whole estimates is checked
against (tests/cli/test_cli.py, tests/memory/test_estimate.py). No command uses it."""
from __future__ import annotations

from typing import Any

from campaign.memory import estimate_memory
from campaign.memory.parsing import parse_reserve
from campaign.memory.workload import Workload
from campaign.models.spec import ModelSpec


def kv_budget(spec: ModelSpec, workload: Workload, memory_bytes: int, *, reserve: str | float = "10%",
              **options: Any) -> int:
    """Bytes a KV cache may take on a card of `memory_bytes` after everything else an inference holds.

    Solves required = (device_without_kv + kv x (1 + overhead share)) x (1 + reserve share) + absolute reserve
    <= memory_bytes for kv, from the inference estimate of `workload` (whose own cache is taken out); the overhead
    share is --fragmentation when given; by default the replayed overhead of `workload` is held fixed.
    """
    est = estimate_memory(spec, workload, reserve=reserve, **options)
    kv_now = next(i.bytes for i in est.items if i.category == "kv")
    share = options.get("fragmentation")
    if share is None:  # replayed overhead: a preallocated cache gets its own 2 MiB-rounded segments, so the
        share = 0.0    # overhead found at this workload is held fixed and the cache adds only its own bytes
    without = est.device_bytes - int(kv_now * (1 + share))
    fraction, absolute = parse_reserve(reserve)
    room = (memory_bytes - absolute) / (1 + fraction) - without
    return max(0, int(room / (1 + share)))
