"""`campaign split`, `leaks`, `usage` as a user meets them: help with examples, exit codes 0/1/2, --json, one-line
errors naming file and line. The commands are registered on a fresh typer app and run through the real
error boundary (campaign.cli.main)."""
from __future__ import annotations

import json
import random

import pytest
import typer

import campaign.cli
from campaign.cli import data
from tests.data.conftest import edit, sentence, write_jsonl


@pytest.fixture
def cli(cli, monkeypatch):
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    data.register(app)
    monkeypatch.setattr(campaign.cli, "app", app)
    return cli


@pytest.fixture
def dataset(tmp_path):
    rng = random.Random(3)
    rows = [{"text": sentence(rng), "label": rng.choice(["pos", "neg"]), "user": f"u{i // 3}"} for i in range(300)]
    for i in range(10):
        rows.append({"text": edit(rng, rows[i]["text"], 1), "label": rows[i]["label"], "user": f"x{i}"})
    return write_jsonl(tmp_path / "data.jsonl", rows)


@pytest.mark.parametrize("command", ["split", "leaks", "usage"])
def test_help_ends_with_an_example(cli, command):
    r = cli(command, "--help")
    assert r.code == 0 and f"Example: campaign {command}" in r.out


def test_split_then_leaks_then_usage(cli, dataset, tmp_path):
    out = tmp_path / "splits"
    r = cli("split", str(dataset), "--out", str(out), "--label", "label", "--group", "user", "--json")
    assert r.code == 0, r.err
    m = r.json()
    assert m["schema"] == "campaign.split/1" and [s["name"] for s in m["splits"]] == ["train", "val", "test"]
    assert sum(s["rows"] for s in m["splits"]) == 310 and m["leaks"]["status"] == "pass"
    human = cli("split", str(dataset), "--out", str(out), "--label", "label", "--group", "user", "--force")
    assert human.code == 0 and human.out.startswith("PASS") and "split.ratio" in human.out

    files = [str(out / f"{n}.jsonl") for n in ("train", "val", "test")]
    clean = cli("leaks", *files, "--label", "label", "--group", "user")
    assert clean.code == 0 and clean.out.startswith("NO LEAKS")

    u1 = cli("usage", str(out), "--use", "test", "--purpose", "final-test", "--json")
    assert u1.code == 0 and u1.json()["final_decisions"] == 1
    u2 = cli("usage", str(out / "split_manifest.json"), "--use", "test", "--purpose", "model-selection")
    assert u2.code == 1 and "WARNING usage.final_test_reuse" in u2.out
    assert cli("usage", str(out), "--max-final-uses", "2").code == 0


def test_leaks_exit_1_with_json(cli, dataset, tmp_path):
    rows = [json.loads(x) for x in dataset.read_text().splitlines()]
    train = write_jsonl(tmp_path / "train.jsonl", rows[:250])
    test = write_jsonl(tmp_path / "test.jsonl", rows[250:])  # users u83.. cross the cut; copies of rows 0-9 too
    r = cli("leaks", str(train), str(test), "--group", "user", "--json")
    assert r.code == 1
    checks = {c["id"]: c for c in r.json()["checks"]}
    group = checks["leak.group_overlap"]
    assert group["status"] == "fail" and group["rows"] == 2 and group["pairs"][0]["links"] == 1  # u83: rows 249-251
    assert checks["leak.near_duplicate"]["rows"] == 10
    assert checks["leak.label_conflict"]["status"] == "skipped"
    human = cli("leaks", str(train), str(test), "--group", "user")
    assert human.code == 1 and human.out.startswith("LEAKS FOUND") and "Jaccard" in human.out
    assert cli("leaks", str(train), str(test), "--group", "user", "--threshold", "0.2").code == 0


def test_bad_input_is_one_line_and_exit_2(cli, tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"text": "fine"}\n{"text": "also fine"}\n{"text": \xff}\n')
    r = cli("split", str(p), "--out", str(tmp_path / "o"))
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and f"{p}:3: not valid UTF-8" in r.err and "--skip-bad" in r.err
    assert not (tmp_path / "o").exists()
    ok = cli("split", str(p), "--out", str(tmp_path / "o"), "--skip-bad", "--ratios", "50/50", "--json")
    assert ok.code == 0 and ok.json()["input"]["bad_records"] == 1
    assert cli("leaks", str(p)).code == 2
    assert cli("split", str(p), "--out", str(tmp_path / "x"), "--ratios", "80/oops").code == 2
    missing = cli("usage", str(tmp_path / "nothing.json"))
    assert missing.code == 2 and "no such file; give the split_manifest.json" in missing.err


@pytest.mark.parametrize("count", ["-1", "0"])
def test_leaks_examples_must_be_positive(cli, dataset, tmp_path, count):
    rows = [json.loads(x) for x in dataset.read_text().splitlines()]
    train = write_jsonl(tmp_path / "train.jsonl", rows[:250])
    test = write_jsonl(tmp_path / "test.jsonl", rows[250:])
    r = cli("leaks", str(train), str(test), "--examples", count)
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1
    assert f"examples {count}" in r.err and "positive" in r.err


