"""Seeds needed and examples needed from the crossed seeds x examples variance components (evaluate/seeds.py):
the components by hand, the counts against their definition and a simulation of the power they promise, a
seed-only count that promises too much (planted), and agreement with it when the test set adds no noise."""
from __future__ import annotations

import math

import numpy as np
import pytest

from campaign.evaluate.seeds import compare_paired, crossed_interval, crossed_needs

stats = pytest.importorskip("scipy.stats")


def test_variance_components_by_hand():
    # D (3 seeds x 4 examples) = [[1,0,1,1],[0,0,1,0],[1,1,1,0]]: grand mean 7/12, seed means 3/4, 1/4, 3/4,
    # example means 2/3, 1/3, 1, 1/3.
    # MS_seed = 4 x ((1/6)^2 + (1/3)^2 + (1/6)^2) / 2 = 1/3; MS_example = 3 x (1/144 + 9/144 + 25/144 + 9/144) / 3
    # = 11/36; SS_total = 7 (5/12)^2 + 5 (7/12)^2 = 420/144, SS_residual = 420/144 - 2/3 - 33/36 = 4/3, MS_res = 2/9.
    # Components of V: sigma2_seed / S = (MS_s - MS_r) / 12 = 1/108, sigma2_example / N = (MS_e - MS_r) / 12 = 1/144,
    # sigma2_res / (S N) = MS_r / 12 = 1/54; V = (1/3 + 11/36 - 2/9) / 12 = 15/36 / 12 = 5/144.
    c = crossed_interval([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 0]])
    assert c is not None
    assert (c.var_seed, c.var_example, c.var_residual) == pytest.approx((1 / 108, 1 / 144, 1 / 54), rel=1e-12)
    assert c.se ** 2 == pytest.approx(5 / 144, rel=1e-12) and c.mean == pytest.approx(7 / 12)
    # Satterthwaite: (15/36)^2 / ((1/3)^2 / 2 + (11/36)^2 / 3 + (2/9)^2 / 6)
    assert c.df == pytest.approx((15 / 36) ** 2 / ((1 / 9) / 2 + (121 / 1296) / 3 + (4 / 81) / 6), rel=1e-12)
    needs = crossed_needs(c, 0.5, alpha=0.05)
    # sigma2_seed = 3/108 = 1/36, sigma2_example = 4/144 = 1/36, sigma2_res = 12/54 = 2/9
    assert needs is not None
    assert (needs.sigma2_seed, needs.sigma2_example, needs.sigma2_residual) == pytest.approx((1 / 36, 1 / 36, 2 / 9))


