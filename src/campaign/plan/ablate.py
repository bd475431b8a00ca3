"""`campaign ablate plan`: factors with levels and a control, a design (one factor at a time from the control, full
factorial, two-level fractional factorial with its generators, resolution and alias structure), seeds per cell,
GPU-hours and USD, and what to run first and what is cut under a budget.

Factors are lettered A, B, C... in the file's order, which is also their priority (the last is cut first). In a
two-level design a factor's control level is coded -1 and its other level +1; the Yates label of a cell names the
factors away from their control ('(1)' is the control itself, 'ab' has A and B changed).
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, replace
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record, Result
from ..validate import JsonObject
from .billing import MARGIN, ROUNDING, Option, cheapest, offer_rentals, parse_margin
from .money import usd
from .prices import CardPrices, PriceFile, card_ref, cents, known_keys, load_prices, load_yaml, offer_label, split_offer
from .schedule import Phase

SCHEMA = "campaign.ablate_plan/1"
FIX = "see examples/plan/factors.yaml for the format"
FACTORS_KEYS = ("name", "metric", "factors", "design", "generators", "fraction", "seeds", "seed_sd", "min_effect",
                "hours_per_run", "cards_per_run", "card", "budget_gpu_hours", "budget_usd", "margin", "power",
                "randomize_seed", "blocks")
FACTOR_KEYS = ("name", "levels", "control", "hours_scale")
MAX_HOURS = 100_000             # hours of one run (11 years): above it a typo, and sums of runs lose precision
MAX_CELLS = 4096                # cells of a design: 2^12; a larger full factorial is refused with the fix
DESIGNS = ("auto", "ofat", "full", "fractional", "pb")
# Plackett & Burman (1946), "The design of optimum multifactorial experiments", Biometrika 33(4), the first rows of
# their cyclic designs (also Montgomery, Design and Analysis of Experiments, Table 8.23): N - 1 signs; the other rows
# are its cyclic shifts, and a last row all minus (here the control).
PB_ROWS = {
    4: "++-",
    8: "+++-+--",
    12: "++-+++---+-",
    16: "++++-+-++--+---",
    20: "++--++++-+-+----++-",
    24: "+++++-+-++--++--+-+----",
}
LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"     # I is skipped: it names the identity in a defining relation
MIN_SEEDS = 2                               # fewer gives no spread between seeds, so no interval
POWER = 0.80                # the power a plan is sized for (campaign seeds' convention); below it a warning
POWER_FAIL = 0.50           # below it the plan misses a real effect more often than it finds it: a failure
# Generators of the 2^(k-p) designs of maximum resolution (minimum aberration), as tabulated by Box, Hunter &
# Hunter (Statistics for Experimenters, 2nd ed., 2005, Table 6.22) and Montgomery (Design and Analysis of
# Experiments, table of selected 2^(k-p) fractional factorial designs); signs are set so the control is a run.
STANDARD_GENERATORS: dict[tuple[int, int], tuple[str, ...]] = {
    (3, 1): ("C=AB",), (4, 1): ("D=ABC",), (5, 1): ("E=ABCD",), (5, 2): ("D=AB", "E=AC"),
    (6, 1): ("F=ABCDE",), (6, 2): ("E=ABC", "F=BCD"), (6, 3): ("D=AB", "E=AC", "F=BC"),
    (7, 1): ("G=ABCDEF",), (7, 2): ("F=ABCD", "G=ABDE"), (7, 3): ("E=ABC", "F=BCD", "G=ACD"),
    (7, 4): ("D=AB", "E=AC", "F=BC", "G=ABC"),
    (8, 2): ("G=ABCD", "H=ABEF"), (8, 3): ("F=ABC", "G=ABD", "H=BCDE"), (8, 4): ("E=BCD", "F=ACD", "G=ABC",
                                                                                  "H=ABD"),
}


@dataclass(frozen=True)
class Factor(Record):
    """A factor: its letter, its levels (as text) and the control level among them."""

    name: str
    letter: str
    levels: tuple[str, ...]
    control: str
    hours_scale: tuple[float, ...] = ()     # per level, a run's hours relative to hours_per_run (2 epochs: 2.0)


@dataclass(frozen=True)
class Cell(Record):
    """One combination of levels: its Yates label, the level of each factor, the seeds to run and their hours."""

    label: str
    levels: dict[str, str]
    seeds: int
    card_hours: float


@dataclass(frozen=True)
class Alias(Record):
    """An effect and what it is confounded with (up to three-factor words), e.g. AB = CD."""

    effect: str
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class Design(Record):
    """A design costed: kind (ofat | full | fractional), its cells, seeds per cell, runs, card-hours and cents;
    for a two-level fraction its generators, defining relation, resolution and aliases."""

    kind: str
    factors: tuple[str, ...]
    cells: tuple[Cell, ...]
    seeds_per_cell: int
    runs: int
    card_hours: float
    cost_cents: int | None
    generators: tuple[str, ...] = ()
    defining_relation: tuple[str, ...] = ()
    resolution: int | None = None
    aliases: tuple[Alias, ...] = ()
    clear_interactions: tuple[str, ...] = ()
    aliased_interactions: tuple[str, ...] = ()
    includes_control: bool = True
    rental: str | None = None               # the cheapest rental that holds the runs (billing.rentals)
    rentals: tuple[Option, ...] = ()        # every rental of every offer of the card priced for the runs
    offer: str | None = None                # the offer of the cheapest rental (the price file's `offer`)

    @property
    def name(self) -> str:
        k, p = len(self.factors), len(self.generators)
        if self.kind == "fractional":
            return f"2^({k}-{p}) fractional, resolution {roman(self.resolution or 0)}"
        if self.kind == "full":
            return "full factorial"
        if self.kind == "pb":
            return f"Plackett-Burman screening, {len(self.cells)} cells"
        return "one factor at a time"


@dataclass(frozen=True)
class Block(Record):
    """The runs ('cell#seed') one card (block) runs."""

    name: str
    runs: tuple[str, ...]


@dataclass(frozen=True)
class AblationPlan(Result):
    """The design chosen under the budget (or the one asked for), the others costed, what runs first, what is cut
    and which interactions remain estimable."""

    path: str
    name: str
    metric: str
    factors: tuple[Factor, ...]
    design: Design
    alternatives: tuple[Design, ...]
    fits: bool
    budget_card_hours: float | None
    budget_cents: int | None
    hours_per_run: float
    cards_per_run: int
    card: str | None
    seeds_how: str                      # given | power | default
    seeds_paired: int | None            # seeds a two-variant paired comparison needs (campaign seeds' power)
    run_first: tuple[str, ...]
    cut: tuple[str, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    margin: float = MARGIN              # the recovery margin the cost applies (billing.py)
    run_order: tuple[str, ...] = ()     # every run as 'cell#seed', in the order to run them (randomized when seeded)
    order_seed: int | None = None       # the seed of the randomized order (random.Random; None: not randomized)
    blocks: tuple[Block, ...] = ()      # runs split over cards (blocks), when asked for
    block_confounded: tuple[str, ...] = ()  # effects confounded with the blocks (none when blocks are replicates)
    schema: str = SCHEMA


def roman(n: int) -> str:
    return {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII"}.get(n, str(n))


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class FactorsFile(Record):
    """A factors file read (see read_factors)."""

    path: str
    name: str
    metric: str
    factors: tuple[Factor, ...]
    design: str
    generators: tuple[str, ...]
    fraction: int | None
    seeds: int | None
    seed_sd: float | None
    min_effect: float | None
    hours_per_run: float
    cards_per_run: int
    card: str | None
    budget_card_hours: float | None
    budget_cents: int | None
    margin: float = MARGIN
    order_seed: int | None = None
    blocks: int | None = None


def _level(value: Any, where: JsonObject, what: str) -> str:
    if isinstance(value, (dict, list)) or value is None:
        where.fail(f"{what} {value!r} must be a single value (a number or a name)")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


def read_factors(path: str | os.PathLike[str]) -> FactorsFile:
    """Read a factors file (YAML or JSON): name, metric, factors: [{name, levels, control}], design (auto | ofat |
    full | fractional), generators (['D=ABC']) or fraction (p), seeds or seed_sd + min_effect, hours_per_run,
    cards_per_run, card, budget_gpu_hours or budget_usd.

    Raises:
        InputError: one line naming the file and the field (a factor with one level, a control not among its levels).
    """

    where = str(path)
    doc = JsonObject(load_yaml(path, "factors"), where, fix=FIX)
    known_keys(doc, FACTORS_KEYS)
    factors: list[Factor] = []
    items = doc.items("factors")
    if not items:
        doc.fail("field 'factors' is empty; list at least one factor with its levels")
    if len(items) > len(LETTERS):
        doc.fail(f"{len(items)} factors; at most {len(LETTERS)} can be lettered")
    for i, f in enumerate(items):
        name = f.str("name")
        f = JsonObject(f.data, f"{where}: factor {name!r}", fix=FIX)
        known_keys(f, FACTOR_KEYS)
        levels = tuple(_level(v, f, "level") for v in f.list("levels"))
        if len(levels) < 2:
            f.fail(f"factor {name!r} has {len(levels)} level(s); a factor needs at least two (its control and a "
                   f"change)")
        if len(set(levels)) != len(levels):
            f.fail(f"factor {name!r} lists a level twice ({', '.join(levels)})")
        control = _level(f.raw("control", f.list("levels")[0]), f, "control")
        if control not in levels:
            f.fail(f"control {control!r} of factor {name!r} is not one of its levels ({', '.join(levels)})")
        if any(x.name == name for x in factors):
            f.fail(f"factor {name!r} is listed twice")
        raw = f.list("hours_scale", [1.0] * len(levels))
        if len(raw) != len(levels) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                              and math.isfinite(x) and 0 < x <= 1000 for x in raw):
            f.fail(f"field 'hours_scale' must give one number above 0 (at most 1,000) per level of {name!r} "
                   f"({len(levels)})")
        factors.append(Factor(name, LETTERS[i], levels, control, tuple(float(x) for x in raw)))
    design = doc.str("design", "auto")
    if design not in DESIGNS:
        doc.fail(f"field 'design' is {design!r}; use {', '.join(DESIGNS)}")
    generators = tuple(str(g) for g in doc.list("generators", []))
    fraction = doc.count("fraction", None, minimum=1, maximum=len(factors))
    seeds = doc.count("seeds", None, minimum=1, maximum=10_000)
    seed_sd = doc.number("seed_sd", None, minimum=0)
    min_effect = doc.number("min_effect", None)
    hours = doc.number("hours_per_run", minimum=0)
    if not 0 < hours <= MAX_HOURS:
        doc.fail(f"field 'hours_per_run' is {hours:g}; give the hours of one run, above 0 and at most {MAX_HOURS:,}")
    card = card_ref(doc.raw("card"), where, "card") if "card" in doc else None
    budget_hours = doc.number("budget_gpu_hours", None, minimum=0)
    budget = cents(doc.raw("budget_usd"), where, "budget_usd") if "budget_usd" in doc else None
    if budget is not None and card is None:
        doc.fail("a budget in USD needs the 'card' whose hourly price applies")
    return FactorsFile(where, str(doc.raw("name", os.path.basename(where))), doc.str("metric", "metric"),
                       tuple(factors), design, generators, fraction, seeds, seed_sd, min_effect, float(hours),
                       doc.count("cards_per_run", 1, minimum=1, maximum=4096), card, budget_hours, budget,
                       parse_margin(doc.raw("margin", f"{MARGIN:.0%}"), where),
                       doc.count("randomize_seed", None, minimum=0, maximum=2**63 - 1),
                       doc.count("blocks", None, minimum=1, maximum=64))


# ------------------------------------------------------------------------------------------ two-level algebra


def parse_generator(text: str, letters: str) -> tuple[str, int, frozenset[str]]:
    """'D=ABC' or 'D = -ABC' -> ('D', sign, {'A', 'B', 'C'}); letters: the design's factor letters."""
    left, sep, right = text.replace(" ", "").upper().partition("=")
    sign = -1 if right.startswith("-") else 1
    word = right.lstrip("+-")
    if not sep or len(left) != 1 or left not in letters or not word or any(c not in letters for c in word) \
            or left in word or len(set(word)) != len(word):
        raise InputError(f"generator {text!r} is not of the form D=ABC over the factor letters {letters}; write the "
                         f"generated factor, '=', then a product of other factors")
    return left, sign, frozenset(word)


