"""Pairing two lm-eval samples files (written here as `lm_eval --log_samples` writes them, helpers of test_harness):
files renamed away from samples_<task>_<date>.jsonl and logged without doc_hash pair by doc_id alone, so the lines'
own word on their document (the task named inside, the doc, prompt_hash, target_hash) must agree; and a metric value
no float can hold is one line, not an internal error (issue 45, items 1 and 2)."""
from __future__ import annotations

import pytest

from campaign.errors import InputError
from campaign.evaluate.harness import read_harness_pairs, read_harness_scores

from .test_harness import sample, write


def old(doc_id, correct, *, doc=None, **fields):
    """A line as an lm-eval without doc_hash logs it; doc replaces the document, fields add or replace others."""
    line = {k: v for k, v in sample(doc_id, correct).items() if k != "doc_hash"}
    if doc is not None:
        line["doc"] = doc
    return {**line, **fields}


def gsm8k(i, correct=True, **fields):
    return old(i, correct, prompt_hash=f"gsm-p{i}", target_hash=f"gsm-t{i}", **fields)


def arc(i, correct=True, **fields):
    """Another task's document i: another question, prompt and target, the same doc_id."""
    return old(i, correct, doc={"question": f"Which gas do plants take in? ({i})", "choices": ["CO2", "O2"]},
               prompt_hash=f"arc-p{i}", target_hash=f"arc-t{i}", **fields)


def without(line, *names):
    return {k: v for k, v in line.items() if k not in names}


# Documents 0-2 are the same in both files; document 3 is the first that is not. Each case leaves one signal.
CASES = {
    "doc": (lambda i: without(gsm8k(i), "prompt_hash", "target_hash"),
            lambda i: without(arc(i) if i >= 3 else gsm8k(i), "prompt_hash", "target_hash"),
            "the document itself"),
    "prompt_hash": (lambda i: without(gsm8k(i), "doc"), lambda i: without(
        {**gsm8k(i), "prompt_hash": "other-prompt"} if i >= 3 else gsm8k(i), "doc"), "prompt_hash: 'gsm-p3' vs "),
    "target_hash": (lambda i: without(gsm8k(i), "doc"), lambda i: without(
        {**gsm8k(i), "target_hash": "other"} if i >= 3 else gsm8k(i), "doc"), "target_hash: 'gsm-t3' vs 'other'"),
    "task": (lambda i: without(gsm8k(i, task="gsm8k"), "doc", "prompt_hash", "target_hash"),
             lambda i: without(gsm8k(i, task="arc_easy" if i >= 3 else "gsm8k"), "doc", "prompt_hash", "target_hash"),
             "the task named inside the samples: 'gsm8k' vs 'arc_easy'"),
}


@pytest.mark.parametrize("signal", sorted(CASES))
def test_renamed_files_of_other_documents_are_refused_naming_both_files_and_the_first_document(tmp_path, cli,
                                                                                               signal):
    base_line, cand_line, said = CASES[signal]
    base = write(tmp_path / "baseline.jsonl", [base_line(i) for i in range(6)])
    cand = write(tmp_path / "candidate.jsonl", [cand_line(i) for i in range(6)])
    assert read_harness_scores(base).keyed_by == read_harness_scores(cand).keyed_by == "doc_id"
    res = cli("regress", str(base), str(cand))
    assert res.code == 2 and res.err.count("\n") == 1 and res.out == "", (res.code, res.err, res.out)
    assert f"{base} and {cand} did not score the same documents: doc_id 3 differs in " in res.err, res.err
    assert said in res.err, res.err


def test_two_tasks_logged_without_doc_hash_and_renamed_are_not_paired_by_position(tmp_path, cli):
    """The finding as reported: gsm8k's and arc's samples, renamed, every line differing."""
    base = write(tmp_path / "model_a.jsonl", [gsm8k(i, i % 2 == 0) for i in range(8)])
    cand = write(tmp_path / "model_b.jsonl", [arc(i, True) for i in range(8)])
    res = cli("regress", str(base), str(cand))
    assert res.code == 2 and res.err.count("\n") == 1, (res.code, res.err, res.out)
    assert "model_a.jsonl and " in res.err and "model_b.jsonl did not score the same documents: doc_id 0" in res.err


