"""The usage ledger is tamper-evident: a deleted, edited or moved entry, a line written by hand, a deleted ledger or
rows file is named by a failing check; uses bind to the rows, so a re-split keeps counting rows already used; the
input data's hash is checked; the first model selection on the test split is a warning; old ledgers still read."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from campaign.data.read import Fields
from campaign.data.split import split_file
from campaign.track.usage import ledger_path, record_usage, usage_report, use_split
from tests.data.conftest import sentence, write_jsonl


def rows_of(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": sentence(rng), "label": rng.choice("ab")} for _ in range(n)]


@pytest.fixture
def split(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", rows_of(200))
    return data, split_file(data, tmp_path / "splits", Fields(label="label")).manifest


def status(report, check: str) -> str:
    return next(c.status for c in report.checks if c.id == check)


def ledger_check(report):
    return next(c for c in report.checks if c.id == "usage.ledger_intact")


def three_uses(manifest) -> Path:
    record_usage(manifest, split="train", purpose="training")
    record_usage(manifest, split="val", purpose="model-selection")
    record_usage(manifest, split="test", purpose="final-test")
    return ledger_path(manifest)


def test_a_clean_ledger_is_chained_and_passes(split):
    data, manifest = split
    path = three_uses(manifest)
    lines = path.read_bytes().split(b"\n")[:-1]
    # each entry carries the sha256 of the line before it (computed here with hashlib), the first none
    prevs = [json.loads(x)["prev"] for x in lines]
    assert prevs == [None, hashlib.sha256(lines[0]).hexdigest(), hashlib.sha256(lines[1]).hexdigest()]
    entry = json.loads(lines[2])
    test_rows = (Path(manifest).parent / "test.jsonl").read_text().splitlines()
    assert entry["rows"] == len(test_rows) and entry["input_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    r = usage_report(manifest)
    assert r.status == "pass" and r.final_decisions == 1 and r.warnings == ()
    assert {c.id: c.status for c in r.checks} == {"usage.final_test_reuse": "pass", "usage.final_test_training": "pass",
                                                  "usage.ledger_intact": "pass", "usage.input_unchanged": "pass"}


def test_the_first_model_selection_on_the_test_split_is_already_a_warning(split, cli):
    _, manifest = split
    r = use_split(manifest, split="test", purpose="model-selection", note="picked a checkpoint")
    assert r.final_decisions == 1 and r.status == "warn"
    assert status(r, "usage.final_test_reuse") == "warn"
    out = cli("usage", manifest)
    assert out.code == 0 and "OK" not in out.out and "WARNING usage.final_test_reuse" in out.out
    assert "1 of them a model selection" in out.out


def test_deleting_the_last_entry_is_seen_through_the_run_store(split, cli):
    """The issue's case: the model selection on the test split is the last line; without it the counts look clean,
    but the run store recorded 4 entries."""
    _, manifest = split
    path = three_uses(manifest)
    record_usage(manifest, split="test", purpose="model-selection")
    assert usage_report(manifest).final_decisions == 2
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))
    r = usage_report(manifest)
    assert r.final_decisions == 1 and not r.passed
    check = ledger_check(r)
    assert check.status == "fail" and "records 4 entr(ies)" in check.seen and "holds 3" in check.seen
    assert check.why and check.fix
    out = cli("usage", manifest, "--json")
    assert out.code == 1 and json.loads(out.out)["status"] == "fail"


@pytest.mark.parametrize("tamper,line", [
    (lambda ls: [ls[0], ls[2], ls[3]], 2),                                  # a middle entry deleted
    (lambda ls: [ls[1], ls[2], ls[3]], 1),                                  # the first entry deleted
    (lambda ls: [ls[0], ls[2], ls[1], ls[3]], 2),                           # two entries swapped
    (lambda ls: [ls[0], ls[1], ls[2].replace('"split": "test"', '"split": "val"'), ls[3]], 4),   # test -> val
])
def test_a_deleted_moved_or_edited_entry_breaks_the_chain_at_the_next_line(split, tamper, line):
    _, manifest = split
    path = three_uses(manifest)
    record_usage(manifest, split="test", purpose="model-selection")
    lines = path.read_text().splitlines(keepends=True)
    assert '"split": "test"' in lines[2]
    path.write_text("".join(tamper(lines)))
    check = ledger_check(usage_report(manifest))
    assert check.status == "fail" and f"{path}:{line}: this entry does not follow the one before it" in check.seen


def test_editing_the_last_entry_is_seen_through_the_run_store(split):
    _, manifest = split
    path = three_uses(manifest)
    text = path.read_text()
    head, last = text.rstrip("\n").rsplit("\n", 1)
    path.write_text(head + "\n" + last.replace('"split": "test"', '"split": "val"') + "\n")
    r = usage_report(manifest)
    assert r.final_decisions == 1           # the edit hides nothing: the entry's rows are the test split's rows
    check = ledger_check(r)
    assert check.status == "fail" and "its entry 3 (line 3) differs" in check.seen


@pytest.mark.parametrize("where", ["end", "middle"])
def test_a_garbage_line_fails_the_ledger_check(split, where):
    _, manifest = split
    path = three_uses(manifest)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(len(lines) if where == "end" else 1, "this is not an entry\n")
    path.write_text("".join(lines))
    check = ledger_check(usage_report(manifest))
    line = 4 if where == "end" else 2
    assert check.status == "fail" and f"{path}:{line}: not a usage entry" in check.seen


def test_a_deleted_ledger_is_named(split, cli):
    _, manifest = split
    path = three_uses(manifest)
    path.unlink()
    r = usage_report(manifest)
    assert r.entries == () and ledger_check(r).status == "fail"
    assert "the ledger was deleted; the run store" in ledger_check(r).seen and "3 entr(ies)" in ledger_check(r).seen
    assert cli("usage", manifest).code == 1


def test_an_edited_rows_file_is_named(split):
    _, manifest = split
    three_uses(manifest)
    rows_file = next(Path(manifest).parent.glob("split_manifest.usage.rows.*.txt"))
    rows_file.write_text("\n".join(rows_file.read_text().split()[1:]) + "\n")
    check = ledger_check(usage_report(manifest))
    assert check.status == "fail" and "are changed" in check.seen


def test_a_re_split_after_adding_rows_keeps_counting_the_rows_already_used(split, tmp_path):
    """The issue's case: rows added to the input, the data split again with the same seed: another test file, but
    some of its rows are ones already used, so both decisions still count (a count bound to the file would reset)."""
    data, manifest = split
    record_usage(manifest, split="test", purpose="final-test")
    record_usage(manifest, split="test", purpose="model-selection")
    old_test = {json.loads(x)["text"] for x in (Path(manifest).parent / "test.jsonl").read_text().splitlines()}
    with open(data, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows_of(10, seed=2))
    r = usage_report(manifest)
    assert status(r, "usage.input_unchanged") == "warn" and "changed since the split" in next(
        c.seen for c in r.checks if c.id == "usage.input_unchanged")
    new = split_file(data, tmp_path / "splits", Fields(label="label"), force=True).manifest
    new_test = {json.loads(x)["text"] for x in (Path(new).parent / "test.jsonl").read_text().splitlines()}
    shared = len(old_test & new_test)
    assert new_test != old_test and shared > 0        # another test file, with rows already used (5 of 21)
    r = usage_report(new)
    assert r.final_decisions == 2 and status(r, "usage.final_test_reuse") == "fail"
    assert status(r, "usage.input_unchanged") == "pass"                 # this split was made from the new data
    assert any(f"up to {shared:,} of its {len(new_test)} rows" in w for w in r.warnings)


def test_training_rows_that_land_in_a_new_test_split_fail_the_training_check(split, tmp_path):
    data, manifest = split
    record_usage(manifest, split="train", purpose="training")
    new = split_file(data, tmp_path / "splits", Fields(label="label"), seed=7, force=True).manifest
    r = usage_report(new)
    assert status(r, "usage.final_test_training") == "fail"             # 80% of rows were trained on


def test_an_old_unchained_ledger_is_read_with_a_warning_and_new_uses_chain_after_it(split):
    _, manifest = split
    path = ledger_path(manifest)
    sha = json.loads(Path(manifest).read_text())["splits"][2]["sha256"]
    old = [{"schema": "campaign.usage_entry/1", "time": "2026-01-01T00:00:00+00:00", "split": "test",
            "purpose": "final_test", "note": "", "run": None, "manifest_sha256": None, "split_sha256": sha}]
    path.write_text("".join(json.dumps(e) + "\n" for e in old))
    r = usage_report(manifest)
    assert r.final_decisions == 1 and ledger_check(r).status == "warn"
    assert "1 entr(ies) predate the hash chain" in ledger_check(r).seen
    record_usage(manifest, split="val", purpose="model-selection")
    lines = path.read_bytes().split(b"\n")[:-1]
    assert json.loads(lines[1])["prev"] == hashlib.sha256(lines[0]).hexdigest()
    r = usage_report(manifest)
    assert ledger_check(r).status == "warn" and r.final_decisions == 1 and len(r.entries) == 2
