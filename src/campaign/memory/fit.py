"""Card fit: the verdict per card, and the inverse solves (largest batch, longest context that fit)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..hardware.cards import Card
from ..models.spec import ModelSpec
from ..results import Record
from . import reserved
from .breakdown import MemoryEstimate
from .constants import LARGE_BUFFER, ROUND_LARGE
from .estimate import allocator_limit, estimate_memory
from .parsing import parse_reserve
from .search import largest_satisfying, largest_within
from .workload import Workload, resized

# The allocator's share of a probe (its replayed overhead, reserve included) swings with the batch (llama-3.2-3b,
# 1024 tokens with checkpointing: 20.4 GiB at batch 39, 0.2 at 40; llama-3.1-8b: 21.7 GiB at batch 3, 0.9 at 4):
# what it caches is what the step freed, so it is bounded by the step's transient tensors (overhead_margin), at most
# 1.15 times them over the catalog's models and workloads. OVERHEAD_FACTOR times them plus two of the allocator's 20 MiB
# segments (kLargeBuffer) is the margin: a probe whose lower bound leaves more room than that fits without a replay.
# tests/memory/test_solve.py checks that the answers equal the exhaustive check's on every catalog model, training and
# inference, on five cards.
OVERHEAD_FACTOR = 1.25
OVERHEAD_FLOOR = 2 * LARGE_BUFFER


@dataclass(frozen=True)
class Fit(Record):
    """Does the workload fit one card, with what headroom, and what is the most it could take."""

    card: str
    memory_bytes: int
    verdict: str  # fits | tight | does not fit
    headroom_bytes: int
    max_batch: int | None = None
    max_seq_len: int | None = None


class Probes:
    """What a solve learned of one workload's probes, shared by the cards it is solved for: per value its lower
    bound (the estimate without the allocator overhead) and that estimate's peak allocated, its margin
    (overhead_margin), its required bytes on a card with room to spare (the replay without a limit), and for a batch
    within the margin of a card its replayed overhead alone (reserved.BatchOverheads); what lies outside the
    allocator (the context, NCCL's buffers: the same for every probe)."""

    def __init__(self) -> None:
        self.low: dict[int, int] = {}
        self.allocated: dict[int, int] = {}
        self.margin: dict[int, int] = {}
        self.required: dict[int, int] = {}
        self.overhead: dict[int, int] = {}
        self.outside = 0


def overhead_margin(spec: ModelSpec, est: MemoryEstimate, *, reserve: str | float) -> int:
    """The most the allocator's replay can add to `est` (an estimate without the overhead), its reserve included:
    OVERHEAD_FACTOR times the largest transient working set of any phase (for training, plus what the process
    cached before its first step and what DeepSpeed makes and drops at each step), plus OVERHEAD_FLOOR. A preallocated
    KV cache is not transient: each of its 2 x layers tensors is its own segment, rounded up to 2 MiB; nor are the last
    position's logits of an inference with it."""
    w = est.workload
    if w.training:
        kinds: tuple[str, ...] = ("activations", "logits", "temporaries")
    elif w.kv_cache == "dynamic":
        kinds = ("activations", "logits", "temporaries", "kv")
    else:  # generate's last-position logits are made and freed at once, as its first and only block of that size
        kinds = ("activations", "temporaries")
    transient = max(sum(i.bytes for i in p.items if i.category in kinds) for p in est.phases)
    if w.training and w.method != "frozen":  # the process's replay: what the load, the setup and DeepSpeed's init
        # left cached, and DeepSpeed's own copies made and dropped at each step (memory/zero_replay.py)
        from .zero_replay import step_transient

        transient += reserved.prefix_slack(spec, w, est.phases) + step_transient(spec, w)
    rounding = 0 if w.training or w.kv_cache == "dynamic" else 2 * max(1, spec.num_layers) * ROUND_LARGE
    fraction, _ = parse_reserve(reserve)
    return int(OVERHEAD_FACTOR * (transient + rounding) * (1 + fraction)) + OVERHEAD_FLOOR


def unlimited_fails(spec: ModelSpec, on_card: MemoryEstimate, memory_bytes: int, reserve: str | float) -> bool:
    """Whether the step replayed without a limit surely does not fit a card of `memory_bytes`, from `on_card` (its
    estimate replayed against that card, which released cached segments), without that replay.

    Until its first release the replay against the card is the replay without a limit; there that replay keeps
    the segment, reaching at least `diverged_at` reserved, and its allocated never passes this replay's plus what
    best fit leaves unsplit in each block taken since (reserved.unlimited_floor). It fits the card only when the
    estimate's peak allocated plus its reserved - allocated stays within what the card leaves the allocator (the
    limit): so it does not where even the floor passes it. Not the converse of the replay against the card failing:
    the replay's own allocated can pass the estimate's, and the sweep has such steps (Qwen2.5-7B QLoRA at 6,430
    tokens on an RTX 4090 fits with room to spare, not against the card).
    """
    outside = on_card.device_bytes - on_card.peak_reserved_bytes  # context and NCCL buffers
    limit = allocator_limit(memory_bytes, reserve=reserve, context_bytes=outside)
    floor = reserved.unlimited_floor(spec, on_card.workload, on_card.phases, limit)
    return floor is not None and on_card.peak_allocated_bytes + floor > limit


def max_value(spec: ModelSpec, workload: Workload, memory_bytes: int, field: str, *, limit: int,
              cache: Probes | None = None, exhaustive: bool = False, card_first: bool | None = None,
              **options: Any) -> int:
    """Largest `field` ('batch' or 'seq_len') whose required bytes fit `memory_bytes` (0: not even 1); for the
    batch, the largest for which every smaller batch fits too.

    A probe's lower bound is the estimate without the allocator overhead (the replayed overhead is never negative,
    nor is a --fragmentation share), monotone in the batch and the length: above the card, the probe fails without
    a replay. A probe fits when its replay with room to spare fits, or its replay against the card
    (estimate_memory's card_bytes) does: the allocator then releases its cached free segments, as it does when
    cudaMalloc fails.
    The replay is not monotone (a larger batch can place its tensors so that the allocator reserves a segment
    less), but it adds at most the margin (see OVERHEAD_FACTOR) to the lower bound: a probe whose lower bound and
    margin fit the card fits without a replay. So the batches replayed are those whose lower bound comes within the
    margin of the card, each of them (a training step's from its replay alone, _AloneChecks), and the answer is the
    batch below the first that does not fit. The edges of the lower bound, and of it with the margin, within the card
    are found by search.largest_within (both are close to a line in the value: a few estimates each). The length
    is searched (exponential then binary), taking a longer
    context to need no less. `exhaustive`: replay every batch below the search's answer instead (the reference the
    tests compare with). `cache` may be shared between the cards of one workload.
    """
    probes = Probes() if cache is None else cache
    bound = {**options, "fragmentation": 0.0}

    def low(n: int) -> int:
        if n not in probes.low:
            est = estimate_memory(spec, resized(workload, field, n), **bound)
            probes.low[n] = est.required_bytes
            probes.allocated[n] = est.peak_allocated_bytes
            probes.outside = est.device_bytes - est.peak_reserved_bytes
            if options.get("fragmentation") is None:
                probes.margin[n] = overhead_margin(spec, est, reserve=options.get("reserve", "10%"))
        return probes.low[n]

    def with_margin(n: int) -> int:
        """The lower bound and the margin: n fits where they fit, however the allocator places its tensors."""
        if n not in probes.margin:
            low(n)
            if n not in probes.margin:  # a given --fragmentation share: the required bytes are the formula's
                probes.margin[n] = required(n) - low(n)
        return low(n) + probes.margin[n]

    def sure(n: int) -> bool:
        return low(n) <= memory_bytes and with_margin(n) <= memory_bytes

    def required(n: int) -> int:
        if n not in probes.required:
            probes.required[n] = estimate_memory(spec, resized(workload, field, n), **options).required_bytes
        return probes.required[n]

    limits: dict[int, int] = {}

    def room_limit() -> int:
        """The most the allocator may reserve on this card for a step to fit it (the reserved bytes, allocated +
        overhead, within it are the required bytes within the card), once a lower bound has set what lies outside."""
        outside = probes.outside
        if outside not in limits:
            limits[outside] = allocator_limit(memory_bytes, reserve=options.get("reserve", "10%"),
                                              context_bytes=outside)
        return limits[outside]

    def room_fits(n: int) -> bool:
        """n fits with room to spare: from its replay alone where made (_AloneChecks) and its allocated bytes."""
        if n in probes.overhead:
            low(n)
            return probes.allocated[n] + probes.overhead[n] <= room_limit()
        return required(n) <= memory_bytes

    on_card_first = cache is None if card_first is None else card_first

    def ok(n: int, below_top: bool = False) -> bool:
        """n fits on a card with room to spare, or replayed against this card (the allocator releasing its
        cached segments). For one card the replay against it comes first: where it releases nothing, it is the
        replay with room to spare as well (reserved.training_overhead keeps it as both), so a probe costs one
        replay. Cards that share their probes (`cache`) replay with room to spare first: that replay serves
        every card it fits; once one does not fit with room to spare, the probes after it come close enough to
        this card's edge that its own replay comes first too. Either order gives the same answer.
        `below_top`: n is at most the largest value whose lower bound fits (not computed)."""
        nonlocal on_card_first
        if not below_top and low(n) > memory_bytes:
            return False
        known = n in probes.required or n in probes.overhead
        if options.get("fragmentation") is not None or not on_card_first or known:
            if room_fits(n):
                return True
            if options.get("fragmentation") is not None:
                return False
            on_card_first = True
        w = resized(workload, field, n)
        on_card = estimate_memory(spec, w, card_bytes=memory_bytes, **options)
        if on_card.required_bytes <= memory_bytes:
            return True
        if not known and unlimited_fails(spec, on_card, memory_bytes, options.get("reserve", "10%")):
            return False
        return room_fits(n)

    if exhaustive:
        found = largest_satisfying(ok, limit)
        if field == "batch":
            for n in range(1, found):
                if not ok(n):
                    return n - 1
        return found
    top = largest_within(low, memory_bytes, limit)  # no replay: the lower bounds only
    if top == 0:
        return 0
    if field != "batch":  # the search's own probes, as the exhaustive one makes them: a longer context can need
        # less (the allocator), and another search would find another edge (43 of the sweep's 871 answers differ)
        return largest_satisfying(lambda n: n <= top and (sure(n) or ok(n)), limit)
    # the batches whose lower bound comes within the margin of the card, from the smallest: below them every batch
    # fits; the first that does not fit ends the answer
    alone = _AloneChecks(spec, workload, top, probes, low, room_limit, **options)
    against = False  # once a batch fits only against the card, the batches after it are replayed there first
    n = 1 + largest_within(with_margin, memory_bytes, top)  # each lower bound from n on fits (it is monotone)
    while n <= top:
        passed = alone.passing(n, on_card=against)
        if passed:
            n += passed
            continue
        if alone.fits(n, on_card=against):
            pass
        elif alone.fits(n, on_card=not against):
            against = True
        elif not (alone.fits(n, exact=True) or alone.fits(n, on_card=True, exact=True) or ok(n, below_top=True)):
            return n - 1
        n += 1
    return top


class _AloneChecks:
    """A training solve's batches within the margin of the card, checked from their replayed overhead alone
    (reserved.BatchOverheads, without their phases and estimates): fits(n) says whether n surely fits, passing(n)
    how many batches from n on do. Never for a given --fragmentation share (no replay) or an inference: nothing
    fits this way there. The replay's batch-free parts (from top's phases) are made at the first batch: a solve with
    none within the margin makes none of them."""

    def __init__(self, spec: ModelSpec, workload: Workload, top: int, probes: Probes, low, room_limit,
                 **options: Any) -> None:
        self.spec, self.workload, self.top, self.probes, self.low, self.room_limit = (
            spec, workload, top, probes, low, room_limit)
        self.used = workload.training and options.get("fragmentation") is None
        self._overhead_at: reserved.BatchOverheads | None = None

    def overhead_at(self) -> reserved.BatchOverheads:
        if self._overhead_at is None:
            from .phases import training_phases

            template = training_phases(self.spec, resized(self.workload, "batch", self.top))
            self._overhead_at = reserved.BatchOverheads(self.spec, self.workload, template)
        return self._overhead_at

    def checks(self, on_card: bool) -> bool:
        """Whether batches are checked alone: for a training solve, against the card only once the step is recorded
        (a replay then costs less than an estimate's many times over)."""
        return self.used and (not on_card or len(self.probes.overhead) >= reserved.RECORD_AFTER)

    def fits(self, n: int, on_card: bool = False, exact: bool = False) -> bool:
        """n's replayed overhead alone (`on_card`: replayed against the card, under room_limit(), as
        estimate_memory's card_bytes replays it, once RECORD_AFTER batches have been replayed alone: False before,
        where the caller's estimate costs little more), added to the peak allocated of a batch m >= n that is
        estimated (the allocated bytes are monotone in the batch: at least n's), is within room_limit(); m is
        larger(n), or n (`exact`: its own estimate, which the caller's next check makes anyway). A batch that does
        not pass is checked in full by the caller."""
        if not self.checks(on_card):
            return False
        limit = self.room_limit() if on_card else None
        overhead = self.overhead_at()(n, limit)
        if not on_card:
            self.probes.overhead[n] = overhead
        return self.allocated(n if exact else self.larger(n)) + overhead <= self.room_limit()

    def passing(self, n: int, on_card: bool = False) -> int:
        """How many batches from n on fit as fits(b, on_card) says, from the replays run ahead of the loop: the
        batches from n on, many in one call of the allocator model, up to the first that does not fit
        (BatchOverheads.ahead). 0 where none is run that way (before the step is recorded)."""
        if not self.checks(on_card):
            return 0
        limit = self.room_limit() if on_card else None
        overhead_at = self.overhead_at()
        overhead_at.ahead(n, self.top, limit, self.room_left)
        count, kept = 0, self.probes.overhead
        for b, left in zip(range(n, self.top + 1), self.room_left(range(n, self.top + 1)), strict=True):
            overhead = overhead_at.known(b, limit)
            if overhead is None:
                break
            if not on_card:
                kept[b] = overhead
            if overhead > left:
                break
            count += 1
        return count

    def room_left(self, batches: Iterable[int]) -> Iterator[int]:
        """Per batch b, what room_limit() leaves past the allocated bytes of larger(b): its overhead alone must fit
        there (larger(b) changes log2(top) times: estimated once each)."""
        room, m, left = self.room_limit(), 0, 0
        for b in batches:
            larger = self.larger(b)
            if larger != m:
                m, left = larger, room - self.allocated(larger)
            yield left

    def larger(self, n: int) -> int:
        """top - (2^k - 1) for the largest such at or above n: log2(top) batches are estimated, each within half the
        distance to top."""
        return self.top - ((1 << (self.top - n + 1).bit_length() - 1) - 1)

    def allocated(self, m: int) -> int:
        self.low(m)
        return self.probes.allocated[m]


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
    batches, lengths = Probes(), Probes()
    for card in cards:
        mb = mc = None
        if solve:
            shared = len(cards) > 1  # several cards share their probes' replays with room to spare
            mb = max_value(spec, workload, card.memory_bytes, "batch", limit=1 << 16, cache=batches,
                           card_first=not shared, **options)
            mc = max_value(spec, workload, card.memory_bytes, "seq_len", limit=seq_limit, cache=lengths,
                           card_first=not shared, **options)
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
