"""One billing model for `campaign budget`, `campaign bench` and `campaign ablate plan`: the same work (runs x hours x
cards, with dependencies) costs the same in all three.

- Recovery margin: every run lasts its hours x (1 + margin) (crashes, preemption, checkpoints re-checked), 15% by
  default; each output says the margin it applied.
- A package: `cards` cards for `days` x 24 h at a fixed price; it holds the work when the schedule (schedule.py) ends
  inside its window.
- On demand: each card is billed from its first run's start to its last run's end, per started unit (hour by
  default; `billing: per-minute` or `per-second` in the price file), so a card a phase does not use is not billed.
- Money: exact decimal cents from the price file to the total (0.347 $/h x 82 h = 2,845.4 cents), rounded once, at
  the total, half up to the cent (ROUNDING).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from ..results import Record
from .money import round_cents, usd
from .schedule import Phase, Schedule, critical_path, schedule

MARGIN = 0.15                       # the default recovery margin on every run
UNITS = {"hour": 1, "minute": 60, "second": 3600}          # billing units per hour
ROUNDING = "exact to the fraction of a cent, rounded once at the total, half up to the cent"


def parse_margin(value: object, where: str) -> float:
    """A recovery margin, '15%' or 0.15, as a share in [0, 1); else one InputError naming where it was given."""
    from ..errors import InputError

    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{where}: margin {value!r} is not a share; write e.g. '15%' or 0.15") from None
    if isinstance(value, bool) or not 0 <= share < 1:
        raise InputError(f"{where}: margin {value!r} must be a share from 0% to below 100%; e.g. '15%'")
    return share


def started_units(hours: float, unit: str = "hour") -> int:
    """Units billed for `hours` of use: every started unit counts (1.01 h is 2 hours per hour, 61 minutes per
    minute); float noise below 1e-9 of a unit is not a started unit."""
    return math.ceil(round(hours * UNITS[unit], 9))


def on_demand_cents(hourly: Decimal, spans: list[float] | tuple[float, ...], unit: str = "hour") -> Decimal:
    """Exact cents of on-demand cards: `hourly` exact cents per card-hour, one span of use (hours) per card, each
    billed per started unit."""
    per = UNITS[unit]
    return sum((hourly * started_units(h, unit) / per for h in spans), Decimal(0))


def card_spans(s: Schedule) -> list[float]:
    """For each card slot that runs anything: hours from its first run's start to its last run's end."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for r in s.runs:
        for c in r.cards:
            first[c] = min(first.get(c, r.start_hours), r.start_hours)
            last[c] = max(last.get(c, r.end_hours), r.end_hours)
    return [last[c] - first[c] for c in sorted(first)]


_SCHEDULES: dict[tuple[int, int, float], tuple[tuple[Phase, ...], Schedule | None]] = {}


def scheduled(phases: tuple[Phase, ...], cards: int, margin: float) -> Schedule | None:
    """schedule(phases, cards, margin=margin), computed once per phases object, card count and margin: every
    rental of a card with the same number of cards runs the same schedule (a few kept, then forgotten)."""
    key = (id(phases), cards, margin)
    hit = _SCHEDULES.get(key)
    if hit is not None and hit[0] is phases:
        return hit[1]
    if len(_SCHEDULES) > 32:
        _SCHEDULES.clear()
    result = schedule(phases, cards, margin=margin)
    _SCHEDULES[key] = (phases, result)
    return result


def describe(unit: str) -> str:
    return f"per started {unit}"


@dataclass(frozen=True)
class Cut(Record):
    """Runs removed from a phase to make an option fit, and the card-hours it saves (margin included)."""

    phase: str
    runs_cut: int
    runs_left: int
    card_hours_saved: float


