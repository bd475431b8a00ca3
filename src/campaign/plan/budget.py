"""`campaign budget`: a campaign's phases scheduled on each rental a price file offers (3/7/30-day packages and
on-demand hours, per card), whether each fits its window (the critical path, not only the total hours), its cost
in exact cents, the recommendation and, when nothing fits, what to cut first."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record, Result
from ..validate import JsonObject
from .billing import (
    MARGIN,
    NO_TERMS,
    ROUNDING,
    Cut,
    Option,
    Terms,
    cheapest,
    offer_rentals,
    parse_margin,
    price,
    storage_cents,
)
from .money import round_cents, usd
from .prices import (
    CardPrices,
    PriceFile,
    card_ref,
    catalog_card,
    cents,
    known_keys,
    load_prices,
    load_yaml,
    offer_label,
    split_offer,
)
from .runtime import MFU, MFU_SOURCE, RuntimeEstimate, estimate_runtime
from .schedule import KINDS, Phase, Schedule, check_phases, schedule, topological

SCHEMA = "campaign.budget/1"
FIX = "see examples/plan/plan.yaml for the format"
MAX_HOURS = 100_000          # hours of one run (11 years): above it, a typo, and the float sums lose their hours
MAX_RUNS = 100_000           # runs scheduled in all (once per card count: 100,000 runs take about 5 s)
MAX_RUN_CARDS = 1_000_000    # runs x their cards: the card slots a schedule assigns
PLAN_KEYS = ("name", "card", "compare", "margin", "deadline_days", "budget_usd", "on_demand_cards", "phases")
PHASE_KEYS = ("name", "kind", "runs", "hours", "measured", "estimate", "cards", "after", "useful", "priority",
              "card")
# the fields of a phase's estimate: the model, the tokens a run processes, and campaign memory's workload options
# (a DPO or GRPO phase is not one of these: its hours are not the FLOPs of training on its tokens, the reference's
# forward and the generation aside; give such a phase its hours)
ESTIMATE_KEYS = ("model", "tokens", "mode", "method", "batch", "seq_len", "grad_checkpointing", "mixed_precision",
                 "lora_rank", "dtype", "shard", "optimizer")


@dataclass(frozen=True)
class PhaseSpec(Record):
    """A phase as the plan file gives it: hours per run on the plan's card, or an estimate to compute per card."""

    phase: Phase
    estimate: dict[str, Any] | None = None       # {model, tokens, method, batch, seq_len, ...} when hours are not given


@dataclass(frozen=True)
class CampaignPlan(Record):
    """A plan file read: phases, the card its hours are for, the cards to compare, margin and limits."""

    path: str
    name: str
    card: str | None
    compare: tuple[str, ...]
    margin: float
    phases: tuple[PhaseSpec, ...]
    deadline_hours: float | None = None
    budget_cents: int | None = None
    on_demand_cards: int | None = None


@dataclass(frozen=True)
class BudgetReport(Result):
    """Every option compared, the recommended one (None when nothing fits) with its schedule, the phases on its
    card, the runtime estimates used, and what to cut first when nothing fits."""

    plan: str
    name: str
    margin: float
    packages: tuple[Option, ...]
    recommended: str | None
    recommended_card: str | None
    why: str
    phases: tuple[Phase, ...]
    schedule: Schedule | None
    cut_first: tuple[Cut, ...]
    cut_for: str | None
    estimates: tuple[RuntimeEstimate, ...]
    checks: tuple[Check, ...]
    prices: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    plot: str | None = None
    schema: str = SCHEMA
    stop_rules: tuple[StopRule, ...] = ()
    rentals: tuple[CardRental, ...] = ()      # phases with a card of their own, each on a rental of that card
    total_cents: int | None = None            # the recommended rental + those rentals, each bill rounded once
    campaign_hours: float | None = None       # when the campaign's last run ends, every rental in its place
    recommended_offer: str | None = None      # the recommended rental's offer (the price file's `offer`)
    start_hours: float | None = None          # where the recommended rental starts on the campaign's clock (with
                                              # rentals: after the phases on other cards it waits for; else None)


@dataclass(frozen=True)
class CardRental(Record):
    """Phases that name their own card (a card per phase), on a rental of that card of their own: the cheapest of
    its rentals (of every offer of it, or of the offer the phases name) that fits (None: none does; why says so)
    and where it lies in the campaign: it starts (start_hours)
    when every phase its phases wait for has ended, and ends (end_hours) when its last run does."""

    card: str
    phases: tuple[Phase, ...]
    option: Option | None
    why: str = ""
    start_hours: float | None = None
    end_hours: float | None = None
    offer: str | None = None                  # the offer taken (or named, when none fits); None: the card has one
    schedule: Schedule | None = None          # its runs, hours from the end of its set-up (start_hours + set-up)


@dataclass(frozen=True)
class StopRule(Record):
    """A money stop rule derived from the plan on the recommended rental. scope 'run': a run of `phase` past `hours`
    (its hours x (1 + margin)) has overrun the plan; cents: that run's card time at the hourly price (None: the card
    has no hourly price). scope 'campaign': stop when the spend reaches `cents` (the plan's budget_usd, the cap);
    hours: the card-hours billed by the hour that the cap leaves past what is prepaid (None: no hourly price)."""

    scope: str
    phase: str | None
    hours: float | None
    cents: int | None
    rule: str


