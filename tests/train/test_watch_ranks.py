"""campaign check --processes 2 -- python train_ddp.py (issue 47): a plain DDP loop (examples/watch/train_ddp.py)
run unchanged under torchrun (gloo), each rank watched. Planted: every rank drawing the same batches (a shuffled
loader seeded alike instead of the DistributedSampler), a model left out of DDP; clean: the script as it is."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

DDP_LOOP = Path(__file__).resolve().parents[2] / "examples" / "watch" / "train_ddp.py"
WRAP = "model = DDP(model, device_ids=[device.index] if cuda else None)\n"


def run(tmp_path: Path, *edits: tuple[str, str]):
    script = planted(tmp_path, *edits, source=DDP_LOOP)
    r = watch(["python", script], updates=3, timeout=120, resume=False, processes=2)
    return r, by_id(r)


def test_watch_ranks_clean(tmp_path):
    r, c = run(tmp_path)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert c["ddp.data_differs"].status == "pass" and "each of the 3 watched updates" in c["ddp.data_differs"].seen
    # Linear(16, 32) and Linear(32, 1): 2 weights and 2 biases, equal bit for bit on both ranks after every update
    assert "all 4 parameter tensors are bitwise equal on the 2 ranks" in c["ddp.params_in_sync"].seen
    assert c["ddp.grad_is_mean"].status == "pass" and "each of the 3 watched updates" in c["ddp.grad_is_mean"].seen


def test_watch_ranks_fed_the_same_data(tmp_path):
    # the loader shuffles with the global generator, seeded 0 on every rank: both ranks draw the same batches
    r, c = run(tmp_path, ("batch_size=8, sampler=sampler)", "batch_size=8, shuffle=True)"))
    data = c["ddp.data_differs"]
    assert data.status == "fail" and "ranks 0 and 1 fed their models the same micro-batches at updates 1, 2, 3" \
        in data.seen
    # the same batches under DDP still give the same update on both ranks
    assert c["ddp.params_in_sync"].status == "pass"


def test_check_processes_model_not_wrapped_in_ddp(tmp_path):
    import json

    from typer.testing import CliRunner

    from campaign.cli import app

    # each rank updates its copy with its own batch's gradient: all 4 tensors differ after the first update
    script = planted(tmp_path, (WRAP, ""), source=DDP_LOOP)
    ran = CliRunner().invoke(app, ["check", "--processes", "2", "--updates", "2", "--no-resume", "--json", "--",
                                   "python", script])
    assert ran.exit_code == 1, ran.output
    c = {x["id"]: x for x in json.loads(ran.stdout)["checks"]}
    sync = c["ddp.params_in_sync"]
    assert sync["status"] == "fail" and "after update 1, 4 of 4 parameter tensors differ" in sync["seen"]
    assert c["ddp.data_differs"]["status"] == "pass"