@dataclass(frozen=True)
class Option(Record):
    """One way to rent: a package (window_hours) or on-demand hours (window_hours None) of `cards` cards.
    hours: when the last run ends; slack_hours: window - hours; utilization: busy card-hours / (cards x window).
    cost_cents: the total rounded once (ROUNDING); cost_exact_cents: the exact amount before rounding, as text;
    cost_usd: cost_cents in dollars; margin: the recovery margin applied; billing: how on-demand time is billed."""

    name: str
    card: str
    cards: int
    window_hours: float | None
    hours: float | None
    critical_path_hours: float
    card_hours: float
    utilization: float | None
    slack_hours: float | None
    cost_cents: int
    cost_usd: float
    fits: bool
    why: str
    useful: int
    cost_per_useful_cents: int | None
    cuts: tuple[Cut, ...] = ()
    fits_after_cuts: bool = False
    cost_exact_cents: str = ""
    margin: float = MARGIN
    billing: str = "per started hour"


def price(phases: tuple[Phase, ...], *, card: str, name: str, cards: int, window: float | None,
          package_cents: Decimal | None, hourly: Decimal | None, margin: float, unit: str = "hour",
          deadline_hours: float | None = None, budget_cents: int | None = None, refused: tuple[str, ...] = (),
          sched: Schedule | None = None) -> Option:
    """The phases on one rental: scheduled on `cards` card slots (each run hours x (1 + margin)), whether the
    schedule ends inside the window (and the deadline), and its cost: the package's price, or on demand each card
    from its first run to its last per started unit. refused: reasons the card cannot run the work at all."""

    cp, chain = critical_path(phases, margin)
    sched = sched if sched is not None else scheduled(phases, cards, margin)
    card_hours = sum(p.card_hours for p in phases) * (1 + margin)
    useful = sum(p.useful for p in phases)
    how = describe(unit)
    if sched is None:
        need = max(p.cards for p in phases)
        exact = package_cents or Decimal(0)
        return Option(name, card, cards, window, None, cp, card_hours, None, None, round_cents(exact),
                      round_cents(exact) / 100, False, f"a run needs {need} cards, the rental holds {cards}", useful,
                      None, cost_exact_cents=str(exact), margin=margin, billing=how)
    hours = sched.makespan_hours
    exact = package_cents if package_cents is not None else on_demand_cents(hourly or Decimal(0), card_spans(sched),
                                                                          unit)
    cost = round_cents(exact)
    limit = window if window is not None else math.inf
    if deadline_hours is not None:
        limit = min(limit, deadline_hours)
    why = ""
    if refused:
        why = refused[0]
    elif cp > limit + 1e-9:
        what = "window" if window is not None and limit == window else "deadline"
        why = f"the critical path alone ({' -> '.join(chain)}) takes {cp:,.1f} h > the {limit:,.0f} h {what}: " \
              f"more cards do not shorten it"
    elif card_hours > cards * limit + 1e-9:
        why = f"{card_hours:,.1f} card-hours of work > {cards} card(s) x {limit:,.0f} h"
    elif hours > limit + 1e-9:
        why = f"scheduled on {cards} card(s) it ends at {hours:,.1f} h > {limit:,.0f} h"
    elif budget_cents is not None and cost > budget_cents:
        why = f"costs {usd(cost)} > the budget of {usd(budget_cents)}"
    fits = not why
    util = sched.busy_card_hours / (cards * window) if window else None
    slack = window - hours if window is not None else None
    per_useful = round_cents(exact / useful) if useful and fits else None
    return Option(name, card, cards, window, hours, cp, card_hours, util, slack, cost, cost / 100, fits, why, useful,
                  per_useful, cost_exact_cents=str(exact), margin=margin, billing=how)


def runs_phase(name: str, runs: int, hours: float, cards: int = 1) -> tuple[Phase, ...]:
    """Independent runs of the same hours as a one-phase plan (bench's runs to the target)."""
    return (Phase(name, "experiment", runs, hours, cards, (), runs),)


MAX_RENEWALS = 12           # a package taken at most this many times in a row (a 3-day package: 36 days)


