"""Paired tests on differences: t (with its interval and power), Wilcoxon signed-rank, sign, McNemar.

Pure functions on 1-D arrays of differences d_i = candidate_i - baseline_i (shape (n,)). Every function gives a
defined answer on degenerate input (n = 1, all differences equal, no discordant pairs): a p-value of 1 or 0,
an interval of zero width, or None where the quantity does not exist (a t interval from one value), never a
division by zero. `alternative` is 'two-sided', 'greater' (candidate better: d > 0) or 'less'.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..results import Record

ALTERNATIVES = ("two-sided", "greater", "less")
EXACT_WILCOXON_MAX_N = 50      # exact null distribution up to 50 non-zero differences (scipy's 'auto' limit)
EXACT_MCNEMAR_MAX = 25         # exact binomial below 25 discordant pairs, chi-square above (common rule)


def scipy_stats():
    try:
        from scipy import stats
    except ImportError:
        raise MissingDependencyError("scipy", "data") from None
    return stats


def numpy():
    try:
        import numpy as np
    except ImportError:
        raise MissingDependencyError("numpy", "data") from None
    return np


def check_alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise InputError(f"alternative {alternative!r} is not known; use two-sided, greater or less")
    return alternative


def snap(d: Any, magnitude: float) -> Any:
    """Round float noise off differences (0.3-0.1 vs 0.5-0.3) so equal differences tie and zeros are zero.

    Rounds to 12 significant digits of the metric's magnitude: far below any real metric resolution.
    """
    np = numpy()
    d = np.asarray(d, dtype=float)
    if magnitude <= 0 or not math.isfinite(magnitude):
        return d
    decimals = 12 - math.ceil(math.log10(magnitude))
    return np.round(d, decimals)


@dataclass(frozen=True)
class TTest:
    """Paired t: mean difference, its SD (ddof=1), the interval at `confidence` and the p-value."""

    n: int
    mean: float
    sd: float | None
    se: float | None
    df: int | None
    statistic: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    alternative: str
    degenerate: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _finite(asdict(self))


def paired_t(d: Sequence[float], *, confidence: float = 0.95, alternative: str = "two-sided") -> TTest:
    """Paired t-test and t interval on differences d (shape (n,)).

    n = 1: mean only (no SD, interval or p-value). SD = 0: the interval is the point; p = 0 when the mean is
    non-zero in the tested direction, 1 otherwise (the t statistic is infinite or undefined).
    """
    np, st = numpy(), scipy_stats()
    check_alternative(alternative)
    diffs = np.asarray(d, dtype=float)
    n = int(diffs.size)
    if n == 0:
        raise InputError("no paired differences; give at least one seed for both variants")
    equal = bool(np.all(diffs == diffs[0]))
    mean = float(diffs[0]) if equal else float(diffs.mean())  # the mean of equal floats can be 1 ulp off
    if n == 1:
        return TTest(1, mean, None, None, None, None, None, None, None, confidence, alternative,
                     "one value: no spread, so no interval or test")
    sd = 0.0 if equal else float(diffs.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    alpha = 1 - confidence
    q = float(st.t.ppf(1 - alpha / 2 if alternative == "two-sided" else 1 - alpha, df))
    low = mean - q * se if alternative in ("two-sided", "greater") else None
    high = mean + q * se if alternative in ("two-sided", "less") else None
    if se == 0:
        sign = (mean > 0) - (mean < 0)
        stat = math.copysign(math.inf, mean) if sign else 0.0
        if sign == 0:
            p = 1.0
        elif alternative == "two-sided":
            p = 0.0
        else:
            p = 0.0 if (sign > 0) == (alternative == "greater") else 1.0
        return TTest(n, mean, 0.0, 0.0, df, stat, p, low, high, confidence, alternative,
                     "all differences are equal: the interval is the point, the t statistic is infinite, and "
                     "power and seeds needed are optimistic (other seeds will vary)")
    t = mean / se
    if alternative == "two-sided":
        p = float(2 * st.t.sf(abs(t), df))
    elif alternative == "greater":
        p = float(st.t.sf(t, df))
    else:
        p = float(st.t.cdf(t, df))
    return TTest(n, mean, sd, se, df, t, min(1.0, p), low, high, confidence, alternative)


@dataclass(frozen=True)
class RankTest(Record):
    """Wilcoxon signed-rank: W+ (sum of ranks of positive differences), zeros dropped (Wilcoxon's method)."""

    n: int                 # non-zero differences
    zeros: int
    statistic: float       # W+
    p_value: float
    method: str            # exact | normal | none
    alternative: str
    ties: bool


def wilcoxon(d: Sequence[float], *, alternative: str = "two-sided") -> RankTest:
    """Wilcoxon signed-rank test on differences d (shape (n,)).

    Exact null distribution for up to 50 non-zero differences, tied |d| included (midranks, enumerated
    exactly over the 2**n sign assignments by dynamic programming on doubled ranks); above that the normal
    approximation with the tie correction and no continuity correction (scipy's default). Two-sided
    exact p = min(1, 2 x the smaller tail). No non-zero difference: p = 1.
    """
    np, st = numpy(), scipy_stats()
    check_alternative(alternative)
    diffs = np.asarray(d, dtype=float)
    nz = diffs[diffs != 0]
    n, zeros = int(nz.size), int(diffs.size - nz.size)
    if n == 0:
        return RankTest(0, zeros, 0.0, 1.0, "none", alternative, False)
    ranks = st.rankdata(np.abs(nz))            # average ranks for ties
    ties = bool(len(np.unique(np.abs(nz))) < n)
    w_plus = float(ranks[nz > 0].sum())
    if n <= EXACT_WILCOXON_MAX_N:
        doubled = np.rint(2 * ranks).astype(int)    # midranks are halves: doubled they are integers
        dist = np.zeros(int(doubled.sum()) + 1)
        dist[0] = 1.0
        for r in doubled:                            # P(S = s), S = sum of the doubled ranks given a + sign
            shifted = np.zeros_like(dist)
            shifted[r:] = dist[: dist.size - r]
            dist = 0.5 * dist + 0.5 * shifted
        s_obs = int(round(2 * w_plus))
        p_le = float(dist[: s_obs + 1].sum())
        p_ge = float(dist[s_obs:].sum())
        method = "exact"
    else:
        mean = n * (n + 1) / 4
        _, counts = np.unique(np.abs(nz), return_counts=True)
        var = n * (n + 1) * (2 * n + 1) / 24 - float((counts**3 - counts).sum()) / 48
        z = (w_plus - mean) / math.sqrt(var)
        p_le, p_ge = float(st.norm.cdf(z)), float(st.norm.sf(z))
        method = "normal"
    p = {"two-sided": min(1.0, 2 * min(p_le, p_ge)), "greater": p_ge, "less": p_le}[alternative]
    return RankTest(n, zeros, w_plus, min(1.0, p), method, alternative, ties)


@dataclass(frozen=True)
class SignTest(Record):
    """Sign test: how many differences are positive and negative (zeros dropped), exact binomial p."""

    positive: int
    negative: int
    zeros: int
    p_value: float
    alternative: str


def binomial_p(k: int, n: int, *, alternative: str = "two-sided") -> float:
    """Exact binomial p-value for k successes of n at p = 1/2; two-sided = min(1, 2 x the smaller tail); n = 0 -> 1."""
    if n == 0:
        return 1.0
    st = scipy_stats()
    p_le = float(st.binom.cdf(k, n, 0.5))
    p_ge = float(st.binom.sf(k - 1, n, 0.5))
    return min(1.0, {"two-sided": 2 * min(p_le, p_ge), "greater": p_ge, "less": p_le}[check_alternative(alternative)])


def sign_test(d: Sequence[float], *, alternative: str = "two-sided") -> SignTest:
    """Sign test on differences d (shape (n,)): 'greater' tests for more positive than negative differences."""
    np = numpy()
    diffs = np.asarray(d, dtype=float)
    pos, neg = int((diffs > 0).sum()), int((diffs < 0).sum())
    return SignTest(pos, neg, int(diffs.size) - pos - neg, binomial_p(pos, pos + neg, alternative=alternative),
                    alternative)


@dataclass(frozen=True)
class McNemar(Record):
    """McNemar's test on discordant pairs: b = right -> wrong, c = wrong -> right."""

    b: int
    c: int
    statistic: float | None
    p_value: float
    method: str


def mcnemar(b: int, c: int) -> McNemar:
    """Exact two-sided binomial on b of b + c when b + c < 25; otherwise chi-square with Edwards' continuity
    correction, max(0, |b - c| - 1)**2 / (b + c), 1 df. No discordant pair: p = 1."""
    if b < 0 or c < 0:
        raise InputError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return McNemar(b, c, None, 1.0, "none (the models never disagree)")
    if n < EXACT_MCNEMAR_MAX:
        return McNemar(b, c, float(min(b, c)), binomial_p(min(b, c), n), "exact binomial")
    stat = max(0.0, abs(b - c) - 1.0) ** 2 / n
    return McNemar(b, c, stat, float(scipy_stats().chi2.sf(stat, 1)), "chi-square, continuity corrected")


def power_paired_t(n: int, effect: float, sd: float, *, alpha: float = 0.05,
                   alternative: str = "two-sided") -> float | None:
    """Power of a paired t-test with n pairs to detect a mean difference `effect` when the differences have SD
    `sd`, with T ~ noncentral t(n - 1, effect / (sd / sqrt(n))):
    two-sided P(|T| > t(1 - alpha/2)); 'greater' P(T > t(1 - alpha)); 'less' P(T < -t(1 - alpha)).
    A one-sided test only detects an effect in its direction: pass effect > 0 for 'greater', < 0 for 'less'."""
    check_alternative(alternative)
    if n < 2:
        return None
    if effect == 0:
        return alpha
    if sd == 0:
        if alternative == "two-sided" or (effect > 0) == (alternative == "greater"):
            return 1.0
        return 0.0
    st = scipy_stats()
    df = n - 1
    nc = effect / (sd / math.sqrt(n))
    if alternative == "two-sided":
        nc = abs(nc)
        tc = float(st.t.ppf(1 - alpha / 2, df))
        power = float(st.nct.sf(tc, df, nc) + st.nct.cdf(-tc, df, nc))
        far = nc > tc
    else:
        tc = float(st.t.ppf(1 - alpha, df))
        power = float(st.nct.sf(tc, df, nc) if alternative == "greater" else st.nct.cdf(-tc, df, nc))
        far = nc > tc if alternative == "greater" else nc < -tc
    if not math.isfinite(power):        # scipy's nct gives NaN for huge noncentrality (SD ~1e-12 x the effect)
        return 1.0 if far else 0.0 if alternative != "two-sided" else alpha
    return power


def seeds_for_power(effect: float, sd: float, *, alpha: float = 0.05, power: float = 0.80,
                    alternative: str = "two-sided", limit: int = 100_000) -> int | None:
    """Smallest number of paired seeds (>= 2) giving `power` to detect `effect` at SD `sd` (see power_paired_t
    for the sign of `effect` under a one-sided alternative); None when the effect is 0, points away from a
    one-sided alternative, or more than `limit` seeds would be needed."""
    check_alternative(alternative)
    if effect == 0 or (alternative != "two-sided" and (effect > 0) != (alternative == "greater")):
        return None
    if sd == 0:
        return 2
    lo, hi = 1, 2
    while (power_paired_t(hi, effect, sd, alpha=alpha, alternative=alternative) or 0.0) < power:
        lo, hi = hi, hi * 2                                      # power grows with n: double, then bisect
        if hi > limit:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (power_paired_t(mid, effect, sd, alpha=alpha, alternative=alternative) or 0.0) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: infinite statistics become the strings 'inf' / '-inf'."""
    return {k: (("inf" if v > 0 else "-inf") if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}
