"""A campaign as phases (runs x hours x cards, with dependencies), its critical path, and a schedule of every run
on the K cards of a rental: which card runs what, from which hour to which.

Hours are floats (they come from measurements or estimates); the schedule is list scheduling, critical path
first: whenever cards are free, the ready phase with the longest remaining path starts as many runs as fit.
"""
from __future__ import annotations

import heapq
from bisect import insort
from dataclasses import dataclass

from ..errors import InputError
from ..results import Record

KINDS = ("checks", "baseline", "experiment", "evaluation", "recovery", "export", "other")


@dataclass(frozen=True)
class Phase(Record):
    """One phase: `runs` runs of `hours` each (margin not included) on `cards` cards each, started once every
    phase in `after` has ended. useful: results it produces that count for the decision (default: its runs for
    an experiment, else 0). priority: cut order when nothing fits (higher is cut first; None: never cut).
    hours_how: given | measured | estimated | scaled (given on another card, scaled by bf16 FLOP/s). card: the card
    the phase runs on, on a rental of its own (budget.card_groups); None: the cards compared."""

    name: str
    kind: str
    runs: int
    hours: float
    cards: int = 1
    after: tuple[str, ...] = ()
    useful: int = 0
    priority: int | None = None
    hours_how: str = "given"
    card: str | None = None

    @property
    def card_hours(self) -> float:
        return self.runs * self.hours * self.cards


def check_phases(phases: tuple[Phase, ...], where: str = "the plan") -> None:
    """Names unique, dependencies known, no cycle, durations and counts positive: else one InputError."""
    names = {p.name for p in phases}
    if not phases:
        raise InputError(f"{where}: no phases; list at least one under 'phases'")
    seen: set[str] = set()
    for p in phases:
        if p.name in seen:
            raise InputError(f"{where}: phase {p.name!r} is listed twice; give each phase its own name")
        seen.add(p.name)
        if not p.hours > 0 or p.hours != p.hours or p.hours == float("inf"):
            raise InputError(f"{where}: phase {p.name!r} has hours {p.hours!r}; a duration must be a number of "
                             f"hours above 0")
        if p.runs < 1 or p.cards < 1:
            raise InputError(f"{where}: phase {p.name!r} needs runs >= 1 and cards >= 1")
        if p.kind not in KINDS:
            raise InputError(f"{where}: phase {p.name!r} has kind {p.kind!r}; use one of {', '.join(KINDS)}")
        for d in p.after:
            if d not in names:
                raise InputError(f"{where}: phase {p.name!r} comes after {d!r}, which is not a phase; check the "
                                 f"name in 'after'")
            if d == p.name:
                raise InputError(f"{where}: phase {p.name!r} comes after itself; remove it from its 'after'")
    order = topological(phases)
    if order is None:
        cycle = _cycle(phases)
        raise InputError(f"{where}: the phases depend on each other in a cycle ({' -> '.join(cycle)}); remove one "
                         f"of these dependencies")


def topological(phases: tuple[Phase, ...]) -> list[str] | None:
    """Phase names in an order where each comes after its dependencies, level by level (a level: the phases whose
    dependencies are all in earlier levels, in plan order), or None when the dependencies form a cycle. Linear in
    phases + dependencies (Kahn's algorithm by levels)."""
    index = {p.name: i for i, p in enumerate(phases)}
    waiting = {p.name: len(set(p.after)) for p in phases}
    users: dict[str, list[str]] = {p.name: [] for p in phases}
    for p in phases:
        for d in set(p.after):
            if d in users:
                users[d].append(p.name)
    level = [p.name for p in phases if waiting[p.name] == 0]
    order: list[str] = []
    while level:
        order.extend(level)
        nxt = []
        for name in level:
            for u in users[name]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    nxt.append(u)
        level = sorted(nxt, key=index.__getitem__)
    return order if len(order) == len(phases) else None


def _cycle(phases: tuple[Phase, ...]) -> list[str]:
    """One dependency cycle, as names (the first repeated at the end)."""
    after = {p.name: p.after for p in phases}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for d in after[n]:
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        path.pop()
        state[n] = 2
        return None

    return next((c for n in after if n not in state and (c := visit(n))), list(after))