def power_margin(needs, s, n, alpha=0.05, power=0.8):
    """(t_crit + t_power) x sqrt(V(s, n)) - effect on the Satterthwaite df of the expected mean squares: <= 0 is
    enough; written out here from the components, apart from the module."""
    a, b, r = needs.sigma2_seed, needs.sigma2_example, needs.sigma2_residual
    v = a / s + b / n + r / (s * n)
    ms_s, ms_e = r + n * a, r + s * b
    df = (ms_s + ms_e - r) ** 2 / (ms_s ** 2 / (s - 1) + ms_e ** 2 / (n - 1) + r ** 2 / ((s - 1) * (n - 1)))
    return (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * math.sqrt(v) - needs.effect


def crossed(rng, s, n, seed_sd, example_sd, resid_sd, mean):
    return (mean + seed_sd * rng.normal(size=(s, 1)) + example_sd * rng.normal(size=(1, n))
            + resid_sd * rng.normal(size=(s, n)))


def test_counts_meet_their_definition_and_deliver_the_power_they_promise():
    rng = np.random.default_rng(7)
    d = crossed(rng, 6, 400, 0.02, 0.3, 0.5, 0.01)
    c = crossed_interval(d)
    needs = crossed_needs(c, 0.05, alpha=0.05)
    assert needs is not None and needs.seeds is not None and needs.examples is not None
    s, n = needs.seeds, needs.examples
    assert power_margin(needs, s, 400) <= 0 and (s == 2 or power_margin(needs, s - 1, 400) > 0)
    assert power_margin(needs, 6, n) <= 0 < power_margin(needs, 6, n - 1)
    # simulate the crossed design at (6 seeds, n examples) with these components and a true effect of 0.05: the
    # crossed t-test (two-sided, 5%) should reject about 80% of the time (binomial sd over 600 runs: 1.6 points)
    sims = np.random.default_rng(1)
    rejected = 0
    for _ in range(600):
        x = crossed(sims, 6, n, math.sqrt(needs.sigma2_seed), math.sqrt(needs.sigma2_example),
                    math.sqrt(needs.sigma2_residual), 0.05)
        ci = crossed_interval(x)
        rejected += ci.low > 0 or ci.high < 0
    assert 0.72 <= rejected / 600 <= 0.88


def test_a_seed_only_count_promises_what_the_test_set_cannot_give():
    # planted: 5 seeds whose metric differences are steady (seed SD 0.02) on 200 examples whose per-example
    # differences are noisy (example SD 1, residual SD 1): the seeds alone say convincing and that a few seeds
    # suffice, but the test set's noise alone forbids 80% power at any seed count
    rng = np.random.default_rng(3)
    d = crossed(rng, 5, 200, 0.0, 1.0, 1.0, 0.2)
    d -= d.mean(axis=1, keepdims=True) - (0.2 + rng.normal(0, 0.02, size=(5, 1)))  # seed means steady
    # by hand: V ~ sigma2_example / 200 + sigma2_res / 1000 = 0.006 (se 0.077, the interval 0.2 +/- 0.15 holds
    # 0.1); 80% power at 0.1 needs V <= (0.1 / (1.96 + 0.84))^2 = 0.0013 < 1 / 200: no seed count reaches it, and
    # at 5 seeds 1.2 / N <= 0.0013 takes N ~ 940 examples
    base = np.zeros(5)
    cand = d.mean(axis=1)
    r = compare_paired(base, cand, min_effect=0.1, example_diffs=d, n_resamples=200)
    from campaign.evaluate.stats import seeds_for_power

    t_only = r.t_test
    assert t_only.ci_low > 0.1                                # the seeds alone: convincing
    naive = seeds_for_power(0.1, float(np.std(cand, ddof=1)), alpha=0.05, power=0.8)
    assert naive is not None and naive <= 5                   # ... and a handful of seeds for 80% power
    assert r.verdict == "inconclusive" and r.needs is not None
    assert r.needs.seeds is None and r.seeds_needed is None   # no number of seeds at 200 examples
    assert r.needs.examples is not None and 600 <= r.needs.examples <= 1400
    assert any("no number of seeds at these 200 examples" in n for n in (*r.warnings, *r.notes))
    assert any("examples" in c.fix for c in r.checks if c.status == "warn")


def test_with_a_quiet_test_set_the_crossed_count_agrees_with_the_seeds():
    # correct setup: the per-example differences are the seed's difference plus tiny noise, so the seeds are the
    # noise; the crossed seed count matches the paired t-test's within one seed
    rng = np.random.default_rng(4)
    seed_effect = 0.2 + rng.normal(0, 0.3, size=(6, 1))
    d = seed_effect + rng.normal(0, 0.001, size=(6, 300))
    r = compare_paired(np.zeros(6), d.mean(axis=1), min_effect=0.3, example_diffs=d, n_resamples=200)
    from campaign.evaluate.stats import seeds_for_power

    t_count = seeds_for_power(0.3, float(np.std(d.mean(axis=1), ddof=1)), alpha=0.05, power=0.8)
    assert r.needs is not None and r.needs.seeds is not None and t_count is not None
    assert abs(r.needs.seeds - t_count) <= 1
