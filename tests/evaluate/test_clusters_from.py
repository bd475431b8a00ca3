"""`regress --clusters-from MANIFEST`: the split's units (groups and duplicate clusters) as the clusters of the
paired difference, checked against statsmodels' cluster-robust OLS on clusters worked out by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest

from campaign.data.read import Fields
from campaign.data.split import split_file
from campaign.errors import InputError
from campaign.evaluate.regress import regress

sm = pytest.importorskip("statsmodels.api")

MOVIES, PER = 40, 10


def corpus(tmp_path, dup=True):
    """MOVIES x PER rows of random-word texts (no two alike), grouped by movie; with `dup`, the first row of movie
    6 repeats a text of movie 5 word for word, so the split's units join movies 5 and 6."""
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(5000)]
    rows = []
    for m in range(MOVIES):
        for k in range(PER):
            rows.append({"id": f"r{m}-{k}", "movie": f"m{m}", "label": "pos" if k % 2 else "neg",
                         "text": " ".join(rng.choice(vocab, 14))})
    if dup:
        rows[6 * PER]["text"] = rows[5 * PER + 3]["text"]
    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    split_file(path, tmp_path / "split", Fields(text=("text",), label="label", group=("movie",), id="id"))
    return rows, tmp_path / "split" / "split_manifest.json"


def predictions(path, rows, right):
    path.write_text("".join(json.dumps({"id": r["id"], "gold": r["label"],
                                        "pred": r["label"] if ok else ("neg" if r["label"] == "pos" else "pos")})
                            + "\n" for r, ok in zip(rows, right, strict=True)), encoding="utf-8")
    return path


def hand_clusters(rows):
    """The clusters worked out by hand: the movie, with m5 and m6 one cluster (a duplicate text joins them)."""
    return np.array([{"m6": 5}.get(r["movie"], int(r["movie"][1:])) for r in rows])


def test_fixes_inside_three_movies_are_not_shown_with_the_splits_clusters(tmp_path):
    # planted: the candidate fixes 20 rows, all in movies 0-2, and nothing else. Naively that is 20 of 400 paired
    # items improving (p ~ 6e-6: IMPROVED); over the split's 39 units it is 3 clusters (p > 0.05)
    rows, manifest = corpus(tmp_path)
    fixed = np.array([int(r["movie"][1:]) < 3 for r in rows])
    base = predictions(tmp_path / "base.jsonl", rows, ~fixed | (np.arange(len(rows)) % 3 == 0))
    cand = predictions(tmp_path / "cand.jsonl", rows, [True] * len(rows))
    naive = regress(base, cand).difference
    assert naive is not None and naive.verdict == "IMPROVED" and naive.p_value < 1e-4
    rep = regress(base, cand, clusters_from=manifest)
    diff = rep.difference
    assert diff is not None and diff.verdict == "NOT SHOWN"
    g = hand_clusters(rows)
    right_b = np.array([json.loads(x)["pred"] == json.loads(x)["gold"] for x in base.read_text().splitlines()])
    d = 1.0 - right_b                      # the candidate is right everywhere
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": g}, use_t=True)
    assert diff.clusters == len(set(g.tolist())) == MOVIES - 1
    assert diff.se == pytest.approx(fit.bse[0], rel=1e-10)
    assert diff.p_value == pytest.approx(fit.pvalues[0], rel=1e-8) and diff.p_value > 0.05
    assert diff.ci95 == pytest.approx(tuple(fit.conf_int()[0]), rel=1e-10)
    assert diff.design_effect == pytest.approx(fit.bse[0] ** 2 / (d.std(ddof=1) ** 2 / d.size))
    assert rep.clusters_from == str(manifest) and any("units of the split" in n for n in rep.notes)


