"""Card fit: the verdict per card, and the inverse solves (largest batch, longest context that fit)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..hardware.cards import Card
from ..models.spec import ModelSpec
from .estimate import Fit, MemoryEstimate, allocator_limit, estimate_memory, parse_reserve
from .kv import largest_satisfying
from .workload import Workload


def max_value(spec: ModelSpec, workload: Workload, memory_bytes: int, field: str, *, limit: int,
              cache: dict[int, tuple[int, int | None]] | None = None, **options: Any) -> int:
    """Largest `field` ('batch' or 'seq_len') whose required bytes fit `memory_bytes` (0: not even 1); for the
    batch, the largest for which every smaller batch fits too (each one is checked).

    Each probe's allocator replay runs against the card (estimate_memory's card_bytes): before it would reserve
    more than the card leaves it, the allocator releases its cached free segments, so a probe whose tensors fit is
    not refused for cache it would have given back, and the answers are monotone where the tensors are.
    A probe first takes the estimate without the allocator overhead, a lower bound of the required bytes (the
    replayed overhead is never negative, nor is a --fragmentation share): when it already exceeds the card, the
    probe fails without replaying the step. Then the estimate with the replay on a card with room to spare: when it
    fits, so does the replay against the card, which releases nothing. `cache` (n -> (lower bound, required
    bytes on a card with room to spare, or None)) may be shared between calls for several cards of the same
    workload.
    """
    cache = {} if cache is None else cache
    bound = {**options, "fragmentation": 0.0}

    def ok(n: int) -> bool:
        w = replace(workload, **{field: n})
        if n not in cache:
            cache[n] = (estimate_memory(spec, w, **bound).required_bytes, None)
        low, required = cache[n]
        if low > memory_bytes:
            return False
        if required is None:
            required = estimate_memory(spec, w, **options).required_bytes
            cache[n] = (low, required)
        if required <= memory_bytes or options.get("fragmentation") is not None:
            return required <= memory_bytes
        return estimate_memory(spec, w, card_bytes=memory_bytes, **options).required_bytes <= memory_bytes

    found = largest_satisfying(ok, limit)
    if field == "batch":
        # The allocator replay is not monotone: a larger batch can place its tensors so that the caching allocator
        # reserves a segment less (the traced step does the same: llama-3.2-1b, 1024 tokens with checkpointing,
        # needs more at batch 10 than at 11). The answer is the largest batch for which every smaller one fits.
        for n in range(1, found):
            if not ok(n):
                return n - 1
    return found


def fit_cards(spec: ModelSpec, workload: Workload, cards: Iterable[Card], *, solve: bool = True,
              estimate: MemoryEstimate | None = None, **options: Any) -> list[Fit]:
    """Verdict, headroom and (optionally) the largest batch and longest context per card.

    `estimate`: the estimate of `workload` made with the same options (computed here when not given); a formula
    estimate is also the solver's probe at the workload's own batch and length, so it is not replayed again. Where
    it does not fit a card, the verdict and headroom come from the estimate replayed against that card (the
    allocator releases cached segments before it would pass the card), as the solver's probes do.
    """
    est = estimate or estimate_memory(spec, workload, **options)
    seq_limit = max(spec.max_position, workload.seq_len)
    out = []
    seed = (est.required_bytes, est.required_bytes)  # (lower bound, required) of the probe at the workload itself
    batches: dict[int, tuple[int, int | None]] = {workload.batch: seed} if est.method == "formula" else {}
    lengths: dict[int, tuple[int, int | None]] = {workload.seq_len: seed} if est.method == "formula" else {}
    for card in cards:
        mb = mc = None
        if solve:
            mb = max_value(spec, workload, card.memory_bytes, "batch", limit=1 << 16, cache=batches, **options)
            mc = max_value(spec, workload, card.memory_bytes, "seq_len", limit=seq_limit, cache=lengths, **options)
        on_card = est
        if (est.method == "formula" and est.required_bytes > card.memory_bytes
                and options.get("fragmentation") is None
                and est.peak_allocated_bytes <= allocator_limit(
                    card.memory_bytes, reserve=options.get("reserve", "10%"),
                    context_bytes=est.device_bytes - est.peak_reserved_bytes)):  # context and NCCL buffers
            on_card = estimate_memory(spec, workload, card_bytes=card.memory_bytes, **options)
        out.append(Fit(card.name, card.memory_bytes, on_card.verdict(card.memory_bytes),
                       card.memory_bytes - on_card.required_bytes, mb, mc))
    return out


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
