"""Card fit: the verdict per card, and the inverse solves (largest batch, longest context that fit)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..hardware.cards import Card
from ..models.spec import ModelSpec
from ..results import Record
from .breakdown import MemoryEstimate
from .estimate import estimate_memory
from .parsing import parse_reserve
from .search import largest_satisfying
from .workload import Workload, resized


@dataclass(frozen=True)
class Fit(Record):
    """Does the workload fit one card, with what headroom, and what is the most it could take."""

    card: str
    memory_bytes: int
    verdict: str  # fits | tight | does not fit
    headroom_bytes: int
    max_batch: int | None = None
    max_seq_len: int | None = None


def max_value(spec: ModelSpec, workload: Workload, memory_bytes: int, field: str, *, limit: int,
              cache: dict[int, int] | None = None, **options: Any) -> int:
    """Largest `field` ('batch' or 'seq_len') in [0, limit] whose step fits `memory_bytes` (0: not even 1), by
    exponential then binary search over fits() from the workload's own value. A probe whose lower bound (the
    estimate without the allocator overhead, kept in `cache` by value: the cards of one workload may share it)
    passes the card fails without a replay.

    The replayed overhead does not always grow with the value: a segment rounding can make a batch fail where a
    larger one fits (2 of the 871 batch answers of tests/memory/solve_sweep.py: the search answers a batch above one
    that fails, a few batches off under a model whose own error band is about 10%), and a longer context can need
    less. The search takes the fit to be monotone."""
    low = {} if cache is None else cache

    def ok(n: int) -> bool:
        w = resized(workload, field, n)
        if options.get("fragmentation") is None:
            if n not in low:
                low[n] = estimate_memory(spec, w, **{**options, "fragmentation": 0.0}).required_bytes
            if low[n] > memory_bytes:
                return False
        return fits(spec, w, memory_bytes, **options)

    return largest_satisfying(ok, limit, getattr(workload, field))


def fits(spec: ModelSpec, workload: Workload, memory_bytes: int, **options: Any) -> bool:
    """Whether the step fits the card as card_estimate judges it: with room to spare, or replayed against the card.
    The replay against the card comes first: where it releases nothing it is the replay with room to spare too, so
    a probe near the card's edge costs one replay."""
    if options.get("fragmentation") is not None:
        return estimate_memory(spec, workload, **options).required_bytes <= memory_bytes
    on_card = estimate_memory(spec, workload, card_bytes=memory_bytes, **options)
    if on_card.required_bytes <= memory_bytes:
        return True
    if not on_card.released_bytes or (on_card.peak_allocated_bytes + on_card.device_bytes
                                      - on_card.peak_reserved_bytes > memory_bytes):
        return False  # the replay with room to spare is this one, or not even the allocated bytes fit
    return estimate_memory(spec, workload, **options).required_bytes <= memory_bytes


def card_estimate(spec: ModelSpec, workload: Workload, card_bytes: int, *, estimate: MemoryEstimate | None = None,
                  **options: Any) -> MemoryEstimate:
    """The estimate a card of `card_bytes` is judged by, whichever way it is asked (--card, the summary,
    --all-cards), as the solve's probes are: the estimate with room to spare where it fits the card; else the step
    replayed against the card (the allocator releases its cached free segments before it would pass the card: the
    step can fit, or be tight, there), unless not even its allocated bytes and what lies outside the allocator
    (context, NCCL) fit the card: then nothing released changes the verdict, and the estimate with room to spare
    stands. `estimate`: the workload's estimate with room to spare and the same options, when made already (a
    traced one, or one with a --fragmentation share, stands as it is).
    """
    est = estimate or estimate_memory(spec, workload, **options)
    if (est.method == "formula" and options.get("fragmentation") is None and est.required_bytes > card_bytes
            and est.peak_allocated_bytes + est.device_bytes - est.peak_reserved_bytes <= card_bytes):
        return estimate_memory(spec, workload, card_bytes=card_bytes, **options)
    return est


def fit_cards(spec: ModelSpec, workload: Workload, cards: Iterable[Card], *, solve: bool = True,
              estimate: MemoryEstimate | None = None, estimate_card: int | None = None, **options: Any) -> list[Fit]:
    """Verdict, headroom and (optionally) the largest batch and longest context per card.

    `estimate`: the estimate of `workload` made with the same options (computed here when not given);
    `estimate_card`: the card memory it is card_estimate's for, if any. Each card's verdict and headroom come from
    card_estimate, as --card's do.
    """
    est = estimate or estimate_memory(spec, workload, **options)
    seq_limit = max(spec.max_position, workload.seq_len)
    out = []
    cards = list(cards)
    batches: dict[int, int] = {}
    lengths: dict[int, int] = {}
    for card in cards:
        mb = mc = None
        if solve:
            mb = max_value(spec, workload, card.memory_bytes, "batch", limit=1 << 16, cache=batches, **options)
            mc = max_value(spec, workload, card.memory_bytes, "seq_len", limit=seq_limit, cache=lengths, **options)
        on_card = est if card.memory_bytes == estimate_card else card_estimate(
            spec, workload, card.memory_bytes, estimate=est, **options)
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