def word(letters: frozenset[str] | set[str]) -> str:
    return "".join(sorted(letters, key=LETTERS.index)) or "I"


def defining_relation(generators: list[tuple[str, int, frozenset[str]]]) -> list[tuple[int, frozenset[str]]]:
    """Every word of the defining relation I = ... : the products of the generator words (each D=ABC gives
    I = ABCD), with their signs; 2^p - 1 words."""
    base = [(s, w | {g}) for g, s, w in generators]
    out = []
    for r in range(1, len(base) + 1):
        for combo in itertools.combinations(base, r):
            sign, letters = 1, frozenset[str]()
            for s, w in combo:
                sign, letters = sign * s, letters ^ w
            out.append((sign, letters))
    return out


def aliases(letters: str, relation: list[tuple[int, frozenset[str]]], *, up_to: int = 3) -> list[Alias]:
    """For each main effect and two-factor interaction, the effects it is confounded with (effect x each word of
    the defining relation), of order <= up_to."""
    effects = [frozenset(c) for c in letters] + [frozenset(p) for p in itertools.combinations(letters, 2)]
    out = []
    for e in effects:
        chain = sorted(((s, e ^ w) for s, w in relation if len(e ^ w) <= up_to),
                       key=lambda x: (len(x[1]), word(x[1])))
        out.append(Alias(word(e), tuple(("-" if s < 0 else "") + word(w) for s, w in chain)))
    return out


