"""lm-eval runs of one or several tasks (samples files written here as `lm_eval --log_samples` writes them) for
`errors` and `seeds`: the metric and filter named, runs on other tasks or documents refused."""
from __future__ import annotations

import random

import pytest

from campaign.errors import InputError
from campaign.evaluate.harness_runs import compare_harness_seeds, harness_errors, read_harness_run

from .test_harness import sample, write


def run(folder, tasks, *, flt="strict-match", metric="exact_match", shuffle=None):
    """A run's folder: tasks {name: [right or wrong per document]}; shuffle: a Random that reorders each log
    and renumbers its doc_ids (doc_hash still names each document)."""
    folder.mkdir(parents=True, exist_ok=True)
    for t, (name, right) in enumerate(tasks.items()):
        lines = [sample(i + 1000 * t, c, flt=flt, metric=metric) for i, c in enumerate(right)]
        if shuffle is not None:
            shuffle.shuffle(lines)
            lines = [{**x, "doc_id": k} for k, x in enumerate(lines)]
        write(folder / f"samples_{name}_2026-12-01T10-00-00.{t}.jsonl", lines)
    return str(folder)


def test_errors_of_a_run_of_two_tasks_name_the_metric_filter_and_documents(tmp_path):
    gsm = [i % 3 != 0 for i in range(30)]      # 10 wrong: doc_ids 0, 3, ..., 27
    arc = [i < 15 for i in range(20)]          # 5 wrong: 15..19
    rep = harness_errors(run(tmp_path / "m", {"gsm8k": gsm, "arc_easy": arc}))
    assert (rep.metric, rep.filter, rep.documents, rep.wrong) == ("exact_match", "strict-match", 50, 15)
    assert rep.mean == pytest.approx(35 / 50)
    by = {t.task: t for t in rep.tasks}
    assert by["gsm8k"].mean == pytest.approx(20 / 30) and by["gsm8k"].wrong == 10
    assert by["gsm8k"].wrong_ids == tuple(str(i) for i in range(0, 30, 3))
    assert by["arc_easy"].wrong_ids == tuple(str(1000 + i) for i in range(15, 20))   # run() numbers task 2 from 1000
    assert rep.to_dict()["status"] == "pass" and rep.to_dict()["filter"] == "strict-match"


def mixed_run(folder, gsm, arc):
    """A folder mixing a generation task (exact_match under strict-match and flexible-extract) with a
    multiple-choice one (acc under the filter lm-eval names 'none')."""
    folder.mkdir(parents=True, exist_ok=True)
    write(folder / "samples_gsm8k_2026-12-01T10-00-00.jsonl",
          [sample(i, c, flt=f) for i, c in enumerate(gsm) for f in ("strict-match", "flexible-extract")])
    write(folder / "samples_arc_2026-12-01T10-00-00.jsonl",
          [sample(100 + i, c, flt="none", metric="acc") for i, c in enumerate(arc)])
    return str(folder)


def test_a_run_mixing_multiple_choice_and_generation_tasks_gets_a_metric_per_task(tmp_path):
    folder = mixed_run(tmp_path / "m", [True, False, True, True], [True, True, False])
    r = harness_errors(folder, filter="flexible-extract")
    by = {t.task: t for t in r.tasks}
    assert (by["gsm8k"].mean, by["gsm8k"].wrong, by["arc"].mean, by["arc"].wrong) == (0.75, 1, 2 / 3, 1)
    assert (by["gsm8k"].metric, by["gsm8k"].filter, by["arc"].metric, by["arc"].filter) == (
        "exact_match", "flexible-extract", "acc", "none")
    # the generation task holds two filters: one must be named, and the message quotes the filter 'none'
    with pytest.raises(InputError, match="holds the filters flexible-extract, strict-match"):
        harness_errors(folder)
    one = tmp_path / "arc.jsonl"
    write(one, [sample(i, True, flt="none", metric="acc") for i in range(3)])
    with pytest.raises(InputError, match="no filter 'flexible-extract' \\(it holds the filter\\(s\\) 'none'\\)"):
        harness_errors(str(one), filter="flexible-extract")


def test_mixed_runs_compared_task_by_task(tmp_path):
    from campaign.evaluate.harness_runs import compare_run_folders

    a = mixed_run(tmp_path / "a", [True] * 40, [True] * 40)
    b = mixed_run(tmp_path / "b", [True] * 40, [False] * 10 + [True] * 30)
    r = compare_run_folders(a, b, filter="strict-match")
    assert [(x.task, x.metric, x.verdict) for x in r.per_task] == [("arc", "acc", "WORSE"),
                                                                  ("gsm8k", "exact_match", "NOT SHOWN")]
    assert r.status == "fail"


