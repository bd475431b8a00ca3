"""Is the difference between two variants larger than seed noise? Paired by seed, against a useful effect.

Input rows: variant, seed, metric (two variants paired by seed); optionally per-example scores
(variant, seed, id, score) for the same examples in every run. Differences are candidate - baseline
(baseline - candidate with higher_is_better=False), so a positive difference is always an improvement.

The verdict uses the t interval over seeds (the bootstrap over 3-10 seeds is known to be too narrow) or, with
per-example scores, the crossed seeds x examples interval (crossed_interval: the variance of the grand mean from
the seed, example and residual components), which also counts the test set's noise: `convincing` when the
interval lies entirely above the minimum useful effect, `no useful effect` when entirely below it,
`inconclusive` otherwise. Seeds needed: the paired t-test's sample size for 80% power (alpha = 1 - confidence,
with the test's alternative: two-sided, or one-sided in its direction) to detect the minimum effect (or, without
one, the observed mean) at the observed SD.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record, Result
from ..validate import check_seed
from .bootstrap import BootstrapInterval, ExampleBootstrap, bootstrap_mean, paired_bootstrap
from .difference import FEW_CLUSTERS
from .predictions import label_of, number_of, read_rows, require_columns
from .stats import (
    RankTest,
    SignTest,
    TTest,
    check_alternative,
    numpy,
    paired_t,
    power_paired_t,
    seeds_for_power,
    sign_test,
    snap,
    wilcoxon,
)

SCHEMA = "campaign.seeds/1"
FEW_SEEDS = 5
TARGET_POWER = 0.80
VERDICTS = ("convincing", "no useful effect", "inconclusive")


@dataclass(frozen=True)
class SeedResults:
    """Metric per variant and seed, as read: values[variant][seed] (variants and seeds in file order)."""

    path: str
    sha256: str
    metric: str
    values: dict[str, dict[str, float]]

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.values)


def _text(value: Any, where: str, what: str) -> str:
    if isinstance(value, (dict, list)):
        raise InputError(f"{what} at {where} is not a single value; write a name or a number")
    text = label_of(value, where=where, what=what)
    if text is None:
        raise InputError(f"{what} at {where} is empty; fill it in")
    return text


def read_seed_results(path: str | os.PathLike[str], *, metric: str = "metric", variant_field: str = "variant",
                      seed_field: str = "seed") -> SeedResults:
    """Rows of variant, seed, metric from a JSONL, CSV/TSV or Parquet file; one row per (variant, seed)."""
    rows, digest = read_rows(path, what="results")
    require_columns(rows, [variant_field, seed_field, metric], path,
                    options={metric: "--metric-field", variant_field: "--variant-field", seed_field: "--seed-field"})
    values: dict[str, dict[str, float]] = {}
    lines: dict[tuple[str, str], int] = {}
    for row in rows:
        where = f"{path} line {row.line}"
        v = _text(row.fields[variant_field], where, "variant")
        s = _text(row.fields[seed_field], where, "seed")
        if (v, s) in lines:
            raise InputError(f"variant {v!r} seed {s!r} appears twice ({path} lines {lines[v, s]} and {row.line}); "
                             f"keep one row per variant and seed")
        lines[v, s] = row.line
        values.setdefault(v, {})[s] = number_of(row.fields[metric], where=where, what=f"metric {metric!r}")
    return SeedResults(str(path), digest, metric, values)


def pick_variants(variants: Sequence[str], baseline: str | None, candidate: str | None,
                  source: str) -> tuple[str, str]:
    """The (baseline, candidate) pair: named, or the two variants of the file in order of appearance."""
    for name in (baseline, candidate):
        if name is not None and name not in variants:
            raise InputError(f"variant {name!r} is not in {source} (variants: {', '.join(map(repr, variants))}); "
                             f"pass one of them")
    if baseline and candidate:
        if baseline == candidate:
            raise InputError(f"baseline and candidate are both {baseline!r}; compare two different variants")
        return baseline, candidate
    named = baseline or candidate
    rest = [v for v in variants if v != named]
    if len(variants) < 2 or (named is None and len(variants) != 2) or (named is not None and len(rest) != 1):
        raise InputError(f"{source} has {len(variants)} variant(s) ({', '.join(map(repr, variants))}); "
                         f"seeds compares two: pass --baseline and --candidate")
    if baseline:
        return baseline, rest[0]
    if candidate:
        return rest[0], candidate
    return variants[0], variants[1]


def pair_seeds(results: SeedResults, baseline: str, candidate: str) -> tuple[list[str], list[float], list[float]]:
    """Seeds present for both variants, with their values; unpaired seeds are bad input."""
    a, b = results.values[baseline], results.values[candidate]
    only_a, only_b = [s for s in a if s not in b], [s for s in b if s not in a]
    if only_a or only_b:
        parts = [f"{len(x)} seed(s) only in {v!r} (e.g. {x[0]!r})"
                 for x, v in ((only_a, baseline), (only_b, candidate)) if x]
        raise InputError(f"unpaired seeds in {results.path}: {'; '.join(parts)}; run both variants on the same seeds "
                         f"or drop the unpaired rows")
    seeds = list(a)
    return seeds, [a[s] for s in seeds], [b[s] for s in seeds]


def read_example_scores(path: str | os.PathLike[str], seeds: Sequence[str], baseline: str, candidate: str, *,
                        score: str = "score", variant_field: str = "variant", seed_field: str = "seed",
                        id_field: str = "id") -> tuple[Any, int]:
    """Per-example differences D (shape (seeds, examples)) from rows of variant, seed, id, score.

    Every (variant, seed) of the pair must score the same example ids once each.
    """
    table = read_example_table(path, seeds, baseline, candidate, score=score, variant_field=variant_field,
                               seed_field=seed_field, id_field=id_field)
    return table.diffs, len(table.ids)


@dataclass(frozen=True)
class ExampleTable:
    """The per-example differences D (seeds x examples) with the examples' ids (D's columns, in file order) and,
    with a cluster field, each example's cluster label (None without)."""

    diffs: Any
    ids: tuple[str, ...]
    clusters: tuple[str, ...] | None = None


