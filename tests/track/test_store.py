"""Runs traced to decisions: manifests in a real git repository, a real SQLite index, concurrent writers, a killed
writer, bad input."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from campaign.errors import InputError
from campaign.io import sha256_file
from campaign.track.compare import diff_runs
from campaign.track.run import decide_run, end_run, run, start_run
from campaign.track.store import Store

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A real git repository with one commit, then a modified file and an untracked one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CAMPAIGN_ROOT")                 # the default: .campaign in the current folder
    subprocess.run([*GIT, "init", "-q"], check=True)
    (tmp_path / "train.py").write_text("lr = 1e-3\n")
    subprocess.run([*GIT, "add", "train.py"], check=True)
    subprocess.run([*GIT, "commit", "-qm", "first"], check=True)
    (tmp_path / "train.py").write_text("lr = 3e-4\n")
    (tmp_path / "notes.txt").write_text("untracked\n")
    return tmp_path


def test_a_run_records_the_dirty_code_its_diff_and_the_environment(repo):
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    m = start_run("baseline", params={"lr": 3e-4}, data=["train.py"], seeds=[1, 2])
    assert m.code["commit"] == head and m.code["dirty"] is True
    assert m.code["untracked"] == ["notes.txt"]                 # the store itself is ignored (.campaign/.gitignore)
    diff = (repo / ".campaign" / "runs" / m.id / "code.diff").read_text()
    assert "-lr = 1e-3" in diff and "+lr = 3e-4" in diff
    assert m.code["diff_sha256"] == sha256_file(repo / ".campaign" / "runs" / m.id / "code.diff")
    assert m.data[0].sha256 == sha256_file(repo / "train.py") and m.data[0].bytes == len("lr = 3e-4\n")
    assert m.environment["python"] == sys.version.split()[0]
    assert m.environment["packages"]["campaign"]


def test_the_change_against_the_baseline_is_computed_and_more_than_one_set_is_flagged(repo):
    base = start_run("base", params={"lr": 1e-3, "lora": {"r": 8, "alpha": 16}})
    one = start_run("r16", params={"lr": 1e-3, "lora": {"r": 16, "alpha": 16}}, baseline=base.id)
    assert one.change == {"lora": {"baseline": {"r": 8, "alpha": 16}, "run": {"r": 16, "alpha": 16}}}
    two = start_run("r16-lr", params={"lr": 2e-3, "lora": {"r": 16, "alpha": 16}}, baseline=base.id)
    assert set(two.change) == {"lr", "lora"}
    d = diff_runs(base.id, two.id)
    assert [(x.part, x.key, x.a, x.b) for x in d.differences if x.part == "params"] == [
        ("params", "lora.r", 8, 16), ("params", "lr", 1e-3, 2e-3)]
    assert next(c for c in d.checks if c.id == "runs.one_change").status == "warn"
    assert next(c for c in diff_runs(base.id, one.id).checks if c.id == "runs.one_change").status == "pass"


def test_an_exception_fails_the_run_with_its_reason_and_metrics_are_kept(repo):
    with pytest.raises(FloatingPointError):
        with run("diverges") as r:
            for step in range(3):
                r.log(step=step, loss=float(step))
            raise FloatingPointError("loss is nan at step 3")
    m = Store().read(r.id)
    assert m.status == "failed" and m.reason == "FloatingPointError: loss is nan at step 3"
    assert m.metrics == {"step": 2, "loss": 2.0}
    assert [rec["step"] for rec in Store().metrics(r.id)] == [0, 1, 2]


def test_stopped_runs_need_a_reason_and_decisions_their_rationale(repo):
    m = start_run("x")
    with pytest.raises(InputError, match="needs --reason"):
        end_run(m.id, "stopped")
    end_run(m.id, "stopped", "preempted")
    with pytest.raises(InputError, match="rationale"):
        decide_run(m.id, "rejected", "")
    assert decide_run(m.id, "rejected", "stopped early").decision.decision == "rejected"


def _writer(root: str, run_id: str, writer: int, n: int) -> None:
    store = Store(root)
    for i in range(n):
        store.log(run_id, [{"writer": writer, "i": i}])


def test_eight_processes_logging_at_once_lose_nothing(repo):
    m = start_run("shared")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(".campaign", m.id, w, 500)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    records = Store().metrics(m.id)
    assert len(records) == 8 * 500
    assert {(r["writer"], r["i"]) for r in records} == {(w, i) for w in range(8) for i in range(500)}


KILLED = textwrap.dedent("""
    import sys, time
    import campaign.track.run as R
    with R.run("killed", root=sys.argv[1]) as r:
        print(r.id, flush=True)
        for step in range(100):
            r.log(step=step, loss=1.0 / (step + 1))
            r.flush()
        print("logged", flush=True)
        time.sleep(60)