def _coded_cells(factors: tuple[Factor, ...],
                 generators: list[tuple[str, int, frozenset[str]]]) -> list[dict[str, int]]:
    """Coded runs (letter -> -1/+1): the full factorial in the base factors in standard order (A changes fastest),
    each generated factor the signed product of its word."""
    generated = {g for g, _, _ in generators}
    base = [f.letter for f in factors if f.letter not in generated]
    runs = []
    for i in range(2 ** len(base)):
        run = {b: (1 if (i >> j) & 1 else -1) for j, b in enumerate(base)}
        for g, s, w in generators:
            run[g] = s * math.prod(run[c] for c in w)
        runs.append(run)
    return runs


def yates(levels: dict[str, int]) -> str:
    return "".join(c.lower() for c in sorted(levels, key=LETTERS.index) if levels[c] > 0) or "(1)"


# ------------------------------------------------------------------------------------------ designs


def _cell(factors: tuple[Factor, ...], chosen: dict[str, str], seeds: int, hours: float) -> Cell:
    label = "".join(f.letter.lower() + ("" if len(f.levels) == 2 else f"{f.levels.index(chosen[f.name])}")
                    for f in factors if chosen[f.name] != f.control) or "(1)"
    scale = math.prod(f.hours_scale[f.levels.index(chosen[f.name])] if f.hours_scale else 1.0 for f in factors)
    return Cell(label, dict(chosen), seeds, seeds * hours * scale)


def _other(f: Factor) -> str:
    return next(v for v in f.levels if v != f.control)


@dataclass(frozen=True)
class Rate:
    """How a design is billed (billing.offer_rentals, as campaign budget and bench bill): its runs on `cards` cards,
    each lengthened by the margin, under every rental of every offer of the card (`offers`, from the price file
    `prices`: its packages, on demand per started unit of its billing, packages combined), at the cheapest that
    holds them."""

    prices: PriceFile
    offers: tuple[CardPrices, ...]
    cards: int = 1
    margin: float = MARGIN

    @property
    def unit(self) -> str:
        """The offers' billing units, for the notes: 'hour', or 'hour or second' when they differ."""
        return " or ".join(dict.fromkeys(self.prices.unit(c) for c in self.offers))