def read_example_table(path: str | os.PathLike[str], seeds: Sequence[str], baseline: str, candidate: str, *,
                       score: str = "score", variant_field: str = "variant", seed_field: str = "seed",
                       id_field: str = "id", cluster_field: str | None = None) -> ExampleTable:
    """read_example_scores with the ids and, with `cluster_field`, each example's cluster: the value of that
    column, which every row of an example (both variants, every seed) must carry and agree on."""
    np = numpy()
    rows, _ = read_rows(path, what="per-example scores")
    columns = [variant_field, seed_field, id_field, score] + ([cluster_field] if cluster_field else [])
    options = {score: "--score-field", variant_field: "--variant-field", seed_field: "--seed-field",
               id_field: "--id-field"}
    if cluster_field:
        options[cluster_field] = "--cluster"
    require_columns(rows, columns, path, options=options)
    table: dict[tuple[str, str], dict[str, float]] = {}
    cluster_of: dict[str, tuple[str, int]] = {}
    for row in rows:
        where = f"{path} line {row.line}"
        v = _text(row.fields[variant_field], where, "variant")
        if v not in (baseline, candidate):
            continue
        key = (v, _text(row.fields[seed_field], where, "seed"))
        ident = _text(row.fields[id_field], where, "id")
        cell = table.setdefault(key, {})
        if ident in cell:
            raise InputError(f"{path} line {row.line}: id {ident!r} is scored twice for variant {key[0]!r} seed "
                             f"{key[1]!r}; keep one score per example and run")
        cell[ident] = number_of(row.fields[score], where=where, what=f"score {score!r}")
        if cluster_field:
            label = _text(row.fields[cluster_field], where, f"cluster {cluster_field!r}")
            first = cluster_of.setdefault(ident, (label, row.line))
            if first[0] != label:
                raise InputError(f"{path}: id {ident!r} is in cluster {first[0]!r} on line {first[1]} and "
                                 f"{label!r} on line {row.line}; give an example the same --cluster value in every "
                                 "row")
    ids: list[str] | None = None
    diffs = []
    for s in seeds:
        for v in (baseline, candidate):
            if (v, s) not in table:
                raise InputError(f"{path} has no per-example scores for variant {v!r} seed {s!r}; score every seed "
                                 f"of both variants or leave out --example-scores")
        base, cand = table[baseline, s], table[candidate, s]
        if ids is None:
            ids = list(base)
        for v, cell in ((baseline, base), (candidate, cand)):
            if set(cell) != set(ids):
                n = len(set(cell) ^ set(ids))
                raise InputError(f"{path}: variant {v!r} seed {s!r} scores a different set of examples ({n} ids "
                                 f"differ); score the same examples in every run")
        diffs.append([cand[i] - base[i] for i in ids])
    ids = ids or []
    clusters = tuple(cluster_of[i][0] for i in ids) if cluster_field else None
    return ExampleTable(np.asarray(diffs, dtype=float), tuple(ids), clusters)


