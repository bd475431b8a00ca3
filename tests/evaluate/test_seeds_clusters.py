"""`seeds --example-scores ... --cluster FIELD / --clusters-from MANIFEST`: the crossed seeds x examples interval with
its example term cluster-robust (evaluate/seeds.py, CrossedInterval). Checked against statsmodels (the cluster-robust
OLS of the seed-averaged differences, the two-way ANOVA's mean squares from OLS fits), a simulated clustered null, a
planted gain inside a few clusters and a correct setup where the clusters do not matter."""
from __future__ import annotations

import json

import numpy as np
import pytest

from campaign.errors import InputError
from campaign.evaluate.seeds import compare_paired, compare_seeds, crossed_interval, crossed_needs

sm = pytest.importorskip("statsmodels.api")
stats = pytest.importorskip("scipy.stats")


def unequal_clusters(rng, n_clusters=12):
    """Cluster labels of sizes 1..n_clusters (78 examples with 12), shuffled: CR1 differs from the variance of the
    cluster means when sizes differ, so this tells them apart."""
    labels = np.repeat(np.arange(n_clusters), np.arange(1, n_clusters + 1))
    return rng.permutation(labels)


def clustered(rng, s, labels, *, seed_sd=0.1, cluster_sd=1.0, example_sd=1.0, resid_sd=0.5, mean=0.0):
    g = int(labels.max()) + 1
    return (mean + seed_sd * rng.normal(size=(s, 1)) + cluster_sd * rng.normal(size=(1, g))[:, labels]
            + example_sd * rng.normal(size=(1, labels.size)) + resid_sd * rng.normal(size=(s, labels.size)))


def test_one_seed_is_statsmodels_cluster_robust_ols():
    rng = np.random.default_rng(11)
    labels = unequal_clusters(rng)
    d = clustered(rng, 1, labels)
    c = crossed_interval(d, clusters=[f"c{x}" for x in labels])
    fit = sm.OLS(d[0], np.ones(labels.size)).fit(cov_type="cluster", cov_kwds={"groups": labels}, use_t=True)
    assert c is not None and c.clusters == 12 and c.df == 11
    assert c.se == pytest.approx(fit.bse[0], rel=1e-10)
    assert (c.low, c.high) == pytest.approx(tuple(fit.conf_int()[0]), rel=1e-10)
    naive = crossed_interval(d)
    assert naive is not None and c.design_effect == pytest.approx((c.se / naive.se) ** 2, rel=1e-12)


def test_several_seeds_match_statsmodels_anova_and_cluster_ols():
    # V = (MS_seed - MS_residual) / (S N) + V_cluster, V_cluster the cluster-robust variance of the mean of the
    # seed-averaged differences; the mean squares from statsmodels' two-way ANOVA, V_cluster from its cluster OLS
    rng = np.random.default_rng(12)
    labels = unequal_clusters(rng)
    s, n = 5, labels.size
    d = clustered(rng, s, labels, seed_sd=0.3)
    c = crossed_interval(d, clusters=labels.tolist())
    # the two-way ANOVA's mean squares from statsmodels' OLS fits with and without each factor (balanced design)
    y = d.ravel()
    seed_x = np.repeat(np.eye(s), n, axis=0)[:, 1:]
    item_x = np.tile(np.eye(n), (s, 1))[:, 1:]
    one = np.ones((s * n, 1))
    full = sm.OLS(y, np.hstack([one, seed_x, item_x])).fit()
    ms_s = (sm.OLS(y, np.hstack([one, item_x])).fit().ssr - full.ssr) / (s - 1)
    ms_e = (sm.OLS(y, np.hstack([one, seed_x])).fit().ssr - full.ssr) / (n - 1)
    ms_r = full.mse_resid
    v_cl = sm.OLS(d.mean(axis=0), np.ones(n)).fit(cov_type="cluster", cov_kwds={"groups": labels}).bse[0] ** 2
    a, r = ms_s / (s * n), ms_r / (s * n)
    v = a + v_cl - r
    assert c is not None and c.se ** 2 == pytest.approx(v, rel=1e-9)
    assert c.mean == pytest.approx(d.mean())
    # Satterthwaite with the example term on G - 1 = 11 df
    df = v ** 2 / (a ** 2 / (s - 1) + v_cl ** 2 / 11 + r ** 2 / ((s - 1) * (n - 1)))
    assert c.df == pytest.approx(df, rel=1e-9)
    q = stats.t.ppf(0.975, df)
    assert (c.low, c.high) == pytest.approx((d.mean() - q * np.sqrt(v), d.mean() + q * np.sqrt(v)), rel=1e-9)
    assert c.var_seed + c.var_example + c.var_residual == pytest.approx(v, rel=1e-9)
    assert c.design_effect == pytest.approx(v_cl / (ms_e / (s * n)), rel=1e-9)
    # with every example its own cluster it is the unclustered crossed interval
    own = crossed_interval(d, clusters=list(range(n)))
    plain = crossed_interval(d)
    assert own is not None and plain is not None
    assert (own.se, own.df) == pytest.approx((plain.se, plain.df), rel=1e-9)


