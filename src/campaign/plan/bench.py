"""`campaign bench`: cost at equal quality. A target quality is fixed; for each configuration (card, cards, method,
precision) the time its runs took to reach it (given, or read off each run's curve of (hours, metric) at the first
crossing, interpolated linearly), the cost of that time under each rental of the price file, and the cheapest way
to reach the target; configurations whose runs never reach it are marked. The raw table (CSV, one row per run)
and the protocol (same data, same evaluation, number of runs, how time was measured) are written together."""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record, Result
from ..validate import JsonObject
from .billing import MARGIN, ROUNDING, Option, cheapest, offer_rentals, parse_margin, runs_phase
from .money import usd
from .prices import OFFER_SEP, PriceFile, card_ref, known_keys, load_prices, load_yaml, offer_label, split_offer

SCHEMA = "campaign.bench/1"
FIX = "see examples/plan/cost.yaml for the format"
COST_KEYS = ("name", "metric", "target", "higher_is_better", "repeats", "margin", "quality_margin", "protocol",
             "configurations")
PROTOCOL_KEYS = ("data", "evaluation", "timing", "data_sha256")
CONFIG_KEYS = ("name", "card", "cards", "method", "precision", "runs", "runs_tag", "data_sha256")
RUN_KEYS = ("seed", "hours_to_target", "curve", "final")
MAX_HOURS = 100_000          # hours of one run (11 years): above it a typo, and sums of runs lose their hours
RAW = "raw.csv"
PROTOCOL = "protocol.md"


@dataclass(frozen=True)
class BenchRun(Record):
    """One run: its seed, the hours it took to reach the target (None: never), the last metric, how timed."""

    seed: str
    hours_to_target: float | None
    final: float | None
    how: str                        # given | curve | run <id> (a recorded run's logged metrics)
    falls_back: bool = False        # its curve reached the target, then ended on the wrong side of it


@dataclass(frozen=True)
class RentalCost(Record):
    """The time to the target priced under one rental (billing.price, the model budget uses): fits when the
    rental's window holds the runs, margin included; hours: when the last run ends."""

    name: str
    cards: int
    window_hours: float | None
    fits: bool
    cost_cents: int | None
    hours: float | None = None
    cost_exact_cents: str = ""
    offer: str | None = None                # the card's offer it rents (the price file's `offer`)

    @property
    def label(self) -> str:
        """The rental with its offer when the card has several: '@community 3-day' (the name alone without)."""
        return rental_label(self.name, self.offer)


@dataclass(frozen=True)
class Configuration(Record):
    """A configuration's runs, whether they reach the target (every run must), the mean and the slowest time to
    it, and its cost under each rental (priced on the slowest run, so a repeat fits too)."""

    name: str
    card: str
    cards: int
    method: str
    precision: str
    runs: tuple[BenchRun, ...]
    status: str                     # reaches | reaches in k of n runs | never reaches
    hours_mean: float | None
    hours_worst: float | None
    rentals: tuple[RentalCost, ...]
    cheapest: str | None
    cheapest_cents: int | None
    quality_p: float | None = None  # one-sided t-test that the runs' mean final quality is past target - margin
    offer: str | None = None        # the offer of the cheapest rental (or the one 'CARD@OFFER' names)


