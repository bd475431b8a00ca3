"""The usage ledger: entries appended next to the manifest, counts per split and purpose, the final-test limit,
concurrent appends, torn lines, bad input."""
from __future__ import annotations

import json
import multiprocessing
import random
from pathlib import Path

import pytest

from campaign.data.read import Fields
from campaign.data.split import split_file
from campaign.errors import InputError
from campaign.track.usage import ledger_path, read_ledger, record_usage, usage_report, use_split
from tests.data.conftest import sentence, write_jsonl


@pytest.fixture
def manifest(tmp_path):
    rng = random.Random(1)
    rows = [{"text": sentence(rng), "label": rng.choice("ab")} for _ in range(60)]
    res = split_file(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "splits", Fields(label="label"))
    return res.manifest


def test_ledger_counts_and_the_final_test_limit(manifest):
    assert usage_report(manifest).entries == ()  # no ledger yet: nothing used
    record_usage(manifest, split="train", purpose="training")
    record_usage(manifest, split="val", purpose="model-selection", note="lr 3e-4 beats 1e-3")
    r = use_split(manifest, split="test", purpose="final-test", note="final report")
    assert r.passed and r.final_split == "test" and r.final_decisions == 1
    assert r.counts == {"train": {"training": 1, "model_selection": 0, "final_test": 0},
                        "val": {"training": 0, "model_selection": 1, "final_test": 0},
                        "test": {"training": 0, "model_selection": 0, "final_test": 1}}
    r = use_split(manifest, split="test", purpose="model_selection", note="peeked to pick a checkpoint")
    assert not r.passed and r.final_decisions == 2
    assert {c.id: c.status for c in r.checks} == {"usage.final_test_reuse": "fail", "usage.final_test_training": "pass",
                                                  "usage.ledger_intact": "pass", "usage.input_unchanged": "pass"}
    assert usage_report(manifest, max_final_uses=2).status == "warn"    # within the limit, but a selection on test
    lines = ledger_path(manifest).read_text().splitlines()
    assert ledger_path(manifest).name == "split_manifest.usage.jsonl"
    assert [json.loads(x)["purpose"] for x in lines] == ["training", "model_selection", "final_test", "model_selection"]
    assert json.loads(lines[1])["note"] == "lr 3e-4 beats 1e-3"


def test_training_on_the_final_split_fails(manifest):
    r = use_split(manifest, split="test", purpose="training")
    assert {c.id: c.status for c in r.checks} == {"usage.final_test_reuse": "pass", "usage.final_test_training": "fail",
                                                  "usage.ledger_intact": "pass", "usage.input_unchanged": "pass"}


def _append_many(manifest: str, k: int) -> None:
    for i in range(k):
        record_usage(manifest, split="val", purpose="model_selection", note=f"worker entry {i} " + "x" * 200)