@dataclass(frozen=True)
class CrossedInterval(Record):
    """The mean per-example difference over seeds x examples with the crossed variance of Var(grand mean):

        V = (MS_seed + MS_example - MS_residual) / (S N)
          = sigma2_seed / S + sigma2_example / N + sigma2_residual / (S N)    (in expectation)

    from the two-way ANOVA of D (S seeds x N examples) without replication, and a t interval on Satterthwaite's
    df. With one seed it is the examples' paired standard error sd(column) / sqrt(N) (Miller 2024, "Adding Error
    Bars to Evals"). `scale` converts to the metric's units (100 when the metric is in points and the scores are
    proportions); every figure here is in the metric's units.

    With clusters (examples that share a movie, a document, a template), the example term MS_example / (S N),
    the naive variance of the mean of the seed-averaged differences c_i = mean_s D[s, i], becomes its
    cluster-robust (CR1) variance over the G clusters,

        V_cluster = G / (G - 1) * sum_g (sum_{i in g} (c_i - mean(c)))^2 / N^2

    (statsmodels' OLS(c, 1).fit(cov_type='cluster') gives the same; with clusters of one size it is the variance
    of the per-cluster means of c over G), on G - 1 df in Satterthwaite's sum: V = (MS_seed - MS_residual) / (S N)
    + V_cluster. `design_effect` is V_cluster over the naive MS_example / (S N); var_example is then V_cluster
    less the residual term, so that the three components still add up to V."""

    seeds: int
    examples: int
    mean: float
    se: float
    df: float
    low: float | None
    high: float | None
    confidence: float
    var_seed: float          # the components of V, in the metric's units squared (sigma2 / S, sigma2 / N, ...)
    var_example: float
    var_residual: float
    scale: float
    method: str = "crossed seeds x examples variance (two-way ANOVA components), t on Satterthwaite df"
    clusters: int | None = None             # G, with clusters of examples; None without
    design_effect: float | None = None      # the example term's cluster-robust variance over its naive one


def cluster_robust_mean_variance(values: Any, codes: Any) -> float:
    """CR1 variance of the mean of `values` over the clusters `codes` (integers 0..G-1): G / (G - 1) *
    sum_g (sum_{i in g} e_i)^2 / n^2 with e = values - mean (see CrossedInterval)."""
    np = numpy()
    x = np.asarray(values, dtype=float)
    c = np.asarray(codes)
    g = int(c.max()) + 1
    sums = np.bincount(c, weights=x - x.mean(), minlength=g)
    return float(g / (g - 1) * (sums ** 2).sum() / x.size ** 2)


def crossed_interval(diffs: Any, *, confidence: float = 0.95, alternative: str = "two-sided",
                     scale: float = 1.0, clusters: Sequence[Any] | None = None) -> CrossedInterval | None:
    """The crossed interval of the mean of D (shape (seeds, examples)), see CrossedInterval; None with one example.
    `clusters`: one label per example (D's columns) for the cluster-robust example term.

    Raises:
        InputError: clusters of another length than the examples, or fewer than 2 clusters.
    """
    np = numpy()
    from .difference import FEW_CLUSTERS, cluster_codes
    from .stats import scipy_stats

    d = np.asarray(diffs, dtype=float) * scale
    s, n = d.shape
    if n < 2:
        return None
    g = None
    codes = None
    if clusters is not None:
        codes, g = cluster_codes(clusters, n, "example")
    grand = float(d.mean())
    col = d.mean(axis=0)
    ms_e = s * float(((col - grand) ** 2).sum()) / (n - 1)
    # the example term of V (an estimate of Var(mean of the columns)) and its df: naive, or over the clusters
    v_ex, df_ex = ms_e / (s * n), float(n - 1)
    deff = None
    if codes is not None and g is not None:
        v_cl = cluster_robust_mean_variance(col, codes)
        deff = v_cl / v_ex if v_ex > 0 else None
        v_ex, df_ex = v_cl, float(g - 1)
    if s == 1:
        var, df, vs, ve, vr = v_ex, df_ex, 0.0, v_ex, 0.0
    else:
        row = d.mean(axis=1)
        ms_s = n * float(((row - grand) ** 2).sum()) / (s - 1)
        resid = d - row[:, None] - col[None, :] + grand
        ms_r = float((resid ** 2).sum()) / ((s - 1) * (n - 1))
        a_s, c_r = ms_s / (s * n), ms_r / (s * n)
        total = a_s + v_ex - c_r
        vs, ve, vr = a_s - c_r, v_ex - c_r, c_r
        if total > 0:
            den = a_s ** 2 / (s - 1) + v_ex ** 2 / df_ex + c_r ** 2 / ((s - 1) * (n - 1))
            var, df = total, (total ** 2 / den if den > 0 else float("inf"))
        else:                       # components estimated negative: the larger term alone
            var, df = max((a_s, float(s - 1)), (v_ex, df_ex))
    se = float(np.sqrt(max(var, 0.0)))
    alpha = 1 - confidence
    q = float(scipy_stats().t.ppf(1 - alpha / 2 if alternative == "two-sided" else 1 - alpha, df)) if se else 0.0
    low = grand - q * se if alternative in ("two-sided", "greater") else None
    high = grand + q * se if alternative in ("two-sided", "less") else None
    if g is None:
        return CrossedInterval(s, n, grand, se, df, low, high, confidence, vs, ve, vr, scale)
    method = (f"crossed seeds x examples variance, the example term cluster-robust (CR1) over {g} clusters on "
              f"{g - 1} df, t on Satterthwaite df" + (f" (only {g} clusters: too narrow under about {FEW_CLUSTERS})"
                                                       if g < FEW_CLUSTERS else ""))
    return CrossedInterval(s, n, grand, se, df, low, high, confidence, vs, ve, vr, scale, method, g, deff)