def read_plan(path: str | os.PathLike[str]) -> CampaignPlan:
    """Read a plan file (YAML or JSON): name, card, compare, margin ('15%'), deadline_days, budget_usd,
    on_demand_cards, phases: [{name, kind, runs, hours | measured | estimate, cards, after, useful, priority, card}];
    hours per run given, measured (a recorded run's id: its wall-clock from start to end) or estimated from FLOPs; a
    phase's own `card` (a card per phase): it runs on a rental of that card of its own, its hours taken on it.

    Raises:
        InputError: one line naming the file and the field (a cycle, a negative duration, an unknown phase).
    """

    where = str(path)
    doc = JsonObject(load_yaml(path, "plan"), where, fix=FIX)
    known_keys(doc, PLAN_KEYS)
    if isinstance(doc.raw("card", None), str) and "@" in doc.raw("card"):
        doc.fail(f"field 'card' is {doc.raw('card')!r}: the card the hours were taken on, whatever the offer; drop "
                 "the '@...' and name offers in 'compare', a phase's 'card' or --card CARD@OFFER")
    card = catalog_card(doc.raw("card"), where, "card") if "card" in doc else None
    compare = tuple(card_ref(c, where, "compare") for c in doc.list("compare", []))
    margin = parse_margin(doc.raw("margin", f"{MARGIN:.0%}"), where)
    specs: list[PhaseSpec] = []
    experiments = 0
    for p in doc.items("phases"):
        name = p.str("name")
        p = JsonObject(p.data, f"{where}: phase {name!r}", fix=FIX)
        known_keys(p, PHASE_KEYS)
        kind = p.str("kind", "experiment")
        if kind not in KINDS:
            p.fail(f"field 'kind' is {kind!r}; use one of {', '.join(KINDS)}")
        runs = p.count("runs", 1, minimum=1, maximum=100_000)
        ncards = p.count("cards", 1, minimum=1, maximum=4096)
        after = p.raw("after", [])
        after = (after,) if isinstance(after, str) else after
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            p.fail("field 'after' must be a phase name or a list of phase names")
        estimate = p.obj("estimate").data if "estimate" in p else None
        if estimate is not None:
            known_keys(JsonObject(estimate, f"{where}: phase {name!r}: estimate", fix=FIX), ESTIMATE_KEYS)
        pin = card_ref(p.raw("card"), p.where, "card") if "card" in p else None
        if "hours" in p:
            hours = p.raw("hours")
            if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) \
                    or not 0 < hours <= MAX_HOURS:
                p.fail(f"field 'hours' is {hours!r}; a duration must be a number of hours above 0 and at most "
                       f"{MAX_HOURS:,}")
            if card is None and pin is None:
                doc.fail(f"phase {name!r} gives hours but the plan names no 'card' they were taken on; add card:")
        elif "measured" in p:
            hours = _measured_hours(p, p.str("measured"))
            if card is None and pin is None:
                doc.fail(f"phase {name!r} is measured but the plan names no 'card' it ran on; add card:")
        elif estimate is None:
            p.fail("give 'hours' (per run), 'measured' (a recorded run's id) or an 'estimate' ({model, tokens, ...})")
        else:
            hours = 1.0
        if kind == "experiment":
            experiments += 1
        priority = p.count("priority", experiments if kind == "experiment" else None, minimum=0)
        useful = p.count("useful", runs if kind == "experiment" else 0, maximum=10**9)
        how = "given" if "hours" in p else "measured" if "measured" in p else "estimated"
        phase = Phase(name, kind, runs, float(hours), ncards, tuple(after), useful, priority, how, pin)
        specs.append(PhaseSpec(phase, estimate))
    check_phases(tuple(s.phase for s in specs), where)
    card_groups(tuple(s.phase for s in specs), where)
    total = sum(s.phase.runs for s in specs)
    slots = sum(s.phase.runs * s.phase.cards for s in specs)
    if total > MAX_RUNS or slots > MAX_RUN_CARDS:
        doc.fail(f"the phases hold {total:,} runs on {slots:,} run-cards; at most {MAX_RUNS:,} runs and "
                 f"{MAX_RUN_CARDS:,} run-cards are scheduled: give fewer, longer runs per phase")
    deadline = doc.number("deadline_days", None, minimum=0)
    if deadline is not None and deadline <= 0:
        doc.fail("field 'deadline_days' must be above 0")
    budget = cents(doc.raw("budget_usd"), where, "budget_usd") if "budget_usd" in doc else None
    return CampaignPlan(where, str(doc.raw("name", os.path.basename(where))), card, compare, margin, tuple(specs),
                        None if deadline is None else deadline * 24, budget,
                        doc.count("on_demand_cards", None, minimum=1, maximum=4096))


def card_groups(phases: tuple[Phase, ...], where: str = "the plan") -> \
        list[tuple[str | None, tuple[Phase, ...]]]:
    """The phases by the card they run on (a phase's own `card`; None: the cards compared), each group a rental of
    its own, in the order the rentals start: a group waits for the groups its phases come after. Two groups that
    wait for each other are one InputError (a rental would stop and start again: give those phases one card)."""
    by = {ph.name: ph for ph in phases}
    keys = list(dict.fromkeys(ph.card for ph in phases))
    needs: dict[str | None, set[str | None]] = {k: set() for k in keys}
    for ph in phases:
        needs[ph.card].update(by[d].card for d in ph.after if by[d].card != ph.card)
    done: list[str | None] = []
    while len(done) < len(keys):
        ready = [k for k in keys if k not in done and needs[k] <= set(done)]
        if not ready:
            left = [k for k in keys if k not in done]
            ph, d = next((ph, d) for ph in phases if ph.card in left for d in ph.after
                         if by[d].card in left and by[d].card != ph.card)
            raise InputError(f"{where}: phase {ph.name!r} on {_on(ph.card)} comes after {d!r} on {_on(by[d].card)}, "
                             f"and phases on the two wait for each other: each card's rental runs its phases in one "
                             f"stretch; give those phases the same card")
        done.append(ready[0])
    return [(k, tuple(ph for ph in phases if ph.card == k)) for k in done]


