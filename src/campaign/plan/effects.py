"""`campaign ablate analyze`: the effects of an ablation's factors from its results (one row per run: each
factor's level, the seed, the metric), with intervals from the spread between seeds.

Two-level factorial data (full or a fraction): each main effect and two-factor interaction as mean(metric at +1) -
mean(metric at -1) over the cell means, effect = sum(c_i ybar_i) / (C/2) with c_i = -1/+1 (the control level is
-1); its SE from the pooled within-cell variance s^2 (df = N - C): s sqrt(sum 1/n_i) / (C/2), i.e. 2s/sqrt(N) when
balanced (Montgomery, Design and Analysis of Experiments, ch. 6). Effects that share a column in the data are
aliased and reported together (AB = CD). Every cell against the control: a paired t on the seeds they share
(campaign seeds' statistics) or Welch's t otherwise, with Holm's step-down correction over the comparisons.

What to take (`recommendation`): for two-level data, the setting the fitted factorial model favours. The model is
least squares on the runs with the main effects and the two-factor interactions the design estimates (each
interaction column once: an aliased pair such as AB = CD enters as its first word); the setting is the combination
of levels with the best predicted metric, its gain is the predicted difference from the control, and its 95%
interval is the prediction difference's t interval on the fit's residual degrees of freedom. Effects the setting
relies on that the design confounds with others are named (`aliased_with`): the prediction assumes the first word.
Without factorial effects (multi-level factors), the best cell against the control.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..evaluate.difference import holm
from ..results import Information, Record
from .ablate import Factor, FactorsFile, read_factors, word

SCHEMA = "campaign.ablate/1"
MAX_RESPONSE = 1e100        # a metric beyond this overflows the sums of squares (1e308 squared is inf)
ALL_ORDERS = 10             # up to this many factors, every interaction order is looked for; above, up to three


@dataclass(frozen=True)
class CellMean(Record):
    """A cell's runs: its Yates label, levels, seeds, mean and SD (ddof=1; None with one run)."""

    label: str
    levels: dict[str, str]
    n: int
    mean: float
    sd: float | None


@dataclass(frozen=True)
class Effect(Record):
    """A main effect or two-factor interaction (letters, and factor names), with what it is aliased with in this
    design, its estimate, SE, interval and two-sided p-value (None without replicated cells)."""

    effect: str
    names: str
    aliases: tuple[str, ...]
    estimate: float
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None


@dataclass(frozen=True)
class HalfNormalPoint(Record):
    """One effect on a half-normal plot: |estimate| against the half-normal quantile of its rank (Daniel 1959):
    inactive effects lie on a line through the origin, active ones above it."""

    effect: str
    abs_estimate: float
    quantile: float


@dataclass(frozen=True)
class Comparison(Record):
    """One cell against the control: the improvement (cell - control, or control - cell for a lower-is-better
    metric), its interval, the raw and Holm-adjusted p-values and the verdict against min_effect."""

    label: str
    levels: dict[str, str]
    n: int
    test: str                       # paired t | Welch t
    improvement: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_holm: float | None
    verdict: str


@dataclass(frozen=True)
class Recommendation(Record):
    """What to take: the setting (factor -> level) and its cell label, its predicted gain over the control (in the
    metric's better direction), the 95% interval of that gain (None without a spread to give one), the effects it
    relies on that the design cannot separate from an alias ('AB = CD'), and how it was obtained."""

    setting: dict[str, str]
    label: str
    predicted_gain: float
    ci95: tuple[float, float] | None
    aliased_with: tuple[str, ...]
    basis: str