def test_split_refuses_stray_split_files_and_force_removes_the_old_names(cli, dataset, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "val.jsonl").write_text("mine\n", encoding="utf-8")
    r = cli("split", str(dataset), "--out", str(out))
    assert r.code == 2 and r.err.count("\n") == 1 and "val.jsonl already exists" in r.err and "--force" in r.err
    assert (out / "val.jsonl").read_text() == "mine\n"
    assert cli("split", str(dataset), "--out", str(out), "--ratios", "50/50", "--names", "x,y", "--force").code == 0
    again = cli("split", str(dataset), "--out", str(out), "--ratios", "50/50", "--force", "--json")
    assert again.code == 0 and again.json()["campaign_version"]
    # x, y (listed by the earlier manifest) are gone; val.jsonl was never campaign's and stays untouched
    assert sorted(p.name for p in out.iterdir()) == ["split_clusters.jsonl", "split_manifest.json", "test.jsonl",
                                                  "train.jsonl", "val.jsonl"]
    assert (out / "val.jsonl").read_text() == "mine\n"


def test_leaks_says_when_the_near_duplicate_search_was_partial(cli, tmp_path):
    rng = random.Random(11)
    crowd = sentence(rng)
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": crowd}] * 5 + [{"text": sentence(rng)} for _ in range(20)])
    test = write_jsonl(tmp_path / "test.jsonl", [{"text": crowd}] + [{"text": sentence(rng)} for _ in range(5)])
    r = cli("leaks", str(train), str(test), "--max-bucket", "2")
    assert r.code == 1 and "leak.near_duplicate skipped: incomplete:" in " ".join(r.out.split())
    d = cli("leaks", str(train), str(test), "--max-bucket", "2", "--json").json()
    assert {c["id"]: c["status"] for c in d["checks"]}["leak.near_duplicate"] == "skipped"
    assert d["config"]["max_bucket"] == 2


def test_split_writes_a_dataset_dict_and_leaks_reads_it(cli, dataset, tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "dd"
    r = cli("split", str(dataset), "--out", str(out), "--label", "label", "--group", "user", "--format", "hf",
            "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["parameters"]["output"] == "hf" and doc["input"]["format"] == "jsonl"
    back = datasets.load_from_disk(str(out))
    assert list(back) == ["train", "val", "test"] and sum(len(d) for d in back.values()) == 310
    r = cli("leaks", str(out), "--group", "user", "--json")        # the DatasetDict stands for its splits
    assert r.code == 0, r.err
    assert [s["name"] for s in r.json()["splits"]] == ["train", "val", "test"]
    # the saved train split in again: its fingerprint beside its sha256
    r = cli("split", str(out / "train"), "--out", str(tmp_path / "again"), "--ratios", "50/50", "--json")
    assert r.code == 0, r.err
    assert r.json()["input"]["fingerprint"] == back["train"]._fingerprint
    assert cli("split", str(dataset), "--out", str(tmp_path / "x"), "--format", "csv").code == 2


def test_drop_clusters_needs_drop_to(cli, dataset, tmp_path):
    r = cli("leaks", str(dataset), str(dataset), "--drop-clusters")
    assert r.code == 2 and "--drop-to" in r.err


def test_the_old_spellings_of_renamed_options_still_work_for_a_release_with_a_notice(cli, tmp_path):
    """--id became --id-field (as in errors and regress) and usage --record became --use (--record is the global
    "save the result" flag): the old spellings give the same result, say the new name in one line on stderr, and
    are left out of the help."""
    rows = [{"text": f"ticket number {i} about {'refunds' if i % 2 else 'logins'} {i * 7}", "ref": f"r{i}"}
            for i in range(60)]
    data_file = write_jsonl(tmp_path / "d.jsonl", rows)
    new = cli("split", str(data_file), "--out", str(tmp_path / "new"), "--id-field", "ref", "--json")
    old = cli("split", str(data_file), "--out", str(tmp_path / "old"), "--id", "ref", "--json")
    assert new.code == old.code == 0 and new.err == ""
    assert old.err == "campaign: --id is now --id-field; the old spelling still works in this release\n"
    assert new.json()["parameters"]["fields"]["id"] == old.json()["parameters"]["fields"]["id"] == "ref"
    assert [s["rows"] for s in new.json()["splits"]] == [s["rows"] for s in old.json()["splits"]]
    used = cli("usage", str(tmp_path / "old"), "--record", "test", "--purpose", "final-test", "--json")
    assert used.code == 0 and used.err.count("\n") == 1 and "usage --record is now usage --use" in used.err
    assert used.json()["final_decisions"] == 1
    assert cli("usage", str(tmp_path / "old"), "--use", "test", "--purpose", "final-test", "--json"
               ).json()["final_decisions"] == 2                         # the same ledger, counted under either name
    for command, hidden, shown in (("split", "--id ", "--id-field"), ("usage", "--record", "--use")):
        page = cli(command, "--help").out
        assert shown in page and hidden not in page