def _on(card: str | None) -> str:
    return "the cards compared" if card is None else card


def _within(phases: tuple[Phase, ...]) -> tuple[Phase, ...]:
    """A group's phases with the phases of other groups dropped from their 'after' (the group's rental starts when
    those have ended)."""
    names = {ph.name for ph in phases}
    return tuple(ph if set(ph.after) <= names else replace(ph, after=tuple(a for a in ph.after if a in names))
                 for ph in phases)


def _measured_hours(p: JsonObject, run_id: str) -> float:
    """A recorded run's wall-clock hours (campaign run: created to ended)."""
    from ..track.manifest import parse_time
    from ..track.store import show_run

    m = show_run(run_id)
    if not m.ended:
        p.fail(f"run {run_id!r} has not ended (status {m.status}); end it with campaign run end, or give 'hours'")
    hours = (parse_time(m.ended) - parse_time(m.created)).total_seconds() / 3600
    if hours <= 0:
        p.fail(f"run {run_id!r} took no time ({m.created} to {m.ended}); give 'hours'")
    return hours


def _what_fits(e: JsonObject, workload: Any, card: str, others: tuple[str, ...] = (),
               priced: tuple[tuple[str, Decimal | None], ...] = ()) -> str:
    """When one card's memory is short, what would make the run fit, each with campaign memory's estimate (the
    memory needed against what the card offers): another card compared that holds it, else the cheapest by the hour
    of the price file's other cards (priced: card, hourly exact cents) that does, else the smallest rental card of
    the catalog that does (to be priced); the fewest cards (2, 4 or 8)
    with ZeRO-3 sharding; an 8-bit optimizer (full training with AdamW); QLoRA (full or LoRA training). '' when
    none does."""
    from dataclasses import replace as with_

    from ..memory.plan import plan_memory

    model = e.str("model")

    def fit(w: Any, c: str) -> Any:
        return plan_memory(model, w, card=c, solve=False).fits[0]

    def gib(f: Any) -> str:
        need = f.memory_bytes - f.headroom_bytes
        return f"{need / 2**30:,.1f} of {f.memory_bytes / 2**30:,.1f} GiB"

    found: list[str] = []
    for other in others:
        if other != card and (f := fit(workload, other)).verdict == "fits":
            found.append(f"it fits {other} ({gib(f)})")
            break
    else:
        from ..hardware.cards import all_cards

        # no card compared holds it: the cheapest by the hour of the price file's other cards that does, compared
        # when asked for; else the smallest rental card of the catalog that does (the catalog has no prices;
        # the least memory, then the fewest FLOP/s, stands for the cheapest), for the user to price
        listed = {name for name, _ in priced}
        by_price = sorted(((h, name) for name, h in priced if h is not None and name != card and name not in others
                           and _known_card(name)), key=lambda x: (x[0], x[1]))
        for hourly, name in by_price:
            if (f := fit(workload, name)).verdict == "fits":
                found.append(f"it fits {name}, the cheapest by the hour of the price file's other cards "
                             f"({usd(hourly)}/h; {gib(f)}): compare it (--card {name})")
                break
        catalog = sorted((c for c in all_cards() if c.typical_rental and c.name != card and c.name not in others
                          and c.name not in listed), key=lambda c: (c.memory_bytes, c.bf16_dense_flops or 0, c.name))
        for c in catalog if not found else ():
            if (f := fit(workload, c.name)).verdict == "fits":
                found.append(f"it fits {c.name}, the smallest rental card of the catalog that holds it ({gib(f)}); "
                             f"add its price to the price file and compare it (--card {c.name})")
                break
    if workload.shard == "none":
        for n in (2, 4, 8):
            if n > workload.gpus and (f := fit(with_(workload, gpus=n, shard="zero3"), card)).verdict == "fits":
                found.append(f"it fits on {n} cards with ZeRO-3 (set cards: {n}, shard: zero3; {gib(f)} per card)")
                break
    training = workload.mode == "train"
    if training and workload.method == "full" and workload.optimizer == "adamw" and \
            (f := fit(with_(workload, optimizer="adamw-8bit"), card)).verdict == "fits":
        found.append(f"an 8-bit optimizer fits (optimizer: adamw-8bit; {gib(f)})")
    if training and workload.method in ("full", "lora"):
        from ..memory import make_workload

        try:
            qlora = make_workload(**{**workload.to_dict(), "method": "qlora", "dtype": "nf4", "notes": ()})
        except Exception:               # a workload the QLoRA variant cannot take: no suggestion
            qlora = None
        if qlora is not None and (f := fit(qlora, card)).verdict == "fits":
            found.append(f"QLoRA fits (method: qlora; {gib(f)})")
    return "; " + "; ".join(found) if found else ""


def _known_card(name: str) -> bool:
    from .prices import _known

    return _known(name)


