"""resume.next_step_equal under `campaign check --processes 2 -- python SCRIPT` (issue 47): the script run again
under torchrun from the checkpoint it wrote within the watched updates, each rank's first resumed update compared
with the same rank's update after the checkpoint in the uninterrupted run. A plain DDP loop saving on rank 0 only
(examples/watch/train_ddp_resume.py, resumed with --resume: rank 1 never saves, yet its update after rank 0's
checkpoint is the one compared) and a Trainer's own checkpoint (examples/watch/train_trainer.py with save_steps=2).
Planted: a resume that does not skip the batches already trained on, the Trainer's ignore_data_skip=True, a
resume that does not load the optimizer's state; no checkpoint or no way to resume: "not verified"."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "watch"
DDP_RESUME = EXAMPLES / "train_ddp_resume.py"
TRAINER = EXAMPLES / "train_trainer.py"
SAVES = ('save_strategy="no"', 'save_strategy="steps", save_steps=2')


def ddp(tmp_path: Path, *edits: tuple[str, str], resume_args: tuple[str, ...] = ("--resume",)):
    script = planted(tmp_path, *edits, source=DDP_RESUME)
    r = watch(["python", script, "--out", str(tmp_path / "ck")], updates=3, timeout=120, resume_args=resume_args,
              processes=2)
    return r, by_id(r)["resume.next_step_equal"]


def trainer(tmp_path: Path, *edits: tuple[str, str]):
    pytest.importorskip("transformers")
    script = planted(tmp_path, SAVES, *edits, source=TRAINER)
    r = watch(["python", script, str(tmp_path / "out")], updates=3, timeout=120, processes=2)
    return r, by_id(r)["resume.next_step_equal"]


def test_resume_ranks_clean_ddp_loop_saving_on_rank_0(tmp_path):
    r, c = ddp(tmp_path)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # saved after update 2 (--save-every 2); batch 8 rows, one micro-batch per update; Linear(16, 32), Linear(32, 1):
    # AdamW keeps step, exp_avg, exp_avg_sq for each of the 4 tensors = 12
    assert c.status == "pass" and c.seen.startswith("on each of the 2 ranks, resumed with --resume from the "
                                                    "checkpoint at update 2, its first update against update 3")
    assert "optimizer state bitwise equal (12 tensors)" in c.seen


def test_resume_ranks_batches_already_trained_on_not_skipped(tmp_path):
    r, c = ddp(tmp_path, ("epoch, skip = divmod(step, len(loader))", "epoch, skip = step // len(loader), 0"))
    assert r.status == "fail"
    assert c.status == "fail" and c.seen.startswith("rank 0 of 2: ") and "the data order restarted" in c.seen


def test_resume_ranks_optimizer_state_not_loaded(tmp_path):
    r, c = ddp(tmp_path, ('    optimizer.load_state_dict(state["optimizer"])\n', ""))
    assert c.status == "fail" and "the optimizer state differs" in c.seen, c


def test_resume_ranks_without_resume_args_is_not_verified(tmp_path):
    r, c = ddp(tmp_path, resume_args=())
    assert r.status == "not verified" and c.status == "skipped" and "--resume-args" in c.fix
    assert "wrote a checkpoint at update 2" in c.seen


def test_resume_ranks_without_a_checkpoint_is_not_verified(tmp_path):
    r, c = ddp(tmp_path, ("parser.add_argument(\"--save-every\", type=int, default=2)",
                          "parser.add_argument(\"--save-every\", type=int, default=100)"))
    assert r.status == "not verified" and c.status == "skipped" and "wrote no checkpoint" in c.seen


def test_resume_ranks_trainer_checkpoint(tmp_path):
    r, c = trainer(tmp_path)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert c.seen.startswith("on each of the 2 ranks, resumed with Trainer.train(resume_from_checkpoint="
                             "'checkpoint-2') from the checkpoint at update 2, its first update against update 3")


def test_resume_ranks_trainer_ignore_data_skip(tmp_path):
    r, c = trainer(tmp_path, ("save_steps=2", "save_steps=2, ignore_data_skip=True"))
    assert c.status == "fail" and "the data order restarted" in c.seen, c
