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
from typing import TYPE_CHECKING

from ..results import Record
from .money import round_cents, usd
from .schedule import Phase, Schedule, critical_path, schedule

if TYPE_CHECKING:
    from .prices import CardPrices, PriceFile

MARGIN = 0.15                       # the default recovery margin on every run
UNITS = {"hour": 1, "minute": 60, "second": 3600}          # billing units per hour
ROUNDING = "exact to the fraction of a cent, rounded once at the total, half up to the cent"


@dataclass(frozen=True)
class Terms:
    """How an offer bills beyond its prices (a card's entry in the price file): each on-demand card billed at least
    `minimum_hours` (a minimum billing increment: a 2-minute run on a 1-hour minimum pays the hour); `setup_hours`
    before the first step (image pulled, data copied), billed on every card and counted in every window; storage at
    `storage_hourly` exact cents per hour from the start to the last run's end, whether the cards run or stand
    idle, on every rental, per started unit. The unit itself stays the `unit` argument (the card's billing)."""

    minimum_hours: float = 0.0
    setup_hours: float = 0.0
    storage_hourly: Decimal | None = None
    minimum_seconds: Decimal | None = None  # the minimum exact, in seconds (minimum_minutes: 1 is 60); None: from hours

    @property
    def minimum(self) -> Decimal:
        """The minimum billed per card, exact seconds: minimum_seconds, else minimum_hours as written x 3,600."""
        if self.minimum_seconds is not None:
            return self.minimum_seconds
        return Decimal(repr(self.minimum_hours)) * 3600

    def describe(self) -> str:
        parts = []
        if self.minimum:
            minutes = (self.minimum / 60).quantize(Decimal("1e-6"))      # 1/60 h written as a float is 1 min
            parts.append(f"at least {int(minutes)} min per card" if minutes < 60 and
                         minutes == minutes.to_integral_value() else f"at least {self.minimum_hours:g} h per card")
        if self.setup_hours:
            parts.append(f"{self.setup_hours:g} h set-up billed before the first step")
        if self.storage_hourly is not None:
            parts.append(f"storage {self.storage_hourly / 100:g} $/h while the campaign lasts, idle or not")
        return "; ".join(parts)


NO_TERMS = Terms()


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


def minimum_units(seconds: Decimal, unit: str = "hour") -> int:
    """Units billed at least, for a minimum of `seconds` (exact): every started unit counts (a 1-minute minimum is
    60 seconds, 1 minute, 1 hour); noise below 1e-9 of a unit is not a started unit, as in started_units."""
    return math.ceil((seconds * UNITS[unit] / 3600).quantize(Decimal("1e-9")))


def on_demand_cents(hourly: Decimal, spans: list[float] | tuple[float, ...], unit: str = "hour",
                    minimum_hours: float = 0.0, minimum_seconds: Decimal | None = None) -> Decimal:
    """Exact cents of on-demand cards: `hourly` exact cents per card-hour, one span of use (hours) per card, each
    billed per started unit and at least the minimum (minimum_seconds exact, else minimum_hours)."""
    per = UNITS[unit]
    least = minimum_units(Terms(minimum_hours, minimum_seconds=minimum_seconds).minimum, unit)
    return sum((hourly * max(started_units(h, unit), least) / per for h in spans), Decimal(0))