MAX_SEEDS, MAX_EXAMPLES = 100_000, 100_000_000     # where the search for seeds / examples needed stops


@dataclass(frozen=True)
class CrossedNeeds(Record):
    """Seeds and examples needed for `power` to detect `effect`, from the crossed variance components
    (sigma2_seed, sigma2_example, sigma2_residual, each clipped at 0, in the metric's units squared):

        V(S, N) = sigma2_seed / S + sigma2_example / N + sigma2_residual / (S N)

    seeds: the fewest S >= 2 (at the N examples given) with (t_crit + t_power) sqrt(V(S, N)) <= |effect|, the t's
    on the Satterthwaite df that the expected mean squares at (S, N) give (the usual approximation of a t-test's
    power); examples: the fewest N at the S seeds given. None where no number reaches it: the other source's
    noise alone is too large (seeds: the test set's, sigma2_example / N; examples: the seeds', sigma2_seed / S).

    With clusters, sigma2_example is the cluster-robust one (CrossedInterval), so N examples are taken to come in
    clusters of the mean size seen (at_clusters over at_examples), and the example term's df is the number of
    clusters less one."""

    effect: float
    power: float
    sigma2_seed: float
    sigma2_example: float
    sigma2_residual: float
    seeds: int | None
    examples: int | None
    at_seeds: int
    at_examples: int
    at_clusters: int | None = None


def crossed_needs(c: CrossedInterval, effect: float, *, alpha: float, power: float = 0.80,
                  alternative: str = "two-sided") -> CrossedNeeds | None:
    """Seeds needed (at c.examples) and examples needed (at c.seeds) for `power` to detect `effect` (see
    CrossedNeeds); None without an effect or with one seed (no seed component)."""
    from .stats import scipy_stats

    if effect == 0 or c.seeds < 2:
        return None
    st = scipy_stats()
    s0, n0 = c.seeds, c.examples
    sig_s = max(c.var_seed, 0.0) * s0
    sig_e = max(c.var_example, 0.0) * n0
    sig_r = max(c.var_residual, 0.0) * s0 * n0
    crit = 1 - alpha / 2 if alternative == "two-sided" else 1 - alpha

    per_cluster = n0 / c.clusters if c.clusters else 1.0

    def enough(s: int, n: int) -> bool:
        var = sig_s / s + sig_e / n + sig_r / (s * n)
        if var <= 0:
            return True
        # the three terms of V(s, n) (seed, example, residual) and their df; the example term's over the clusters
        a, b, r = sig_s / s + sig_r / (s * n), sig_e / n + sig_r / (s * n), sig_r / (s * n)
        df_e = max(n / per_cluster, 2.0) - 1
        den = a ** 2 / (s - 1) + b ** 2 / df_e + r ** 2 / ((s - 1) * (n - 1))
        df = var ** 2 / den if den > 0 else float("inf")
        q = float(st.t.ppf(crit, df)) + float(st.t.ppf(power, df))
        return q * math.sqrt(var) <= abs(effect)

    def fewest(test: Any, top: int) -> int | None:
        if not test(top):
            return None
        low, high = 2, top                 # test(high) holds; find the fewest that holds (it is monotone)
        if test(low):
            return low
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if test(mid) else (mid, high)
        return high

    return CrossedNeeds(abs(effect), power, sig_s, sig_e, sig_r, fewest(lambda s: enough(s, n0), MAX_SEEDS),
                        fewest(lambda n: enough(s0, n), MAX_EXAMPLES), s0, n0, c.clusters)


def in_clusters(needs: CrossedNeeds) -> str:
    """' (in about K clusters of M)' for examples needed with clusters (CrossedNeeds), else ''."""
    if not needs.at_clusters or needs.examples is None:
        return ""
    size = needs.at_examples / needs.at_clusters
    return f" (in about {math.ceil(needs.examples / size):,} clusters of {size:.3g})"


