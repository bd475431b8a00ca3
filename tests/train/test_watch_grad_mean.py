"""ddp.grad_is_mean (issue 47): under `campaign check --processes 2`, the gradient each rank's optimizer applies is the
mean of the gradients the 2 ranks computed from their own micro-batches. Planted: an all-reduce with SUM and no
division (the applied gradient is exactly 2 = N times the mean), forward and backward under no_sync() at every
micro-batch (each rank applies its own gradient), a loss divided by the world size before DDP averages (the loop's
scaling of an update's micro-batches adds up to 1/2 instead of 1). Clean: examples/watch/train_ddp.py and a DDP loop
accumulating 2 micro-batches with no_sync() on the first (examples/watch/train_ddp_accum.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from campaign.train.watch_ranks import gradient_mismatch

from .test_watch import planted

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "watch"
DDP_LOOP = EXAMPLES / "train_ddp.py"
ACCUM_LOOP = EXAMPLES / "train_ddp_accum.py"


def check(script: str) -> dict:
    from typer.testing import CliRunner

    from campaign.cli import app

    ran = CliRunner().invoke(app, ["check", "--processes", "2", "--updates", "2", "--no-resume", "--json", "--",
                                   "python", script])
    assert ran.exit_code in (0, 1), ran.output
    out = json.loads(ran.stdout)
    return {"exit": ran.exit_code, **{x["id"]: x for x in out["checks"]}}


def test_gradient_mismatch_by_hand():
    # ranks' own fingerprints [1, 3] and [1, 1]: mean [1, 2]; applied [2, 4] = 2 x mean: |[1, 2]| / |[1, 2]| = 1 off
    rel, ratio = gradient_mismatch([[2.0, 4.0]], [[[1.0, 3.0]], [[1.0, 1.0]]])
    assert rel == pytest.approx(1.0) and ratio == pytest.approx(2.0)
    # applied [1, 3] (rank 0's own): off by |[0, 1]| / |[1, 2]| = 1/sqrt(5); ratio (1 + 6) / 5 = 1.4
    rel, ratio = gradient_mismatch([[1.0, 3.0]], [[[1.0, 3.0]], [[1.0, 1.0]]])
    assert rel == pytest.approx(1 / math.sqrt(5)) and ratio == pytest.approx(1.4)
    assert gradient_mismatch([[1.0, 2.0]], [[[1.0, 3.0]], [[1.0, 1.0]]])[0] == 0


@pytest.mark.parametrize("source", [DDP_LOOP, ACCUM_LOOP], ids=["plain", "accumulating"])
def test_grad_is_mean_clean(tmp_path, source):
    pytest.importorskip("torch")
    c = check(planted(tmp_path, source=source))
    assert c["exit"] == 0, c
    mean = c["ddp.grad_is_mean"]
    assert mean["status"] == "pass" and "each of the 2 watched updates" in mean["seen"], mean
    assert c["ddp.params_in_sync"]["status"] == "pass"


def test_grad_is_mean_sum_not_divided(tmp_path):
    pytest.importorskip("torch")
    # no DDP: the loop all-reduces each gradient with the default op, SUM, and never divides by the 2 ranks
    script = planted(tmp_path, ("model = DDP(model, device_ids=[device.index] if cuda else None)\n", ""),
                     ("        loss.backward()\n", "        loss.backward()\n        for p in model.parameters():\n"
                                                  "            dist.all_reduce(p.grad)\n"), source=DDP_LOOP)
    c = check(script)
    mean = c["ddp.grad_is_mean"]
    assert c["exit"] == 1 and mean["status"] == "fail"
    # applied = g0 + g1 = 2 x mean(g0, g1): ratio 2, relative error |2m - m| / |m| = 1
    assert "at update 1, rank 0's applied gradient is 2 times the mean of the 2 ranks' gradients (relative error 1)" \
        in mean["seen"], mean
    assert c["ddp.params_in_sync"]["status"] == "pass"      # the sum is the same on both ranks: only this check sees it


def test_grad_is_mean_no_sync_everywhere(tmp_path):
    pytest.importorskip("torch")
    # every micro-batch's forward and backward under no_sync(), the last one included: DDP never all-reduces
    c = check(planted(tmp_path, ("        last = micro == accum - 1\n", "        last = False\n"), source=ACCUM_LOOP))
    mean = c["ddp.grad_is_mean"]
    assert c["exit"] == 1 and mean["status"] == "fail", mean
    assert mean["seen"].startswith("at update 1, ") and "the gradients were not averaged over the ranks" in mean["seen"]
    assert "no_sync()" in mean["fix"]
    assert c["ddp.params_in_sync"]["status"] == "fail"


def test_grad_is_mean_loss_divided_by_world_size(tmp_path):
    pytest.importorskip("torch")
    # loss / accum / world size: the 2 micro-batches' factors 1/4 + 1/4 add up to 1/2, and DDP averages again
    c = check(planted(tmp_path, ("            loss = loss / accum\n",
                                 "            loss = loss / accum / dist.get_world_size()\n"), source=ACCUM_LOOP))
    mean = c["ddp.grad_is_mean"]
    assert c["exit"] == 1 and mean["status"] == "fail", mean
    assert "update 1: each rank scales its micro-batches' losses by factors adding up to 0.5 = 1/2" in mean["seen"]