def phases_on(plan: CampaignPlan, card: str, *, mfu: float = MFU, others: tuple[str, ...] = (),
              priced: tuple[tuple[str, Decimal | None], ...] = ()) -> \
        tuple[tuple[Phase, ...], list[RuntimeEstimate], list[str]]:
    """The plan's phases with their hours on `card`: given hours on the plan's card as they are, scaled by the
    bf16 FLOP/s ratio on another card; estimated hours from FLOPs. Also the estimates and what cannot run there
    (a micro-batch that does not fit the card's memory)."""
    from ..hardware import find_card
    from ..memory import make_workload

    out: list[Phase] = []
    estimates: list[RuntimeEstimate] = []
    refused: list[str] = []
    target = find_card(card)
    for s in plan.phases:
        p = s.phase
        if s.estimate is not None:
            e = JsonObject(s.estimate, f"{plan.path}: phase {p.name!r}: estimate", fix=FIX)
            options = {k: e.data[k] for k in ESTIMATE_KEYS if k not in ("model", "tokens", "mode") and k in e}
            try:
                workload = make_workload(mode=e.str("mode", "train"), gpus=p.cards, **options)
            except TypeError as err:
                e.fail(f"a field has the wrong type ({err})")
            except InputError as err:          # campaign memory's refusal, said where the plan gives the field
                e.fail(str(err))
            tokens = e.count("tokens", minimum=1, maximum=10**16)
            est = replace(estimate_runtime(e.str("model"), workload, tokens=tokens, card=target.name, mfu=mfu),
                          phase=p.name)
            estimates.append(est)
            if est.memory_verdict != "fits":
                refused.append(f"{p.name}: {est.model} does not fit {target.name} at this micro-batch "
                               f"({est.memory_verdict}; campaign memory)" + _what_fits(e, workload, target.name,
                                                                                        others, priced))
            out.append(replace(p, hours=est.hours, hours_how="estimated"))
        elif plan.card is not None and target.name != plan.card:
            source = find_card(plan.card)
            if not (source.bf16_dense_flops and target.bf16_dense_flops):
                refused.append(f"{p.name}: hours given on {plan.card}; no bf16 FLOP/s to scale them to {target.name}")
                out.append(p)
            else:
                out.append(replace(p, hours=p.hours * source.bf16_dense_flops / target.bf16_dense_flops,
                                   hours_how="scaled"))
        else:
            out.append(p)
    return tuple(out), estimates, refused


def _useful(phases: tuple[Phase, ...]) -> int:
    return sum(p.useful for p in phases)


def _option(phases: tuple[Phase, ...], card: str, name: str, ncards: int, window: float | None,
            package: Decimal | None, hourly: Decimal | None, plan: CampaignPlan, refused: list[str],
            unit: str = "hour", terms: Terms = NO_TERMS) -> Option:
    return price(phases, card=card, name=name, cards=ncards, window=window, package_cents=package, hourly=hourly,
                 margin=plan.margin, unit=unit, deadline_hours=plan.deadline_hours, budget_cents=plan.budget_cents,
                 refused=tuple(refused), terms=terms)


def _cuts(phases: tuple[Phase, ...], fits: Any) -> tuple[tuple[Cut, ...], bool]:
    """Runs removed one at a time from the cuttable phases (highest priority number first, later phases first
    among equals), down to one run each, until fits(phases) holds: (the cuts, whether it then fits). The fewest
    removals in that order are found by bisection over the sequence of single-run removals (a schedule with
    fewer runs ends no later), so O(log runs) schedules rather than one per run removed."""
    position = {p.name: i for i, p in enumerate(phases)}
    order = sorted((p for p in phases if p.priority is not None and p.runs > 1),
                   key=lambda p: (-(p.priority or 0), -position[p.name]))
    steps = [(p.name, p.runs - 1) for p in order]           # removable runs per phase, in cut order
    total = sum(k for _, k in steps)

    def after(t: int) -> dict[str, int]:
        """The first t single-run removals, as runs cut per phase."""
        cut: dict[str, int] = {}
        for name, k in steps:
            if t <= 0:
                break
            cut[name] = min(k, t)
            t -= cut[name]
        return cut

    def applied(cut: dict[str, int]) -> tuple[Phase, ...]:
        return tuple(replace(p, runs=p.runs - cut[p.name], useful=max(p.useful - cut[p.name], 0))
                     if cut.get(p.name) else p for p in phases)

    if fits(phases) or total == 0:
        return (), bool(fits(phases))
    if not fits(applied(after(total))):
        lo = total
        ok = False
    else:
        lo, hi = 0, total                       # fits(after(hi)) holds, fits(after(lo)) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(applied(after(mid))):
                hi = mid
            else:
                lo = mid
        lo, ok = hi, True
    by = {p.name: p for p in phases}
    return tuple(Cut(n, k, by[n].runs - k, k * by[n].hours * by[n].cards) for n, k in after(lo).items()), ok