def _priced(rate: Rate | None, d: Design) -> Design:
    """The design with its cost: its runs (each cell's seeds x the cell's hours) one after another on rate.cards
    cards (on demand), or side by side as a rental's cards allow, priced by billing.rentals, at the cheapest rental
    that holds them, as campaign budget prices the same runs. No card: no cost."""
    if rate is None:
        return d
    phases = tuple(Phase(f"cell {c.label}", "experiment", c.seeds, c.card_hours / c.seeds / rate.cards, rate.cards,
                         (), c.seeds) for c in d.cells if c.seeds)       # each cell's runs take its own hours
    options = offer_rentals(rate.prices, rate.offers, phases, on_demand_cards=rate.cards, margin=rate.margin)
    best = cheapest(options)
    return replace(d, cost_cents=None if best is None else best.cost_cents, rental=None if best is None else best.name,
                   rentals=tuple(options), offer=None if best is None else best.offer)


def ofat(factors: tuple[Factor, ...], seeds: int, hours: float, hourly: Rate | None = None) -> Design:
    """The control, then each factor's other levels one at a time from the control: 1 + sum(levels - 1) cells."""
    control = {f.name: f.control for f in factors}
    cells = [_cell(factors, control, seeds, hours)]
    for f in factors:
        for v in f.levels:
            if v != f.control:
                cells.append(_cell(factors, {**control, f.name: v}, seeds, hours))
    total = sum(c.card_hours for c in cells)
    d = Design("ofat", tuple(f.name for f in factors), tuple(cells), seeds, len(cells) * seeds, total,
               None)
    return _priced(hourly, d)


def full_factorial(factors: tuple[Factor, ...], seeds: int, hours: float, hourly: Rate | None = None) -> Design:
    """Every combination of levels; for two-level factors the cells in standard order, all effects clear."""
    combos = itertools.product(*[[f.control] + [v for v in f.levels if v != f.control] for f in reversed(factors)])
    names = [f.name for f in reversed(factors)]
    cells = [_cell(factors, dict(zip(names, c, strict=True)), seeds, hours) for c in combos]
    total = sum(c.card_hours for c in cells)
    letters = "".join(f.letter for f in factors)
    two = all(len(f.levels) == 2 for f in factors)
    inter = tuple(word(frozenset(p)) for p in itertools.combinations(letters, 2))
    d = Design("full", tuple(f.name for f in factors), tuple(cells), seeds, len(cells) * seeds, total,
               None, aliases=tuple(Alias(a.effect, ()) for a in aliases(letters, []))
               if two else (), clear_interactions=inter)
    return _priced(hourly, d)


def fractional(factors: tuple[Factor, ...], seeds: int, hours: float, hourly: Rate | None = None, *,
               generators: tuple[str, ...] = (), p: int | None = None) -> Design:
    """A two-level 2^(k-p) fraction: the generators given, else the standard ones for (k, p) with signs that keep
    the control among the runs; its defining relation, resolution (the shortest word) and aliases.

    Raises:
        InputError: a factor with more than two levels, no standard generators for (k, p), a bad generator.
    """
    k = len(factors)
    many = [f.name for f in factors if len(f.levels) != 2]
    if many:
        raise InputError(f"a two-level fractional design needs two levels per factor; {many[0]!r} has more; use "
                         f"design: full or ofat, or keep two levels")
    letters = "".join(f.letter for f in factors)
    if generators:
        parsed = [parse_generator(g, letters) for g in generators]
        gen_letters = [g for g, _, _ in parsed]
        if len(set(gen_letters)) != len(gen_letters) or any(g in w for _, _, w in parsed for g in gen_letters):
            raise InputError(f"generators {', '.join(generators)}: each generated factor must appear once, on the "
                             f"left only; write them over the base factors")
    else:
        if p is None:
            p = 1
        if (k, p) not in STANDARD_GENERATORS:
            raise InputError(f"no standard generators for a 2^({k}-{p}) design; give 'generators' such as "
                             f"['D=ABC']")
        parsed = []
        for g in STANDARD_GENERATORS[k, p]:
            left, _, w = parse_generator(g, letters)
            parsed.append((left, 1 if len(w) % 2 else -1, w))     # all factors at -1 then give -1 on the left
    relation = defining_relation(parsed)
    resolution = min(len(w) for _, w in relation)
    runs = _coded_cells(factors, parsed)
    by_letter = {f.letter: f for f in factors}
    cells = [_cell(factors, {by_letter[c].name: (by_letter[c].control if v < 0 else _other(by_letter[c]))
                             for c, v in run.items()}, seeds, hours) for run in runs]
    includes = any(all(v < 0 for v in run.values()) for run in runs)
    al = aliases(letters, relation)
    two = [a for a in al if len(a.effect) == 2]
    clear = tuple(a.effect for a in two if all(len(x.lstrip("-")) > 2 for x in a.aliases))
    chains: dict[frozenset[str], str] = {}             # each chain of confounded interactions once: AB = CD
    for a in two:
        if a.effect not in clear:
            members = [a.effect] + [x for x in a.aliases if len(x.lstrip("-")) <= 2]
            chains.setdefault(frozenset(m.lstrip("-") for m in members), " = ".join(members))
    aliased = tuple(chains.values())
    total = sum(c.card_hours for c in cells)
    gens = tuple(f"{g}={'-' if s < 0 else ''}{word(w)}" for g, s, w in parsed)
    d = Design("fractional", tuple(f.name for f in factors), tuple(cells), seeds, len(cells) * seeds, total,
               None, gens, tuple(("-" if s < 0 else "") + word(w) for s, w in relation),
               resolution, tuple(al), clear, aliased, includes)
    return _priced(hourly, d)