@dataclass(frozen=True)
class BenchReport(Result):
    """Every configuration at the target, the cheapest way to reach it, and the files written."""

    path: str
    name: str
    metric: str
    target: float
    higher_is_better: bool
    repeats: int
    configurations: tuple[Configuration, ...]
    cheapest: str | None
    cheapest_rental: str | None
    cheapest_cents: int | None
    why: str
    protocol: dict[str, Any]
    prices: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    margin: float = MARGIN
    quality_margin: float | None = None
    schema: str = SCHEMA
    cheapest_offer: str | None = None       # the offer of the cheapest configuration's rental

    @property
    def checks(self) -> tuple[Check, ...]:
        """bench.reaches: some configuration reaches the target (the cheapest is the one to rent); bench.holds: no
        run's curve falls back past the target after reaching it (warn); bench.same_data: the configurations'
        data hashes agree (warn when not shown, fail when they differ)."""
        reached = [c.name for c in self.configurations if c.status != "never reaches"]
        out = []
        if self.cheapest is not None:
            out.append(Check("bench.reaches", "pass", f"{len(reached)} of {len(self.configurations)} configurations "
                             f"reach {self.metric} {self.target:g}; cheapest: {self.cheapest}"))
        else:
            out.append(Check("bench.reaches", "fail", f"no configuration reaches {self.metric} {self.target:g}: "
                             f"{self.why}", "a rental priced on a curve that never reaches the target buys nothing",
                             "run longer, change the configuration, or lower the target"))
        falls = [f"{c.name} seed {r.seed}" for c in self.configurations for r in c.runs if r.falls_back]
        out.append(Check("bench.holds", "warn" if falls else "pass",
                         f"reached the target, then ended past it: {', '.join(falls)}" if falls
                         else "no run falls back past the target after reaching it",
                         "a run that falls back was priced at its first crossing: a checkpoint taken later misses "
                         "the target", "keep the checkpoint at the crossing, or time runs to a stable crossing"))
        if self.quality_margin is not None and self.cheapest is not None:
            out.append(self._quality_check(next(c for c in self.configurations if c.name == self.cheapest)))
        data = self.protocol.get("data_sha256", {})
        if data.get("same") is True:
            out.append(Check("bench.same_data", "pass", f"every configuration on data sha256 {data['sha256']}"))
        elif data.get("same") is False:
            out.append(Check("bench.same_data", "fail", f"the configurations' data hashes differ ({data['sha256']})",
                             "cost at equal quality compares configurations on the same data only",
                             "evaluate every configuration on the same data"))
        else:
            out.append(Check("bench.same_data", "warn", "no data hash: nothing shows every configuration used the "
                             "same data", "a configuration evaluated on easier data looks cheaper",
                             "give protocol data_sha256 (or each configuration's data_sha256)", gates=False))
        return tuple(out)


    def _quality_check(self, c: Configuration) -> Check:
        """bench.quality: the cheapest configuration's final quality, over its runs, shown past the target less the
        stated margin (a one-sided t-test at 0.05; informative: every run crossing the target is what prices it)."""
        qm = self.quality_margin or 0.0
        bound = self.target - qm if self.higher_is_better else self.target + qm
        finals = [r.final for r in c.runs if r.final is not None]
        side = ">=" if self.higher_is_better else "<="
        why = (f"crossing the target once per run does not show the quality holds: the runs' final {self.metric} must "
               f"be {side} {bound:g} (target {self.target:g}, margin {qm:g}) beyond seed noise")
        if c.quality_p is None:
            return Check("bench.quality", "skipped", f"{c.name}: {len(finals)} of {len(c.runs)} runs give a final "
                         f"{self.metric}; the test needs it for every run, and 2 runs or more", why,
                         "give each run's final (or its curve)", gates=False)
        mean = math.fsum(finals) / len(finals)
        seen = (f"{c.name}: mean final {self.metric} {mean:.4g} over {len(finals)} runs, {side} {bound:g} "
                f"(one-sided t-test p = {c.quality_p:.3g})")
        if c.quality_p < 0.05:
            return Check("bench.quality", "pass", seen, gates=False)
        return Check("bench.quality", "warn", seen + ": not shown", why,
                     "run more seeds, or weigh the next configuration", gates=False)


def quality_p(finals: list[float], bound: float, higher: bool) -> float | None:
    """p of a one-sided one-sample t-test that the mean of `finals` lies past `bound` (above it when higher is
    better); None with fewer than 2 values. Equal values: 0 when past the bound, else 1 (no spread to test)."""
    from scipy import stats

    if len(finals) < 2:
        return None
    diffs = [(f - bound) if higher else (bound - f) for f in finals]
    if max(diffs) == min(diffs):
        return 0.0 if diffs[0] > 0 else 1.0
    return float(stats.ttest_1samp(diffs, 0.0, alternative="greater").pvalue)


