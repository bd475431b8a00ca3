"""A job launched with torchrun (2 processes, gloo on the CPU) has one run: rank 0 writes it with the job's world,
every rank's records carry its rank, and a rank that fails is named as the root cause."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from campaign.track.distributed import job_run_id, launched_job
from campaign.track.store import Store

SCRIPT = """
import os
import torch.distributed as dist
import campaign

dist.init_process_group("gloo")
rank = dist.get_rank()
try:
    with campaign.run("ddp-job", params={"lr": 0.001}, with_torch=False) as r:
        r.log(step=1, loss=1.0 + rank)
        if os.environ.get("FAIL_RANK") == str(rank):
            raise ValueError(f"bad batch at rank {rank}")
        if os.environ.get("KILL_RANK") == str(rank):
            os.kill(os.getpid(), 9)  # the OOM killer's way: no exception, no record
        dist.barrier()
finally:
    if os.environ.get("FAIL_RANK") is None and os.environ.get("KILL_RANK") is None:
        dist.destroy_process_group()
"""


def launch(tmp_path, **env):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1", **env}
    environment.pop("CAMPAIGN_ROOT", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script)], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)


def test_two_ranks_make_one_run_with_both_ranks_records(tmp_path):
    done = launch(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    store = Store(tmp_path / ".campaign")
    [row] = store.list()
    m = store.read(row.id)
    assert m.status == "completed" and "-job-" in m.id
    world = m.params["distributed"]
    assert (world["world_size"], world["local_world_size"], world["rank"]) == (2, 2, 0)
    assert m.params["lr"] == 0.001
    losses = {r["rank"]: r["loss"] for r in store.metrics(m.id) if "loss" in r}
    assert losses == {0: 1.0, 1: 2.0}


@pytest.mark.parametrize("how, reason", [
    ("FAIL_RANK", "rank 1 failed: ValueError: bad batch at rank 1"),          # its own error, recorded as it raised
    ("KILL_RANK", "rank 1 (pid "),                                            # SIGKILL: no error of its own
])
def test_the_rank_that_failed_is_named_as_the_root_cause_not_rank_0(tmp_path, how, reason):
    done = launch(tmp_path, **{how: "1"})
    assert done.returncode != 0
    store = Store(tmp_path / ".campaign")
    [row] = store.list()
    m = store.read(row.id)
    assert m.status == "failed" and m.reason.startswith(reason), (m.status, m.reason)
    assert ("died without an error of its own" in m.reason) == (how == "KILL_RANK")


def test_outside_a_launcher_there_is_no_job(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_job() is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    job = launched_job()
    assert (job.rank, job.world_size, job.key) == (1, 2, "job-7|10.0.0.1:29500")
    assert job_run_id("My Run", job).startswith("my-run-job-")
    assert job_run_id("My Run", launched_job()) == job_run_id("My Run", job)  # every rank computes the same id
    monkeypatch.setenv("MASTER_PORT", "29501")  # another job
    assert job_run_id("My Run", launched_job()) != job_run_id("My Run", job)