def test_runs_with_other_prompts_or_targets_are_refused_naming_the_document(tmp_path):
    from campaign.evaluate.harness_runs import compare_run_folders

    a = run(tmp_path / "a", {"gsm8k": [True, False, True]})
    b = tmp_path / "b"
    b.mkdir()
    lines = [sample(i, c) for i, c in enumerate([True, False, True])]
    lines[2]["prompt_hash"] = "another prompt template"
    write(b / "samples_gsm8k_2026-12-01T10-00-00.0.jsonl", lines)
    with pytest.raises(InputError, match="doc_id 2 differs in prompt_hash"):
        compare_run_folders(a, str(b))
    lines[2]["prompt_hash"] = "p"
    lines[1]["target_hash"] = "another target"
    write(b / "samples_gsm8k_2026-12-01T10-00-00.0.jsonl", lines)
    with pytest.raises(InputError, match="doc_id 1 differs in target_hash"):
        compare_run_folders(a, str(b))
    lines[1]["target_hash"] = "t"
    write(b / "samples_gsm8k_2026-12-01T10-00-00.0.jsonl", lines)
    assert compare_run_folders(a, str(b)).examples == 3          # correct setup: the same documents pair


def test_two_runs_of_one_task_in_a_folder_are_refused(tmp_path):
    folder = tmp_path / "m"
    write(folder.mkdir() or folder / "samples_gsm8k_2026-12-01T10-00-00.jsonl", [sample(0, True)])
    write(folder / "samples_gsm8k_2026-12-02T10-00-00.jsonl", [sample(0, False)])
    with pytest.raises(InputError, match="two runs of the task 'gsm8k'"):
        read_harness_run(folder)


def _variant(rng, n, p):
    return [rng.random() < p for _ in range(n)]


def test_seeds_over_runs_pair_by_seed_and_by_document(tmp_path):
    from scipy import stats

    rng = random.Random(1)
    base, cand = [], []
    for s in range(4):
        tasks_b = {"gsm8k": _variant(rng, 40, 0.5), "arc": _variant(rng, 25, 0.6)}
        tasks_c = {"gsm8k": _variant(rng, 40, 0.6), "arc": _variant(rng, 25, 0.7)}
        base.append((run(tmp_path / f"b{s}", tasks_b), tasks_b))
        cand.append((run(tmp_path / f"c{s}", tasks_c, shuffle=rng), tasks_c))  # other order, other doc_ids
    rep = compare_harness_seeds([p for p, _ in base], [p for p, _ in cand], n_resamples=2000)
    mean_b = [sum(t["gsm8k"] + t["arc"]) / 65 for _, t in base]
    mean_c = [sum(t["gsm8k"] + t["arc"]) / 65 for _, t in cand]
    assert rep.metric == "exact_match (strict-match)" and rep.n_seeds == 4
    assert list(rep.baseline_values) == pytest.approx(mean_b) and list(rep.candidate_values) == pytest.approx(mean_c)
    t = stats.ttest_rel(mean_c, mean_b)
    assert rep.t_pvalue == pytest.approx(t.pvalue, rel=1e-9)
    assert rep.examples is not None and (rep.examples.seeds, rep.examples.examples) == (4, 65)
    # the per-document differences were paired by document: their mean is the mean of the run means' differences
    assert rep.examples.mean_diff == pytest.approx(sum(mean_c) / 4 - sum(mean_b) / 4)
    h = rep.source["harness"]
    assert (h["metric"], h["filter"], h["paired_by"], h["documents"]) == ("exact_match", "strict-match",
                                                                          "doc_hash", 65)


def test_seeds_refuse_a_run_that_saw_other_documents(tmp_path):
    ok = {"gsm8k": [True, False, True, True]}
    short = {"gsm8k": [True, False, True]}
    b = [run(tmp_path / "b0", ok), run(tmp_path / "b1", ok)]
    c = [run(tmp_path / "c0", ok), run(tmp_path / "c1", short)]   # the second seed's candidate lost a document
    with pytest.raises(InputError, match=r"did not see the same documents \(1 only in"):
        compare_harness_seeds(b, c)
    other = [run(tmp_path / "c2", ok), run(tmp_path / "c3", {"arc": [True] * 4})]
    with pytest.raises(InputError, match="other tasks"):
        compare_harness_seeds(b, other)
    with pytest.raises(InputError, match="2 baseline run.* and 1 candidate"):
        compare_harness_seeds(b, c[:1])