def plackett_burman_rows(k: int) -> list[list[int]]:
    """The N x k coded runs of a Plackett-Burman design for k two-level factors, N the smallest multiple of 4
    above k (8 to 24): the cyclic shifts of PB_ROWS[N], then the all-minus run; the first k columns.

    Raises:
        InputError: more than 23 factors.
    """
    n = 4 * math.ceil((k + 1) / 4)
    if n not in PB_ROWS:
        raise InputError(f"a Plackett-Burman design of {k} factors needs {n} runs; the tabulated ones go to 24 runs "
                         f"(23 factors): drop factors or screen them in two groups")
    g = [1 if c == "+" else -1 for c in PB_ROWS[n]]
    rows = [[g[(j - i) % (n - 1)] for j in range(n - 1)] for i in range(n - 1)] + [[-1] * (n - 1)]
    return [r[:k] for r in rows]


def plackett_burman(factors: tuple[Factor, ...], seeds: int, hours: float, hourly: Rate | None = None) -> Design:
    """A Plackett-Burman screening design (two levels per factor): N runs for up to N - 1 factors, every main effect
    estimated from all N runs, each partially aliased with many two-factor interactions (complex aliasing,
    resolution III): for screening many factors, then a fraction or a full factorial on the few that matter."""
    many = [f.name for f in factors if len(f.levels) != 2]
    if many:
        raise InputError(f"a Plackett-Burman design needs two levels per factor; {many[0]!r} has more; use design: "
                         f"full or ofat, or keep two levels")
    cells = [_cell(factors, {f.name: (f.control if v < 0 else _other(f)) for f, v in zip(factors, row, strict=True)},
                   seeds, hours) for row in plackett_burman_rows(len(factors))]
    total = sum(c.card_hours for c in cells)
    d = Design("pb", tuple(f.name for f in factors), tuple(cells), seeds, len(cells) * seeds, total,
               None, resolution=3)
    return _priced(hourly, d)


# ------------------------------------------------------------------------------------------ the plan


def _seeds_for(design_cells: int, paired: int | None, given: int | None, kind: str) -> int:
    """Seeds per cell: as given; else from the paired seeds a two-variant comparison needs: OFAT compares each
    cell with the control, so each needs them all; a two-level factorial estimates each effect from every run
    (half against half: SE 2 sigma / sqrt(N)), so cells x seeds = 2 x paired suffices, at least MIN_SEEDS."""
    if given is not None:
        return given
    if paired is None:
        return 3
    if kind == "ofat":
        return max(paired, MIN_SEEDS)
    return max(MIN_SEEDS, math.ceil(2 * paired / design_cells))