def critical_path(phases: tuple[Phase, ...], margin: float = 0.0) -> tuple[float, tuple[str, ...]]:
    """The longest chain of dependent phases, each taking one run's hours x (1 + margin) (its runs side by side,
    as with unlimited cards): (hours, phase names in order). No number of cards makes a campaign shorter."""
    by = {p.name: p for p in phases}
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for name in topological(phases) or []:
        p = by[name]
        before = max(p.after, key=lambda d: finish[d], default=None)
        finish[name] = (finish[before] if before else 0.0) + p.hours * (1 + margin)
        via[name] = before
    end = max(finish, key=lambda n: finish[n])
    chain: list[str] = []
    node: str | None = end
    while node is not None:
        chain.append(node)
        node = via[node]
    return finish[end], tuple(reversed(chain))


@dataclass(frozen=True)
class ScheduledRun(Record):
    """One run placed: its phase, its number (1-based), the card slots it holds (0-based) and its hours."""

    phase: str
    run: int
    cards: tuple[int, ...]
    start_hours: float
    end_hours: float


@dataclass(frozen=True)
class PhaseSpan(Record):
    """A phase's first start and last end in a schedule."""

    phase: str
    start_hours: float
    end_hours: float


@dataclass(frozen=True)
class Schedule(Record):
    """Every run on `cards` card slots; makespan: the hour the last run ends (margin included)."""

    cards: int
    margin: float
    makespan_hours: float
    busy_card_hours: float
    runs: tuple[ScheduledRun, ...]
    spans: tuple[PhaseSpan, ...]


def schedule(phases: tuple[Phase, ...], cards: int, *, margin: float = 0.0) -> Schedule | None:
    """List-schedule every run on `cards` card slots (each run lasts hours x (1 + margin)); None when a run needs
    more cards than there are. Ready phases go longest-remaining-path first, then in plan order; each run takes the
    lowest-numbered free slots. O((runs + phases) log) with heaps: 4,000 phases are a second, not minutes."""
    if any(p.cards > cards for p in phases):
        return None
    by = {p.name: p for p in phases}
    order = topological(phases) or []
    users: dict[str, list[str]] = {p.name: [] for p in phases}
    for p in phases:
        for d in set(p.after):
            users[d].append(p.name)
    tail: dict[str, float] = {}                          # longest path from a phase's start to the end
    for name in reversed(order):
        tail[name] = by[name].hours * (1 + margin) + max((tail[u] for u in users[name]), default=0.0)
    rank = {name: (-tail[name], i) for i, name in enumerate(p.name for p in phases)}
    waiting = {p.name: len(set(p.after)) for p in phases}
    started = {p.name: 0 for p in phases}
    finished = {p.name: 0 for p in phases}
    ended_at: dict[str, float] = {}
    first_start: dict[str, float] = {}
    ready: list[tuple[tuple[float, int], str]] = sorted((rank[p.name], p.name) for p in phases
                                                        if waiting[p.name] == 0)
    free = list(range(cards))                            # a heap: the lowest-numbered slots first
    running: list[tuple[float, int, str, tuple[int, ...]]] = []     # a heap by end time, then start order
    placed: list[ScheduledRun] = []
    total = sum(p.runs for p in phases)
    now = 0.0
    while len(placed) < total or running:
        done: list[tuple[tuple[float, int], str]] = []
        for item in ready:
            if not free:
                break
            n = item[1]
            p = by[n]
            while started[n] < p.runs and len(free) >= p.cards:
                slots = tuple(sorted(heapq.heappop(free) for _ in range(p.cards)))
                started[n] += 1
                end = now + p.hours * (1 + margin)
                first_start.setdefault(n, now)
                placed.append(ScheduledRun(n, started[n], slots, now, end))
                heapq.heappush(running, (end, len(placed), n, slots))
            if started[n] == p.runs:
                done.append(item)
        for item in done:
            ready.remove(item)
        if not running:
            break
        now = running[0][0]
        while running and running[0][0] <= now + 1e-9:
            _, _, n, slots = heapq.heappop(running)
            finished[n] += 1
            for c in slots:
                heapq.heappush(free, c)
            if finished[n] == by[n].runs:
                ended_at[n] = now
                for u in users[n]:
                    waiting[u] -= 1
                    if waiting[u] == 0:
                        insort(ready, (rank[u], u))
    spans = tuple(PhaseSpan(n, first_start[n], ended_at[n]) for n in order)
    busy = sum((r.end_hours - r.start_hours) * len(r.cards) for r in placed)
    return Schedule(cards, margin, max(ended_at.values()), busy, tuple(placed), spans)