def budget(plan: str | os.PathLike[str] | CampaignPlan, *, prices: str | os.PathLike[str] | PriceFile | None = None,
           cards: tuple[str, ...] | list[str] | None = None, packages: tuple[str, ...] | list[str] | None = None,
           mfu: float = MFU, margin: float | None = None, plot: str | os.PathLike[str] | None = None,
           combine: bool = True) -> BudgetReport:
    """Compare every rental of the price file (its packages and on-demand hours, for each card compared) on the
    plan: fits, slack, utilization, cost and cost per useful result; recommend the cheapest that fits.

    Phases that name their own card (a card per phase) run on a rental of that card of their own, the cheapest of
    its offers that fits (`rentals`), started when every phase they wait for has ended; the cards compared (and
    `packages`) are for the other phases (when every phase names its card: the first phase's card). The budget
    (budget_usd) less those rentals is what the compared cards may cost; the deadline holds for the campaign with
    every rental in its place (`campaign_hours`); `total_cents` adds up the bills.

    Args:
        plan: a plan file (read_plan) or a CampaignPlan.
        prices: a price file (load_prices; default the bundled example) or a PriceFile.
        cards: the cards to compare, every offer of each (the price file's entries of that card), or one offer as
            'CARD@OFFER' (default: the plan's 'compare', else every card of the price file).
        packages: only these packages (by name; 'on-demand' for the hourly price), each must be in the price file.
        mfu: model FLOPs utilization for estimated hours; margin: overrides the plan's recovery margin.
        plot: write the recommended schedule as a Gantt chart (.png or .svg; matplotlib).
        combine: also price the packages compared combined (billing.combinations: k in a row, side by side, topped
            up on demand when on-demand is compared) where one alone does not hold the work and the combination is
            the cheaper.
    Raises:
        InputError: a bad plan or price file, or a card missing from the price file.
    """
    if not 0 < mfu <= 1:
        raise InputError(f"MFU {mfu!r} must be in (0, 1]; e.g. 0.4")
    whole = plan if isinstance(plan, CampaignPlan) else read_plan(plan)
    if margin is not None:
        if not 0 <= margin < 1:
            raise InputError(f"margin {margin!r} must be a share in [0, 1); e.g. 0.15")
        whole = replace(whole, margin=margin)
    pf = prices if isinstance(prices, PriceFile) else load_prices(prices)
    groups = card_groups(tuple(s.phase for s in whole.phases), whole.path)
    main_card = None if any(g is None for g, _ in groups) else groups[0][0]
    spec = {s.phase.name: s for s in whole.phases}

    def part(members: tuple[Phase, ...], card: str | None) -> CampaignPlan:
        """The plan of one group: its phases (on `card`, where their hours were taken, when they name it)."""
        return replace(whole, card=card or whole.card, phases=tuple(replace(spec[ph.name], phase=ph)
                                                                    for ph in _within(members)))

    estimates: list[RuntimeEstimate] = []
    priced = _priced(pf)
    labels: list[str] = []                       # every offer priced, for the notes on its billing
    others: list[tuple[str, CardRental, CardPrices]] = []     # group, its rental, the offer taken (else the first)
    for g, members in groups:
        if g is None or g == main_card:
            continue
        offers = pf.offers(g)
        labels.extend(c.label for c in offers)
        ph, est, refused = phases_on(part(members, offers[0].card), offers[0].card, mfu=mfu, priced=priced)
        estimates.extend(est)
        found = offer_rentals(pf, offers, ph, on_demand_cards=whole.on_demand_cards or max(x.cards for x in ph),
                              margin=whole.margin, deadline_hours=whole.deadline_hours, refused=tuple(refused),
                              combine=combine)
        pick = cheapest(found)
        gc = next(c for c in offers if c.offer == pick.offer) if pick else offers[0]
        others.append((g, CardRental(gc.card, ph, pick, "" if pick else _why(None, found),
                                     offer=pick.offer if pick else split_offer(g)[1]), gc))
    elsewhere = sum(r.option.cost_cents for _, r, _ in others if r.option is not None)
    p = part(next(m for g, m in groups if g == main_card), None if main_card is None else split_offer(main_card)[0])
    if whole.budget_cents is not None and others:
        p = replace(p, budget_cents=max(whole.budget_cents - elsewhere, 0))
    refs: tuple[str, ...]
    if main_card is not None:
        refs = (main_card,)
    else:
        refs = tuple(_ref(c) for c in cards) if cards else p.compare or tuple(dict.fromkeys(c.card for c in pf.cards))
    offered = list({c.label: c for ref in refs for c in pf.offers(ref)}.values())    # each offer once, in order
    labels.extend(c.label for c in offered)
    compared = tuple(dict.fromkeys(c.card for c in offered))
    options: list[Option] = []
    per_card: dict[str, tuple[Phase, ...]] = {}
    for card in compared:
        phases, est, refused = phases_on(p, card, mfu=mfu, others=compared, priced=priced)
        per_card[card] = phases
        estimates.extend(est)
        mine = [c for c in offered if c.card == card]
        for n in packages or ():                 # a package or the hourly price asked for: some offer must sell it
            if n != "on-demand" and not any(pk.name == n for c in mine for pk in c.packages):
                pf.package(mine[0].label, n)      # one line naming the file and the packages it has
        if packages and "on-demand" in packages and all(c.hourly_exact is None for c in mine):
            raise InputError(f"{pf.path}: card {mine[0].label if len(mine) == 1 else card!r} has no hourly price"
                             + ("" if len(mine) == 1 else " in any of its offers") + "; add 'hourly' or drop on-demand")
        asked = []                                # each offer with only the rentals asked for (--package)
        for cp in mine:
            chosen = tuple(pk for n in packages if n != "on-demand" for pk in cp.packages if pk.name == n) \
                if packages else cp.packages
            by_hour = not packages or "on-demand" in packages
            offer = replace(cp, packages=chosen) if by_hour else \
                replace(cp, packages=chosen, hourly=None, hourly_cents=None)
            if offer.packages or offer.hourly_exact is not None:    # else it sells none of the rentals asked for
                asked.append(offer)
        cards_on_demand = p.on_demand_cards or max(x.cards for x in phases)
        options.extend(offer_rentals(pf, asked, phases, on_demand_cards=cards_on_demand, margin=p.margin,
                                     deadline_hours=p.deadline_hours, budget_cents=p.budget_cents,
                                     refused=tuple(refused), combine=combine))
    # what to cut, when no option fits: for each that does not (memory refusals aside)
    final: list[Option] = []
    anything_fits = any(o.fits for o in options)
    for o in options:
        if anything_fits or o.fits or (o.why and "does not fit" in o.why and "micro-batch" in o.why) or o.hours is None:
            final.append(o)
            continue
        phases = per_card[o.card]
        cp = pf.for_card(offer_label(o.card, o.offer))
        pk_price = Decimal(o.cost_exact_cents) - storage_cents(cp.terms, o.hours, pf.unit(cp)) \
            if o.window_hours is not None else None           # the packages' price, storage billed apart
        hourly = cp.hourly_exact

        def fits(ph: tuple[Phase, ...], o: Option = o, pk_price: Decimal | None = pk_price,
                 hourly: Decimal | None = hourly, cp: CardPrices = cp) -> bool:
            return _option(ph, o.card, o.name, o.cards, o.window_hours, pk_price, hourly, p, [], pf.unit(cp),
                           cp.terms).fits

        cuts, ok = _cuts(phases, fits)
        final.append(replace(o, cuts=cuts, fits_after_cuts=ok))
    best = cheapest(final)
    cut_first: tuple[Cut, ...] = ()
    cut_for = None
    if best is None:
        rescued = [o for o in final if o.fits_after_cuts]
        if rescued:
            pick = min(rescued, key=lambda o: (sum(c.runs_cut for c in o.cuts), o.cost_cents))
            cut_first, cut_for = pick.cuts, f"{label(pick)} {pick.name}"
    why = _why(best, final)
    placed: list[CardRental] = [r for _, r, _ in others]
    campaign_hours = None if best is None else best.hours
    start = None
    missing = [r for r in placed if r.option is None]
    if best is not None and missing:
        why = "; ".join(f"the phases on {_rental_card(r)} ({', '.join(ph.name for ph in r.phases)}): {r.why}"
                        for r in missing)
        best = None
    elif best is not None and placed:
        chosen_on: dict[str | None, tuple[Option, tuple[Phase, ...]]] = {main_card: (best, per_card[best.card])}
        for g, r, _ in others:
            assert r.option is not None              # none is missing here
            chosen_on[g] = (r.option, r.phases)
        spans = _timeline(groups, chosen_on, p.margin)
        placed = [replace(r, start_hours=spans[g][0], end_hours=spans[g][1], schedule=spans[g][2])
                  for g, r, _ in others]
        start = spans[main_card][0]
        campaign_hours = max(end for _, end, _ in spans.values())
        if whole.deadline_hours is not None and campaign_hours > whole.deadline_hours + 1e-9:
            why = f"every rental in its place, the campaign ends at {campaign_hours:,.1f} h > the " \
                  f"{whole.deadline_hours:,.1f} h deadline (" + "; ".join(
                      f"{_rental_card(r)} from {r.start_hours:,.1f} h to {r.end_hours:,.1f} h" for r in placed) + ")"
            best = None
    total = None if best is None else best.cost_cents + elsewhere
    card = best.card if best else (p.card or compared[0])
    card = card if card in per_card else next(iter(per_card))
    sched = schedule(per_card[card], best.cards, margin=p.margin) if best else None
    checks = _checks(whole, best, final, estimates, why if best is None and (missing or placed) else None)
    notes = _notes(p, estimates, mfu, pf, per_card, tuple(dict.fromkeys(labels)))
    if placed:
        notes.append("phases with a card of their own ("
                     + "; ".join(f"{', '.join(ph.name for ph in r.phases)} on {_rental_card(r)}" for r in placed)
                     + ") run on a rental of that card of their own, its cheapest that fits, started when every "
                       "phase they wait for has ended"
                     + (f"; budget_usd less those rentals ({usd(elsewhere)}) is what the cards compared may cost"
                        if whole.budget_cents is not None else ""))
    if main_card is not None and len(groups) > 1:
        notes.append(f"every phase names its card: the rentals of {main_card} (the first phase's) are compared")
    written = None
    several = best is not None and any(r.schedule is not None for r in placed)
    if plot is not None and sched is not None and best is not None and not several:
        from .plots import gantt

        written = str(gantt(sched, plot, title=f"{p.name}: {label(best)} {best.name}", window=best.package_hours,
                            label=_package_end(best), setup_hours=best.setup_hours))
    rules = stop_rules(replace(p, budget_cents=whole.budget_cents), best, per_card[card],
                       pf.for_card(offer_label(best.card, best.offer)),
                       tuple((r, c) for r, (_, _, c) in zip(placed, others, strict=True))) if best else ()
    report = BudgetReport(p.path, p.name, p.margin, tuple(final), best.name if best else None,
                          best.card if best else None, why, per_card[card], sched, cut_first, cut_for,
                          tuple(estimates), tuple(checks),
                          {"path": pf.path, "source": pf.source, "date": pf.date, "example": pf.example},
                          tuple(notes), written, stop_rules=rules, rentals=tuple(placed), total_cents=total,
                          campaign_hours=campaign_hours, recommended_offer=best.offer if best else None,
                          start_hours=start if best else None)
    if plot is not None and several:                 # a card per phase: every rental's phases on their own rows
        from .plots import gantt_rentals

        report = replace(report, plot=str(gantt_rentals(report.to_dict(), plot,
                                                        title=f"{p.name}: every rental on the campaign's clock")))
    return report