def storage_cents(terms: Terms, hours: float, unit: str = "hour") -> Decimal:
    """Exact cents of storage over `hours` (the campaign from its start to its last run's end), per started unit."""
    if terms.storage_hourly is None:
        return Decimal(0)
    return terms.storage_hourly * started_units(hours, unit) / UNITS[unit]


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
    cost_usd: cost_cents in dollars; margin: the recovery margin applied; billing: how on-demand time is billed;
    package_hours: where the package's time ends (its window; for a package topped up on demand, the package's)."""

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
    package_hours: float | None = None     # where the package ends (hours from the start); None on demand alone
    setup_hours: float = 0.0               # set-up billed before the first step (the price file's setup_hours)
    offer: str | None = None               # the card's offer priced (the price file's `offer`); None: the card has one


def price(phases: tuple[Phase, ...], *, card: str, name: str, cards: int, window: float | None,
          package_cents: Decimal | None, hourly: Decimal | None, margin: float, unit: str = "hour",
          deadline_hours: float | None = None, budget_cents: int | None = None, refused: tuple[str, ...] = (),
          sched: Schedule | None = None, terms: Terms = NO_TERMS) -> Option:
    """The phases on one rental: scheduled on `cards` card slots (each run hours x (1 + margin)), whether the
    schedule ends inside the window (and the deadline), and its cost: the package's price, or on demand each card
    from its first run to its last per started unit. refused: reasons the card cannot run the work at all."""

    cp, chain = critical_path(phases, margin)
    setup = terms.setup_hours
    cp += setup
    sched = sched if sched is not None else scheduled(phases, cards, margin)
    card_hours = sum(p.card_hours for p in phases) * (1 + margin)
    useful = sum(p.useful for p in phases)
    how = describe(unit)
    if sched is None:
        need = max(p.cards for p in phases)
        exact = package_cents or Decimal(0)
        return Option(name, card, cards, window, None, cp, card_hours, None, None, round_cents(exact),
                      round_cents(exact) / 100, False, f"a run needs {need} cards, the rental holds {cards}", useful,
                      None, cost_exact_cents=str(exact), margin=margin, billing=how,
                      package_hours=window if package_cents is not None else None, setup_hours=setup)
    hours = sched.makespan_hours + setup
    exact = package_cents if package_cents is not None else \
        on_demand_cents(hourly or Decimal(0), [h + setup for h in card_spans(sched)], unit, terms.minimum_hours,
                        terms.minimum_seconds)
    exact += storage_cents(terms, hours, unit)
    cost = round_cents(exact)
    limit = window if window is not None else math.inf
    if deadline_hours is not None:
        limit = min(limit, deadline_hours)
    why = ""
    if refused:
        why = refused[0]
    elif cp > limit + 1e-9:
        what = "window" if window is not None and limit == window else "deadline"
        why = f"the critical path alone ({' -> '.join(chain)}{', set-up included' if setup else ''}) takes " \
              f"{cp:,.1f} h > the {limit:,.0f} h {what}: more cards do not shorten it"
    elif card_hours > cards * (limit - setup) + 1e-9:
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
                  per_useful, cost_exact_cents=str(exact), margin=margin, billing=how,
                  package_hours=window if package_cents is not None else None, setup_hours=setup)


def runs_phase(name: str, runs: int, hours: float, cards: int = 1) -> tuple[Phase, ...]:
    """Independent runs of the same hours as a one-phase plan (bench's runs to the target)."""
    return (Phase(name, "experiment", runs, hours, cards, (), runs),)


MAX_RENEWALS = 12           # a package taken at most this many times in a row (a 3-day package: 36 days)
MAX_SIDE_BY_SIDE = 16       # at most this many copies of a package side by side


def combinations(phases: tuple[Phase, ...], *, card: str, packages: tuple, hourly: Decimal | None, margin: float,
                 unit: str = "hour", deadline_hours: float | None = None, budget_cents: int | None = None,
                 refused: tuple[str, ...] = (), cheapest_cents: int | None = None,
                 terms: Terms = NO_TERMS) -> list[Option]:
    """Packages combined, for each package that does not hold the work alone: the same package k times in a row
    (k x its window for k x its price, renewed without a gap), the fewest copies side by side that hold the work
    (m x its cards in its window for m x its price, m from 2 to MAX_SIDE_BY_SIDE), and the package topped up on
    demand when an hourly price is given (the runs past its window billed by the hour, each card from the window's
    end, or its first run after it, to its last run). Only combinations that hold the work and cost less than
    cheapest_cents (the cheapest single rental that does) are kept: the others can never be the one to take.
    Cheapest first, the earliest to end first among equals."""
    out: list[Option] = []
    for pk in packages:
        alone = price(phases, card=card, name=pk.name, cards=pk.cards, window=float(pk.hours),
                      package_cents=pk.exact, hourly=None, margin=margin, unit=unit, terms=terms,
                      deadline_hours=deadline_hours, refused=refused)
        if alone.fits or alone.hours is None or refused:
            continue
        tried: list[Option] = []
        k = math.ceil(round(alone.hours / pk.hours, 9))
        if 2 <= k <= MAX_RENEWALS:
            tried.append(price(phases, card=card, name=f"{k} x {pk.name} in a row", cards=pk.cards,
                               window=float(pk.hours * k), package_cents=pk.exact * k, hourly=None, margin=margin,
                               unit=unit, terms=terms, deadline_hours=deadline_hours, budget_cents=budget_cents))
        for m in range(2, MAX_SIDE_BY_SIDE + 1):
            if cheapest_cents is not None and round_cents(pk.exact * m) >= cheapest_cents:
                break                               # more copies only cost more
            side = price(phases, card=card, name=f"{m} x {pk.name} side by side", cards=m * pk.cards,
                         window=float(pk.hours), package_cents=pk.exact * m, hourly=None, margin=margin, unit=unit,
                         terms=terms, deadline_hours=deadline_hours, budget_cents=budget_cents)
            limit = min(float(pk.hours), deadline_hours if deadline_hours is not None else math.inf)
            if side.fits or side.hours is None or side.critical_path_hours > limit + 1e-9 or \
                    (budget_cents is not None and side.cost_cents > budget_cents):
                tried.append(side)                  # it fits, or more copies cannot make it fit
                break
        if hourly is not None:
            tried.append(topped_up(phases, card=card, package=pk, hourly=hourly, margin=margin, unit=unit, terms=terms,
                                   deadline_hours=deadline_hours, budget_cents=budget_cents))
        out.extend(o for o in tried if o.fits and (cheapest_cents is None or o.cost_cents < cheapest_cents))
    return sorted(out, key=lambda o: (o.cost_cents, o.hours or 0))


def rentals(phases: tuple[Phase, ...], *, card: str, packages: tuple, hourly: Decimal | None, on_demand_cards: int,
            margin: float, unit: str = "hour", deadline_hours: float | None = None, budget_cents: int | None = None,
            refused: tuple[str, ...] = (), combine: bool = True, terms: Terms = NO_TERMS) -> list[Option]:
    """Every way to rent one card for the phases, priced the same way wherever campaign prices work (budget, bench,
    ablate plan): each package alone, on demand on `on_demand_cards` cards (when an hourly price is given, None:
    not sold or not asked for) and, with combine, the cheapest combination of those packages (combinations: in a
    row, side by side, topped up on demand) when it holds the work for less than any single rental that does."""
    out = [price(phases, card=card, name=pk.name, cards=pk.cards, window=float(pk.hours), package_cents=pk.exact,
                 hourly=None, margin=margin, unit=unit, terms=terms, deadline_hours=deadline_hours,
                 budget_cents=budget_cents, refused=refused) for pk in packages]
    if hourly is not None:
        out.append(price(phases, card=card, name="on-demand", cards=on_demand_cards, window=None, package_cents=None,
                         hourly=hourly, margin=margin, unit=unit, terms=terms, deadline_hours=deadline_hours,
                         budget_cents=budget_cents, refused=refused))
    if combine:
        least = min((o.cost_cents for o in out if o.fits), default=None)
        out.extend(combinations(phases, card=card, packages=packages, hourly=hourly, margin=margin, unit=unit,
                                terms=terms, deadline_hours=deadline_hours, budget_cents=budget_cents, refused=refused,
                                cheapest_cents=least)[:1])
    return out


def cheapest(options: list[Option] | tuple[Option, ...]) -> Option | None:
    """The rental to take: the cheapest that fits; among equal costs the one with the most slack, then the one
    that ends first. None when none fits."""
    return min((o for o in options if o.fits), key=lambda o: (o.cost_cents, -(o.slack_hours or 0), o.hours or 0),
               default=None)


def topped_up(phases: tuple[Phase, ...], *, card: str, package: object, hourly: Decimal, margin: float,
              unit: str = "hour", deadline_hours: float | None = None, budget_cents: int | None = None,
              terms: Terms = NO_TERMS) -> Option:
    """A package (its cards for its window) with the runs still going at its end continued on demand: the
    package's price + each card's time past the window (from the window's end, or its first run after it, to its
    last run) per started unit."""
    from dataclasses import replace as with_


    pk = package
    o = price(phases, card=card, name=f"{pk.name} + on-demand", cards=pk.cards, window=None,  # type: ignore[attr-defined]
              package_cents=None, hourly=hourly, margin=margin, unit=unit, terms=terms, deadline_hours=deadline_hours)
    sched = scheduled(phases, pk.cards, margin)  # type: ignore[attr-defined]
    if sched is None or not o.fits:
        return o
    window = float(pk.hours) - terms.setup_hours  # type: ignore[attr-defined]  # in the schedule's hours
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for r in sched.runs:
        if r.end_hours <= window + 1e-9:
            continue
        for c in r.cards:
            first[c] = min(first.get(c, math.inf), max(r.start_hours, window))
            last[c] = max(last.get(c, 0.0), r.end_hours)
    exact = pk.exact + on_demand_cents(hourly, [last[c] - first[c] for c in first], unit,  # type: ignore[attr-defined]
                                       terms.minimum_hours, terms.minimum_seconds) \
        + storage_cents(terms, o.hours or 0, unit)
    cost = round_cents(exact)
    why = f"costs {usd(cost)} > the budget of {usd(budget_cents)}" if budget_cents is not None and \
        cost > budget_cents else ""
    per_useful = round_cents(exact / o.useful) if o.useful and not why else None
    return with_(o, cost_cents=cost, cost_usd=cost / 100, cost_exact_cents=str(exact), fits=not why, why=why,
                 cost_per_useful_cents=per_useful, package_hours=float(pk.hours))  # type: ignore[attr-defined]


def offer_rentals(pf: PriceFile, offers: tuple[CardPrices, ...] | list[CardPrices], phases: tuple[Phase, ...], *,
                  on_demand_cards: int, margin: float, deadline_hours: float | None = None,
                  budget_cents: int | None = None, refused: tuple[str, ...] = (), combine: bool = True) -> list[Option]:
    """Every rental of every offer of a card (PriceFile.offers: all of them, or the one 'CARD@OFFER' names) for
    the phases, each priced by `rentals` at its own prices, billing unit and terms and marked with its offer: the
    one way campaign budget, bench and ablate plan price the same runs. cheapest() of them is the one to take."""
    from dataclasses import replace as with_

    return [with_(o, offer=c.offer) for c in offers for o in rentals(
        phases, card=c.card, packages=c.packages, hourly=c.hourly_exact, on_demand_cards=on_demand_cards,
        margin=margin, unit=pf.unit(c), deadline_hours=deadline_hours, budget_cents=budget_cents, refused=refused,
        combine=combine, terms=c.terms)]