def units_scale(seed_diffs: Any, example_diffs: Any) -> float | None:
    """How per-example differences convert to the metric's: 1 when each seed's metric difference is the mean of
    its per-example differences, 100 when it is 100 times it (points from proportions), None when neither."""
    np = numpy()
    m = np.asarray(example_diffs, dtype=float).mean(axis=1)
    d = np.asarray(seed_diffs, dtype=float)
    for scale in (1.0, 100.0):
        if np.allclose(d, scale * m, rtol=1e-6, atol=1e-9 * scale):
            return scale
    return None


@dataclass(frozen=True)
class SeedsReport(Result):
    """Paired comparison of two variants over seeds; mean_diff > 0 means the candidate is better. Its check
    seeds.conclusive warns when the interval leaves the answer open (the verdict field says which answer)."""

    baseline: str
    candidate: str
    metric: str
    higher_is_better: bool
    seeds: tuple[str, ...]
    baseline_values: tuple[float, ...]
    candidate_values: tuple[float, ...]
    differences: tuple[float, ...]
    n_seeds: int
    mean_diff: float
    sd_diff: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    alternative: str
    t_statistic: float | str | None
    t_pvalue: float | None
    wilcoxon_statistic: float
    wilcoxon_pvalue: float
    wilcoxon_method: str
    sign_pvalue: float
    min_effect: float
    verdict: str
    power: float | None
    power_effect: float | None
    seeds_needed: int | None
    t_test: TTest
    bootstrap: BootstrapInterval
    wilcoxon: RankTest
    sign: SignTest
    examples: ExampleBootstrap | None = None
    crossed: CrossedInterval | None = None   # seeds x examples, in the metric's units; the verdict's interval
    needs: CrossedNeeds | None = None        # seeds and examples needed, from the crossed components
    verdict_interval: str = "t over seeds"
    units: str = ""                          # how the per-example figures relate to the metric's units
    cluster_field: str | None = None         # the per-example scores' column naming each example's cluster
    clusters_from: str | None = None         # or the split manifest whose units are the clusters
    source: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA
    plot: str | None = None         # the dispersion plot written by the CLI's --plot (campaign.plots)

    @property
    def checks(self) -> tuple[Check, ...]:
        low, high = (self.crossed.low, self.crossed.high) if self.verdict_interval != "t over seeds" and \
            self.crossed is not None else (self.ci_low, self.ci_high)
        interval = f"[{_fmt(low)}, {_fmt(high)}]"
        seen = (f"{self.verdict}: mean difference {self.mean_diff:+.4g}, {self.confidence:.0%} interval {interval} "
                f"({self.verdict_interval}) against a minimum effect of {self.min_effect:g} over {self.n_seeds} "
                "seeds")
        if self.verdict != "inconclusive":
            return (Check("seeds.conclusive", "pass", seen),)
        more = f"run {self.seeds_needed} seeds" if self.seeds_needed else "run more seeds"
        if self.needs is not None:
            x = self.needs
            by_examples = f"{x.examples:,} examples{in_clusters(x)} (at {x.at_seeds} seeds)" if x.examples else ""
            more = " or ".join(filter(None, (f"{x.seeds} seeds (at {x.at_examples:,} examples)" if x.seeds else "",
                                             by_examples)))
            more = f"run {more} for 80% power" if more else ("neither more seeds nor more examples alone reach 80% "
                                                              "power: add both")
        return (Check("seeds.conclusive", "warn", seen, "the interval holds both a useful effect and none", more),)



# Bootstrap percentile intervals of a mean "badly under-cover in small samples" and are less accurate than t
# intervals there (Hesterberg 2015, The American Statistician 69(4), abstract and sec. 4; the narrowness bias is a
# factor sqrt((n-1)/n) on the standard error). The cut at 20 seeds is assumed, not taken from a source.
SMALL_FOR_BOOTSTRAP = 20


def _fmt(v: float | None) -> str:
    return "open" if v is None else f"{v:+.4g}"


def verdict_of(low: float | None, high: float | None, min_effect: float) -> str:
    """convincing: the interval lies above min_effect; no useful effect: below it; else inconclusive."""
    if low is not None and low > min_effect:
        return "convincing"
    if high is not None and high < min_effect:
        return "no useful effect"
    return "inconclusive"