def label(o: Option) -> str:
    """An option's card with its offer, as --card names it: 'H100-SXM-80GB@community' (the card alone when the
    price file gives it one entry)."""
    return offer_label(o.card, o.offer)


def _rental_card(r: CardRental) -> str:
    return offer_label(r.card, r.offer)


def _ref(card: str) -> str:
    """A card named on the command line ('h100', 'h100@community') as the price file names it: the catalog's
    name (the catalog's one-line error for an unknown card), with its offer."""
    from ..hardware import find_card

    name, offer = split_offer(card)
    if offer == "":
        raise InputError(f"--card {card!r}: name the offer after '@' (CARD@OFFER, e.g. H100-SXM-80GB@community) or "
                         "drop the '@'")
    return offer_label(find_card(name).name, offer)


def _priced(pf: PriceFile) -> tuple[tuple[str, Decimal | None], ...]:
    """Each card of the price file with its lowest hourly price among its offers (None: none sold by the hour)."""
    low: dict[str, Decimal | None] = {}
    for c in pf.cards:
        h, seen = c.hourly_exact, low.get(c.card)
        low[c.card] = h if seen is None else seen if h is None else min(h, seen)
    return tuple(low.items())


def _timeline(groups: list[tuple[str | None, tuple[Phase, ...]]],
              chosen: dict[str | None, tuple[Option, tuple[Phase, ...]]], margin: float) -> \
        dict[str | None, tuple[float, float, Schedule | None]]:
    """Where each group's rental lies (hours from the campaign's start): it starts when every phase of another
    group its phases come after has ended (set-up included), and ends its own hours later (set-up included); with
    its schedule (hours from the end of its set-up)."""
    ends: dict[str, float] = {}
    out: dict[str | None, tuple[float, float, Schedule | None]] = {}
    for g, members in groups:
        option, phases = chosen[g]
        names = {ph.name for ph in members}
        start = max((ends[d] for ph in members for d in ph.after if d not in names), default=0.0)
        sched = schedule(phases, option.cards, margin=margin)
        for sp in sched.spans if sched is not None else ():
            ends[sp.phase] = start + option.setup_hours + sp.end_hours
        out[g] = (start, start + (option.hours or 0.0), sched)
    return out