def combinations(phases: tuple[Phase, ...], *, card: str, packages: tuple, hourly: Decimal | None, margin: float,
                 unit: str = "hour", deadline_hours: float | None = None, budget_cents: int | None = None,
                 refused: tuple[str, ...] = (), cheapest_cents: int | None = None) -> list[Option]:
    """Packages combined, for each package that does not hold the work alone: the same package k times in a row
    (k x its window for k x its price, renewed without a gap), two side by side (twice its cards in its window),
    and the package topped up on demand (the runs past its window billed by the hour, each card from the window's
    end, or its first run after it, to its last run). Only combinations that hold the work and cost less than
    cheapest_cents (the cheapest single rental that does) are kept: the others can never be the one to take.
    Cheapest first."""
    out: list[Option] = []
    for pk in packages:
        alone = price(phases, card=card, name=pk.name, cards=pk.cards, window=float(pk.hours),
                      package_cents=pk.exact, hourly=None, margin=margin, unit=unit, deadline_hours=deadline_hours,
                      refused=refused)
        if alone.fits or alone.hours is None or refused:
            continue
        tried: list[Option] = []
        k = math.ceil(round(alone.hours / pk.hours, 9))
        if 2 <= k <= MAX_RENEWALS:
            tried.append(price(phases, card=card, name=f"{k} x {pk.name} in a row", cards=pk.cards,
                               window=float(pk.hours * k), package_cents=pk.exact * k, hourly=None, margin=margin,
                               unit=unit, deadline_hours=deadline_hours, budget_cents=budget_cents))
        tried.append(price(phases, card=card, name=f"2 x {pk.name} side by side", cards=2 * pk.cards,
                           window=float(pk.hours), package_cents=pk.exact * 2, hourly=None, margin=margin, unit=unit,
                           deadline_hours=deadline_hours, budget_cents=budget_cents))
        if hourly is not None:
            tried.append(topped_up(phases, card=card, package=pk, hourly=hourly, margin=margin, unit=unit,
                                   deadline_hours=deadline_hours, budget_cents=budget_cents))
        out.extend(o for o in tried if o.fits and (cheapest_cents is None or o.cost_cents < cheapest_cents))
    return sorted(out, key=lambda o: (o.cost_cents, o.hours or 0))


def topped_up(phases: tuple[Phase, ...], *, card: str, package: object, hourly: Decimal, margin: float,
              unit: str = "hour", deadline_hours: float | None = None, budget_cents: int | None = None) -> Option:
    """A package (its cards for its window) with the runs still going at its end continued on demand: the
    package's price + each card's time past the window (from the window's end, or its first run after it, to its
    last run) per started unit."""
    from dataclasses import replace as with_


    pk = package
    o = price(phases, card=card, name=f"{pk.name} + on-demand", cards=pk.cards, window=None,  # type: ignore[attr-defined]
              package_cents=None, hourly=hourly, margin=margin, unit=unit, deadline_hours=deadline_hours)
    sched = scheduled(phases, pk.cards, margin)  # type: ignore[attr-defined]
    if sched is None or not o.fits:
        return o
    window = float(pk.hours)  # type: ignore[attr-defined]
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for r in sched.runs:
        if r.end_hours <= window + 1e-9:
            continue
        for c in r.cards:
            first[c] = min(first.get(c, math.inf), max(r.start_hours, window))
            last[c] = max(last.get(c, 0.0), r.end_hours)
    exact = pk.exact + on_demand_cents(hourly, [last[c] - first[c] for c in first], unit)  # type: ignore[attr-defined]
    cost = round_cents(exact)
    why = f"costs {usd(cost)} > the budget of {usd(budget_cents)}" if budget_cents is not None and \
        cost > budget_cents else ""
    per_useful = round_cents(exact / o.useful) if o.useful and not why else None
    return with_(o, cost_cents=cost, cost_usd=cost / 100, cost_exact_cents=str(exact), fits=not why, why=why,
                 cost_per_useful_cents=per_useful)
