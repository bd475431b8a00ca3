"""The seeds x clusters bootstrap (evaluate/bootstrap.py, cluster_distribution; `seeds --example-scores ...
--cluster FIELD` / `--clusters-from MANIFEST`): seeds with replacement and whole clusters with replacement.

Checked against an exact enumeration of a tiny case with unequal clusters, statsmodels' cluster-robust OLS and the
plug-in crossed variance worked out by hand (clusters of one size), a simulated clustered null, a planted gain
inside a few clusters (the interval from scipy's binomial quantiles) and a correct setup where the clusters do not
matter."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from campaign.errors import InputError
from campaign.evaluate.bootstrap import cluster_distribution, paired_bootstrap
from campaign.evaluate.seeds import compare_seeds
from tests.evaluate.test_seeds_clusters import clustered, fixes_in_four_movies, results_file, scores_file

sm = pytest.importorskip("statsmodels.api")
stats = pytest.importorskip("scipy.stats")


def moments_within_monte_carlo(draws, mean, var, k=4.0):
    """The draws' mean and variance match `mean` and `var` within k Monte Carlo SEs worked out from the draws:
    SE(mean) = sd / sqrt(B), SE(variance) = sqrt((m4 - s^4) / B), m4 the fourth central moment."""
    b = draws.size
    centred = draws - draws.mean()
    s2 = float((centred ** 2).mean())
    m4 = float((centred ** 4).mean())
    assert abs(draws.mean() - mean) <= k * np.sqrt(s2 / b)
    assert abs(s2 - var) <= k * np.sqrt((m4 - s2 ** 2) / b)


def test_a_tiny_case_matches_the_exact_bootstrap_distribution():
    # 2 seeds, 3 clusters of sizes 1, 2 and 3: enumerate every equally likely draw (2^2 seed draws x 3^3 cluster
    # draws), build the resampled seeds x examples table explicitly and take its mean: the exact bootstrap
    # distribution, whose mean and variance the sampled one must match (the ratio of sums with unequal sizes)
    d = np.array([[0.0, 1.0, -1.0, 2.0, 0.5, 1.0], [1.0, -2.0, 0.0, 1.0, 3.0, -1.0]])
    codes = np.array([2, 1, 2, 0, 1, 2])          # cluster 0: 1 example, 1: 2, 2: 3
    members = [np.flatnonzero(codes == g) for g in range(3)]
    exact = []
    for seeds in itertools.product(range(2), repeat=2):
        for picks in itertools.product(range(3), repeat=3):
            cols = np.concatenate([members[g] for g in picks])
            exact.append(d[np.array(seeds)][:, cols].mean())
    exact = np.array(exact)
    draws = cluster_distribution(d, codes, n_resamples=200_000, seed=3)
    moments_within_monte_carlo(draws, exact.mean(), exact.var())
    # and the distribution itself: every value drawn is one of the exact ones
    atoms = np.unique(exact)
    at = np.clip(np.searchsorted(atoms, draws), 1, atoms.size - 1)
    assert np.minimum(abs(draws - atoms[at]), abs(draws - atoms[at - 1])).max() < 1e-12


def test_one_seed_equal_clusters_match_statsmodels_cluster_robust_se():
    # one seed, 30 clusters of 8: the bootstrap of the mean of G cluster means has variance (1/G) x the plug-in
    # variance of the cluster means = (G - 1) / G x the CR1 variance (statsmodels' OLS on a constant, clustered:
    # G / (G - 1) x sum_g (sum of residuals in g)^2 / N^2)
    rng = np.random.default_rng(31)
    g, size = 30, 8
    labels = rng.permutation(np.repeat(np.arange(g), size))
    d = clustered(rng, 1, labels, cluster_sd=0.7, example_sd=1.0)
    fit = sm.OLS(d[0], np.ones(labels.size)).fit(cov_type="cluster", cov_kwds={"groups": labels})
    v_cr1 = float(fit.bse[0] ** 2)
    cluster_means = np.array([d[0][labels == c].mean() for c in range(g)])
    assert v_cr1 == pytest.approx(cluster_means.var(ddof=1) / g, rel=1e-9)   # the same, by hand
    draws = cluster_distribution(d, labels, n_resamples=40_000, seed=1)
    moments_within_monte_carlo(draws, d.mean(), (g - 1) / g * v_cr1)
    # the interval the user sees: the percentile ends about mean +/- 1.96 SE (the mean of 30 cluster means is
    # close to normal; 10% allows the quantiles' Monte Carlo error at 10,000 resamples)
    r = paired_bootstrap(d, clusters=labels.tolist())
    se = np.sqrt((g - 1) / g * v_cr1)
    assert r.clusters == g and r.engine == "clusters" and r.method.startswith("cluster bootstrap")
    assert (r.high - r.low) / (2 * 1.96 * se) == pytest.approx(1, abs=0.10)


def test_several_seeds_equal_clusters_match_the_crossed_plug_in_variance():
    # 5 seeds x 25 clusters of 6: with M[s, g] the cluster means, M = mu + a_s + b_g + e_sg (two-way decomposition),
    # drawing seeds and clusters independently gives Var = mean(a^2) / S + mean(b^2) / G + mean(e^2) / (S G)
    rng = np.random.default_rng(32)
    s, g, size = 5, 25, 6
    labels = np.repeat(np.arange(g), size)
    d = clustered(rng, s, labels, seed_sd=0.4, cluster_sd=0.8, example_sd=1.0, resid_sd=0.7)
    m = np.stack([[d[i][labels == c].mean() for c in range(g)] for i in range(s)])
    mu = m.mean()
    a, b = m.mean(axis=1) - mu, m.mean(axis=0) - mu
    e = m - mu - a[:, None] - b[None, :]
    var = (a ** 2).mean() / s + (b ** 2).mean() / g + (e ** 2).mean() / (s * g)
    draws = cluster_distribution(d, labels, n_resamples=40_000, seed=2)
    moments_within_monte_carlo(draws, mu, var)
    # the seeds count: resampling clusters only (one seed row) would leave out mean(a^2) / S
    assert (a ** 2).mean() / s > 0.2 * var


def null_rejections(reps, rng, resamples=500):
    """How often the naive (examples) and the cluster bootstrap's 95% intervals leave out 0 on a null with 40
    clusters x 10 examples and 5 seeds (a small seed effect, sd 0.1; a cluster effect, sd 1; an example effect,
    sd 1; residual noise, sd 0.5: the seed-averaged differences' intra-cluster correlation is 1 / 2.05 = 0.49)."""
    labels = np.repeat(np.arange(40), 10)
    naive = clus = 0
    for i in range(reps):
        d = clustered(rng, 5, labels)
        x = paired_bootstrap(d, n_resamples=resamples, seed=i, engine="numpy")
        y = paired_bootstrap(d, n_resamples=resamples, seed=i, clusters=labels.tolist())
        naive += x.low > 0 or x.high < 0
        clus += y.low > 0 or y.high < 0
    return naive / reps, clus / reps


def test_simulated_clustered_null_naive_far_above_five_percent_clustered_near_it():
    # Worked out: Var(grand mean) = 0.1^2/5 + 1/40 + 1/400 + 0.25/2000 = 0.0296. The cluster bootstrap estimates
    # it with the plug-in factor (G - 1)/G over G = 40 clusters and normal quantiles, so it rejects about
    # P(|t_39| > 1.96 sqrt(39/40)) = 0.060 (4,000 runs gave 6.7%). The naive bootstrap sees the examples as
    # independent: about 0.0016 + 2/400 + 0.0001 = 0.0067, a z sqrt(0.0296 / 0.0067) = 2.1 times too large,
    # rejecting P(|Z| > 1.96 / 2.1) = 0.35 (4,000 runs gave 36%). With 300 runs the binomial SEs are 0.014 and
    # 0.028: the clustered rate must lie within 0.060 +/- 3.5 SE, the naive one at least 0.35 - 3.5 SE.
    expected = 2 * stats.t.sf(1.96 * np.sqrt(39 / 40), 39)
    se = np.sqrt(expected * (1 - expected) / 300)
    naive, clus = null_rejections(300, np.random.default_rng(48))
    assert expected - 3.5 * se <= clus <= expected + 3.5 * se
    assert naive >= 0.35 - 3.5 * np.sqrt(0.35 * 0.65 / 300)


def test_a_gain_inside_four_movies_is_convincing_naively_not_by_clusters(tmp_path):
    # planted: the candidate fixes all 10 examples of movies 0-3 (40 of 400), in every seed, and each seed flips
    # one other example per model. Naively the fixed examples drawn are ~ Binomial(400, 0.1): the interval is about
    # scipy's binomial quantiles / 400 = [0.0725, 0.13], above the minimum effect 0.05: convincing. By clusters the
    # fixed movies drawn are ~ Binomial(40, 0.1): about [1, 8] / 40 = [0.025, 0.2], which holds 0.05: not shown.
    # (0.01 allows the flips, at most 2 of 400 examples per seed, and the quantiles' Monte Carlo error.)
    labels, scores = fixes_in_four_movies(tmp_path)
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    naive = compare_seeds(res, examples=ex, min_effect=0.05, n_resamples=4000).examples
    rep = compare_seeds(res, examples=ex, min_effect=0.05, n_resamples=4000, cluster="movie")
    boot = rep.examples
    assert naive is not None and boot is not None
    lo, hi = stats.binom.ppf([0.025, 0.975], 400, 0.1) / 400
    assert naive.clusters is None and (naive.low, naive.high) == pytest.approx((lo, hi), abs=0.01)
    assert naive.low > 0.05
    lo, hi = stats.binom.ppf([0.025, 0.975], 40, 0.1) / 40
    assert boot.clusters == 40 and (boot.low, boot.high) == pytest.approx((lo, hi), abs=0.01)
    assert boot.low < 0.05 < boot.high
    assert any("in 40 clusters: cluster bootstrap" in n for n in rep.notes)


def test_a_gain_spread_over_movies_keeps_the_cluster_bootstrap_as_wide_as_the_naive(tmp_path):
    # correct setup: each example gains independently of its movie: the clusters do not matter, so resampling
    # them gives about the naive width (its ratio has a relative sd of about sqrt(1 / (2 x 39)) = 0.11 over 40
    # clusters: 0.65-1.35 is 3 sd) and both intervals lie above 0
    rng = np.random.default_rng(6)
    labels = np.repeat(np.arange(40), 10)
    base0 = (rng.random(400) < 0.6).astype(int)
    cand0 = np.where(rng.random(400) < 0.25, 1, base0)
    d = np.array([cand0 - np.where(np.arange(400) == rng.integers(0, 400), 1 - base0, base0) for _ in range(5)],
                 dtype=float)
    naive = paired_bootstrap(d, n_resamples=4000)
    boot = paired_bootstrap(d, n_resamples=4000, clusters=labels.tolist())
    assert naive.low > 0 and boot.low > 0
    assert 0.65 <= (boot.high - boot.low) / (naive.high - naive.low) <= 1.35


def test_seeded_and_checked():
    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(20), 5)
    d = clustered(rng, 3, labels)
    one = cluster_distribution(d, labels, n_resamples=3000, seed=5)
    assert np.array_equal(one, cluster_distribution(d, labels, n_resamples=3000, seed=5))
    assert not np.array_equal(one, cluster_distribution(d, labels, n_resamples=3000, seed=6))
    # a one-sided interval keeps its open end open and its bound at the one-sided level
    two = paired_bootstrap(d, n_resamples=3000, seed=0, clusters=labels.tolist())
    up = paired_bootstrap(d, n_resamples=3000, seed=0, clusters=labels.tolist(), alternative="greater")
    assert up.high is None and up.low == pytest.approx(np.quantile(cluster_distribution(d, labels, n_resamples=3000,
                                                                                        seed=0), 0.05))
    assert two.low < up.low
    with pytest.raises(InputError, match="99 cluster labels for 100 examples"):
        paired_bootstrap(d, clusters=labels.tolist()[:99])
    with pytest.raises(InputError, match="at least 2 clusters"):
        paired_bootstrap(d, clusters=["a"] * 100)
    with pytest.raises(InputError, match="0..G-1, each with an example"):
        cluster_distribution(d, labels * 2)          # odd codes unused: empty clusters


def test_cli_says_which_bootstrap_ran(tmp_path, cli):
    labels, scores = fixes_in_four_movies(tmp_path)
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    out = cli("seeds", str(res), "--example-scores", str(ex), "--cluster", "movie", "--resamples", "500", "--json")
    assert out.code == 0, out.err
    boot = out.json()["examples"]
    assert boot["clusters"] == 40 and boot["engine"] == "clusters"
    assert boot["method"].startswith("cluster bootstrap") and "40 clusters" in boot["method"]
    plain = cli("seeds", str(res), "--example-scores", str(ex), "--resamples", "500", "--json")
    assert plain.code == 0 and plain.json()["examples"]["clusters"] is None
    text = cli("seeds", str(res), "--example-scores", str(ex), "--cluster", "movie", "--resamples", "500")
    assert text.code == 0 and "bootstrap seeds x clusters (5 x 40 clusters" in text.out
    text = cli("seeds", str(res), "--example-scores", str(ex), "--resamples", "500")
    assert text.code == 0 and "bootstrap seeds x examples (5 x 400)" in text.out