""")


def test_a_writer_killed_with_sigkill_leaves_its_records_and_shows_as_stopped(repo):
    proc = subprocess.Popen([sys.executable, "-c", KILLED, ".campaign"], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "logged"
    row = next(r for r in Store().list() if r.id == run_id)
    assert row.status == "running"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert [r["step"] for r in Store().metrics(run_id)] == list(range(100))
    row = next(r for r in Store().list() if r.id == run_id)
    assert row.status == "stopped" and f"process {proc.pid} ended without closing" in row.reason


def test_sigterm_marks_the_run_stopped(repo):
    proc = subprocess.Popen([sys.executable, "-c", KILLED, ".campaign"], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "logged"
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    m = Store().read(run_id)
    assert m.status == "stopped" and "SIGTERM" in m.reason


def test_a_run_on_another_host_without_heartbeat_is_stale(repo):
    m = start_run("elsewhere", stale_after=60)
    Store().update(m.id, owner={"host": "another-host", "pid": 1})
    beat = repo / ".campaign" / "runs" / m.id / "heartbeat"
    old = time.time() - 3600
    os.utime(beat, (old, old))
    row = next(r for r in Store().list() if r.id == m.id)
    assert row.status == "stopped" and "no heartbeat since" in row.reason


def _index_rows(root):
    con = sqlite3.connect(root / "index.sqlite")
    try:
        return sorted(r[:5] + r[6:] for r in con.execute("SELECT * FROM runs"))   # all but `updated`
    finally:
        con.close()


def test_the_index_rebuilt_from_the_files_equals_the_live_index(repo):
    a = start_run("a", tags=["sweep"])
    b = start_run("b", baseline=a.id)
    end_run(a.id, "completed")
    decide_run(a.id, "accepted", "baseline")
    end_run(b.id, "failed", "OOM")
    live = _index_rows(repo / ".campaign")
    (repo / ".campaign" / "index.sqlite").unlink()
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (repo / ".campaign" / extra).unlink(missing_ok=True)
    assert Store().rebuild() == 2
    assert _index_rows(repo / ".campaign") == live


def test_a_corrupted_manifest_never_breaks_listing_the_others(repo, cli):
    good = start_run("good")
    bad = start_run("bad")
    (repo / ".campaign" / "runs" / bad.id / "manifest.json").write_text('{"schema": "campaign.run/1", "id": ')
    rows = {r.id: r for r in Store().list()}
    assert rows[good.id].status == "running"
    assert rows[bad.id].status == "invalid" and "manifest.json" in rows[bad.id].reason
    r = cli("runs", "show", bad.id)
    assert r.code == 2 and "manifest.json" in r.err and len(r.err.strip().splitlines()) == 1
    listed = cli("runs", "list", "--json")
    assert listed.code == 0 and {x["id"] for x in json.loads(listed.out)["runs"]} == {good.id, bad.id}


def test_cli_start_log_end_decide_and_bad_input(repo, cli):
    started = cli("run", "start", "lora-r16", "--param", "lora.r=16", "--param", "lr=0.0003", "--guard",
                  "accuracy>=-0.01", "--seed", "0", "--tag", "sweep")
    assert started.code == 0
    run_id = started.out.strip()
    m = Store().read(run_id)
    # started from a shell command that exits at once: no owner process, the heartbeat alone says it is alive
    assert m.params == {"lora": {"r": 16}, "lr": 0.0003} and m.owner["pid"] is None
    assert next(x for x in Store().list() if x.id == run_id).status == "running"
    assert cli("run", "log", run_id, "step=10", "loss=1.5", "warmup=true").code == 0
    assert Store().metrics(run_id)[-1] | {"t": None} == {"t": None, "step": 10, "loss": 1.5, "warmup": True}
    for argv, fragment in ((["run", "log", "no-such-run", "x=1"], "no run 'no-such-run'"),
                           (["run", "log", run_id, "loss"], "'loss' is not key=value"),
                           (["run", "log", run_id, "loss=loss"], "'loss' is not a number"),   # $loss unexpanded
                           (["run", "log", run_id, "step=1", "acc=[1]"], "'[1]' is not a number"),
                           (["run", "log", run_id, "acc=null"], "'null' is not a number"),
                           (["run", "start", "x", "--guard", "accuracy>"], "guard"),
                           (["run", "start", "x", "--stale-after", "soon"], "not a duration"),
                           (["run", "end", run_id, "--status", "stopped"], "needs --reason"),
                           (["run", "decide", run_id, "maybe", "--why", "x"], "decision 'maybe'"),
                           (["runs", "list", "--status", "lost"], "status 'lost'")):
        r = cli(*argv)
        assert r.code == 2 and fragment in r.err and len(r.err.strip().splitlines()) == 1, (argv, r.err)
    assert cli("run", "log", run_id, "loss=NaN").code == 0            # a diverged loss is kept, as text
    assert Store().metrics(run_id)[-1]["loss"] == "NaN"
    assert cli("run", "log", run_id, "loss=-inf").code == 0 and Store().metrics(run_id)[-1]["loss"] == "-inf"
    assert cli("run", "log", run_id, "loss=1.5").code == 0
    assert cli("run", "end", run_id, "--status", "completed").code == 0
    again = cli("run", "end", run_id, "--status", "failed", "--reason", "oops")
    assert again.code == 2 and "already ended completed" in again.err         # a closed run keeps its status
    late = cli("run", "log", run_id, "step=11")
    assert late.code == 2 and "already ended" in late.err
    decided = cli("run", "decide", run_id, "accepted", "--why", "+2 points", "--json")
    assert decided.code == 0 and decided.json()["decision"]["decision"] == "accepted"
    artifact = Path(repo) / "preds.jsonl"
    artifact.write_text('{"id": 1}\n')
    said = cli("run", "artifact", run_id, str(artifact), "--kind", "predictions")
    assert said.code == 0 and said.out.startswith(f"{run_id}: completed, accepted, 1 artifact(s)")
    shown = json.loads(cli("runs", "show", run_id, "--json").out)
    assert shown["status"] == "completed" and shown["decision"]["why"] == "+2 points"
    assert shown["metrics"] == {"step": 10, "loss": 1.5, "warmup": True}


def test_runs_check_evaluates_the_guards_on_the_recorded_predictions(repo, cli):
    gold = ["a", "b", "a", "b", "a", "b", "a", "b", "a", "b"]
    def write(name, preds):
        path = repo / name
        path.write_text("".join(json.dumps({"id": i, "gold": g, "pred": p}) + "\n"
                                for i, (g, p) in enumerate(zip(gold, preds, strict=True))))
        return str(path)
    base = start_run("base")
    cand = start_run("cand", baseline=base.id, guards=["accuracy>=-0.05"])
    assert cli("run", "artifact", base.id, write("b.jsonl", gold), "--kind", "predictions").code == 0
    # the candidate gets 6 of 10 wrong: accuracy 1.0 -> 0.4, a change of -0.6 against a guard of -0.05; a guard
    # is a test: paired t = (-0.6 + 0.05) / 0.1633 = -3.37 on 9 df, one-sided p = 0.004, shown broken
    worse = ["b", "a", "b", "a", "b", "a"] + gold[6:]
    assert cli("run", "artifact", cand.id, write("c.jsonl", worse), "--kind", "predictions").code == 0
    r = cli("runs", "check", cand.id, "--json")
    assert r.code == 1
    guard = json.loads(r.out)["guards"][0]
    assert guard["passed"] is False and guard["delta"] == pytest.approx(-0.6)
    (repo / "c.jsonl").write_text("")                      # the recorded predictions changed afterwards
    r = cli("runs", "check", cand.id)
    assert r.code == 2 and "changed or are gone" in r.err


def test_runs_export_to_mlflow_reads_back_with_mlflows_own_client(repo, cli, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    with run("lora-r16", params={"lora": {"r": 16}, "lr": 3e-4}, hypothesis="r16 helps", tags=["sweep"]) as r:
        for step in range(1, 6):
            r.log(step=step, loss=1.0 / step, note="text is not a metric")
    failed = start_run("oom")
    end_run(failed.id, "failed", "CUDA out of memory")
    out = repo / "exported"
    assert cli("runs", "export", "--mlflow", str(out)).code == 0
    client = MlflowClient(tracking_uri=out.resolve().as_uri())
    exported = {x.data.tags["campaign.id"]: x for x in client.search_runs(
        [client.get_experiment_by_name("campaign").experiment_id])}
    assert set(exported) == {r.id, failed.id}
    mine = exported[r.id]
    assert mine.data.params == {"lora.r": "16", "lr": "0.0003"}
    assert mine.info.status == "FINISHED" and mine.data.tags["campaign.hypothesis"] == "r16 helps"
    history = client.get_metric_history(mine.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(s, 1.0 / s) for s in range(1, 6)]
    assert exported[failed.id].info.status == "FAILED"
    assert exported[failed.id].data.tags["campaign.reason"] == "CUDA out of memory"
    again = cli("runs", "export", "--mlflow", str(out))
    assert again.code == 2 and "exists" in again.err


def test_a_failure_reason_survives_and_force_keeps_the_history(repo):
    m = start_run("oom")
    end_run(m.id, "failed", "CUDA out of memory")
    with pytest.raises(InputError, match="already ended failed"):
        end_run(m.id, "completed")
    changed = end_run(m.id, "invalid", "wrong data split", force=True)
    assert changed.status == "invalid" and "was failed: CUDA out of memory" in changed.reason


def test_a_diverged_loss_logged_from_python_is_kept_not_nulled(repo):
    with run("diverged") as r:
        r.log(step=1, loss=float("nan"), grad_norm=float("inf"))
    assert Store().metrics(r.id)[0] | {"t": None} == {"t": None, "step": 1, "loss": "nan", "grad_norm": "inf"}


PREEMPTED = textwrap.dedent("""
    import signal, sys, time
    import campaign.track.run as R
    saved = []
    signal.signal(signal.SIGTERM, lambda signum, frame: saved.append("checkpoint"))
    with R.run("preempted", root=sys.argv[1]) as r:
        print(r.id, flush=True)
        r.log(step=1, loss=1.0)
        try:  # "logged" is printed inside the try: a SIGTERM sent on reading it always finds the finally armed
            print("logged", flush=True)
            time.sleep(60)
        finally:
            r.log(user_handler=",".join(saved))