def test_an_improvement_spread_over_movies_stays_improved(tmp_path):
    # correct setup: the candidate fixes 4 rows in every movie; clusters barely widen the interval
    rows, manifest = corpus(tmp_path)
    k = np.array([int(r["id"].split("-")[1]) for r in rows])
    base = predictions(tmp_path / "base.jsonl", rows, k >= 6)
    cand = predictions(tmp_path / "cand.jsonl", rows, k >= 2)
    diff = regress(base, cand, clusters_from=manifest).difference
    d = (k >= 2).astype(float) - (k >= 6)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": hand_clusters(rows)}, use_t=True)
    assert diff is not None and diff.verdict == "IMPROVED" and diff.estimate == pytest.approx(0.4)
    assert diff.se == pytest.approx(fit.bse[0], rel=1e-10) and diff.clusters == 39


def test_a_prediction_outside_the_split_is_named(tmp_path):
    rows, manifest = corpus(tmp_path, dup=False)
    extra = [*rows, {"id": "stranger", "label": "pos"}]
    base = predictions(tmp_path / "base.jsonl", extra, [True] * len(extra))
    cand = predictions(tmp_path / "cand.jsonl", extra, [False] + [True] * (len(extra) - 1))
    with pytest.raises(InputError, match=r"base\.jsonl line 401.*'stranger' is in no row of the split"):
        regress(base, cand, clusters_from=manifest)
    with pytest.raises(InputError, match="give one"):
        regress(base, cand, clusters_from=manifest, cluster="movie")


def test_a_changed_clusters_file_or_a_split_without_ids_is_refused(tmp_path):
    rows, manifest = corpus(tmp_path, dup=False)
    base = predictions(tmp_path / "base.jsonl", rows, [True] * len(rows))
    cand = predictions(tmp_path / "cand.jsonl", rows, [False] + [True] * (len(rows) - 1))
    f = manifest.parent / "split_clusters.jsonl"
    first, rest = f.read_text().split("\n", 1)
    f.write_text(json.dumps(json.loads(first) | {"cluster": 12345}) + "\n" + rest)
    with pytest.raises(InputError, match="changed since the split"):
        regress(base, cand, clusters_from=manifest)
    split_file(tmp_path / "reviews.jsonl", tmp_path / "noid", Fields(text=("text",), group=("movie",)))
    with pytest.raises(InputError, match="made without --id"):
        regress(base, cand, clusters_from=tmp_path / "noid")


def test_cli_regress_clusters_from_reports_clusters_and_design_effect(tmp_path, cli):
    rows, manifest = corpus(tmp_path)
    fixed = np.array([int(r["movie"][1:]) < 3 for r in rows])
    base = predictions(tmp_path / "base.jsonl", rows, ~fixed)
    cand = predictions(tmp_path / "cand.jsonl", rows, [True] * len(rows))
    r = cli("regress", str(base), str(cand), "--clusters-from", str(manifest), "--json")
    assert r.code == 0, r.err
    diff = r.json()["difference"]
    assert diff["clusters"] == 39 and diff["verdict"] == "NOT SHOWN" and diff["design_effect"] > 5
    text = cli("regress", str(base), str(cand), "--clusters-from", str(manifest))
    assert "over 39 clusters" in text.out and "design effect" in text.out


def test_errors_accuracy_interval_over_the_splits_clusters(tmp_path):
    from campaign.evaluate.analysis import analyze_errors

    rows, manifest = corpus(tmp_path)
    right = np.array([int(r["movie"][1:]) % 4 != 0 for r in rows])       # every 4th movie all wrong
    preds = predictions(tmp_path / "p.jsonl", rows, right)
    est = analyze_errors(preds, clusters_from=manifest).estimates[0]
    fit = sm.OLS(right.astype(float), np.ones(right.size)).fit(cov_type="cluster",
                                                               cov_kwds={"groups": hand_clusters(rows)}, use_t=True)
    assert est.rate == pytest.approx(0.75) and est.clusters == 39
    assert est.se == pytest.approx(fit.bse[0], rel=1e-10)
    lo, hi = fit.conf_int()[0]
    assert est.ci95 == pytest.approx((max(lo, 0.0), min(hi, 1.0)), rel=1e-10)
