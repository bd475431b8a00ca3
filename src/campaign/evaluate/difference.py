"""The verdict of a paired comparison: the difference of a metric (candidate - baseline) with its standard error,
95% interval and p-value, naive or cluster-robust, and the word it earns.

Per-example differences d_i (shape (n,)): the estimate is their mean. Without clusters the standard error is
the paired one, sd(d) / sqrt(n), with a t on n - 1 df (the paired t-test). With clusters (items that share a
movie, a user, a document, a prompt template), d_i is regressed on a constant with the cluster-robust (sandwich)
variance and its small-sample correction CR1:

    V = G / (G - 1) * sum_g (sum_{i in g} e_i)^2 / n^2,    e_i = d_i - mean(d)

(CR1's factor G/(G-1) * (n-1)/(n-k) with k = 1 regressor; statsmodels' OLS(d, ones).fit(cov_type='cluster')
gives the same), with a t on G - 1 df (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust
Inference"). The design effect is V over the naive variance. With few clusters the cluster-robust test itself
over-rejects (ibid., the few-clusters problem); under 20 (a cut assumed, not taken from a source) it is said.

Verdicts (alpha = 0.05): EQUIVALENT (an --equivalence-margin stated and TOST shows |difference| < margin),
NON-INFERIOR (the one-sided test at -margin shows difference > -margin, and no significant gain), IMPROVED / WORSE
(the 95% interval excludes 0), NOT SHOWN (none of these). Several tests at once (tasks) get Holm's correction.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record
from .stats import numpy, scipy_stats

ALPHA = 0.05
FEW_CLUSTERS = 20
VERDICTS = ("IMPROVED", "WORSE", "NOT SHOWN", "EQUIVALENT", "NON-INFERIOR")


@dataclass(frozen=True)
class Difference(Record):
    """candidate - baseline of one metric over n paired items: estimate, se, the 95% interval, the two-sided
    p-value, its df, the clusters (None without) and the design effect, the method; with a margin, the TOST
    p-value and the one-sided non-inferiority p-value at -margin; the verdict (VERDICTS)."""

    metric: str
    estimate: float
    se: float
    ci95: tuple[float, float]
    p_value: float
    df: int
    n: int
    clusters: int | None
    design_effect: float | None
    method: str
    verdict: str = "NOT SHOWN"
    margin: float | None = None
    non_inferiority_margin: float | None = None
    equivalence_p: float | None = None
    non_inferiority_p: float | None = None
    p_adjusted: float | None = None         # Holm-adjusted, when one of several tests
    family: int = 1                         # how many tests the Holm correction ran over
    task: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def p_decisive(self) -> float:
        return self.p_value if self.p_adjusted is None else self.p_adjusted


def _t_sf(t: float, df: int) -> float:
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    return float(scipy_stats().t.sf(t, df))


def cluster_ids(values: Sequence[Any]) -> list[int]:
    """Integer codes of cluster labels, in order of first appearance."""
    code: dict[Any, int] = {}
    return [code.setdefault(v, len(code)) for v in values]


def paired_difference(d: Sequence[float], *, metric: str = "accuracy", clusters: Sequence[Any] | None = None,
                      margin: float | None = None, non_inferiority: float | None = None,
                      task: str | None = None) -> Difference:
    """The difference's estimate, se, 95% interval and p-value (see the module docstring), with a verdict.

    Raises:
        InputError: fewer than 2 items; clusters of another length or fewer than 2; a margin that is not positive.
    """
    np = numpy()
    st = scipy_stats()
    x = np.asarray(d, dtype=float)
    n = int(x.size)
    if n < 2:
        raise InputError(f"{n} paired item(s): a difference's standard error needs at least 2")
    for name, m in (("--equivalence-margin", margin), ("--non-inferiority", non_inferiority)):
        if m is not None and not (math.isfinite(m) and m > 0):
            raise InputError(f"{name} {m!r}: give the largest loss that does not matter, a positive number in the "
                             "metric's units (0.01 = one point of accuracy)")
    mean = float(x.mean())
    if bool(np.all(x == x[0])):
        mean = float(x[0])
    e = x - mean
    naive_var = float((e ** 2).sum() / (n - 1) / n)
    notes: list[str] = []
    if clusters is None:
        var, df, g, deff = naive_var, n - 1, None, None
        method = "paired t on per-item differences (items independent)"
    else:
        codes, g = cluster_codes(clusters, n)
        sums = np.bincount(codes, weights=e, minlength=g)
        var = float(g / (g - 1) * (sums ** 2).sum() / n ** 2)
        df = g - 1
        deff = var / naive_var if naive_var > 0 else None
        method = f"cluster-robust (CR1) over {g} clusters, t with {df} df"
        if g < FEW_CLUSTERS:
            notes.append(f"only {g} clusters: cluster-robust intervals are too narrow under about {FEW_CLUSTERS}; "
                         "read the p-value as optimistic")
    se = math.sqrt(var)
    q = float(st.t.ppf(1 - ALPHA / 2, df))
    ci = (mean - q * se, mean + q * se)
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = min(1.0, 2 * _t_sf(abs(mean) / se, df))

    def one_sided_above(bound: float) -> float:   # H0: difference <= bound
        if se == 0:
            return 0.0 if mean > bound else 1.0
        return _t_sf((mean - bound) / se, df)

    def one_sided_below(bound: float) -> float:   # H0: difference >= bound
        if se == 0:
            return 0.0 if mean < bound else 1.0
        return _t_sf((bound - mean) / se, df)

    eq_p = ni_p = None
    if margin is not None:
        eq_p = max(one_sided_above(-margin), one_sided_below(margin))
    ni_margin = non_inferiority if non_inferiority is not None else margin
    if ni_margin is not None:
        ni_p = one_sided_above(-ni_margin)
    out = Difference(metric, mean, se, ci, p, df, n, g, deff, method, margin=margin,
                     non_inferiority_margin=ni_margin, equivalence_p=eq_p, non_inferiority_p=ni_p, task=task,
                     notes=tuple(notes))
    return with_verdict(out)


def with_verdict(x: Difference, p_adjusted: float | None = None, family: int = 1, eq_p: float | None = None,
                 ni_p: float | None = None) -> Difference:
    """The difference with its verdict, from its p-values (Holm-adjusted ones where given)."""
    from dataclasses import replace

    y = replace(x, p_adjusted=p_adjusted, family=family)
    p = y.p_decisive
    eq_p = x.equivalence_p if eq_p is None else eq_p
    ni_p = x.non_inferiority_p if ni_p is None else ni_p
    eq = eq_p is not None and eq_p < ALPHA
    ni = ni_p is not None and ni_p < ALPHA
    if eq:
        word = "EQUIVALENT"
    elif p < ALPHA and x.estimate > 0:
        word = "IMPROVED"
    elif ni:
        word = "NON-INFERIOR"
    elif p < ALPHA and x.estimate < 0:
        word = "WORSE"
    else:
        word = "NOT SHOWN"
    return replace(y, verdict=word)


@dataclass(frozen=True)
class RateEstimate(Record):
    """A rate (accuracy, valid JSON) over n items with its standard error and 95% interval: Wilson's score
    interval for independent items; with clusters, the CR1 cluster-robust standard error of the mean of the 0/1
    outcomes and a t interval on G - 1 df (clipped to [0, 1])."""

    metric: str
    rate: float
    se: float
    ci95: tuple[float, float]
    n: int
    method: str
    clusters: int | None = None
    design_effect: float | None = None


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval for k successes of n (statsmodels' proportion_confint(method='wilson'))."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_estimate(outcomes: Sequence[bool], *, metric: str, clusters: Sequence[Any] | None = None) -> RateEstimate:
    """The rate of True among `outcomes` with its standard error and interval (see RateEstimate)."""
    n = len(outcomes)
    if n == 0:
        raise InputError(f"no items to estimate {metric} from")
    k = sum(bool(x) for x in outcomes)
    p = k / n
    se = math.sqrt(p * (1 - p) / n)
    if clusters is None:
        return RateEstimate(metric, p, se, wilson(k, n), n, "Wilson score interval (items independent)")
    x = paired_difference([float(bool(v)) for v in outcomes], metric=metric, clusters=clusters)
    low, high = max(0.0, x.ci95[0]), min(1.0, x.ci95[1])
    return RateEstimate(metric, p, x.se, (low, high), n, x.method, x.clusters, x.design_effect)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (statsmodels' multipletests(method='holm') gives the same)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def holm_family(diffs: Sequence[Difference]) -> tuple[Difference, ...]:
    """Each difference's verdict from Holm-adjusted p-values over the family (unchanged when there is one)."""
    if len(diffs) < 2:
        return tuple(diffs)
    adj = holm([x.p_value for x in diffs])
    eq: list[float | None] = list(holm([x.equivalence_p for x in diffs if x.equivalence_p is not None]))
    ni: list[float | None] = list(holm([x.non_inferiority_p for x in diffs if x.non_inferiority_p is not None]))
    eq = eq or [None] * len(diffs)
    ni = ni or [None] * len(diffs)
    return tuple(with_verdict(x, a, len(diffs), e, i) for x, a, e, i in zip(diffs, adj, eq, ni, strict=True))