def stop_rules(p: CampaignPlan, best: Option, phases: tuple[Phase, ...], prices: CardPrices,
               others: tuple[tuple[CardRental, CardPrices], ...] = ()) -> tuple[StopRule, ...]:
    """Money stop rules for the recommended rental: per phase, the hours a run may take (hours x (1 + margin)) and
    what that card time costs at its card's hourly price; with a budget (budget_usd, the cap), the campaign's: stop
    at the cap, and the card-hours billed by the hour it leaves past the prepaid packages and the rentals of the
    phases with a card of their own (`others`). Exact cents, rounded once."""
    hourly = prices.hourly_exact
    out: list[StopRule] = []
    each = [(ph, hourly, "") for ph in phases] + [(ph, c.hourly_exact, f" {r.card}") for r, c in others
                                                     for ph in r.phases]
    for ph, rate, on in each:
        hours = ph.hours * (1 + p.margin)
        exact = None if rate is None else rate * Decimal(repr(hours)) * ph.cards
        cents = None if exact is None else round_cents(exact)
        money = "" if cents is None else f", {usd(cents)} of card time at {usd(rate or 0)}/h"
        out.append(StopRule("run", ph.name, hours, cents, f"stop a run of {ph.name} that passes {hours:,.2f} h "
                            f"({ph.hours:,.2f} h + {p.margin:.0%} margin) on {ph.cards}{on} card(s){money}: it has "
                            "overrun the plan"))
    if p.budget_cents is not None:
        prepaid = Decimal(0)
        if best.package_hours is not None:                 # a package, alone, combined or topped up
            exact = Decimal(best.cost_exact_cents)
            topped = best.name.removesuffix(" + on-demand")
            prepaid = exact if best.window_hours is not None else \
                next(pk.exact for pk in prices.packages if pk.name == topped)
        elsewhere = sum((r.option.cost_cents for r, _ in others if r.option is not None), 0)
        left = Decimal(p.budget_cents) - prepaid - elsewhere
        card_hours = None if hourly is None or not hourly else max(float(left / hourly), 0.0)
        what = f"{usd(round_cents(prepaid))} prepaid in {best.name.removesuffix(' + on-demand')}; " if prepaid else ""
        what += "".join(f"{usd(r.option.cost_cents)} on {_rental_card(r)} {r.option.name}; " for r, _ in others
                        if r.option is not None)
        room = "" if card_hours is None else f"{what}at most {card_hours:,.1f} {label(best)} card-hours billed by " \
            "the hour" if others else f"{what}at most {card_hours:,.1f} card-hours billed by the hour"
        out.append(StopRule("campaign", None, card_hours, p.budget_cents,
                            f"stop the campaign when the spend reaches {usd(p.budget_cents)} (budget_usd): the plan "
                            f"costs {usd(best.cost_cents + elsewhere)} on {label(best)} {best.name}"
                            + "".join(f" and {_rental_card(r)} {r.option.name}" for r, _ in others
                                      if r.option is not None)
                            + (f"; {room}" if room else "")))
    return tuple(out)