def crossing(curve: list[tuple[float, float]], target: float, higher: bool) -> float | None:
    """The first time a curve of (hours, metric) points, in time order, reaches the target: linear
    interpolation between the last point short of it and the first at or past it; None if it never does."""
    def reached(y: float) -> bool:
        return y >= target if higher else y <= target

    prev: tuple[float, float] | None = None
    for t, y in curve:
        if reached(y):
            if prev is None or prev[1] == y:
                return t
            t0, y0 = prev
            return t0 + (target - y0) * (t - t0) / (y - y0)
        prev = (t, y)
    return None


def runs_from_store(tag: str, metric: str, target: float, higher: bool, where: str) -> list[BenchRun]:
    """The ended runs recorded with `tag` (campaign run: completed, stopped or failed; a stopped or failed run that
    never reached the target counts as one that never does), each timed from its start to the first logged
    `metric` at or past the target (interpolated between records), on the records' own clock."""
    from ..track.manifest import parse_time
    from ..track.store import Store, show_run

    store = Store()
    out = []
    for row in reversed(store.list(tag=tag)):
        if row.status not in ("completed", "stopped", "failed"):
            continue
        m = show_run(row.id)
        start = parse_time(m.created)
        curve = [((parse_time(r["t"]) - start).total_seconds() / 3600, float(r[metric]))
                 for r in store.metrics(row.id) if isinstance(r.get(metric), (int, float))
                 and not isinstance(r.get(metric), bool) and isinstance(r.get("t"), str)]
        hours = crossing(curve, target, higher) if curve else None
        out.append(BenchRun(str(m.seeds[0]) if m.seeds else m.id, hours, curve[-1][1] if curve else None,
                            f"run {m.id}", hours is not None and not _reached(curve[-1][1], target, higher)))
    if not out:
        raise InputError(f"{where}: no ended run is tagged {tag!r}; record the runs with campaign run start --tag "
                         f"{tag}, or give 'runs'")
    return out


def _reached(y: float, target: float, higher: bool) -> bool:
    return y >= target if higher else y <= target


def _runs(c: JsonObject, target: float, higher: bool, metric: str) -> list[BenchRun]:
    if "runs_tag" in c:
        return runs_from_store(c.str("runs_tag"), metric, target, higher, c.where)
    out: list[BenchRun] = []
    for i, r in enumerate(c.items("runs")):
        known_keys(r, RUN_KEYS)
        seed = str(r.raw("seed", i))
        if any(x.seed == seed for x in out):
            r.fail(f"seed {seed!r} is given twice in this configuration; each run is one seed (a duplicated run "
                   f"would count twice)")
        if "curve" in r:
            points = []
            for j, p in enumerate(r.list("curve")):
                if not (isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float))
                                                                    and not isinstance(v, bool)
                                                                    and math.isfinite(v) for v in p)):
                    r.fail(f"curve[{j}] must be [hours, metric], two numbers, got {p!r}")
                points.append((float(p[0]), float(p[1])))
            if not points:
                r.fail("field 'curve' is empty; give [hours, metric] points")
            if any(b[0] <= a[0] for a, b in zip(points, points[1:], strict=False)) or points[0][0] < 0:
                r.fail("the curve's hours must start at 0 or more and increase")
            if points[-1][0] > MAX_HOURS:
                r.fail(f"the curve runs to {points[-1][0]:g} h; hours of one run are at most {MAX_HOURS:,}")
            hit = crossing(points, target, higher)
            out.append(BenchRun(seed, hit, points[-1][1], "curve",
                                hit is not None and not _reached(points[-1][1], target, higher)))
        elif "hours_to_target" in r:
            hours = r.data["hours_to_target"]
            if hours is not None and (isinstance(hours, bool) or not isinstance(hours, (int, float))
                                      or not math.isfinite(hours) or not 0 < hours <= MAX_HOURS):
                r.fail(f"field 'hours_to_target' is {hours!r}; give hours above 0 (at most {MAX_HOURS:,}), or null "
                       f"when it never reached")
            final = r.number("final", None)
            if final is not None and hours is None and _reached(final, target, higher):
                r.fail(f"hours_to_target is null (never reached) but final {final:g} reaches the target {target:g}; "
                       f"give the hours it took")
            if final is not None and hours is not None and not _reached(final, target, higher):
                r.fail(f"hours_to_target is {hours:g} but final {final:g} does not reach the target {target:g}; "
                       f"give the run's curve (it fell back below the target) or fix the figures")
            out.append(BenchRun(seed, None if hours is None else float(hours), final, "given"))
        else:
            r.fail("give 'hours_to_target' (null when the run never reached the target) or a 'curve'")
    if not out:
        c.fail("field 'runs' is empty; give at least one run, or 'runs_tag'")
    return out