def describe(x: Difference) -> str:
    """One line: the verdict, estimate, se, interval, p-value, clusters."""
    where = f"{x.task}: " if x.task else ""
    p = f"p = {x.p_value:.3g}" + (f" (Holm-adjusted over {x.family} tests: {x.p_adjusted:.3g})"
                                  if x.p_adjusted is not None else "")
    line = (f"{where}{x.verdict}: {x.metric} difference {x.estimate:+.4f} (candidate - baseline), se {x.se:.4f}, "
            f"95% interval [{x.ci95[0]:+.4f}, {x.ci95[1]:+.4f}], {p}; {x.method}")
    if x.clusters is not None and x.design_effect is not None:
        line += f", design effect {x.design_effect:.2f}"
    if x.non_inferiority_p is not None and x.non_inferiority_margin is not None:
        line += f"; non-inferiority at -{x.non_inferiority_margin:g}: one-sided p = {x.non_inferiority_p:.3g}"
    if x.equivalence_p is not None and x.margin is not None:
        line += f"; equivalence within +/-{x.margin:g}: TOST p = {x.equivalence_p:.3g}"
    return line


def difference_checks(diffs: Sequence[Difference]) -> tuple[Check, ...]:
    """One check per difference, id difference.verdict (difference.<task> with several): fail when WORSE (a
    significant loss, not shown within a stated margin); with a margin, warn when equivalence is not shown only
    because the candidate may be better by more than the margin; fail when a stated margin is not met."""
    out = []
    for x in diffs:
        cid = "difference.verdict" if x.task is None or len(diffs) == 1 else f"difference.{x.task}"
        seen = describe(x)
        if x.verdict == "WORSE":
            out.append(Check(cid, "fail", seen, "the candidate is significantly worse than the baseline",
                             "fix the candidate; or, if a small loss is acceptable, state it with --non-inferiority "
                             "MARGIN"))
        elif x.margin is not None and x.verdict != "EQUIVALENT":
            if x.verdict in ("IMPROVED", "NON-INFERIOR"):
                out.append(Check(cid, "warn", seen, f"not shown equivalent within +/-{x.margin:g}: the candidate "
                                 "may be better by more than the margin (it is not worse by more than it)",
                                 "if only a loss matters, use --non-inferiority MARGIN instead of "
                                 "--equivalence-margin"))
            else:
                out.append(Check(cid, "fail", seen, f"not shown equivalent within +/-{x.margin:g}: the data "
                                 "leave room for a larger difference",
                                 "more examples narrow the interval; or state a margin the decision can live with"))
        elif x.non_inferiority_margin is not None and x.margin is None and x.verdict not in ("NON-INFERIOR",
                                                                                             "IMPROVED"):
            out.append(Check(cid, "fail", seen, f"not shown non-inferior: the candidate may be worse by more than "
                             f"{x.non_inferiority_margin:g}", "more examples narrow the interval; or fix the "
                             "candidate"))
        else:
            out.append(Check(cid, "pass", seen))
    return tuple(out)


__all__ = ["VERDICTS", "Difference", "RateEstimate", "cluster_ids", "describe", "difference_checks", "holm",
           "holm_family", "paired_difference", "rate_estimate", "wilson", "with_verdict"]


def cluster_codes(clusters: Sequence[Any], n: int, unit: str = "item") -> tuple[Any, int]:
    """Each of the n units' cluster as an integer code 0..G-1, and G.

    Raises:
        InputError: not one label per unit, or every unit in one cluster (a cluster-robust error needs 2).
    """
    if len(clusters) != n:
        raise InputError(f"{len(clusters)} cluster labels for {n} {unit}s; give one per {unit}")
    codes = numpy().asarray(cluster_ids(clusters))
    g = int(codes.max()) + 1
    if g < 2:
        raise InputError(f"every {unit} is in one cluster: a cluster-robust standard error needs at least 2 "
                         "clusters; give a finer --cluster field")
    return codes, g