def test_the_same_document_under_doc_hash_with_another_target_is_refused(tmp_path):
    base = write(tmp_path / "a.jsonl", [sample(i, True) for i in range(4)])
    cand = write(tmp_path / "b.jsonl", [{**sample(i, True), "target_hash": "t2" if i == 2 else "t"} for i in range(4)])
    with pytest.raises(InputError, match=r"doc_id 2 differs in target_hash: 't' vs 't2'.*\(paired by doc_hash\)"):
        read_harness_pairs(base, cand)


def test_renamed_files_of_the_same_documents_still_pair(tmp_path, cli):
    """The clean case: one task's documents, renamed, without doc_hash, the hashes and task alike; 3 of 8 right in
    the baseline (0, 3, 6), 6 in the candidate (all but 1 and 2)."""
    base = write(tmp_path / "baseline.jsonl", [gsm8k(i, i % 3 == 0, task="gsm8k") for i in range(8)])
    cand = write(tmp_path / "candidate.jsonl", [gsm8k(i, i not in (1, 2), task="gsm8k") for i in range(8)])
    res = cli("regress", str(base), str(cand), "--json")
    assert res.code == 0, res.err
    r = res.json()
    assert (r["examples"], r["paired_by"], r["both_right"], r["both_wrong"]) == (8, "doc_id", 3, 2)
    assert (r["right_to_wrong"], r["wrong_to_right"]) == ([], ["4", "5", "7"])
    assert r["mean_baseline"] == pytest.approx(3 / 8) and r["mean_candidate"] == pytest.approx(6 / 8)
    # and paired by doc_hash in another order, each line's doc_id renumbered: the same documents, still paired
    shuffled = write(tmp_path / "shuffled.jsonl", [{**sample(i, True), "doc_id": 7 - i} for i in reversed(range(8))])
    first = write(tmp_path / "first.jsonl", [sample(i, i < 4) for i in range(8)])
    assert read_harness_pairs(first, shuffled)[3:] == ([1.0] * 4 + [0.0] * 4, [1.0] * 8)


def test_a_metric_no_float_holds_is_one_line_naming_file_line_and_metric(tmp_path, cli):
    lines = [sample(i, True) for i in range(4)]
    lines[2] = {**lines[2], "exact_match": 10 ** 400}
    big = write(tmp_path / "samples_gsm8k_2026-12-01T00-00-00.jsonl", lines)
    fine = write(tmp_path / "samples_gsm8k_2026-12-02T00-00-00.jsonl", [sample(i, True) for i in range(4)])
    for args in (("errors", str(big)), ("regress", str(big), str(fine)), ("regress", str(fine), str(big))):
        res = cli(*args)
        assert res.code == 2 and res.err.count("\n") == 1, (args, res.code, res.err)
        assert f"{big}:3: exact_match is an integer of 401 digits, not a finite number" in res.err, res.err


def test_integer_scores_a_float_holds_are_read_as_numbers(tmp_path, cli):
    """The clean case: 0/1 logged as integers, and a large integer a float still holds (1e300)."""
    ints = write(tmp_path / "ints.jsonl", [{**sample(i, True), "exact_match": i % 2} for i in range(4)])
    assert list(read_harness_scores(ints).scores.values()) == [0.0, 1.0, 0.0, 1.0]
    res = cli("errors", str(ints), "--json")
    assert res.code == 0 and res.json()["wrong"] == 2, res.err
    large = write(tmp_path / "large.jsonl", [sample(i, True, metric="perplexity", extra={"perplexity": 10 ** 300})
                                              for i in range(2)])
    assert list(read_harness_scores(large).scores.values()) == [1e300, 1e300]