@dataclass(frozen=True)
class AblationAnalysis(Information):
    """Cell means, factorial effects (when the data is a two-level factorial), comparisons with the control."""

    path: str
    sha256: str
    metric: str
    factors: tuple[Factor, ...]
    design: str
    runs: int
    cells: tuple[CellMean, ...]
    effects: tuple[Effect, ...]
    error_variance: float | None
    error_df: int
    confidence: float
    comparisons: tuple[Comparison, ...]
    correction: str
    min_effect: float
    higher_is_better: bool
    notes: tuple[str, ...] = ()
    error_method: str = "pooled"        # pooled (the spread between seeds) | lenth (unreplicated) | none
    pse: float | None = None            # Lenth's pseudo standard error (unreplicated two-level designs)
    missing: tuple[str, ...] = ()       # cells (Yates labels) the design has but the results lack
    half_normal: tuple[HalfNormalPoint, ...] = ()   # the effects' half-normal plot, for an unreplicated design
    recommendation: Recommendation | None = None    # what to take (see recommend)
    schema: str = SCHEMA


def _match(value: str, f: Factor, where: str) -> str:
    """The factor level a cell of the results names: the same text, else the same number ('1e-4' = 0.0001)."""
    if value in f.levels:
        return value
    try:
        x = float(value)
        for level in f.levels:
            try:
                if float(level) == x:
                    return level
            except ValueError:
                continue
    except ValueError:
        pass
    raise InputError(f"{where}: {f.name} = {value!r} is not one of its levels ({', '.join(f.levels)}); fix the "
                     f"row or the factors file")


def rows_from_runs(tag: str, *, seed_field: str = "seed", root: str | os.PathLike[str] | None = None) -> list[Any]:
    """The completed runs tagged `tag` (campaign run start --tag) as result rows: each run's parameters (the
    factors, by name), its first seed under `seed_field` and its last logged metrics; `line` is the run's position.
    Also returns nothing for runs that did not complete (failed, stopped, invalid runs are not results)."""
    from ..evaluate.predictions import Row
    from ..track.store import list_runs, show_run

    store = None if root is None else Path(root)
    rows = []
    for i, r in enumerate(reversed(list_runs(status="completed", tag=tag, root=store).runs)):
        m = show_run(r.id, root=store)
        rows.append((m.id, Row(i + 1, {**_flat(m.params), seed_field: m.seeds[0] if m.seeds else m.id,
                                       **m.metrics})))
    if not rows:
        raise InputError(f"no completed run is tagged {tag!r}; tag the ablation's runs (campaign run start --tag "
                         f"{tag}) or give a results file")
    return rows