def _package_end(o: Option) -> str | None:
    """The Gantt's label of where the package ends: '3-day ends at 72 h' (then 'on demand after' when topped up)."""
    if o.package_hours is None:
        return None
    name = o.name.removesuffix(" + on-demand")
    return f"{name} ends at {o.package_hours:,.4g} h" + ("; on demand after" if o.window_hours is None else "")


def _why(best: Option | None, options: list[Option]) -> str:
    if best is None:
        if not options:
            return "no rental priced"
        widest = max(options, key=lambda o: (math.inf if o.window_hours is None else o.window_hours, o.cards))
        return f"no rental fits; the widest, {label(widest)} {widest.name}: {widest.why}"
    text = f"the cheapest that fits: {usd(best.cost_cents)}"
    if best.window_hours is not None:
        text += f", ends at {best.hours:,.1f} h of {best.window_hours:,.0f} h ({best.slack_hours:,.1f} h slack)"
    else:
        text += f", {best.hours:,.1f} h billed by the hour"
    if best.cost_per_useful_cents is not None:
        text += f", {usd(best.cost_per_useful_cents)} per useful result"
    shorter = [o for o in options if o.card == best.card and o.offer == best.offer and not o.fits
               and o.window_hours is not None and (best.window_hours is None or o.window_hours < best.window_hours)]
    if shorter:
        o = min(shorter, key=lambda o: o.cost_cents)
        text += f"; {o.name} does not fit ({o.why})"
    return text


def _checks(p: CampaignPlan, best: Option | None, options: list[Option], estimates: list[RuntimeEstimate],
            whole_why: str | None = None) -> list[Check]:
    phases = tuple(s.phase for s in p.phases)
    baselines = [ph.name for ph in phases if ph.kind == "baseline"]
    experiments = [ph for ph in phases if ph.kind == "experiment"]
    # which phases come after a baseline, directly or through others: one pass in dependency order (linear)
    behind: dict[str, bool] = {}
    by = {ph.name: ph for ph in phases}
    for name in topological(phases) or []:
        behind[name] = any(d in baselines or behind.get(d, False) for d in by[name].after)

    out: list[Check] = []
    if not baselines:
        out.append(Check("budget.baseline_first", "warn", "no phase of kind 'baseline'",
                         "without the starting model evaluated first, no experiment has a concrete reference",
                         "add a baseline phase and put the experiments after it"))
    else:
        loose = [e.name for e in experiments if not behind.get(e.name)]
        out.append(Check("budget.baseline_first", "warn" if loose else "pass",
                         f"experiments not after the baseline: {', '.join(loose)}" if loose
                         else f"every experiment comes after {', '.join(baselines)}",
                         "an experiment run before the baseline is evaluated has nothing to be compared with",
                         "add the baseline phase to their 'after'"))
    out.append(Check("budget.margin", "warn" if p.margin < 0.1 else "pass", f"recovery margin {p.margin:.0%} on "
                     "every run", "runs crash, get preempted and need their checkpoints re-checked in a fresh process",
                     "keep a margin of 10-20% (margin: 15%)"))
    if estimates:
        names = ", ".join(dict.fromkeys(e.phase for e in estimates))
        out.append(Check("budget.estimated_hours", "warn", f"hours of {names} estimated from FLOPs",
                         "an estimate, not a measurement: real MFU varies with batch, sequence and kernels",
                         "time a few steps on the card and give hours (or --mfu)"))
    guessed = sorted((e for e in estimates if e.memory_generic and e.memory_verdict == "fits"),
                     key=lambda e: best is None or e.card != best.card)  # the chosen card's first
    if guessed:  # campaign memory's memory.family: the fit of a family the formulas do not know is a guess
        e = guessed[0]
        out.append(Check("budget.memory_family", "skipped",
                         f"{', '.join(dict.fromkeys(g.phase for g in guessed))}: {e.model} fits {e.card} on a "
                         f"guess ({e.memory_generic})",
                         "its family is not one campaign memory's formulas model: whether a run fits is a guess, and "
                         "a run that does not fit stops the campaign",
                         f"trace its real step: campaign trace {e.ref or e.model} --card {e.card} with the phase's "
                         "options"))
    out.append(Check("budget.fits", "pass" if best else "fail",
                     f"{label(best)} {best.name} fits" if best else whole_why or "no rental fits the plan",
                     "a campaign that overruns its window loses the runs in flight",
                     "cut runs as listed, take a longer package or more cards"))
    return out


def _notes(p: CampaignPlan, estimates: list[RuntimeEstimate], mfu: float, pf: PriceFile,
           per_card: dict[str, tuple[Phase, ...]], priced: tuple[str, ...] = ()) -> list[str]:
    notes = []
    if pf.example:
        notes.append(f"prices: example data ({pf.source}, {pf.date}); pass --prices FILE with your provider's")
    if estimates:
        notes.append(f"estimated hours = FLOPs / (bf16 FLOP/s x cards x MFU {mfu:.0%}); MFU default: {MFU_SOURCE}")
    if any(ph.hours_how == "scaled" for phases in per_card.values() for ph in phases):
        notes.append(f"hours given on {p.card} are scaled to other cards by the ratio of dense bf16 FLOP/s "
                     "(an estimate)")
    for c in pf.cards:
        if c.label in priced and (c.billing or c.terms.describe()):
            notes.append(f"{c.label} bills per started {pf.unit(c)}"
                         + (f"; {c.terms.describe()}" if c.terms.describe() else "") + " (the price file)")
    notes.append(f"on-demand: each card billed per started {pf.billing} from its first run to its last; recovery "
                 f"margin {p.margin:.0%} on every run; money {ROUNDING}")
    return notes