def rental_label(name: str, offer: str | None) -> str:
    """A rental with its offer: '@community 3-day' ('3-day' when the card has one entry)."""
    return name if offer is None else f"{OFFER_SEP}{offer} {name}"


def _rentals(pf: PriceFile, card: str, cards: int, hours: float, repeats: int, margin: float) -> list[Option]:
    """`repeats` runs of `hours` on `cards` cards each, priced under every rental of every offer of the card (or
    the one 'CARD@OFFER' names) by the one billing model (billing.offer_rentals, as campaign budget and ablate plan
    do): each run lasts hours x (1 + margin); a package runs its cards side by side and fits when the schedule ends
    inside its window; on demand each card is billed from its first run to its last, per started unit; packages
    combined when cheaper."""
    phases = runs_phase("runs", repeats, hours, cards)
    return offer_rentals(pf, pf.offers(card), phases, on_demand_cards=cards, margin=margin)


def bench(cost_file: str | os.PathLike[str], *, prices: str | os.PathLike[str] | PriceFile | None = None,
          out: str | os.PathLike[str] | None = None) -> BenchReport:
    """Cost at equal quality from a cost file (YAML or JSON): name, metric, target, higher_is_better, repeats (the
    runs to the target the campaign needs, default 1), protocol
    {data, evaluation, timing}, configurations: [{name, card, cards, method, precision, runs: [{seed,
    hours_to_target | curve: [[hours, metric], ...]}]}].

    Args:
        prices: the price file (default: the bundled example prices).
        out: a folder to write raw.csv and protocol.md into, together (all-or-nothing).
    Raises:
        InputError: one line naming the file and the field.
    """
    from ..io import sha256_file

    where = str(cost_file)
    doc = JsonObject(load_yaml(cost_file, "cost"), where, fix=FIX)
    known_keys(doc, COST_KEYS)
    margin = parse_margin(doc.raw("margin", f"{MARGIN:.0%}"), where)
    metric = doc.str("metric", "metric")
    target = float(doc.number("target"))
    higher = doc.raw("higher_is_better", True)
    if not isinstance(higher, bool):
        doc.fail("field 'higher_is_better' must be true or false")
    repeats = doc.count("repeats", 1, minimum=1, maximum=100_000)
    qm = doc.raw("quality_margin", None)
    if qm is not None and (isinstance(qm, bool) or not isinstance(qm, (int, float)) or not math.isfinite(qm)
                           or qm < 0):
        doc.fail(f"field 'quality_margin' is {qm!r}; give how far below the target (in {metric}'s units, 0 or more) "
                 "the runs' final quality may lie")
    quality_margin = None if qm is None else float(qm)
    proto = doc.obj("protocol", None)
    if proto is not None:
        known_keys(proto, PROTOCOL_KEYS)
    protocol: dict[str, Any] = {k: str(proto.raw(k, "")) if proto is not None else ""
                                for k in ("data", "evaluation", "timing")}
    common_hash = proto.str("data_sha256", None) if proto is not None else None
    hashes: list[str | None] = []
    pf = prices if isinstance(prices, PriceFile) else load_prices(prices)
    configs: list[Configuration] = []
    units: list[str] = []               # the billing units of the offers priced, for the notes
    names: set[str] = set()
    for c in doc.items("configurations"):
        name = c.str("name")
        c = JsonObject(c.data, f"{where}: configuration {name!r}", fix=FIX)
        known_keys(c, CONFIG_KEYS)
        if name in names:
            c.fail(f"configuration {name!r} is listed twice")
        names.add(name)
        card = card_ref(c.raw("card"), c.where, "card")
        card, named = split_offer(card)
        ncards = c.count("cards", 1, minimum=1, maximum=4096)
        if repeats * ncards > 1_000_000:
            c.fail(f"{repeats:,} runs x {ncards:,} cards is more than 1,000,000 run-cards to schedule; cost fewer "
                   f"repeats (the price scales with them) or fewer cards")
        hashes.append(c.str("data_sha256", common_hash))
        runs = _runs(c, target, higher, metric)
        reached = [r.hours_to_target for r in runs if r.hours_to_target is not None]
        if len(reached) == len(runs):
            status = "reaches"
        elif reached:
            status = f"reaches in {len(reached)} of {len(runs)} runs"
        else:
            status = "never reaches"
        mean = math.fsum(reached) / len(reached) if reached else None
        worst = max(reached) if reached else None
        options = _rentals(pf, offer_label(card, named), ncards, worst, repeats, margin) \
            if status == "reaches" and worst is not None else []
        units.extend(u for u in (pf.unit(c) for c in pf.offers(offer_label(card, named))) if u not in units)
        priced = [RentalCost(o.name, o.cards, o.window_hours, o.fits, o.cost_cents, o.hours, o.cost_exact_cents,
                             o.offer) for o in options]
        best = cheapest(options)
        finals = [r.final for r in runs if r.final is not None]
        p = None
        if quality_margin is not None and len(finals) == len(runs):
            p = quality_p(finals, target - quality_margin if higher else target + quality_margin, higher)
        configs.append(Configuration(name, card, ncards, c.str("method", ""), c.str("precision", ""), tuple(runs),
                                     status, mean, worst, tuple(priced), best.name if best else None,
                                     best.cost_cents if best else None, p, best.offer if best else named))
    if not configs:
        doc.fail("field 'configurations' is empty")
    ok = [c for c in configs if c.cheapest_cents is not None]
    win = min(ok, key=lambda c: (c.cheapest_cents or 0, c.hours_worst or 0), default=None)
    if win:
        why = f"{win.name} reaches {metric} {target:g} in {win.hours_worst:,.2f} h (slowest of {len(win.runs)} runs) " \
              f"on {win.cards} x {offer_label(win.card, win.offer)}: {usd(win.cheapest_cents or 0)} {win.cheapest}" + \
              (f" for {repeats} such runs" if repeats > 1 else "") + f" (recovery margin {margin:.0%})"
        others = sorted((c for c in ok if c is not win), key=lambda c: c.cheapest_cents or 0)
        if others:
            why += f"; next {others[0].name} at {usd(others[0].cheapest_cents or 0)}"
    else:
        why = f"no configuration reaches {metric} {target:g} in every run"
    notes = ["every run must reach the target for a configuration to count; its cost is the slowest run's hours, "
             f"x {repeats} run(s), each lengthened by the recovery margin {margin:.0%}, priced under each rental as "
             f"campaign budget does (on demand: each card per started {' or '.join(units or [pf.billing])} from its "
             "first run to its last; "
             f"a package: its cards side by side within its window); money {ROUNDING}"]
    if pf.example:
        notes.append(f"prices: example data ({pf.source}, {pf.date}); pass --prices FILE with your provider's")
    source = {"path": where, "sha256": sha256_file(where)}
    seen = sorted({h for h in hashes if h is not None})
    protocol["data_sha256"] = {"sha256": ", ".join(seen) or None,
                               "same": None if None in hashes else len(seen) == 1}
    report = BenchReport(where, str(doc.raw("name", os.path.basename(where))), metric, target, higher, repeats,
                         tuple(configs), win.name if win else None, win.cheapest if win else None,
                         win.cheapest_cents if win else None, why, protocol | {"source": source},
                         {"path": pf.path, "source": pf.source, "date": pf.date, "example": pf.example},
                         (), tuple(notes), margin, quality_margin, cheapest_offer=win.offer if win else None)
    if out is not None:
        from dataclasses import replace

        from ..io import file_set

        with file_set(out, replaces=(RAW, PROTOCOL)) as stage:
            (stage / RAW).write_text(raw_csv(report), encoding="utf-8")
            (stage / PROTOCOL).write_text(protocol_text(report), encoding="utf-8")
        report = replace(report, files=(os.path.join(str(out), RAW), os.path.join(str(out), PROTOCOL)))
    return report


