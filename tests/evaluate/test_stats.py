"""Paired tests checked against textbook values, hand enumeration, scipy and statsmodels; degenerate inputs."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from campaign.evaluate.stats import mcnemar, paired_t, power_paired_t, seeds_for_power, sign_test, snap, wilcoxon

# Student's sleep data (Cushny & Peebles 1905, R `sleep`): extra sleep of drug 2 minus drug 1, 10 patients.
SLEEP = [1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4]
ALTS = ["two-sided", "greater", "less"]


def test_paired_t_on_the_sleep_data_matches_r():
    # R: t.test(extra ~ group, data = sleep, paired = TRUE) -> t = -4.0621, df = 9, p-value = 0.002833,
    # 95 percent CI -2.4598858 -0.7001142, mean difference -1.58 (group 1 minus group 2; here the reverse).
    t = paired_t(SLEEP)
    assert t.mean == pytest.approx(1.58) and t.df == 9
    assert t.statistic == pytest.approx(4.0621, abs=1e-4)
    assert t.p_value == pytest.approx(0.002833, abs=1e-6)
    assert (t.ci_low, t.ci_high) == (pytest.approx(0.7001142, abs=1e-7), pytest.approx(2.4598858, abs=1e-7))


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize("shift", [0.4, -0.4])
def test_paired_t_matches_scipy_in_both_directions(alternative, shift):
    rng = np.random.default_rng(1)
    a = rng.normal(10, 1, 12)
    b = a + shift + rng.normal(0, 0.5, 12)
    ref = stats.ttest_rel(b, a, alternative=alternative)
    t = paired_t(b - a, alternative=alternative, confidence=0.9)
    assert t.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert t.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    ci = ref.confidence_interval(0.9)
    assert (t.ci_low if t.ci_low is not None else -np.inf) == pytest.approx(ci.low)
    assert (t.ci_high if t.ci_high is not None else np.inf) == pytest.approx(ci.high)


def test_one_sided_t_directions_are_not_swapped():
    up = paired_t(SLEEP, alternative="greater")
    down = paired_t(SLEEP, alternative="less")
    assert up.p_value == pytest.approx(0.002833 / 2, abs=1e-6)      # half of R's two-sided p
    assert down.p_value == pytest.approx(1 - 0.002833 / 2, abs=1e-6)
    assert up.ci_high is None and up.ci_low > 0 and down.ci_low is None and down.ci_high > 0


def test_paired_t_degenerate_inputs_are_defined():
    one = paired_t([0.3])
    assert one.mean == 0.3 and one.p_value is None and one.ci_low is None and one.sd is None
    same = paired_t([0.5, 0.5, 0.5])
    assert same.sd == 0 and (same.ci_low, same.ci_high) == (0.5, 0.5) and same.p_value == 0.0
    assert math.isinf(same.statistic) and same.to_dict()["statistic"] == "inf"
    assert paired_t([0.5, 0.5], alternative="less").p_value == 1.0
    assert paired_t([0.0, 0.0, 0.0]).p_value == 1.0
    noisy = paired_t([0.6 - 0.5] * 3)                     # np.std would say 1.7e-17
    assert noisy.sd == 0.0 and noisy.ci_low == noisy.ci_high == 0.6 - 0.5


def test_wilcoxon_exact_hand_enumeration():
    # n = 5, all positive: W+ = 15 is the single most extreme of 2**5 = 32 sign patterns.
    r = wilcoxon([1, 2, 3, 4, 5])
    assert r.statistic == 15 and r.method == "exact" and r.p_value == pytest.approx(2 / 32)
    assert wilcoxon([1, 2, 3, 4, 5], alternative="greater").p_value == pytest.approx(1 / 32)
    assert wilcoxon([1, 2, 3, 4, 5], alternative="less").p_value == pytest.approx(1.0)
    # Rank 1 negative: W+ = 14; P(W+ >= 14) = P(14) + P(15) = 2/32.
    r = wilcoxon([-1, 2, 3, 4, 5])
    assert r.statistic == 14 and r.p_value == pytest.approx(4 / 32)
    assert wilcoxon([-1, 2, 3, 4, 5], alternative="less").p_value == pytest.approx(31 / 32)
    assert wilcoxon([1, -2, -3, -4, -5], alternative="less").p_value == pytest.approx(2 / 32)


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize("n", [4, 9, 20, 50])
def test_wilcoxon_exact_matches_scipy_without_ties(alternative, n):
    d = np.random.default_rng(n).normal(0.3, 1, n)
    ref = stats.wilcoxon(d, alternative=alternative, method="exact")
    assert wilcoxon(d, alternative=alternative).p_value == pytest.approx(ref.pvalue, rel=1e-10)


@pytest.mark.parametrize("alternative", ALTS)
def test_wilcoxon_with_ties_is_the_exact_permutation_p(alternative):
    d = np.array([0.5, 0.5, -0.5, 1.0, 2.0, 2.0, 2.0, -3.0])
    ranks = stats.rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s)
            for signs in itertools.product([0, 1], repeat=len(d))]
    p_ge = np.mean([s >= observed - 1e-9 for s in sums])
    p_le = np.mean([s <= observed + 1e-9 for s in sums])
    expected = {"two-sided": min(1, 2 * min(p_ge, p_le)), "greater": p_ge, "less": p_le}[alternative]
    r = wilcoxon(d, alternative=alternative)
    assert r.ties and r.method == "exact" and r.statistic == observed
    assert r.p_value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("alternative", ALTS)
def test_wilcoxon_normal_approximation_above_50_matches_scipy(alternative):
    d = np.round(np.random.default_rng(7).normal(0.2, 1, 80), 1)     # rounding makes ties: tie correction
    ref = stats.wilcoxon(d[d != 0], alternative=alternative, method="approx")
    r = wilcoxon(d, alternative=alternative)
    assert r.method == "normal" and r.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_wilcoxon_drops_zeros_and_handles_all_zero():
    assert wilcoxon([0, 1, 2, 3, 4, 5]).p_value == pytest.approx(2 / 32)
    z = wilcoxon([0.0, 0.0])
    assert z.n == 0 and z.zeros == 2 and z.p_value == 1.0


def test_sign_test_hand_and_statsmodels():
    # 9 positive, 0 negative, 1 zero dropped: two-sided p = 2 / 2**9.
    s = sign_test(SLEEP)
    assert (s.positive, s.negative, s.zeros) == (9, 0, 1) and s.p_value == pytest.approx(2 / 512)
    assert sign_test(SLEEP, alternative="greater").p_value == pytest.approx(1 / 512)
    assert sign_test(SLEEP, alternative="less").p_value == pytest.approx(1.0)
    from statsmodels.stats.descriptivestats import sign_test as sm_sign

    d = np.random.default_rng(3).normal(0.2, 1, 30)
    assert sign_test(d).p_value == pytest.approx(sm_sign(d)[1], rel=1e-10)
    assert sign_test([0, 0]).p_value == 1.0


def test_mcnemar_exact_by_hand_and_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    # b = 1, c = 6: two-sided binomial = 2 x P(X <= 1 | 7, 1/2) = 2 x (1 + 7) / 128.
    m = mcnemar(1, 6)
    assert m.method == "exact binomial" and m.p_value == pytest.approx(16 / 128)
    for b, c in [(0, 5), (3, 9), (10, 14), (12, 12)]:
        ref = sm_mcnemar([[50, b], [c, 20]], exact=True).pvalue
        assert mcnemar(b, c).p_value == pytest.approx(ref, rel=1e-12)


def test_mcnemar_chi_square_with_continuity_correction():
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    # Agresti's approval ratings: b = 150, c = 86 -> (|150 - 86| - 1)**2 / 236 = 16.8178.
    m = mcnemar(150, 86)
    assert m.method.startswith("chi-square") and m.statistic == pytest.approx(63**2 / 236)
    for b, c in [(150, 86), (20, 5), (13, 30)]:
        ref = sm_mcnemar([[400, b], [c, 300]], exact=False, correction=True)
        assert mcnemar(b, c).statistic == pytest.approx(ref.statistic)
        assert mcnemar(b, c).p_value == pytest.approx(ref.pvalue, rel=1e-10)
    # b = c: no evidence; Edwards' correction is floored at 0 (statsmodels would give (0 - 1)**2 / n).
    assert mcnemar(20, 20).p_value == 1.0


def test_mcnemar_when_models_never_disagree():
    m = mcnemar(0, 0)
    assert m.p_value == 1.0 and m.statistic is None and "never disagree" in m.method


def test_power_matches_statsmodels_and_the_textbook_n():
    from statsmodels.stats.power import TTestPower

    # Cohen's d = 0.5 at 80% power, alpha 0.05 two-sided: 34 pairs (33.37 rounded up).
    assert seeds_for_power(0.5, 1.0) == 34
    for effect, sd in [(0.5, 0.4), (1.0, 1.23), (0.1, 0.3), (2.0, 0.5)]:
        n = TTestPower().solve_power(effect_size=effect / sd, alpha=0.05, power=0.8, alternative="two-sided")
        assert seeds_for_power(effect, sd) == max(2, math.ceil(n - 1e-9))
        for k in (2, 3, 5, 10):
            ref = TTestPower().power(effect_size=effect / sd, nobs=k, alpha=0.05, alternative="two-sided")
            assert power_paired_t(k, effect, sd) == pytest.approx(ref, rel=1e-6)


def test_power_degenerate_inputs():
    assert power_paired_t(1, 0.5, 1.0) is None
    assert seeds_for_power(0.0, 1.0) is None
    assert seeds_for_power(0.5, 0.0) == 2 and power_paired_t(3, 0.5, 0.0) == 1.0
    assert seeds_for_power(1e-6, 10.0) is None          # beyond 100,000 seeds
    assert power_paired_t(3, 1.0, 1e-12) == 1.0         # scipy's nct alone returns NaN here


def test_snap_makes_float_noise_ties():
    raw = np.array([0.6, 0.7, 0.8]) - np.array([0.1, 0.2, 0.3])
    assert len(set(raw.tolist())) > 1                     # 0.5, 0.49999999999999994, 0.5
    assert set(snap(raw, 0.8).tolist()) == {0.5}


@pytest.mark.parametrize("alternative,sm_alternative,sign", [("greater", "larger", 1), ("less", "smaller", -1)])
def test_one_sided_power_matches_statsmodels(alternative, sm_alternative, sign):
    from statsmodels.stats.power import TTestPower

    for effect, sd in ((0.5, 1.0), (1.0, 0.7), (0.2, 0.5)):
        es = sign * effect / sd
        n = TTestPower().solve_power(effect_size=es, alpha=0.05, power=0.8, alternative=sm_alternative)
        assert seeds_for_power(sign * effect, sd, alternative=alternative) == max(2, math.ceil(n - 1e-9))
        for k in (2, 5, 12):
            ref = TTestPower().power(effect_size=es, nobs=k, alpha=0.05, alternative=sm_alternative)
            assert power_paired_t(k, sign * effect, sd, alternative=alternative) == pytest.approx(ref, rel=1e-6)
    # an effect pointing away from the one-sided alternative is never detected
    assert power_paired_t(10, -sign * 0.5, 1.0, alternative=alternative) < 0.05
    assert seeds_for_power(-sign * 0.5, 1.0, alternative=alternative) is None
