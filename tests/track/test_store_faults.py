"""The run store under faults: a torn metrics line, text that is not UTF-8, a damaged or unwritable index, a
mistyped --root, a symlink loop. Each is one clear line or a store that still lists every run; nothing is lost."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from campaign.track.run import end_run, log_run, start_run
from campaign.track.store import Store

BAD = "bad\udcff"  # what Python makes of the bytes b"bad\xff" on a command line (surrogateescape)


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CAMPAIGN_ROOT")  # the default store: .campaign in the current folder
    return tmp_path


def test_a_torn_last_line_is_ended_before_the_next_append(here):
    run = start_run("r", with_torch=False)
    log_run(run.id, [{"step": 1, "loss": 2.0}])
    metrics = here / ".campaign" / "runs" / run.id / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"t": "2026-12-02T00:00:00Z", "step": 2, "lo')  # a crash mid-append
    log_run(run.id, [{"step": 3, "loss": 1.5}])
    store = Store()
    assert [r["step"] for r in store.metrics(run.id)] == [1, 3]  # the new record is readable, not glued on
    assert store.torn_lines(run.id) == 1
    assert store.last_metrics(run.id)["loss"] == 1.5


@pytest.mark.parametrize("args", [
    ["run", "start", BAD],
    ["run", "start", "ok", "--hypothesis", BAD],
    ["run", "start", "ok", "--tag", BAD],
])
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(cli, here, args):
    r = cli(*args)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "not valid UTF-8" in r.err, r.err
    assert not (here / ".campaign" / "runs").exists() or not list((here / ".campaign" / "runs").iterdir())


def test_end_and_decide_refuse_text_that_is_not_utf8(cli, here):
    run = start_run("r", with_torch=False)
    r = cli("run", "end", run.id, "--status", "failed", "--reason", BAD)
    assert r.code == 2 and "not valid UTF-8" in r.err
    end_run(run.id, "completed")
    r = cli("run", "decide", run.id, "accepted", "--why", BAD)
    assert r.code == 2 and "not valid UTF-8" in r.err
    assert cli("runs", "list").code == 0


def test_a_manifest_with_a_lone_surrogate_is_listed_invalid_not_fatal(cli, here):
    good = start_run("good", with_torch=False)
    bad = start_run("older", with_torch=False)
    path = here / ".campaign" / "runs" / bad.id / "manifest.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "name": "older\udcff"}))  # as an earlier version could write it
    (here / ".campaign" / "index.sqlite").unlink()
    r = cli("runs", "list", "--json")
    assert r.code == 0, r.err
    rows = {row["id"]: row for row in r.json()["runs"]}
    assert rows[good.id]["status"] == "running" and rows[bad.id]["status"] == "invalid"
    assert "not valid UTF-8" in rows[bad.id]["reason"]
    assert cli("runs", "rebuild").code == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated", "folder"])
def test_a_damaged_index_is_set_aside_and_rebuilt(cli, here, damage):
    first = start_run("first", with_torch=False)
    index = here / ".campaign" / "index.sqlite"
    if damage == "garbage":
        index.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        index.write_bytes(index.read_bytes()[:100])
    else:
        index.unlink()
        index.mkdir()
    r = cli("run", "start", "second")  # the manifest is written and its id printed: a retry makes no second run
    assert r.code == 0, r.err
    second = r.out.strip().split()[0]
    assert (here / ".campaign" / "runs" / second / "manifest.json").is_file()
    listed = cli("runs", "list", "--json")
    assert listed.code == 0, listed.err
    assert {row["id"] for row in listed.json()["runs"]} == {first.id, second}
    assert cli("runs", "rebuild").code == 0
    with sqlite3.connect(index) as con:  # a working index again, the damaged one kept beside it
        assert {r[0] for r in con.execute("SELECT id FROM runs")} == {first.id, second}
    assert [p.name for p in index.parent.iterdir() if p.name.startswith("index.sqlite.damaged-")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders: the fault cannot be made here")
def test_a_read_only_store_is_listed_without_writing(cli, here):
    run = start_run("r", with_torch=False)
    store = here / ".campaign"
    (store / "index.sqlite").unlink()
    modes = {p: p.stat().st_mode for p in [store, *store.rglob("*")]}
    try:
        for p in modes:
            p.chmod(p.stat().st_mode & ~0o222)
        r = cli("runs", "list", "--json")
        assert r.code == 0, r.err
        assert [row["id"] for row in r.json()["runs"]] == [run.id]
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def test_a_mistyped_root_is_refused_and_not_created(cli, here):
    start_run("r", with_torch=False)
    r = cli("runs", "list", "--root", str(here / ".campain"))
    assert r.code == 2 and "no run store there" in r.err
    assert not (here / ".campain").exists()
    assert cli("runs", "list").code == 0  # the default store, found


def test_a_symlink_loop_is_one_clear_line(cli, here):
    loop = here / "loop"
    loop.symlink_to(here / "loop")
    r = cli("run", "start", "r", "--data", str(loop))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    run = start_run("r2", with_torch=False)
    r = cli("run", "artifact", run.id, str(loop), "--kind", "data")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert Path(loop).is_symlink()


def test_record_on_a_run_command_says_where_the_run_is_kept(cli, here):
    r = cli("--record", "run", "start", "r")
    assert r.code == 0 and "recorded in the run store" in r.err
    run_id = r.out.strip()
    assert (here / ".campaign" / "runs" / run_id / "manifest.json").is_file()
    assert not (here / ".campaign" / "records").exists()  # no second copy of the run as a record
