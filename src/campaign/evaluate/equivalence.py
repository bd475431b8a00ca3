"""Equal quality as a test: two one-sided tests (TOST) that a candidate's paired scores differ from the baseline's
by less than a margin the user states, in either direction.

The decisions the guides take "at equal quality" (a quantized variant, a cheaper configuration) need this, not a
difference test: p > 0.05 for a difference says the data cannot tell, not that the variants are equal.

For paired scores (per-example metrics, or 0/1 correctness, both as the candidate minus the baseline on the same
examples): d_i with mean m and standard error s/sqrt(n) (s with n - 1); H0: m <= -margin or m >= +margin;
t_low = (m + margin) / se, t_high = (m - margin) / se, each on n - 1 degrees of freedom; p = the larger of the two
one-sided p-values (Schuirmann 1987; statsmodels' ttost_paired gives the same). Equivalent at level alpha when
p < alpha, which is when the 1 - 2 alpha confidence interval of m lies inside (-margin, +margin).
For 0/1 outcomes this is the large-sample test on the paired differences (-1, 0, +1): the discordant pairs carry
all of it, as in McNemar's test.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..checks import Check
from ..errors import InputError
from ..results import Result

SCHEMA = "campaign.equivalence/1"


@dataclass(frozen=True)
class Equivalence(Result):
    """TOST on paired differences (candidate - baseline): their mean, the 1 - 2 alpha interval, the two
    one-sided statistics and the p-value, against +/- margin."""

    n: int
    margin: float
    alpha: float
    difference: float
    interval: tuple[float, float]
    t_low: float
    t_high: float
    p_value: float
    checks: tuple[Check, ...] = field(default=())
    schema: str = SCHEMA

    @property
    def equivalent(self) -> bool:
        return self.p_value < self.alpha


def paired_tost(baseline: Sequence[float], candidate: Sequence[float], *, margin: float,
                alpha: float = 0.05) -> Equivalence:
    """TOST that mean(candidate - baseline) lies within +/- margin (see the module docstring).

    Raises:
        InputError: lengths differ, fewer than 2 pairs, a margin that is not positive, a score that is not finite.
    """
    from scipy import stats

    if len(baseline) != len(candidate):
        raise InputError(f"{len(baseline)} baseline scores and {len(candidate)} candidate scores: an equivalence test "
                         "pairs them example by example; give the same examples")
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
        raise InputError(f"margin {margin!r}: give the largest difference that does not matter, a positive number in "
                         "the metric's units (0.01 = one point of accuracy)")
    if not 0 < alpha < 0.5:
        raise InputError(f"alpha {alpha!r}: give a level between 0 and 0.5 (0.05)")
    d = [float(c) - float(b) for b, c in zip(baseline, candidate, strict=True)]
    if not all(math.isfinite(x) for x in d):
        raise InputError("a score that is not finite (NaN or inf): an equivalence test needs every pair's scores")
    n = len(d)
    if n < 2:
        raise InputError(f"{n} pair(s): an equivalence test needs at least 2")
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    se = math.sqrt(var / n)
    df = n - 1
    if se == 0:  # every difference the same: inside the margin or not, with certainty
        inside = -margin < mean < margin
        t_low = t_high = math.inf if inside else -math.inf
        p = 0.0 if inside else 1.0
        half = 0.0
    else:
        t_low, t_high = (mean + margin) / se, (mean - margin) / se
        p = max(float(stats.t.sf(t_low, df)), float(stats.t.cdf(t_high, df)))
        half = float(stats.t.ppf(1 - alpha, df)) * se
    interval = (mean - half, mean + half)
    seen = (f"difference {mean:+.4g} (candidate - baseline, {n} pairs), {1 - 2 * alpha:.0%} interval "
            f"[{interval[0]:+.4g}, {interval[1]:+.4g}] against +/-{margin:g}: p = {p:.3g}")
    check = Check("equivalence.within_margin", "pass", seen) if p < alpha else Check(
        "equivalence.within_margin", "fail", seen,
        "the data do not show the variants within the margin: they may differ by more",
        "more examples narrow the interval; or state a margin the decision can live with")
    return Equivalence(n, float(margin), float(alpha), mean, interval, t_low, t_high, p, (check,))


__all__ = ["Equivalence", "paired_tost"]