def test_equal_clusters_use_the_variance_of_the_cluster_means():
    # by hand: with clusters of one size, V_cluster is the sample variance of the per-cluster means of the
    # seed-averaged differences over G
    d = np.array([[1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])   # 2 seeds x 6 examples
    c = crossed_interval(d[:1], clusters=["a", "a", "b", "b", "c", "c"])
    # seed 0: cluster means 0.5, 1, 0 -> variance 0.25, / 3
    assert c is not None and c.se ** 2 == pytest.approx(0.25 / 3) and c.df == 2


def null_rejections(reps, rng):
    """Rejections at 5% (two-sided) of the naive and the clustered crossed interval on a null with 40 clusters x
    10 examples and 5 seeds. The per-example differences: a small seed effect (sd 0.1), a cluster effect (sd 1),
    an example effect (sd 1) and residual noise (sd 0.5): the seed-averaged differences' intra-cluster correlation
    is 1 / (1 + 1 + 0.25 / 5) = 0.49."""
    labels = np.repeat(np.arange(40), 10)
    naive = clus = 0
    for _ in range(reps):
        d = clustered(rng, 5, labels)
        a, b = crossed_interval(d), crossed_interval(d, clusters=labels.tolist())
        naive += a.low > 0 or a.high < 0
        clus += b.low > 0 or b.high < 0
    return naive / reps, clus / reps


def test_simulated_clustered_null_rejects_about_five_percent():
    # 2,000 nulls: the binomial SE at 5% is sqrt(0.05 x 0.95 / 2000) = 0.0049, so the clustered rate must lie within
    # 0.05 +/- 3.5 SE = [0.033, 0.067]. The naive interval leaves out the design effect 1 + 9 x 0.49 = 5.4 on the
    # example term: its z is about sqrt(5.4) = 2.3 times too large, rejecting P(|Z| > 1.96 / 2.3) ~ 0.39; it must
    # reject at least 25% (7 binomial SEs of 0.010 below 0.32, the rate this seed gives)
    naive, clus = null_rejections(2000, np.random.default_rng(48))
    assert naive >= 0.25
    assert 0.033 <= clus <= 0.067


def scores_file(path, labels, scores, cluster_field="movie"):
    """scores[(variant, seed)] -> per-example scores in example order; each example i is in cluster labels[i]."""
    rows = [{"variant": v, "seed": s, "id": f"q{i}", cluster_field: f"m{labels[i]}", "score": float(x)}
            for (v, s), xs in scores.items() for i, x in enumerate(xs)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def results_file(path, scores, seeds):
    lines = ["variant,seed,metric"] + [f"{v},{s},{float(np.mean(scores[v, s]))!r}"
                                       for s in seeds for v in ("base", "cand")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def fixes_in_four_movies(tmp_path):
    """5 seeds, 40 movies x 10 examples: the baseline is wrong on every example of movies 0-3 and right on 6 of 10
    of each other movie; the candidate is the same but right on all of movies 0-3 (40 fixes); each seed flips one
    random example of each model beyond movie 3. The candidate's gain, 0.1, sits inside 4 movies."""
    rng = np.random.default_rng(5)
    labels = np.repeat(np.arange(40), 10)
    base0 = np.where(labels < 4, 0, (np.arange(400) % 10 < 6).astype(int))
    cand0 = np.where(labels < 4, 1, base0)
    scores = {}
    for s in range(5):
        b, c = base0.copy(), cand0.copy()
        for x in (b, c):
            k = rng.integers(40, 400)
            x[k] = 1 - x[k]
        scores["base", s], scores["cand", s] = b, c
    return labels, scores


def test_a_gain_inside_four_movies_is_not_convincing_with_clusters(tmp_path):
    # planted: naively 40 of 400 examples improve in every seed, se ~ sqrt(0.09 / 400) = 0.015, the crossed
    # interval ~ [0.07, 0.13] lies above the minimum effect 0.05: convincing. Over the 40 movies the movie means of
    # the seed-averaged differences are 1 (4 movies) or ~0 (36): se ~ sqrt(0.1 x 0.9 x 40 / 39 / 40) = 0.048, the
    # interval ~ 0.1 +/- 2.02 x 0.048 = [0.003, 0.197] holds 0.05: inconclusive
    labels, scores = fixes_in_four_movies(tmp_path)
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    naive = compare_seeds(res, examples=ex, min_effect=0.05, n_resamples=200)
    rep = compare_seeds(res, examples=ex, min_effect=0.05, n_resamples=200, cluster="movie")
    assert naive.verdict == "convincing" and naive.crossed.low > 0.05
    x = rep.crossed
    assert rep.verdict == "inconclusive" and rep.status == "warn" and x.clusters == 40
    d = np.array([scores["cand", s] - scores["base", s] for s in range(5)], dtype=float)
    v_cl = sm.OLS(d.mean(axis=0), np.ones(400)).fit(cov_type="cluster", cov_kwds={"groups": labels}).bse[0] ** 2
    assert 0.045 <= np.sqrt(v_cl) <= 0.05 and x.low < 0.05 < x.high
    assert x.design_effect > 5
    assert "40 clusters" in rep.checks[0].seen and rep.cluster_field == "movie"
    assert any("design effect" in n for n in rep.notes)
    assert rep.examples is not None and rep.examples.clusters == 40 and naive.examples.clusters is None
    assert any("in 40 clusters: cluster bootstrap" in n for n in rep.notes)
    # the counts needed come from the clustered components: more examples than the naive count asks for
    assert rep.needs is not None and naive.needs is not None
    assert rep.needs.at_clusters == 40
    assert rep.needs.examples is None or rep.needs.examples > (naive.needs.examples or 0)


def test_a_gain_spread_over_movies_stays_convincing(tmp_path):
    # correct setup: each example gains with probability 0.1 independently of its movie, the same in every seed:
    # the clusters do not matter (design effect near 1; its estimate over 40 clusters has a relative sd of about
    # sqrt(2 / 39) = 0.23) and both verdicts agree
    rng = np.random.default_rng(6)
    labels = np.repeat(np.arange(40), 10)
    base0 = (rng.random(400) < 0.6).astype(int)
    cand0 = np.where(rng.random(400) < 0.25, 1, base0)
    scores = {}
    for s in range(5):
        b = base0.copy()
        b[rng.integers(0, 400)] ^= 1
        scores["base", s], scores["cand", s] = b, cand0.copy()
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    naive = compare_seeds(res, examples=ex, min_effect=0.02, n_resamples=200)
    rep = compare_seeds(res, examples=ex, min_effect=0.02, n_resamples=200, cluster="movie")
    assert rep.verdict == naive.verdict == "convincing"
    assert 0.5 <= rep.crossed.design_effect <= 1.6
    assert not any("clusters:" in w for w in rep.warnings)


def test_clusters_from_a_split_manifest(tmp_path):
    # the split's units (movies, with m5 and m6 joined by a duplicate text) are the clusters, matched by id
    from tests.evaluate.test_clusters_from import corpus, hand_clusters

    rows, manifest = corpus(tmp_path)
    g = hand_clusters(rows)
    rng = np.random.default_rng(9)
    scores = {}
    for s in range(3):
        scores["base", s] = rng.integers(0, 2, len(rows))
        scores["cand", s] = rng.integers(0, 2, len(rows))
    ex = tmp_path / "ex.jsonl"
    ex.write_text("".join(json.dumps({"variant": v, "seed": s, "id": r["id"], "score": int(x)}) + "\n"
                          for (v, s), xs in scores.items() for r, x in zip(rows, xs, strict=True)), encoding="utf-8")
    res = results_file(tmp_path / "r.csv", scores, range(3))
    rep = compare_seeds(res, examples=ex, clusters_from=manifest, n_resamples=200)
    d = np.array([scores["cand", s] - scores["base", s] for s in range(3)], dtype=float)
    by_hand = crossed_interval(d, clusters=g.tolist())
    assert rep.crossed.clusters == len(set(g.tolist())) == 39
    assert rep.crossed.se == pytest.approx(by_hand.se, rel=1e-12)
    assert rep.clusters_from == str(manifest) and rep.source["clusters"]["path"] == str(manifest)
    assert rep.examples is not None and rep.examples.clusters == 39 and rep.examples.engine == "clusters"
    other = tmp_path / "other.jsonl"
    other.write_text(ex.read_text(encoding="utf-8").replace('"r0-0"', '"zz"'), encoding="utf-8")
    with pytest.raises(InputError, match="'zz' is in no row of the split"):
        compare_seeds(res, examples=other, clusters_from=manifest, n_resamples=200)


def test_clustered_counts_meet_their_definition():
    # seeds and examples needed from the clustered components: at the counts found, (t_crit + t_power) sqrt(V) <=
    # effect on the Satterthwaite df with the example term on (examples / cluster size) - 1 df; one fewer fails
    rng = np.random.default_rng(21)
    labels = np.repeat(np.arange(40), 10)
    d = clustered(rng, 6, labels, seed_sd=0.0, cluster_sd=0.3, example_sd=0.3, resid_sd=0.5, mean=0.05)
    c = crossed_interval(d, clusters=labels.tolist())
    needs = crossed_needs(c, 0.1, alpha=0.05)
    assert needs is not None and needs.examples is not None and needs.at_clusters == 40

    def margin(s, n):
        a, b, r = needs.sigma2_seed, needs.sigma2_example, needs.sigma2_residual
        v = a / s + b / n + r / (s * n)
        ta, tb, tr = a / s + r / (s * n), b / n + r / (s * n), r / (s * n)
        df = v ** 2 / (ta ** 2 / (s - 1) + tb ** 2 / (n / 10 - 1) + tr ** 2 / ((s - 1) * (n - 1)))
        return (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * np.sqrt(v) - 0.1

    n = needs.examples
    assert margin(6, n) <= 0 < margin(6, n - 1)
    naive = crossed_needs(crossed_interval(d), 0.1, alpha=0.05)
    assert naive is not None and naive.examples is not None and n > 2 * naive.examples


def test_bad_cluster_input(tmp_path):
    labels, scores = fixes_in_four_movies(tmp_path)
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    with pytest.raises(InputError, match="give their per-example scores with --example-scores"):
        compare_seeds(res, cluster="movie")
    with pytest.raises(InputError, match="both name the clusters"):
        compare_seeds(res, examples=ex, cluster="movie", clusters_from=tmp_path / "m.json")
    with pytest.raises(InputError, match="'film'"):
        compare_seeds(res, examples=ex, cluster="film")
    lines = ex.read_text(encoding="utf-8").splitlines()
    moved = json.loads(lines[401])                     # example q1 of seed 1: put in another movie than seed 0 said
    moved["movie"] = "m39"
    lines[401] = json.dumps(moved)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="id 'q1' is in cluster 'm0' on line 2 and 'm39' on line 402"):
        compare_seeds(res, examples=bad, cluster="movie")
    with pytest.raises(InputError, match="at least 2 clusters"):
        compare_paired([0, 0], [1, 2], example_diffs=np.ones((2, 3)), example_clusters=["a", "a", "a"])
    with pytest.raises(InputError, match="need the per-example scores"):
        compare_paired([0, 0], [1, 2], example_clusters=["a", "b"])


def test_cli_seeds_with_cluster(tmp_path, cli):
    labels, scores = fixes_in_four_movies(tmp_path)
    ex = scores_file(tmp_path / "ex.jsonl", labels, scores)
    res = results_file(tmp_path / "r.csv", scores, range(5))
    out = cli("seeds", str(res), "--example-scores", str(ex), "--cluster", "movie", "--min-effect", "0.05",
              "--resamples", "200", "--json")
    assert out.code == 0, out.err
    doc = out.json()
    assert doc["verdict"] == "inconclusive" and doc["crossed"]["clusters"] == 40
    assert doc["cluster_field"] == "movie"
    text = cli("seeds", str(res), "--example-scores", str(ex), "--cluster", "movie", "--min-effect", "0.05",
               "--resamples", "200")
    assert text.code == 0 and "40 clusters" in text.out and "bootstrap seeds x clusters" in text.out
    bad = cli("seeds", str(res), "--cluster", "movie")
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1 and "--example-scores" in bad.err
    # lm-eval runs carry no cluster column: refused, not ignored
    runs = cli("seeds", "--baseline-samples", str(ex), "--candidate-samples", str(ex), "--cluster", "movie")
    assert runs.code == 2 and "--cluster do(es) not apply to lm-eval runs" in runs.err