def _flat(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as dotted names: {'lora': {'r': 16}} -> {'lora.r': 16} (and the nested object kept)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        out[prefix + k] = v
        if isinstance(v, dict):
            out.update(_flat(v, prefix + k + "."))
    return out


def analyze_ablation(results: str | os.PathLike[str] | None, factors: str | os.PathLike[str] | FactorsFile, *,
                     runs_tag: str | None = None, metric: str | None = None, seed_field: str = "seed",
                     confidence: float = 0.95, higher_is_better: bool = True,
                     min_effect: float = 0.0) -> AblationAnalysis:
    """Effects and comparisons of an ablation's results (JSONL, CSV/TSV or Parquet: a column per factor, the seed,
    the metric; metric defaults to the factors file's), or of the completed runs tagged `runs_tag` (their
    manifests' parameters, seeds and last metrics) when results is None.

    Raises:
        InputError: a missing column, a level not in the factors file, a (cell, seed) twice, confidence outside (0, 1).
    """
    from ..evaluate.predictions import label_of, number_of, read_rows, require_columns
    from ..evaluate.seeds import verdict_of
    from ..evaluate.stats import paired_t, scipy_stats

    if not 0 < confidence < 1:
        raise InputError(f"confidence {confidence!r} must be between 0 and 1; e.g. 0.95")
    if (results is None) == (runs_tag is None):
        raise InputError("give a results file or --runs TAG (the tag of the ablation's recorded runs), one of them")
    ff = factors if isinstance(factors, FactorsFile) else read_factors(factors)
    metric = metric or ff.metric
    if results is not None:
        rows, digest = read_rows(results, what="ablation results")
        source = str(results)
        wheres = [f"{results} line {r.line}" for r in rows]
    else:
        found = rows_from_runs(runs_tag or "", seed_field=seed_field)
        rows, digest = [r for _, r in found], ""
        source = f"runs tagged {runs_tag!r}"
        wheres = [f"run {i}" for i, _ in found]
    names = [f.name for f in ff.factors]
    require_columns(rows, names + [seed_field, metric], source, options={metric: "--metric-field",
                                                                         seed_field: "--seed-field"})
    data: dict[tuple[str, ...], dict[str, float]] = {}
    for row, where in zip(rows, wheres, strict=True):
        key = tuple(_match(label_of(row.fields[f.name], where=where, what=f.name) or "", f, where) for f in ff.factors)
        seed = label_of(row.fields[seed_field], where=where, what="seed") or ""
        if seed in data.setdefault(key, {}):
            raise InputError(f"{where}: the cell {dict(zip(names, key, strict=True))} has seed {seed!r} twice; keep "
                             f"one row per cell and seed")
        value = number_of(row.fields[metric], where=where, what=f"metric {metric!r}")
        if not abs(value) <= MAX_RESPONSE:
            raise InputError(f"{where}: metric {metric!r} is {value:g}, beyond +-{MAX_RESPONSE:g}, which sums of runs "
                             f"cannot hold; rescale the metric (e.g. its logarithm) or fix the row")
        data[key][seed] = value
    if not data:
        raise InputError(f"{source}: no rows; give one row per run (factor levels, seed, {metric})")
    st = scipy_stats()
    alpha = 1 - confidence

    def label(key: tuple[str, ...]) -> str:
        return "".join(f.letter.lower() + ("" if len(f.levels) == 2 else str(f.levels.index(v)))
                       for f, v in zip(ff.factors, key, strict=True) if v != f.control) or "(1)"

    cells = []
    for key, values in data.items():
        v = list(values.values())
        mean = math.fsum(v) / len(v)
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else None
        cells.append(CellMean(label(key), dict(zip(names, key, strict=True)), len(v), mean, sd))
    n_total = sum(c.n for c in cells)
    df = n_total - len(cells)
    ss = math.fsum((x - c.mean) ** 2 for c, vals in zip(cells, data.values(), strict=True) for x in vals.values())
    s2 = ss / df if df > 0 else None
    notes: list[str] = []
    effects, design = _effects(ff, cells, s2, df, confidence, st)
    method, pse = ("pooled", None) if s2 is not None else ("none", None)
    if s2 is None and len(effects) >= 3:
        effects, pse = lenth(effects, confidence, st)
        method = "lenth"
        notes.append(f"no cell has two seeds: intervals and p-values from Lenth's pseudo standard error (PSE "
                     f"{pse:,.4g} on {len(effects)} effects, t on {len(effects) / 3:,.3g} df; Lenth 1989), which "
                     "assumes most effects are null")
    elif s2 is None:
        notes.append("no cell has two seeds: no spread between seeds, so no interval or p-value")
    missing = _missing(ff, cells)
    if missing:
        notes.append(f"missing from the design: cell(s) {', '.join(missing)} (no run); run them or the effects "
                     "they enter are not estimated")
    counts = sorted({c.n for c in cells})
    if len(counts) > 1:
        few = [c.label for c in cells if c.n < counts[-1]]
        notes.append(f"cell(s) {', '.join(few)} have fewer runs than the others ({counts[-1]}): a seed is missing "
                     "there")
    comparisons = _comparisons(ff, cells, data, confidence, higher_is_better, min_effect, paired_t, st, alpha,
                               verdict_of)
    correction = f"Holm's step-down over {len(comparisons)} comparisons with the control (family-wise error " \
        f"{alpha:.0%})" if comparisons else "none: no control cell to compare with"
    if effects:
        notes.append("effect intervals are per effect, not adjusted for their number: a screening design; confirm "
                     "what you act on")
    advice = recommend(ff, data, effects, comparisons, higher_is_better, st)
    return AblationAnalysis(source, digest, metric, ff.factors, design, n_total, tuple(cells), tuple(effects),
                            s2, df, confidence, tuple(comparisons), correction, min_effect, higher_is_better,
                            tuple(notes), method, pse, missing,
                            half_normal_points(effects, st) if method == "lenth" else (), advice)


MAX_SETTINGS_FACTORS = 16   # up to 2^16 settings are searched for the best predicted one


def recommend(ff: FactorsFile, data: dict[tuple[str, ...], dict[str, float]], effects: list[Effect],
              comparisons: list[Comparison], higher: bool, st: Any) -> Recommendation | None:
    """What to take (see the module's docstring): from the factorial fit when there are effects, else the best cell
    against the control; None when neither can say (no control, or too many factors to search)."""
    if effects and len(ff.factors) <= MAX_SETTINGS_FACTORS:
        return _fitted(ff, data, effects, higher, st)
    if not comparisons:
        return None
    best = max(comparisons, key=lambda c: c.improvement)
    if best.improvement <= 0:
        control = {f.name: f.control for f in ff.factors}
        return Recommendation(control, "(1)", 0.0, None, (), "no cell beats the control on its mean: keep the "
                              "control")
    ci = _interval95(data[tuple(best.levels[f.name] for f in ff.factors)], data[tuple(f.control for f in ff.factors)],
                     higher, st)
    return Recommendation(dict(best.levels), best.label, best.improvement, ci, (),
                          f"the cell with the best mean improvement over the control ({best.test}, verdict "
                          f"{best.verdict}, Holm p {'-' if best.p_holm is None else f'{best.p_holm:.3g}'}); no "
                          "factorial fit for factors of more than two levels")


def _interval95(values: dict[str, float], base: dict[str, float], higher: bool, st: Any) -> tuple[float, float] | None:
    """The 95% interval of a cell's improvement over the control: paired t on shared seeds, else Welch's."""
    sign = 1 if higher else -1
    shared = [s for s in values if s in base]
    if len(shared) >= 2 and len(shared) == len(values) == len(base):
        d = [sign * (values[s] - base[s]) for s in shared]
        n = len(d)
        mean = math.fsum(d) / n
        se = math.sqrt(math.fsum((x - mean) ** 2 for x in d) / (n - 1) / n)
        q = float(st.t.ppf(0.975, n - 1))
        return (mean - q * se, mean + q * se)
    a, b = list(values.values()), list(base.values())
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    va, vb = (math.fsum((x - m) ** 2 for x in v) / (len(v) - 1) for v, m in ((a, ma), (b, mb)))
    se2 = va / len(a) + vb / len(b)
    if se2 == 0:
        return (sign * (ma - mb),) * 2
    dfw = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    q = float(st.t.ppf(0.975, dfw))
    return (sign * (ma - mb) - q * math.sqrt(se2), sign * (ma - mb) + q * math.sqrt(se2))


def _fitted(ff: FactorsFile, data: dict[tuple[str, ...], dict[str, float]], effects: list[Effect], higher: bool,
            st: Any) -> Recommendation:
    """The factorial model's best setting: least squares on every run with an intercept, the main effects and the
    two-factor interactions among `effects` (their first word), the best of the 2^k settings by predicted metric,
    its gain over the control and the gain's 95% t interval on the residual degrees of freedom. Interactions are
    dropped when they leave no residual degree of freedom; then, without any, no interval."""
    import numpy as np

    letters = [f.letter for f in ff.factors]
    terms = [e for e in effects if len(e.effect) <= 2]
    runs = [({f.letter: (-1 if v == f.control else 1) for f, v in zip(ff.factors, key, strict=True)}, y)
            for key, values in data.items() for y in values.values()]

    def row(x: dict[str, int], ts: list[Effect]) -> list[float]:
        return [1.0] + [float(math.prod(x[c] for c in t.effect)) for t in ts]

    n = len(runs)
    if n - 1 - len(terms) <= 0:
        terms = [t for t in terms if len(t.effect) == 1]
    X = np.array([row(x, terms) for x, _ in runs])
    y = np.array([v for _, v in runs])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    df = n - X.shape[1]
    sign = 1 if higher else -1
    control = {c: -1 for c in letters}
    x0 = np.array(row(control, terms))
    best_x, best_gain = control, 0.0
    for bits in range(2 ** len(letters)):
        x = {c: (1 if bits >> i & 1 else -1) for i, c in enumerate(letters)}
        gain = sign * float((np.array(row(x, terms)) - x0) @ beta)
        if gain > best_gain + 1e-12 * max(1.0, abs(best_gain)):
            best_x, best_gain = x, gain
    diff = np.array(row(best_x, terms)) - x0
    ci = None
    if df > 0 and best_x != control:
        resid = y - X @ beta
        s2 = float(resid @ resid) / df
        var = s2 * float(diff @ np.linalg.pinv(X.T @ X) @ diff)
        q = float(st.t.ppf(0.975, df))
        ci = (best_gain - q * math.sqrt(var), best_gain + q * math.sqrt(var))
    used = [t for t, d in zip(terms, diff[1:], strict=True) if d != 0]
    # aliases of three factors or more are taken as negligible (the usual assumption; a 2^(4-1) has A = BCD)
    low = [(t, [a for a in t.aliases if len(a.lstrip("-")) <= 2]) for t in used]
    aliased = tuple(f"{t.effect} = {' = '.join(a)}" for t, a in low if a)
    setting = {f.name: (f.control if best_x[f.letter] < 0 else next(v for v in f.levels if v != f.control))
               for f in ff.factors}
    label = "".join(c.lower() for c in letters if best_x[c] > 0) or "(1)"
    interactions = [t.effect for t in terms if len(t.effect) == 2]
    basis = (f"factorial fit: least squares on {n} runs with the main effects"
             + (f" and the interactions {', '.join(interactions)}" if interactions else "")
             + f" ({df} residual df); the best of the {2 ** len(letters)} settings by predicted {ff.metric}")
    if best_x == control:
        basis += "; no setting is predicted to beat the control: keep it"
    elif tuple(setting[f.name] for f in ff.factors) not in data:
        basis += f"; cell {label} was not run: the gain is the model's prediction, run it to confirm"
    if aliased:
        basis += ("; the design cannot separate " + "; ".join(aliased) + ": the prediction assumes the first of each")
    weak = [f"{t.names} (p {t.p_value:.2g})" for t in used if t.p_value is not None and t.p_value >= 0.05]
    if weak:
        basis += "; it also rests on effects not told apart from zero at 5%: " + ", ".join(weak)
    basis += "; interactions of three factors or more taken as negligible" if len(letters) > 2 else ""
    return Recommendation(setting, label, best_gain, ci, aliased, basis)


def half_normal_points(effects: list[Effect], st: Any) -> tuple[HalfNormalPoint, ...]:
    """The m effects by |estimate|, the i-th (1-based) at the half-normal quantile Phi^-1(0.5 + 0.5 (i - 0.5) / m)
    (Montgomery, section 6.5)."""
    ranked = sorted(effects, key=lambda e: abs(e.estimate))
    m = len(ranked)
    return tuple(HalfNormalPoint(e.effect, abs(e.estimate), float(st.norm.ppf(0.5 + 0.5 * (i - 0.5) / m)))
                 for i, e in enumerate(ranked, start=1))


def lenth(effects: list[Effect], confidence: float, st: Any) -> tuple[list[Effect], float]:
    """Lenth's (1989) pseudo standard error of an unreplicated two-level design's m effects: s0 = 1.5 x
    median|c|, PSE = 1.5 x median of the |c| below 2.5 s0; each effect's interval c +- t(d) PSE and p-value on
    d = m / 3 degrees of freedom (Lenth, Technometrics 31(4), 1989; Montgomery, Design and Analysis of Experiments,
    section 6.5)."""
    from dataclasses import replace

    absolute = sorted(abs(e.estimate) for e in effects)
    s0 = 1.5 * _median(absolute)
    trimmed = [a for a in absolute if a < 2.5 * s0]
    pse = 1.5 * _median(trimmed) if trimmed else 0.0
    d = len(effects) / 3
    q = float(st.t.ppf(1 - (1 - confidence) / 2, d))
    out = []
    for e in effects:
        if pse > 0:
            p = float(2 * st.t.sf(abs(e.estimate) / pse, d))
            out.append(replace(e, se=pse, ci_low=e.estimate - q * pse, ci_high=e.estimate + q * pse, p_value=p))
        else:
            out.append(e)
    return out, pse


def _median(values: list[float]) -> float:
    n = len(values)
    if not n:
        return 0.0
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def _missing(ff: FactorsFile, cells: list[CellMean]) -> tuple[str, ...]:
    """Cells of the smallest regular two-level design holding the cells present (the full factorial, or the fraction
    whose defining words are constant over them) that have no run: the missing cells, by Yates label."""
    factors = ff.factors
    k = len(factors)
    if any(len(f.levels) != 2 for f in factors) or k > 8 or len(cells) < 2:
        return ()
    coded = [tuple(-1 if c.levels[f.name] == f.control else 1 for f in factors) for c in cells]
    words = []
    for mask in range(1, 2 ** k):
        signs = {math.prod(x[i] for i in range(k) if mask >> i & 1) for x in coded}
        if len(signs) == 1:
            words.append((mask, signs.pop()))
    present = set(coded)
    out = []
    for run in itertools.product((-1, 1), repeat=k):
        run = tuple(reversed(run))
        if run in present:
            continue
        if all(math.prod(run[i] for i in range(k) if mask >> i & 1) == sign for mask, sign in words):
            out.append("".join(f.letter.lower() for f, v in zip(factors, run, strict=True) if v > 0) or "(1)")
    # a design missing half its cells or more is no longer that design: name only a few missing runs
    return tuple(out) if 0 < len(out) < len(cells) else ()


def _effects(ff: FactorsFile, cells: list[CellMean], s2: float | None, df: int, confidence: float,
             st: Any) -> tuple[list[Effect], str]:
    """Main effects and two-factor interactions when every factor has two levels and the cells balance each main
    effect; effects with the same (or opposite) column are aliased and given once."""
    factors = ff.factors
    if any(len(f.levels) != 2 for f in factors):
        return [], "multi-level: comparisons with the control only"
    coded = [{f.letter: (-1 if c.levels[f.name] == f.control else 1) for f in factors} for c in cells]
    C = len(cells)
    if C < 2 or any(sum(x[f.letter] for x in coded) != 0 for f in factors):
        return [], "not a two-level factorial (a main effect is unbalanced): comparisons with the control only"
    k = len(factors)
    design = "full factorial" if C == 2 ** k else f"2^({k}-{k - round(math.log2(C))}) fraction" \
        if C & (C - 1) == 0 else "two-level, balanced"
    letters = [f.letter for f in factors]
    by_letter = {f.letter: f.name for f in factors}
    # every interaction order up to ALL_ORDERS factors (a full 2^k estimates ABC... too); beyond, up to three
    orders = range(1, k + 1) if k <= ALL_ORDERS else (1, 2, 3)
    candidates = [frozenset(w) for r in orders for w in itertools.combinations(letters, r)]
    groups: dict[tuple[int, ...], list[tuple[int, frozenset[str]]]] = {}
    for e in candidates:
        col = tuple(math.prod(x[c] for c in e) for x in coded)
        if sum(col) != 0:                        # a constant or unbalanced column: not estimable here
            continue
        key = col if col[0] > 0 else tuple(-v for v in col)
        groups.setdefault(key, []).append((1 if col[0] > 0 else -1, e))
    # a regular design (full factorial, 2^(k-p) fraction): any two effect columns are equal or orthogonal. A
    # non-regular one (Plackett-Burman) has partly correlated columns: only its main effects are estimated.
    low_order = [key for key, members in groups.items() if len(members[0][1]) <= 2]
    regular = all(abs(sum(a * b for a, b in zip(u, v, strict=True))) in (0, C)
                  for u, v in itertools.combinations(low_order, 2))
    if not regular:
        groups = {key: members for key, members in groups.items() if len(members[0][1]) == 1}
        design = "two-level screening, non-regular (as Plackett-Burman): main effects only, each partly aliased " \
            "with two-factor interactions"
    tq = float(st.t.ppf(1 - (1 - confidence) / 2, df)) if s2 is not None else None
    out = []
    half = C / 2
    for _, members in groups.items():
        sign, e = members[0]
        signs = [math.prod(x[c] for c in e) for x in coded]
        est = math.fsum(v * c.mean for v, c in zip(signs, cells, strict=True)) / half
        se = math.sqrt(s2 * math.fsum(1 / c.n for c in cells)) / half if s2 is not None else None
        low = high = p = None
        if se is not None and tq is not None:
            low, high = est - tq * se, est + tq * se
            p = float(2 * st.t.sf(abs(est / se), df)) if se > 0 else (0.0 if est else 1.0)
        aliases = tuple(("-" if s != sign else "") + word(w) for s, w in members[1:] if len(w) <= max(3, len(e)))
        out.append(Effect(word(e), " x ".join(by_letter[c] for c in word(e)), aliases, est, se, low, high, p))
    return out, design


def _comparisons(ff: FactorsFile, cells: list[CellMean], data: dict[tuple[str, ...], dict[str, float]],
                 confidence: float, higher: bool, min_effect: float, paired_t: Any, st: Any, alpha: float,
                 verdict_of: Any) -> list[Comparison]:
    control_key = tuple(f.control for f in ff.factors)
    if control_key not in data:
        return []
    base = data[control_key]
    raw = []
    for c, (key, values) in zip(cells, data.items(), strict=True):
        if key == control_key:
            continue
        shared = [s for s in values if s in base]
        sign = 1 if higher else -1
        if len(shared) >= 2 and len(shared) == len(values) == len(base):
            t = paired_t([sign * (values[s] - base[s]) for s in shared], confidence=confidence)
            raw.append((c, len(shared), "paired t", t.mean, t.ci_low, t.ci_high, t.p_value))
        else:
            a, b = list(values.values()), list(base.values())
            mean = sign * (math.fsum(a) / len(a) - math.fsum(b) / len(b))
            if len(a) < 2 or len(b) < 2:
                raw.append((c, len(a), "Welch t", mean, None, None, None))
                continue
            va, vb = (math.fsum((x - math.fsum(v) / len(v)) ** 2 for x in v) / (len(v) - 1) for v in (a, b))
            se2 = va / len(a) + vb / len(b)
            if se2 == 0:
                raw.append((c, len(a), "Welch t", mean, mean, mean, 0.0 if mean else 1.0))
                continue
            dfw = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
            q = float(st.t.ppf(1 - alpha / 2, dfw))
            p = float(2 * st.t.sf(abs(mean) / math.sqrt(se2), dfw))
            raw.append((c, len(a), "Welch t", mean, mean - q * math.sqrt(se2), mean + q * math.sqrt(se2), p))
    ps = [r[6] for r in raw if r[6] is not None]
    adjusted = iter(holm(ps))
    out = []
    for c, n, test, mean, low, high, p in raw:
        ph = next(adjusted) if p is not None else None
        verdict = verdict_of(low, high, min_effect)
        if verdict == "convincing" and (ph is None or ph >= alpha):
            verdict = "inconclusive"
        out.append(Comparison(c.label, c.levels, n, test, mean, low, high, p, ph, verdict))
    return out