""")


def test_sigterm_runs_the_users_own_handler_first(repo):
    proc = subprocess.Popen([sys.executable, "-c", PREEMPTED, ".campaign"], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "logged"
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    m = Store().read(run_id)
    assert m.status == "stopped" and "SIGTERM" in m.reason
    assert [r["user_handler"] for r in Store().metrics(run_id) if "user_handler" in r] == ["checkpoint"]


BUFFERED = textwrap.dedent("""
    import sys, time
    import campaign.track.run as R
    with R.run("buffered", root=sys.argv[1]) as r:
        print(r.id, flush=True)
        r.log(step=1000, final_accuracy=0.91)        # buffered: no explicit flush
        time.sleep(60)
""")


def test_buffered_records_reach_the_disk_before_a_kill(repo):
    proc = subprocess.Popen([sys.executable, "-c", BUFFERED, ".campaign"], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    deadline = time.time() + 20
    while not Store().metrics(run_id) and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert [r["final_accuracy"] for r in Store().metrics(run_id)] == [0.91]


def test_a_bad_timestamp_or_a_copied_folder_shows_as_invalid_and_listing_goes_on(repo):
    good = start_run("good")
    bad = start_run("bad")
    path = repo / ".campaign" / "runs" / bad.id / "manifest.json"
    doc = json.loads(path.read_text())
    doc["created"] = "yesterday"
    path.write_text(json.dumps(doc))
    import shutil
    shutil.copytree(repo / ".campaign" / "runs" / good.id, repo / ".campaign" / "runs" / "good-copy")
    rows = {r.id: r for r in Store().list()}
    assert rows[good.id].status == "running"
    assert rows[bad.id].status == "invalid" and "not an ISO 8601 time" in rows[bad.id].reason
    assert rows["good-copy"].status == "invalid" and "not the folder's" in rows["good-copy"].reason


def test_mlflow_export_takes_campaigns_own_metric_names(repo, cli, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    with run("per-class") as r:
        r.log(step=1, **{"f1[refund]": 0.8})
    out = repo / "exported"
    assert cli("runs", "export", "--mlflow", str(out)).code == 0
    client = MlflowClient(tracking_uri=out.resolve().as_uri())
    exported = client.search_runs([client.get_experiment_by_name("campaign").experiment_id])[0]
    assert exported.data.metrics == {"f1_refund_": 0.8}