def plan_ablation(factors_file: str | os.PathLike[str] | FactorsFile, *, design: str | None = None,
                  seeds: int | None = None, fraction: int | None = None, budget_gpu_hours: float | None = None,
                  budget_usd: str | float | None = None, prices: str | os.PathLike[str] | None = None) -> AblationPlan:
    """Plan an ablation: the design asked for (or, with design 'auto', the most informative one that fits the
    budget: full factorial, then two-level fractions of falling resolution, then one factor at a time, seeds
    lowered to MIN_SEEDS, and factors dropped from the end of the list), costed in card-hours and USD.

    Args override the file's: design (auto | ofat | full | fractional), seeds, fraction (p), budget_gpu_hours,
    budget_usd; prices: the price file for the card's hourly price (default: the bundled example).
    Raises:
        InputError: a bad factors file or option.
    """
    if seeds is not None and seeds < 1:
        raise InputError(f"seeds {seeds!r} must be at least 1; e.g. --seeds 3")
    if fraction is not None and fraction < 1:
        raise InputError(f"fraction {fraction!r} must be at least 1 (the p of a 2^(k-p) design); e.g. --fraction 1")
    if budget_gpu_hours is not None and not 0 < budget_gpu_hours < math.inf:
        raise InputError(f"GPU-hour budget {budget_gpu_hours!r} must be a number above 0; e.g. --budget-gpu-hours 40")
    ff = factors_file if isinstance(factors_file, FactorsFile) else read_factors(factors_file)
    if fraction is not None and fraction >= len(ff.factors):
        raise InputError(f"fraction {fraction!r} leaves no base factor of {len(ff.factors)}; use 1 to "
                         f"{len(ff.factors) - 1}")
    ff = replace(ff, design=design or ff.design, seeds=seeds if seeds is not None else ff.seeds,
                 fraction=fraction if fraction is not None else ff.fraction,
                 budget_card_hours=budget_gpu_hours if budget_gpu_hours is not None else ff.budget_card_hours,
                 budget_cents=cents(budget_usd, "--budget-usd", "budget_usd") if budget_usd is not None
                 else ff.budget_cents)
    if ff.design not in DESIGNS:
        raise InputError(f"design {ff.design!r} is not known; use {', '.join(DESIGNS)} (pb: Plackett-Burman)")
    if ff.budget_cents is not None and ff.card is None:
        raise InputError(f"{ff.path}: a budget in USD needs the 'card' whose hourly price applies; add card:")
    hourly = None
    if ff.card:
        pf = load_prices(prices)
        hourly = Rate(pf, pf.offers(ff.card), ff.cards_per_run, ff.margin)
    paired = None
    seeds_how = "given" if ff.seeds is not None else "default"
    notes: list[str] = []
    if ff.seeds is None and ff.seed_sd is not None and ff.min_effect is not None:
        from ..evaluate.stats import seeds_for_power

        paired = seeds_for_power(ff.min_effect, ff.seed_sd) if ff.min_effect else None
        if paired is None:
            raise InputError(f"{ff.path}: no number of seeds detects min_effect {ff.min_effect!r}; give a non-zero "
                             f"min_effect or seeds")
        seeds_how = "power"
        notes.append(f"{paired} paired seeds give 80% power to detect {ff.min_effect:g} at a seed SD of "
                     f"{ff.seed_sd:g} (campaign seeds' paired t); a two-level factorial reuses every run for every "
                     "effect, so its cells need fewer")
    elif ff.seeds is None:
        notes.append("3 seeds per cell by default; give seed_sd (campaign seeds' SD of differences) and min_effect "
                     "to size them by power")
    hours = ff.hours_per_run * ff.cards_per_run
    two_level = all(len(f.levels) == 2 for f in ff.factors)

    def cells_of(kind: str, factors: tuple[Factor, ...], p: int | None = None) -> int:
        return {"ofat": 1 + sum(len(f.levels) - 1 for f in factors),
                "full": math.prod(len(f.levels) for f in factors),
                "pb": 4 * math.ceil((len(factors) + 1) / 4),
                "fractional": 2 ** max(len(factors) - (p or len(ff.generators) or 1), 0)}[kind]

    def build(kind: str, factors: tuple[Factor, ...], p: int | None = None, min_seeds: bool = False) -> Design:
        n_cells = cells_of(kind, factors, p)
        if n_cells > MAX_CELLS:
            raise InputError(f"{ff.path}: a {'full factorial' if kind == 'full' else kind + ' design'} of "
                             f"{len(factors)} factors has {n_cells:,} cells, more than {MAX_CELLS:,}; use design: "
                             f"fractional (a 2^(k-p) fraction: give 'generators') or ofat, or fewer factors")
        if kind == "fractional" and 2 ** (p or len(ff.generators) or 1) > MAX_CELLS:
            raise InputError(f"{ff.path}: a 2^(k-p) fraction with p = {p or len(ff.generators)} has a defining "
                             f"relation of more than {MAX_CELLS:,} words; use at most 12 generators, or ofat")
        s = MIN_SEEDS if min_seeds and ff.seeds is None else _seeds_for(n_cells, paired, ff.seeds, kind)
        try:
            return _design(kind, factors, s, p)
        except InputError as err:               # name the factors file the design was asked in
            raise InputError(f"{ff.path}: {err}") from None

    def _design(kind: str, factors: tuple[Factor, ...], s: int, p: int | None) -> Design:
        if kind == "ofat":
            return ofat(factors, s, hours, hourly)
        if kind == "full":
            return full_factorial(factors, s, hours, hourly)
        if kind == "pb":
            return plackett_burman(factors, s, hours, hourly)
        gens = ff.generators if factors == ff.factors and p is None else ()
        return fractional(factors, s, hours, hourly, generators=gens, p=p or ff.fraction)

    def fits(d: Design) -> bool:
        return (ff.budget_card_hours is None or d.card_hours <= ff.budget_card_hours + 1e-9) and \
            (ff.budget_cents is None or (d.cost_cents is not None and d.cost_cents <= ff.budget_cents))

    candidates: list[Design] = []
    if ff.design == "auto":
        k = len(ff.factors)
        if cells_of("full", ff.factors) <= MAX_CELLS:
            candidates.append(build("full", ff.factors))
        else:
            notes.append(f"the full factorial ({cells_of('full', ff.factors):,} cells) is above the {MAX_CELLS:,} "
                         "cells planned; not considered")
        if two_level:
            for p in range(1, k):
                if (k, p) in STANDARD_GENERATORS:
                    candidates.append(build("fractional", ff.factors, p))
            if not any((k, p) in STANDARD_GENERATORS for p in range(1, k)) and 5 <= k <= 23:
                candidates.append(build("pb", ff.factors))      # many factors: screen them
        candidates.append(build("ofat", ff.factors))
        if ff.seeds is None:
            candidates.append(build("ofat", ff.factors, min_seeds=True))
    else:
        candidates.append(build(ff.design, ff.factors, ff.fraction))
        if ff.design != "ofat":
            candidates.append(build("ofat", ff.factors))
    chosen = next((d for d in candidates if fits(d)), None)
    cut: list[str] = []
    if ff.design != "auto" and chosen is not candidates[0]:
        chosen = None                     # the design asked for does not fit: say so, offer the rest
    if chosen is None:
        for drop in range(1, len(ff.factors)):
            kept = ff.factors[:-drop]
            d = build("ofat", kept, min_seeds=True)
            if fits(d):
                cut.append(f"factors {', '.join(f.name for f in ff.factors[-drop:])} (last in priority) and seeds "
                           f"down to {d.seeds_per_cell}: one factor at a time over {', '.join(f.name for f in kept)} "
                           f"fits ({d.card_hours:,.1f} card-hours)")
                candidates.append(d)
                break
    design_ = chosen or candidates[0]
    alternatives = tuple(d for d in candidates if d is not design_)
    if chosen is not None and chosen is not candidates[0]:
        preferred = candidates[0]
        cut.insert(0, f"{preferred.name} ({preferred.runs} runs, {preferred.card_hours:,.1f} card-hours) is over the "
                      "budget")
        if chosen.kind == "fractional":
            cut.append(f"interactions aliased in the {chosen.name}: {'; '.join(chosen.aliased_interactions) or 'none'}")
        if chosen.kind == "ofat":
            cut.append("every interaction: one factor at a time estimates none")
    checks = _checks(ff, design_, chosen is not None)
    first = _order(design_, ff.factors)
    blocks, confounded = _blocks(design_, ff, first) if ff.blocks and ff.blocks > 1 else ((), ())
    runs = [r for b in blocks for r in b.runs] if blocks else _runs_in(design_, first)
    if ff.order_seed is not None:
        import random

        rng = random.Random(ff.order_seed)
        if blocks:
            shuffled = []
            for b in blocks:
                order = list(b.runs)
                rng.shuffle(order)
                shuffled.append(Block(b.name, tuple(order)))
            blocks = tuple(shuffled)
            runs = [r for b in blocks for r in b.runs]
        else:
            rng.shuffle(runs)
        notes.append(f"run order randomized with seed {ff.order_seed} (Python's random.Random"
                     + (", within each block" if blocks else "") + f"): {', '.join(runs[:8])}"
                     + (", ..." if len(runs) > 8 else "") + "; the full order is in run_order (--json)")
    if blocks:
        notes.append(f"{len(blocks)} blocks (cards): " + "; ".join(f"{b.name}: {len(b.runs)} runs" for b in blocks)
                     + ("; confounded with the blocks: " + ", ".join(confounded) if confounded
                        else "; each block runs whole replicates, so no effect is confounded with the cards"))
    return AblationPlan(ff.path, ff.name, ff.metric, ff.factors, design_, alternatives, chosen is not None,
                        ff.budget_card_hours, ff.budget_cents, ff.hours_per_run, ff.cards_per_run, ff.card,
                        seeds_how, paired, first, tuple(cut), tuple(checks),
                        tuple(notes + _notes(design_, ff, hourly.unit if hourly else "hour")), ff.margin,
                        tuple(runs), ff.order_seed, tuple(blocks), tuple(confounded))


