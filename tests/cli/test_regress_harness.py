"""`campaign regress` on lm-eval samples files (paired by document: McNemar, flips, equivalence at
--equivalence-margin) and --equivalence-margin on prediction files: equivalence reported beside the difference test,
and part of the verdict."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def samples(path, correct, *, metric="exact_match"):
    lines = []
    for i, c in enumerate(correct):
        doc = {"question": f"q{i}"}
        lines.append({"doc_id": i, "doc": doc, "target": "a", "arguments": [], "resps": [["a"]],
                      "filtered_resps": ["a" if c else "b"], "filter": "strict-match", "metrics": [metric],
                      "doc_hash": hashlib.sha256(json.dumps(doc).encode()).hexdigest(), metric: float(c)})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_lm_eval_runs_paired_with_mcnemar_and_a_margin(cli, tmp_path):
    # 30 right -> wrong, 12 wrong -> right over 220 documents: McNemar's chi-square (|30 - 12| - 1)^2 / 42 = 6.881
    base = [1] * 30 + [0] * 12 + [1] * 120 + [0] * 58
    cand = [0] * 30 + [1] * 12 + [1] * 120 + [0] * 58
    a = samples(tmp_path / "samples_arc_2026-11-30T00-00-00.jsonl", base)
    b = samples(tmp_path / "samples_arc_2026-12-01T00-00-00.jsonl", cand)
    r = cli("regress", a, b, "--equivalence-margin", "0.15", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert (d["task"], d["metric"], d["filter"], d["examples"]) == ("arc", "exact_match", "strict-match", 220)
    assert d["mcnemar"]["statistic"] == 17 ** 2 / 42 and len(d["right_to_wrong"]) == 30
    assert d["right_to_wrong"][:3] == ["0", "1", "2"]  # the baseline's doc_ids
    # the differences: -1 x 30, +1 x 12, 0 x 178: mean -18/220, sample variance 40.53/219, se 0.0290; the 90%
    # interval mean -/+ t(0.95, 219) se = [-0.1297, -0.0339]: inside +/-0.15, not inside +/-0.1
    mean = -18 / 220
    se = ((30 * (-1 - mean) ** 2 + 12 * (1 - mean) ** 2 + 178 * mean ** 2) / 219 / 220) ** 0.5
    t = __import__("scipy.stats", fromlist=["t"]).t.ppf(0.95, 219)
    assert d["equivalence"]["interval"] == [pytest.approx(mean - t * se), pytest.approx(mean + t * se)]
    assert d["status"] == "pass" and d["checks"][0]["id"] == "difference.verdict"
    assert d["difference"]["verdict"] == "EQUIVALENT"
    narrow = cli("regress", a, b, "--equivalence-margin", "0.1")
    # 8.2 points lower, 95% interval [-0.139, -0.025]: worse, and not within +/-0.1
    assert narrow.code == 1 and narrow.out.startswith("WORSE: exact_match difference -0.0818")
    assert "significantly worse" in narrow.out


def test_runs_on_other_documents_are_refused(cli, tmp_path):
    a = samples(tmp_path / "a.jsonl", [1] * 10)
    (tmp_path / "b.jsonl").write_text("".join(line for line in Path(a).read_text().splitlines(keepends=True)[:8]))
    r = cli("regress", a, str(tmp_path / "b.jsonl"))
    assert r.code == 2 and "did not see the same documents" in r.err


def test_margin_on_prediction_files(cli):
    # the examples: accuracy 0.8133 -> 0.8733 on 300 examples (32 right -> wrong, 50 wrong -> right): +6 points,
    # its 90% interval about [+0.010, +0.110]: inside +/-0.12, not inside +/-0.1
    base, cand = str(EXAMPLES / "data" / "baseline.jsonl"), str(EXAMPLES / "data" / "candidate.jsonl")
    wide = cli("regress", base, cand, "--equivalence-margin", "0.12", "--json").json()
    assert wide["equivalence"]["difference"] == pytest.approx(18 / 300)
    assert wide["status"] == "pass"
    narrow = cli("regress", base, cand, "--equivalence-margin", "0.1")
    # better, not worse: equivalence fails only above +0.1, so a warning (exit 0) and no "fail", and the verdict
    # says better. By hand: d = +1 x 50, -1 x 32, 0 x 218; sd = sqrt((82 - 300 x 0.06^2) / 299) = 0.52030,
    # se = 0.030040, 95% interval 0.06 -/+ 1.96794 x se = [+0.0009, +0.1191], two-sided p = 0.0467
    assert narrow.code == 0 and "not shown equivalent within +/-0.1" in narrow.out
    assert narrow.out.startswith("IMPROVED: accuracy difference +0.0600") and "[+0.0009, +0.1191]" in narrow.out
    d = cli("regress", base, cand, "--equivalence-margin", "0.1", "--json").json()
    assert d["status"] == "warn" and d["difference"]["p_value"] == pytest.approx(0.0467, abs=5e-4)
    assert cli("regress", base, cand, "--metric", "acc").code == 2  # --metric is for lm-eval samples


def test_errors_and_seeds_read_lm_eval_runs(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    samples(run / "samples_gsm8k_2026-12-01T00-00-00.jsonl", [1, 0, 1, 1])
    samples(run / "samples_arc_2026-12-01T00-00-00.jsonl", [0, 0, 1])
    r = cli("errors", str(run), "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert (d["metric"], d["filter"], d["documents"], d["wrong"]) == ("exact_match", "strict-match", 7, 3)
    assert {t["task"]: t["wrong_ids"] for t in d["tasks"]} == {"gsm8k": ["1"], "arc": ["0", "1"]}
    text = cli("errors", str(run))
    assert "exact_match (strict-match)" in text.out and "gsm8k" in text.out
    assert cli("errors", str(run), "--slice", "lang").code == 2
    # seeds: three seeds a variant, each one file; the candidate gains 1, 2, 1 documents of 10
    base = [[1] * 5 + [0] * 5, [1] * 6 + [0] * 4, [1] * 4 + [0] * 6]
    gain = [1, 2, 1]
    args = []
    for s, b in enumerate(base):
        args += ["--baseline-samples", samples(tmp_path / f"samples_gsm8k_2026-12-0{s + 1}T00-00-00.jsonl", b)]
    for s, (b, g) in enumerate(zip(base, gain, strict=True)):
        (tmp_path / f"c{s}").mkdir()     # a run's folder, as lm_eval --output_path writes one
        cand = [1] * (sum(b) + g) + [0] * (10 - sum(b) - g)
        args += ["--candidate-samples", samples(tmp_path / f"c{s}" / "samples_gsm8k_2026-12-01T00-00-00.jsonl",
                                                cand)]
    r = cli("seeds", *args, "--metric", "exact_match", "--resamples", "500", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["metric"] == "exact_match (strict-match)" and d["differences"] == pytest.approx([0.1, 0.2, 0.1])
    assert d["source"]["harness"]["documents"] == 10
    short = samples(tmp_path / "samples_gsm8k_2026-12-09T00-00-00.jsonl", [1] * 9)
    r = cli("seeds", *args[:4], "--candidate-samples", args[7], "--candidate-samples", short)
    assert r.code == 2 and "did not see the same documents" in r.err
    assert cli("seeds", "--baseline-samples", args[1]).code == 2


def test_regress_pairs_runs_of_several_tasks(cli, tmp_path):
    for run, arc, gsm in (("base", [1, 1, 0, 0], [1, 0, 1]), ("cand", [1, 0, 0, 1], [0, 0, 1])):
        (tmp_path / run).mkdir()
        samples(tmp_path / run / "samples_arc_2026-12-01T00-00-00.jsonl", arc)
        samples(tmp_path / run / "samples_gsm8k_2026-12-01T00-00-00.jsonl", gsm)
    r = cli("regress", str(tmp_path / "base"), str(tmp_path / "cand"), "--json")
    assert r.code == 0, r.err
    d = r.json()
    # 7 documents: arc doc 1 and gsm8k doc 0 lost, arc doc 3 won: McNemar exact on 2 vs 1
    assert (d["task"], d["examples"], d["metric"]) == ("arc, gsm8k", 7, "exact_match")
    assert d["right_to_wrong"] == ["arc/1", "gsm8k/0"] and d["wrong_to_right"] == ["arc/3"]
    assert d["mean_baseline"] == pytest.approx(4 / 7) and d["mean_candidate"] == pytest.approx(3 / 7)
    samples(tmp_path / "cand" / "samples_gsm8k_2026-12-01T00-00-00.jsonl", [0, 0])   # one document lost
    r = cli("regress", str(tmp_path / "base"), str(tmp_path / "cand"))
    assert r.code == 2 and "did not see the same documents" in r.err


def test_lm_eval_options_are_refused_on_prediction_files(cli, tmp_path):
    preds = str(EXAMPLES / "data" / "candidate.jsonl")
    r = cli("errors", preds, "--metric", "acc")
    assert r.code == 2 and "--metric do(es) not apply to prediction files" in r.err
    run = tmp_path / "run"
    run.mkdir()
    samples(run / "samples_arc_2026-12-01T00-00-00.jsonl", [1, 0])
    r = cli("seeds", str(EXAMPLES / "data" / "seeds.csv"), "--filter", "strict-match")
    assert r.code == 2 and "--filter" in r.err
    r = cli("seeds", "--baseline-samples", str(run), "--candidate-samples", str(run), "--example-scores", preds)
    assert r.code == 2 and "--example-scores" in r.err


def test_several_tasks_get_a_verdict_each_with_holm(cli, tmp_path):
    # arc: 30 lost, none won, of 200: a clear loss; gsm8k: 3 lost, 2 won of 200: nothing shown
    for run, arc, gsm in (("a", [1] * 200, [1] * 3 + [0] * 2 + [1] * 195), ("b", [0] * 30 + [1] * 170,
                                                                             [0] * 3 + [1] * 2 + [1] * 195)):
        (tmp_path / run).mkdir()
        samples(tmp_path / run / "samples_arc_2026-11-30T00-00-00.jsonl", arc)
        samples(tmp_path / run / "samples_gsm8k_2026-11-30T00-00-00.jsonl", gsm)
    r = cli("regress", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    d = r.json()
    assert r.code == 1 and [x["task"] for x in d["per_task"]] == ["arc", "gsm8k"]
    from statsmodels.stats.multitest import multipletests

    raw = [x["p_value"] for x in d["per_task"]]
    assert [x["p_adjusted"] for x in d["per_task"]] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert [x["verdict"] for x in d["per_task"]] == ["WORSE", "NOT SHOWN"]
    assert {c["id"]: c["status"] for c in d["checks"]} == {"difference.arc": "fail", "difference.gsm8k": "pass"}
    text = cli("regress", str(tmp_path / "a"), str(tmp_path / "b"))
    assert "Holm-corrected over the 2 tasks" in text.out


def test_a_mixed_run_folder_is_analysed_in_one_call(cli, tmp_path):
    from tests.evaluate.test_harness_runs import mixed_run

    a = mixed_run(tmp_path / "a", [True] * 40, [True] * 40)
    b = mixed_run(tmp_path / "b", [True] * 40, [False] * 10 + [True] * 30)
    e = cli("errors", b, "--filter", "flexible-extract", "--json")
    assert e.code == 0, e.err
    assert {t["task"]: (t["metric"], t["filter"]) for t in e.json()["tasks"]} == {
        "arc": ("acc", "none"), "gsm8k": ("exact_match", "flexible-extract")}
    # arc: 10 of 40 lost, none won: se = sqrt((10 - 40 x 0.0625) / 39 / 40) = 0.06934
    r = cli("regress", a, b, "--filter", "strict-match", "--json")
    arc = r.json()["per_task"][0]
    assert r.code == 1 and arc["task"] == "arc" and arc["metric"] == "acc"
    assert arc["se"] == pytest.approx(0.069338, rel=1e-4)