def compare_paired(baseline_values: Sequence[float], candidate_values: Sequence[float], *,
                   seeds: Sequence[str] | None = None, baseline: str = "baseline", candidate: str = "candidate",
                   metric: str = "metric", min_effect: float = 0.0, confidence: float = 0.95,
                   alternative: str = "two-sided", higher_is_better: bool = True, n_resamples: int = 10_000,
                   seed: int = 0, example_diffs: Any = None, example_clusters: Sequence[Any] | None = None,
                   source: dict[str, Any] | None = None) -> SeedsReport:
    """All paired statistics for metric values of two variants on the same seeds (equal-length sequences).

    Args:
        example_diffs: optional per-example differences, shape (seeds, examples), for the crossed bootstrap
            (already oriented: candidate - baseline, or the reverse when lower is better).
        example_clusters: with example_diffs, the cluster of each example (one label per column): the crossed
            interval's example term becomes cluster-robust (see CrossedInterval), and the per-example bootstrap
            resamples clusters, not examples (bootstrap.cluster_distribution).
        seed: seeds the bootstrap's numpy Generator.
    """
    np = numpy()
    check_alternative(alternative)
    check_seed(seed)
    if not 0 < confidence < 1:
        raise InputError(f"confidence {confidence!r} must be between 0 and 1, e.g. 0.95")
    if not math.isfinite(min_effect):
        raise InputError(f"minimum useful effect {min_effect!r} must be a finite number, in metric units")
    a, b = np.asarray(baseline_values, dtype=float), np.asarray(candidate_values, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise InputError("baseline and candidate need one value per seed each, for the same seeds")
    seeds = tuple(str(s) for s in (seeds if seeds is not None else range(a.size)))
    raw = (b - a) if higher_is_better else (a - b)
    d = snap(raw, float(max(np.abs(a).max(), np.abs(b).max())))
    n = int(d.size)
    t = paired_t(d, confidence=confidence, alternative=alternative)
    w = wilcoxon(d, alternative=alternative)
    sg = sign_test(d, alternative=alternative)
    boot = bootstrap_mean(d, n_resamples=n_resamples, confidence=confidence, alternative=alternative, seed=seed)
    ex = None
    if example_diffs is not None:
        ex = paired_bootstrap(example_diffs, n_resamples=n_resamples, confidence=confidence, alternative=alternative,
                              seed=seed, clusters=example_clusters)
    verdict = verdict_of(t.ci_low, t.ci_high, min_effect) if n >= 2 else "inconclusive"
    t_verdict = verdict
    crossed = None
    crossed_used = False
    verdict_interval = "t over seeds"
    units = ""
    crossed_note = ""
    if example_clusters is not None and example_diffs is None:
        raise InputError("clusters of examples need the per-example scores: give --example-scores with --cluster "
                         "or --clusters-from")
    if example_diffs is not None:
        scale = units_scale(d, example_diffs)
        crossed = crossed_interval(example_diffs, confidence=confidence, alternative=alternative, scale=scale or 1.0,
                                   clusters=example_clusters)
        if crossed is not None and scale is not None:
            by_seeds = verdict
            crossed_used = True
            verdict = verdict_of(crossed.low, crossed.high, min_effect)
            verdict_interval = (f"crossed seeds x examples ({crossed.seeds} x {crossed.examples:,}"
                                + (f", {crossed.clusters:,} clusters" if crossed.clusters else "") + ")")
            units = (f"every figure is in {metric}'s units" + (" (points: the per-example scores, proportions, "
                                                               "are shown x100)" if scale == 100 else ""))
            if by_seeds != verdict:
                crossed_note = (f"the seeds alone say {by_seeds!r} (t interval [{_fmt(t.ci_low)}, "
                                f"{_fmt(t.ci_high)}]), but the test set's noise"
                                + (f" (over its {crossed.clusters:,} clusters)" if crossed.clusters else "")
                                + " widens the interval to "
                                f"[{_fmt(crossed.low)}, {_fmt(crossed.high)}]: {verdict!r}")
        elif crossed is not None:
            units = ("the per-example figures are in the scores' units: each seed's metric difference is not "
                     "the mean (nor 100 x the mean) of its per-example differences")
            crossed_note = ("the metric is not the mean of the per-example scores, so the verdict keeps the t "
                            "interval over seeds; the crossed interval is in the scores' units")
    # power against the effect's size in the direction the test looks: a one-sided 'less' test detects a decrease
    effect = abs(min_effect) if min_effect else abs(t.mean)
    if alternative == "less":
        effect = -effect
    alpha = 1 - confidence
    power = seeds_needed = None
    warnings: list[str] = []
    notes: list[str] = []
    if n >= 2 and effect != 0:
        power = power_paired_t(n, effect, t.sd or 0.0, alpha=alpha, alternative=alternative)
        seeds_needed = seeds_for_power(effect, t.sd or 0.0, alpha=alpha, power=TARGET_POWER, alternative=alternative)
    sided = "" if alternative == "two-sided" else f", one-sided {alternative}"
    what = f"{effect:g} ({'--min-effect' if min_effect else 'the observed mean difference'}{sided})"
    if n == 1:
        warnings.append("1 seed: no spread can be estimated, so no interval, t-test or power; run at least "
                        f"{FEW_SEEDS} seeds per variant")
    elif n < FEW_SEEDS:
        detail = (f"{power:.0%} power to detect {what} at the observed SD {t.sd:.4g}" if power is not None
                  else "no power to speak of (no effect to detect)")
        need = f"; {seeds_needed} seeds give 80%" if seeds_needed else ""
        warnings.append(f"only {n} seeds: a paired t-test has {detail}{need}")
    if n >= 2 and t.sd == 0:
        width = "has zero width" if alternative == "two-sided" else "has its bound at the mean (zero margin)"
        warnings.append(f"all {n} differences are {t.mean:+.4g}: the differences do not vary, so the t interval "
                        f"{width} and the p-value, power and seeds needed are optimistic; other seeds will "
                        "vary: run more seeds, or check that the runs really differ by seed")
    if t.degenerate and n > 1:
        notes.append(t.degenerate)
    if boot.note:
        notes.append(boot.note)
    if 2 <= n < SMALL_FOR_BOOTSTRAP:
        verdict_boot = verdict_of(boot.low, boot.high, min_effect)
        differ = (f": here the bootstrap interval [{_fmt(boot.low)}, {_fmt(boot.high)}] would say "
                  f"{verdict_boot!r} where the t interval says {t_verdict!r}" if verdict_boot != t_verdict else "")
        # a disagreement a reader would see in the table is a warning; the general limitation, a note
        (warnings if differ else notes).append(
            f"with {n} seeds the bootstrap intervals are too narrow (resampling {n} values cannot show the spread "
            f"of unseen seeds; their coverage falls short of {confidence:.0%} below about {SMALL_FOR_BOOTSTRAP} "
            f"seeds), so {'the seeds alone are read with' if crossed_used else 'the verdict uses'} the t "
            f"interval{differ}")
    if w.zeros:
        notes.append(f"{w.zeros} seed(s) with no difference are left out of the Wilcoxon and sign tests")
    if w.method == "normal":
        notes.append("Wilcoxon p-value from the normal approximation (over 50 non-zero differences)")
    if n >= 2 and effect != 0 and seeds_needed is None:
        notes.append(f"more than 100,000 seeds would be needed for 80% power to detect {what}")
    if not min_effect:
        notes.append("no --min-effect: the verdict compares the interval with 0; give the smallest difference "
                     "worth having in metric units")
    if crossed_note:
        warnings.append(crossed_note)
    needs = None
    if crossed_used and crossed is not None:
        needs = crossed_needs(crossed, effect, alpha=alpha, power=TARGET_POWER, alternative=alternative)
    if needs is not None:
        t_seeds = seeds_needed
        seeds_needed = needs.seeds
        s_part = (f"{needs.seeds} seeds at these {needs.at_examples:,} examples" if needs.seeds else
                  f"no number of seeds at these {needs.at_examples:,} examples (the test set's noise alone is too "
                  "large)")
        e_part = (f"{needs.examples:,} examples{in_clusters(needs)} at these {needs.at_seeds} seeds"
                  if needs.examples else
                  f"no number of examples at these {needs.at_seeds} seeds (the seeds' noise alone is too large)")
        more = t_seeds and (not needs.seeds or needs.seeds > t_seeds)
        (warnings if more and verdict == "inconclusive" else notes).append(
            f"for 80% power to detect {what}, from the crossed variance components (seed, example, residual): "
            f"{s_part}, or {e_part}"
            + (f"; a count from the seed SD only would say {t_seeds} seeds, leaving out the test set's noise"
               if t_seeds else ""))
    if ex is not None and ex.clusters:
        notes.append(f"per-example bootstrap over {ex.seeds} seeds x {ex.examples:,} examples in {ex.clusters:,} "
                     f"clusters: {ex.method}; the verdict reads the crossed interval")
    elif ex is not None:
        notes.append(f"per-example bootstrap over {ex.seeds} seeds x {ex.examples:,} examples: {ex.method} "
                     f"({ex.engine} resampling)")
    if crossed is not None and crossed.clusters:
        deff = ("" if crossed.design_effect is None else
                f", design effect {crossed.design_effect:.2f} on the example term (its variance over the naive one)")
        notes.append(f"clusters: {crossed.clusters:,} clusters of {crossed.examples:,} examples; the crossed "
                     f"interval's example term is cluster-robust (CR1, {crossed.clusters - 1} df){deff}")
        if crossed.clusters < FEW_CLUSTERS:
            warnings.append(f"only {crossed.clusters} clusters: cluster-robust intervals are too narrow under about "
                            f"{FEW_CLUSTERS}; read the crossed interval as optimistic")
    return SeedsReport(
        baseline=baseline, candidate=candidate, metric=metric, higher_is_better=higher_is_better, seeds=seeds,
        baseline_values=tuple(map(float, a)), candidate_values=tuple(map(float, b)),
        differences=tuple(map(float, d)), n_seeds=n, mean_diff=t.mean, sd_diff=t.sd, ci_low=t.ci_low,
        ci_high=t.ci_high, confidence=confidence, alternative=alternative,
        t_statistic=t.to_dict()["statistic"], t_pvalue=t.p_value, wilcoxon_statistic=w.statistic,
        wilcoxon_pvalue=w.p_value, wilcoxon_method=w.method, sign_pvalue=sg.p_value, min_effect=min_effect,
        verdict=verdict, power=power, power_effect=effect if effect != 0 else None, seeds_needed=seeds_needed,
        t_test=t, bootstrap=boot, wilcoxon=w, sign=sg, examples=ex, crossed=crossed, needs=needs,
        verdict_interval=verdict_interval, units=units, source=source or {},
        warnings=tuple(warnings), notes=tuple(notes))


def compare_seeds(results: str | os.PathLike[str], *, metric: str = "metric", baseline: str | None = None,
                  candidate: str | None = None, examples: str | os.PathLike[str] | None = None,
                  score_field: str = "score", min_effect: float = 0.0, confidence: float = 0.95,
                  alternative: str = "two-sided", higher_is_better: bool = True, n_resamples: int = 10_000,
                  seed: int = 0, variant_field: str = "variant", seed_field: str = "seed",
                  id_field: str = "id", cluster: str | None = None,
                  clusters_from: str | os.PathLike[str] | None = None) -> SeedsReport:
    """Read a results file (variant, seed, metric) and compare two variants paired by seed. Its figure is
    campaign.plots.seeds of the result's to_dict().

    Args:
        metric, variant_field, seed_field: the columns of the results file (and, with id_field and score_field,
            of the per-example scores file).
        cluster: a column of the per-example scores naming each example's cluster (movie, document, template);
            or clusters_from: a split manifest whose units (groups and duplicate clusters, matched by id) are the
            clusters. Either makes the crossed interval's example term cluster-robust and the per-example
            bootstrap a cluster bootstrap.
    Raises:
        InputError: missing columns, a non-numeric metric, unpaired seeds, not exactly two variants; clusters
            without per-example scores, an example in two clusters or in no row of the split.
    """
    if cluster and clusters_from:
        raise InputError("--cluster and --clusters-from both name the clusters; give one")
    if (cluster or clusters_from) and examples is None:
        raise InputError(f"{'--cluster' if cluster else '--clusters-from'} groups the test examples: give their "
                         "per-example scores with --example-scores (variant, seed, id, score rows)")
    res = read_seed_results(results, metric=metric, variant_field=variant_field, seed_field=seed_field)
    base, cand = pick_variants(res.variants, baseline, candidate, str(results))
    seeds, a, b = pair_seeds(res, base, cand)
    ex = None
    groups: Sequence[str] | None = None
    source: dict[str, Any] = {"results": {"path": res.path, "sha256": res.sha256}}
    if examples is not None:
        table = read_example_table(examples, seeds, base, cand, score=score_field, variant_field=variant_field,
                                   seed_field=seed_field, id_field=id_field, cluster_field=cluster)
        ex, groups = table.diffs, table.clusters
        if not higher_is_better:
            ex = -ex
        source["examples"] = {"path": str(examples), "examples": len(table.ids)}
        if clusters_from is not None:
            from ..data.split_clusters import clusters_of_ids, read_clusters

            split = read_clusters(clusters_from)
            groups = clusters_of_ids(split, table.ids, lambda i: f"{examples} (example {table.ids[i]!r})")
            source["clusters"] = {"path": str(split.manifest)}
    rep = compare_paired(a, b, seeds=seeds, baseline=base, candidate=cand, metric=metric, min_effect=min_effect,
                         confidence=confidence, alternative=alternative, higher_is_better=higher_is_better,
                         n_resamples=n_resamples, seed=seed, example_diffs=ex, example_clusters=groups,
                         source=source)
    if cluster is None and clusters_from is None:
        return rep
    from dataclasses import replace

    return replace(rep, cluster_field=cluster, clusters_from=None if clusters_from is None else str(clusters_from))


__all__ = ["CrossedInterval", "ExampleTable", "SeedResults", "SeedsReport", "VERDICTS", "cluster_robust_mean_variance",
           "compare_paired", "compare_seeds", "crossed_interval", "crossed_needs", "pair_seeds", "pick_variants",
           "read_example_scores", "read_example_table", "read_seed_results", "units_scale", "verdict_of"]