def _runs_in(d: Design, first: tuple[str, ...]) -> list[str]:
    """Every run as 'cell#seed' (seeds numbered from 1): seed by seed, the cells in run-first order, so stopping
    early leaves whole replicates."""
    return [f"{label}#{s}" for s in range(1, d.seeds_per_cell + 1) for label in first]


def _blocks(d: Design, ff: FactorsFile, first: tuple[str, ...]) -> tuple[tuple[Block, ...], tuple[str, ...]]:
    """Runs split over ff.blocks cards. With at least as many seeds per cell as blocks, each block runs whole
    replicates (seed s on card s mod blocks): the cards are confounded with nothing. Else, for a two-level full or
    fractional design and a power-of-two number of blocks, the blocks confound the highest-order interactions
    (Box, Hunter & Hunter, ch. 5.15): the cells split by the signs of those words, whose products and aliases avoid
    main effects. Else InputError."""
    n = ff.blocks or 1
    if d.seeds_per_cell >= n:
        groups: list[list[str]] = [[] for _ in range(n)]
        for i, run in enumerate(_runs_in(d, first)):
            groups[(i // len(first)) % n].append(run)
        return tuple(Block(f"card {i + 1}", tuple(g)) for i, g in enumerate(groups)), ()
    b = n.bit_length() - 1
    if d.kind not in ("full", "fractional") or 2 ** b != n or len(d.cells) < 2 * n or \
            any(len(ff.factors[i].levels) != 2 for i in range(len(ff.factors))):
        raise InputError(f"{ff.path}: blocks: {n} needs at least {n} seeds per cell (each card runs whole "
                         f"replicates) or a two-level full or fractional design with a power-of-two number of blocks; "
                         f"raise seeds or change blocks")
    letters = "".join(f.letter for f in ff.factors)
    relation = [frozenset(w.lstrip("-")) for w in d.defining_relation]

    def shortest(w: frozenset[str]) -> int:
        return min([len(w)] + [len(w ^ r) for r in relation])

    def products(ws: tuple[frozenset[str], ...]) -> list[frozenset[str]]:
        out = []
        for r in range(1, len(ws) + 1):
            for combo in itertools.combinations(ws, r):
                acc: frozenset[str] = frozenset()
                for w in combo:
                    acc = acc ^ w
                out.append(acc)
        return out

    def score(ws: tuple[frozenset[str], ...]) -> tuple[int, int, int]:
        """Higher is better: the shortest effect confounded with blocks, then fewer of that length."""
        lengths = [shortest(g) for g in products(ws)]
        low = min(lengths)
        return (low, -lengths.count(low), sum(lengths))

    words = [frozenset(c) for r in range(len(letters), 1, -1) for c in itertools.combinations(letters, r)]
    words = [w for w in words if shortest(w) >= 2][:64]          # the highest orders first
    best = max(itertools.combinations(words, b), key=score, default=None)
    if best is None or score(best)[0] < 2:
        raise InputError(f"{ff.path}: no {n} blocks of this design keep the main effects clear; use fewer blocks or "
                         f"more seeds")
    chosen = list(best)
    by = {f.name: f for f in ff.factors}
    sign = {c.label: {by[name].letter: (-1 if v == by[name].control else 1) for name, v in c.levels.items()}
            for c in d.cells}
    groups = [[] for _ in range(n)]
    for run in _runs_in(d, first):
        label = run.split("#")[0]
        idx = sum((1 << i) for i, w in enumerate(chosen) if math.prod(sign[label][x] for x in w) > 0)
        groups[idx].append(run)
    return tuple(Block(f"card {i + 1}", tuple(g)) for i, g in enumerate(groups)), \
        tuple(sorted((word(g) for g in products(best)), key=lambda x: (len(x), x)))


def _order(d: Design, factors: tuple[Factor, ...]) -> tuple[str, ...]:
    """The control first; then OFAT in factor order; a full two-level factorial's half-fraction holding the
    control (I = -ABC..., resolution k) before the other half, so stopping halfway leaves a clean fraction."""
    labels = [c.label for c in d.cells]
    rest = [x for x in labels if x != "(1)"]
    if d.kind == "full" and all(len(f.levels) == 2 for f in factors) and len(factors) >= 3:
        half = [x for x in rest if len(x) % 2 == 0]          # same parity as the control: product (-1)^k
        return tuple(["(1)"] + half + [x for x in rest if x not in half])
    return tuple((["(1)"] if "(1)" in labels else []) + rest)


def design_power(d: Design, ff: FactorsFile) -> tuple[float, int] | None:
    """(power, n) of the design to detect min_effect at seed_sd (the SD of paired differences), None without them.
    One factor at a time compares each cell with the control on its seeds: a paired t on n = seeds per cell. A
    two-level factorial estimates each effect from all N runs with SE 2 sigma / sqrt(N) = seed_sd sqrt(2 / N), a
    paired t's SE on n = N / 2 pairs (the equivalence _seeds_for sizes by)."""
    from ..evaluate.stats import power_paired_t

    if ff.seed_sd is None or not ff.min_effect:
        return None
    n = d.seeds_per_cell if d.kind == "ofat" or any(len(levels) != 2 for levels in
                                                    (f.levels for f in ff.factors)) else d.runs // 2
    value = power_paired_t(n, ff.min_effect, ff.seed_sd) if n >= 2 else 0.0
    return (float(value or 0.0), n)


def _checks(ff: FactorsFile, d: Design, fits: bool) -> list[Check]:
    out = [Check("ablate.control_run", "pass" if d.includes_control else "warn",
                 "the control is one of the runs" if d.includes_control else "the control is not among the runs",
                 "every variant is read against the control: it must be run with the same seeds",
                 "use generators whose signs keep the control (the defaults do), or add the control run")]
    if d.kind == "pb":
        out.append(Check("ablate.resolution", "warn", "Plackett-Burman: resolution III with complex aliasing",
                         "each main effect is partly aliased with many two-factor interactions",
                         "screen with it, then confirm the few active factors in a fraction or a full factorial"))
    if d.kind == "fractional":
        status = "pass" if (d.resolution or 0) >= 4 else "warn"
        out.append(Check("ablate.resolution", status, f"resolution {roman(d.resolution or 0)}",
                         "at resolution III main effects are aliased with two-factor interactions",
                         "take a smaller fraction (fraction: 1) or fewer factors"))
    power = design_power(d, ff)
    if power is None:
        out.append(Check("ablate.seeds", "pass" if d.seeds_per_cell >= MIN_SEEDS else "warn",
                         f"{d.seeds_per_cell} seed(s) per cell",
                         "with one seed there is no spread between seeds, so no interval on any effect",
                         f"run at least {MIN_SEEDS} seeds per cell"))
    else:
        value, n = power
        status = "pass" if value >= POWER else "warn" if value >= POWER_FAIL else "fail"
        out.append(Check("ablate.seeds", status,
                         f"{d.seeds_per_cell} seed(s) per cell: power {value:.3f} at n = {n} to detect "
                         f"{ff.min_effect:g} at a seed SD of {ff.seed_sd:g} (paired t, alpha 0.05)",
                         f"below {POWER:.0%} power a real effect of that size is missed more often than the plan "
                         "can afford" if status != "pass" else "",
                         "raise the budget for more seeds, take a two-level fraction (every run counts for every "
                         "effect), or drop factors" if status != "pass" else ""))
    if ff.budget_card_hours is not None or ff.budget_cents is not None:
        out.append(Check("ablate.budget", "pass" if fits else "fail",
                         f"{d.name}: {d.card_hours:,.1f} card-hours" + (f", {usd(d.cost_cents)}" if d.cost_cents
                                                                         is not None else "")
                         + (" fits the budget" if fits else " is over the budget"),
                         "an ablation cut off halfway leaves effects you cannot separate",
                         "cut as listed, or raise the budget"))
    return out


def _notes(d: Design, ff: FactorsFile, unit: str = "hour") -> list[str]:
    notes = []
    if d.kind == "fractional":
        notes.append(f"defining relation I = {' = '.join(d.defining_relation)}; aliases of order above three are "
                     "left out")
    if ff.card is None:
        notes.append("no card given: cost in card-hours only; add card: for USD at its hourly price")
    else:
        card, named = split_offer(ff.card)
        taken = "" if d.offer is None else f" on {offer_label(card, d.offer)}"
        every = " among its offers" if d.offer is not None and named is None else ""
        rental = f"{d.rental}{taken} (the cheapest rental of {ff.card}{every} that holds the runs" if d.rental else \
            f"no rental of {ff.card} holds the runs ("
        notes.append(f"cost: {rental}: its packages, on demand per started {unit} and packages combined, priced "
                     f"as campaign budget prices the same runs; --json lists every rental); recovery margin "
                     f"{ff.margin:.0%} on every run; GPU-hours are the runs' hours, margin excluded; money {ROUNDING}")
    return notes