def test_concurrent_appends_do_not_interleave(manifest):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(manifest, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    entries, warnings = read_ledger(manifest)
    assert len(entries) == 100 and warnings == []
    assert usage_report(manifest).counts["val"]["model_selection"] == 100


def test_a_torn_last_line_is_reported_and_the_next_entry_is_kept(manifest):
    record_usage(manifest, split="val", purpose="model_selection")
    with open(ledger_path(manifest), "a") as f:
        f.write('{"schema": "campaign.usage_entry/1", "split": "te')  # a writer died mid-line
    record_usage(manifest, split="test", purpose="final_test")
    r = usage_report(manifest)
    assert len(r.entries) == 2 and r.counts["test"]["final_test"] == 1
    # the entry written after the torn line acknowledges it by its hash: a warning, not a broken ledger
    assert len(r.warnings) == 1 and ":2: a torn line" in r.warnings[0] and r.passed


def test_a_ledger_line_of_the_wrong_shape_fails_the_ledger_check_with_its_line(manifest):
    # a split that is a list, a dict, or a list nested 100,000 deep (past Python's recursion limit): each line is
    # reported (a line written by hand breaks the ledger), never an internal error, and the good entries still count
    record_usage(manifest, split="test", purpose="final_test")
    lines = ['{"time": "2026-01-01T00:00:00Z", "split": ["test"], "purpose": "final_test"}',
             '{"time": "2026-01-01T00:00:00Z", "split": {"a": 1}, "purpose": "final_test"}',
             '{"time": "2026-01-01T00:00:00Z", "split": ' + "[" * 100_000 + "]" * 100_000 + ', "purpose": "x"}',
             '{"time": 5, "split": "test", "purpose": "final_test"}']
    with open(ledger_path(manifest), "a") as f:
        f.write("\n".join(lines) + "\n")
    r = usage_report(manifest)
    assert len(r.entries) == 1 and r.counts["test"]["final_test"] == 1
    ledger = next(c for c in r.checks if c.id == "usage.ledger_intact")
    assert ledger.status == "fail" and ":2: not a usage entry" in ledger.seen and "(and 1 more)" in ledger.seen
    assert [w.split(":")[-2] for w in read_ledger(manifest)[1]] == ["2", "3", "4", "5"]


def test_uses_bind_to_the_rows_and_a_re_split_keeps_counting_the_rows_already_used(tmp_path):
    rng = random.Random(1)
    rows = [{"text": sentence(rng), "label": rng.choice("ab")} for _ in range(60)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "splits"
    first = split_file(data, out, Fields(label="label"), seed=0)
    record_usage(first.manifest, split="test", purpose="final_test")
    record_usage(first.manifest, split="test", purpose="model_selection")
    assert usage_report(first.manifest).final_decisions == 2
    old_test = {json.loads(x)["text"] for x in (out / "test.jsonl").read_text().splitlines()}
    second = split_file(data, out, Fields(label="label"), seed=3, force=True)     # seed 3 keeps 1 of the 6 rows
    new_test = {json.loads(x)["text"] for x in (out / "test.jsonl").read_text().splitlines()}
    shared = len(old_test & new_test)
    assert new_test != old_test and shared > 0                  # another test set, sharing some rows
    rep = usage_report(second.manifest)
    # the ledger was kept through the re-split; both uses saw rows that are in the new test split: they count
    assert len(rep.entries) == 2 and rep.final_decisions == 2 and not rep.passed
    assert rep.counts["test"] == {"training": 0, "model_selection": 0, "final_test": 0}   # none on this content
    assert any(f"2 use(s) recorded on an earlier split share rows with the current 'test' (up to {shared:,} of "
               f"its {len(new_test)} rows)" in w for w in rep.warnings)


def test_a_split_file_changed_after_the_split_is_refused(manifest):
    test = Path(manifest).parent / "test.jsonl"
    with open(test, "a", encoding="utf-8") as f:
        f.write('{"text": "one more row slipped in", "label": "a"}\n')
    for call in (lambda: usage_report(manifest), lambda: record_usage(manifest, split="val", purpose="training")):
        with pytest.raises(InputError, match=r"test\.jsonl: changed since the split .*campaign split --force"):
            call()
    assert not ledger_path(manifest).exists()


def test_a_note_that_is_not_utf8_is_refused(manifest):
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")     # what Python makes of such bytes in argv
    with pytest.raises(InputError, match="--note holds bytes that are not UTF-8"):
        record_usage(manifest, split="val", purpose="training", note=bad)
    with pytest.raises(InputError, match="--run holds bytes that are not UTF-8"):
        record_usage(manifest, split="val", purpose="training", run=bad)
    assert not ledger_path(manifest).exists()


def test_bad_input(manifest, tmp_path):
    with pytest.raises(InputError, match=r"split 'dev' is not in .*train, val, test"):
        record_usage(manifest, split="dev", purpose="training")
    with pytest.raises(InputError, match="purpose 'tuning' is unknown"):
        record_usage(manifest, split="val", purpose="tuning")
    with pytest.raises(InputError, match="no such file; give the split_manifest.json"):
        usage_report(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text('{"schema": "campaign.kv/1"}')
    with pytest.raises(InputError, match="not a campaign split manifest"):
        usage_report(tmp_path / "x.json")
    with pytest.raises(InputError, match="needs both the split and the purpose"):
        use_split(manifest, split="test")
    assert not ledger_path(manifest).exists()  # nothing was recorded by the failed calls


@pytest.mark.parametrize("splits,fragment", [
    (None, "missing field 'splits'"),
    ("train,test", "field 'splits' must be an array, got 'train,test' (a JSON string)"),
    ([], "'splits' is empty"),
    ([{"path": "train.jsonl"}], "splits[0]: missing field 'name'"),
    ([{"name": "train", "path": "train.jsonl"}, "test"], "splits[1]: is a JSON string, not an object"),
    ([{"name": "test", "path": "a.jsonl"}, {"name": "test", "path": "b.jsonl"}], "splits[1]: split name 'test' is "
                                                                                 "empty or repeated"),
    ([{"name": 3, "path": "a.jsonl"}], "splits[0]: field 'name' must be a string, got 3 (a JSON number)"),
    ([{"name": "train", "path": "train.jsonl", "sha256": "0" * 64}], "splits[0]: its file"),
])
def test_a_malformed_manifest_is_one_line(tmp_path, splits, fragment):
    m = tmp_path / "split_manifest.json"
    m.write_text(json.dumps({"schema": "campaign.split/1", "splits": splits}), encoding="utf-8")
    for call in (lambda: usage_report(m), lambda: record_usage(m, split="test", purpose="final-test")):
        with pytest.raises(InputError) as e:
            call()
        msg = str(e.value)
        assert fragment in msg and str(m) in msg and "\n" not in msg and "campaign split" in msg
    assert not ledger_path(m).exists()


def test_every_final_test_use_is_a_run_record(manifest, tmp_path):
    from campaign.track.store import Store

    store = Store(tmp_path / "records")
    entry = record_usage(manifest, split="test", purpose="final-test", note="the report", runs_root=store.root)
    m = store.read(entry.run)
    assert m.status == "completed" and m.tags == ("usage", "final_test") and m.hypothesis == "the report"
    test_file = Path(manifest).parent / "test.jsonl" if Path(manifest).is_file() else Path(manifest) / "test.jsonl"
    assert [(a.kind, Path(a.path).name) for a in m.artifacts] == [("evaluation:final_test", test_file.name)]
    # a use attached to an existing run adds the split to that run; an unknown run is refused before writing
    from campaign.track.run import start_run

    run = start_run("selection", root=store.root, with_torch=False)
    record_usage(manifest, split="val", purpose="model-selection", run=run.id, runs_root=store.root)
    assert [a.kind for a in store.read(run.id).artifacts] == ["evaluation:model_selection"]
    with pytest.raises(InputError, match="no run 'nope'"):
        record_usage(manifest, split="val", purpose="model-selection", run="nope", runs_root=store.root)
    assert {r.id for r in store.list()} == {entry.run, run.id}


@pytest.mark.parametrize("doc,fragment", [
    ({"schema": "campaign.leak_fix_shards/1", "shards": []}, "not a campaign split manifest"),
    ({"schema": "campaign.split_shards/1", "splits": [{"name": "test"}], "shards": 5},
     "field 'shards' must be an array"),
    ({"schema": "campaign.split_shards/1", "splits": [{"name": ".."}], "shards": []}, "split name '..'"),
    ({"schema": "campaign.split_shards/1", "splits": [{"name": "test"}],
      "shards": [{"split": "test", "path": "../test.jsonl", "sha256": "0" * 64}]}, "shards[0]: path '../test.jsonl'"),
    ({"schema": "campaign.split_shards/1", "splits": [{"name": "test"}],
      "shards": [{"split": "dev", "path": "dev/a.jsonl", "sha256": "0" * 64}]}, "shards[0]: split 'dev' is not one"),
])
def test_a_malformed_manifest_of_a_split_in_shards_is_one_line(tmp_path, doc, fragment):
    # (the engine's own manifests, and shards changed after the split, are tested on Ray in
    # tests/data/test_engine_ray.py)
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps(doc), encoding="utf-8")
    for call in (lambda: usage_report(tmp_path), lambda: record_usage(m, split="test", purpose="final-test")):
        with pytest.raises(InputError) as e:
            call()
        assert fragment in str(e.value) and str(m) in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "split_manifest.json").write_text("{}")
    with pytest.raises(InputError, match="holds both split_manifest.json and manifest.json; give the manifest file"):
        usage_report(tmp_path)
    assert not ledger_path(m).exists()
