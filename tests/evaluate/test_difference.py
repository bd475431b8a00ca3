"""The verdict of a paired comparison (evaluate/difference.py): its figures against statsmodels and scipy, the
cluster-robust test's null rejection rate by simulation, and the verdicts of `regress` on files the tests write."""
from __future__ import annotations

import json

import numpy as np
import pytest

from campaign.errors import InputError
from campaign.evaluate.difference import holm, paired_difference
from campaign.evaluate.regress import regress

sm = pytest.importorskip("statsmodels.api")


def clustered(seed, g=50, per=10, icc=0.7, shift=0.0):
    """g clusters x `per` items of a continuous difference with intra-cluster correlation `icc`."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(g), per)
    d = shift + np.sqrt(icc) * rng.normal(size=g)[groups] + np.sqrt(1 - icc) * rng.normal(size=g * per)
    return d, groups


def test_naive_difference_is_the_paired_t_test():
    from scipy import stats

    d, _ = clustered(1, shift=0.1)
    r = paired_difference(d)
    ref = stats.ttest_1samp(d, 0.0)
    ci = ref.confidence_interval(0.95)
    assert r.estimate == pytest.approx(d.mean()) and r.se == pytest.approx(d.std(ddof=1) / np.sqrt(d.size))
    assert r.p_value == pytest.approx(ref.pvalue, rel=1e-10) and r.ci95 == pytest.approx((ci.low, ci.high))
    assert (r.clusters, r.design_effect, r.df) == (None, None, d.size - 1)


def test_cluster_robust_difference_matches_statsmodels_cr1():
    d, g = clustered(2, g=30, per=7, shift=0.3)
    r = paired_difference(d, clusters=[f"movie{x}" for x in g])
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": g}, use_t=True)
    assert r.se == pytest.approx(fit.bse[0], rel=1e-10)
    assert r.p_value == pytest.approx(fit.pvalues[0], rel=1e-8)           # t with G - 1 = 29 df
    assert r.ci95 == pytest.approx(tuple(fit.conf_int()[0]), rel=1e-10)
    naive = d.std(ddof=1) ** 2 / d.size
    assert (r.clusters, r.df) == (30, 29) and r.design_effect == pytest.approx(fit.bse[0] ** 2 / naive)
    assert r.design_effect > 2                                            # icc 0.7, 7 per cluster: 1 + 6 x 0.7


def test_few_clusters_are_said():
    d, g = clustered(3, g=8, per=5)
    assert any("only 8 clusters" in n for n in paired_difference(d, clusters=list(g)).notes)
    assert not paired_difference(*clustered(3, g=40, per=5)[:1], clusters=list(clustered(3, g=40, per=5)[1])).notes
    with pytest.raises(InputError, match="at least 2 clusters"):
        paired_difference(d, clusters=[0] * d.size)


def test_clustered_null_rejection_rate_near_five_percent_where_the_naive_test_is_far_above():
    # 50 clusters x 10 items, intra-cluster correlation 0.7, no true difference, 400 replications
    naive = robust = 0
    reps = 400
    for rep in range(reps):
        d, g = clustered(1000 + rep)
        naive += paired_difference(d).p_value < 0.05
        robust += paired_difference(d, clusters=list(g)).p_value < 0.05
    # expected: robust ~5% (binomial sd over 400 reps ~1.1 points); naive: design effect 1 + 9 x 0.7 = 7.3, so
    # |z| > 1.96 / sqrt(7.3) = 0.725 happens ~47% of the time
    assert 0.02 <= robust / reps <= 0.08
    assert naive / reps > 0.35


def test_non_inferiority_and_equivalence_p_values_match_statsmodels_ttost():
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(5)
    base = rng.normal(0.7, 0.2, 300)
    cand = base + rng.normal(0.02, 0.1, 300)
    r = paired_difference(cand - base, margin=0.03)
    p, lower, upper = ttost_paired(cand, base, -0.03, 0.03)
    assert r.equivalence_p == pytest.approx(p, rel=1e-10)
    assert r.non_inferiority_p == pytest.approx(lower[1], rel=1e-10)     # H0: difference <= -margin
    ni = paired_difference(cand - base, non_inferiority=0.01)
    assert ni.non_inferiority_p == pytest.approx(ttost_paired(cand, base, -0.01, 1.0)[1][1], rel=1e-10)


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = [0.01, 0.04, 0.03, 0.5, 0.002]
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))


def write(path, gold, pred, cluster=None):
    rows = [{"id": str(i), "gold": g, "pred": q} | ({} if cluster is None else {"movie": cluster[i]})
            for i, (g, q) in enumerate(zip(gold, pred, strict=True))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_significant_regression_fails_without_guards(tmp_path):
    # the case: 0.8142 -> 0.7746 with 53 right -> wrong and none back (here 1339 examples, 53 flips)
    n = 1339
    gold = ["x"] * n
    base = ["x"] * 1090 + ["y"] * (n - 1090)
    cand = ["x"] * (1090 - 53) + ["y"] * (n - 1090 + 53)
    r = regress(write(tmp_path / "b.jsonl", gold, base), write(tmp_path / "c.jsonl", gold, cand))
    d = r.difference
    # by hand: d = -1 x 53, 0 otherwise; mean -53/1339, sd = sqrt((53 - 1339 x mean^2) / 1338)
    mean = -53 / n
    se = np.sqrt((53 - n * mean ** 2) / (n - 1) / n)
    assert d.estimate == pytest.approx(mean) and d.se == pytest.approx(se) and d.verdict == "WORSE"
    assert r.status == "fail" and [c.id for c in r.checks if c.status == "fail"] == ["difference.verdict"]
    # correct setup: the same flips both ways (26 and 27) are not shown to differ, and pass
    mixed = ["y"] * 26 + ["x"] * (1090 - 26) + ["x"] * 27 + ["y"] * (n - 1090 - 27)
    ok = regress(write(tmp_path / "b.jsonl", gold, base), write(tmp_path / "m.jsonl", gold, mixed))
    assert ok.difference.verdict == "NOT SHOWN" and ok.status == "pass"


def test_non_inferiority_clean_and_planted(tmp_path):
    n = 1000
    gold = ["x"] * n
    base = ["x"] * 800 + ["y"] * 200
    cand = ["y"] * 10 + ["x"] * 790 + ["x"] * 10 + ["y"] * 190  # 10 lost, 10 won: no change
    b, c = write(tmp_path / "b.jsonl", gold, base), write(tmp_path / "c.jsonl", gold, cand)
    ok = regress(b, c, non_inferiority=0.02)
    # se = sqrt(20 / 999 / 1000) = 0.004474; t = 0.02 / se = 4.470 on 999 df: p ~ 4e-6
    assert ok.difference.verdict == "NON-INFERIOR" and ok.status == "pass"
    assert ok.difference.non_inferiority_p == pytest.approx(4.35e-6, rel=0.05)
    tight = regress(b, c, non_inferiority=0.005)  # t = 1.118: p = 0.132, not shown
    assert tight.difference.verdict == "NOT SHOWN" and tight.status == "fail"


def test_clustered_items_widen_the_regress_interval(tmp_path):
    # the case in small: the candidate fixes 33 errors inside 3 movies; 40 movies in all
    movies = [f"m{i // 10}" for i in range(400)]
    gold = ["x"] * 400
    base = ["y" if i < 33 or i % 10 == 9 else "x" for i in range(400)]
    cand = ["x" if i < 33 else q for i, q in enumerate(base)]
    b = write(tmp_path / "b.jsonl", gold, base, movies)
    c = write(tmp_path / "c.jsonl", gold, cand, movies)
    naive = regress(b, c).difference
    robust = regress(b, c, cluster="movie")
    d = np.array([1.0 if i < 33 else 0.0 for i in range(400)])
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": np.arange(400) // 10}, use_t=True)
    x = robust.difference
    assert naive.verdict == "IMPROVED" and naive.p_value < 1e-8
    assert x.clusters == 40 and x.se == pytest.approx(fit.bse[0]) and x.p_value == pytest.approx(fit.pvalues[0])
    assert x.verdict == "NOT SHOWN" and x.design_effect > 5
    assert robust.to_dict()["difference"]["clusters"] == 40
    with pytest.raises(InputError, match="no 'lang' for --cluster"):
        regress(b, c, cluster="lang")


def test_errors_accuracy_with_wilson_interval_matches_statsmodels(tmp_path):
    from statsmodels.stats.proportion import proportion_confint

    from campaign.evaluate.analysis import analyze_errors

    gold = ["x"] * 137
    pred = ["x"] * 121 + ["y"] * 16                      # 121 of 137 right
    rep = analyze_errors(write(tmp_path / "p.jsonl", gold, pred))
    (acc,) = rep.estimates
    assert acc.metric == "accuracy" and acc.rate == pytest.approx(121 / 137)
    assert acc.se == pytest.approx(np.sqrt(121 / 137 * 16 / 137 / 137))
    assert acc.ci95 == pytest.approx(proportion_confint(121, 137, alpha=0.05, method="wilson"), rel=1e-9)
    # near 0 and 1 Wilson stays inside [0, 1] where the normal interval does not
    both = ["x"] * 10 + ["y"] * 10
    edge = analyze_errors(write(tmp_path / "e.jsonl", both, both)).estimates[0]
    assert edge.ci95 == pytest.approx(proportion_confint(20, 20, method="wilson"), rel=1e-9) and edge.ci95[1] == 1.0


def test_errors_cluster_robust_accuracy_matches_statsmodels(tmp_path):
    from campaign.evaluate.analysis import analyze_errors

    rng = np.random.default_rng(11)
    movie_skill = rng.random(30)
    movies = [i // 8 for i in range(240)]
    right = [rng.random() < movie_skill[m] for m in movies]
    gold = ["x"] * 240
    pred = ["x" if r else "y" for r in right]
    rep = analyze_errors(write(tmp_path / "p.jsonl", gold, pred, [f"m{m}" for m in movies]), cluster="movie")
    (acc,) = rep.estimates
    y = np.array(right, dtype=float)
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": np.array(movies)}, use_t=True)
    assert acc.clusters == 30 and acc.se == pytest.approx(fit.bse[0], rel=1e-10)
    assert acc.ci95 == pytest.approx(tuple(fit.conf_int()[0]), rel=1e-10)
    assert acc.design_effect > 1.5                        # skills vary by movie: items within a movie agree
    with pytest.raises(InputError, match="no 'lang' for --cluster"):
        analyze_errors(tmp_path / "p.jsonl", cluster="lang")