def raw_csv(r: BenchReport) -> str:
    """One row per run: configuration, card, cards, method, precision, seed, hours to the target (empty when
    never), reached, final metric, how it was timed."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["configuration", "card", "cards", "method", "precision", "seed", "hours_to_target", "reached",
                "final_" + r.metric, "timed"])
    for c in r.configurations:
        for run in c.runs:
            w.writerow([c.name, c.card, c.cards, c.method, c.precision, run.seed,
                        "" if run.hours_to_target is None else f"{run.hours_to_target:.6g}",
                        str(run.hours_to_target is not None).lower(), "" if run.final is None else f"{run.final:g}",
                        run.how])
    return buf.getvalue()


def _same_data(p: dict[str, Any]) -> str:
    """What the data's hashes show: the same data for every configuration only when every hash is given and equal."""
    h = p.get("data_sha256") or {}
    if h.get("same") is True:
        return f"sha256 {h['sha256']}: the same data for every configuration"
    if h.get("same") is False:
        return f"the configurations' data hashes differ: {h['sha256']}"
    return "no data hash given: nothing shows that every configuration used the same data"


def protocol_text(r: BenchReport) -> str:
    """The protocol beside the raw table: what was fixed, what was measured and how, and the result."""
    p = r.protocol
    direction = "at least" if r.higher_is_better else "at most"
    lines = [f"# Cost at equal quality: {r.name}", "",
             f"- Target: {r.metric} {direction} {r.target:g}, the same for every configuration.",
             f"- Data: {p.get('data') or 'not stated'} ({_same_data(p)}).",
             f"- Evaluation: {p.get('evaluation') or 'not stated'} (the same procedure for every configuration).",
             f"- Runs measured: {', '.join(f'{c.name} {len(c.runs)}' for c in r.configurations)}; costed for "
             f"{r.repeats} run(s) to the target.",
             f"- Time measured: {p.get('timing') or 'not stated'}; from a run's curve, the first crossing of the "
             "target, interpolated linearly between evaluations.",
             f"- Prices: {r.prices.get('source')} ({r.prices.get('date')})"
             + (", example data" if r.prices.get("example") else "") + ".",
             f"- Input: {p['source']['path']} (sha256 {p['source']['sha256']}); raw table: {RAW}.", "",
             "| configuration | card | cards | method | precision | status | mean h | slowest h | cheapest | cost |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in r.configurations:
        lines.append(f"| {c.name} | {c.card} | {c.cards} | {c.method} | {c.precision} | {c.status} | "
                     f"{'-' if c.hours_mean is None else f'{c.hours_mean:.2f}'} | "
                     f"{'-' if c.hours_worst is None else f'{c.hours_worst:.2f}'} | {c.cheapest or '-'} | "
                     f"{'-' if c.cheapest_cents is None else usd(c.cheapest_cents)} |")
    lines += ["", f"Result: {r.why}.", ""]
    return "\n".join(lines)
