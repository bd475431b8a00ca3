"""campaign check --processes 2 -- python SCRIPT (issue 47) on an accelerate loop (examples/watch/
train_accelerate.py: Accelerator, prepare, accumulate, backward) and a Hugging Face Trainer script (examples/watch/
train_trainer.py), run unchanged under torchrun (gloo), each rank watched.

Clean: both scripts pass every check, though accelerate wraps the model in DDP, skips the all-reduce (no_sync) on
an update's first micro-batch and steps the prepared scheduler once per process at each call, and the Trainer
multiplies the model's loss by the world size and clips the gradients by their norm. Planted: the dataloader not
given to accelerator.prepare, a Trainer whose get_train_dataloader returns a plain shuffled DataLoader (every rank
reads the same batches: ddp.data_differs), a scheduler left out of accelerator.prepare and so stepped at every
micro-batch (step.lr_per_update)."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("transformers")

from campaign.train.watch_checks import _lr, watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "watch"
ACCELERATE = EXAMPLES / "train_accelerate.py"
TRAINER = EXAMPLES / "train_trainer.py"
PREPARE = "model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)"
TRAIN = "Trainer(model=model, args=args, train_dataset=dataset).train()\n"
PLAIN_LOADER = '''

class MyTrainer(Trainer):
    def get_train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                                           shuffle=True, collate_fn=self.data_collator)


MyTrainer(model=model, args=args, train_dataset=dataset).train()
'''


def run(tmp_path: Path, source: Path, *edits: tuple[str, str]):
    script = planted(tmp_path, *edits, source=source)
    args = [str(tmp_path / "out")] if source == TRAINER else []
    r = watch(["python", script, *args], updates=3, timeout=120, resume=False, processes=2)
    return r, by_id(r)


def test_lr_per_update_counts_one_call_stepping_once_per_process():
    # between two updates: one burst of 2 scheduler steps (no forward or backward between them) on 2 processes is
    # accelerate's prepared scheduler; two separate steps (one per micro-batch) are not, nor 2 steps on 1 process
    def ups(bursts, changes):
        return [{"update": 1, "lrs": [1e-4]},
                {"update": 2, "lrs": [3e-4], "scheduler_steps": sum(bursts), "scheduler_bursts": bursts,
                 "lr_changes": changes, "backwards": 2}]

    assert _lr(ups([2], 2), 2, world=2).status == "pass"
    assert _lr(ups([1, 1], 2), 2, world=2).status == "fail"
    assert _lr(ups([2], 2), 2, world=1).status == "fail"
    assert _lr(ups([3], 3), 2, world=2).status == "fail"


def test_accelerate_loop_clean_under_two_processes(tmp_path):
    r, c = run(tmp_path, ACCELERATE)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert r.micro_batches == (2, 2, 2)                        # gradient_accumulation_steps=2
    # LambdaLR(min(1, (step + 1) / 10)) on 1e-3, stepped twice per update (once per process): 1e-4, 3e-4, 5e-4
    assert [round(x[0], 10) for x in r.learning_rates] == [1e-4, 3e-4, 5e-4]
    assert "stepped 2 times in one call between updates, once per process" in c["step.lr_per_update"].seen
    for cid in ("ddp.data_differs", "ddp.params_in_sync", "ddp.grad_is_mean"):
        assert c[cid].status == "pass", c[cid]
    # Linear(16, 32) and Linear(32, 1): 4 tensors
    assert "all 4 parameter tensors are bitwise equal on the 2 ranks" in c["ddp.params_in_sync"].seen


def test_accelerate_dataloader_not_prepared_feeds_every_rank_the_same_batches(tmp_path):
    # set_seed(0) on every rank and a loader accelerate never shards: both ranks shuffle alike
    r, c = run(tmp_path, ACCELERATE, (PREPARE, "model, optimizer, scheduler = accelerator.prepare(model, "
                                               "optimizer, scheduler)"))
    assert r.status == "fail"
    assert c["ddp.data_differs"].status == "fail"
    assert "ranks 0 and 1 fed their models the same micro-batches at updates 1, 2, 3" in c["ddp.data_differs"].seen
    assert c["ddp.params_in_sync"].status == "pass" and c["ddp.grad_is_mean"].status == "pass"


def test_accelerate_scheduler_not_prepared_steps_per_micro_batch(tmp_path):
    # inside accelerator.accumulate, a scheduler accelerate does not hold steps at each of the 2 micro-batches
    r, c = run(tmp_path, ACCELERATE, (PREPARE, "model, optimizer, loader = accelerator.prepare(model, optimizer, "
                                               "loader)"))
    lr = c["step.lr_per_update"]
    assert lr.status == "fail" and "the scheduler stepped 2 times" in lr.seen, lr
    assert c["ddp.data_differs"].status == "pass"


def test_trainer_clean_under_two_processes(tmp_path):
    r, c = run(tmp_path, TRAINER)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    for cid in ("ddp.data_differs", "ddp.params_in_sync", "ddp.grad_is_mean", "step.accumulation"):
        assert c[cid].status == "pass", c[cid]
    # the model divides its summed token losses by the tokens of the update on both ranks; the Trainer multiplies
    # that loss by the world size, 2, before DDP averages (average_tokens_across_devices), in place; each rank:
    # 2 micro-batches x 2 rows x 11 predicted positions (12 tokens, labels shifted) = 44 tokens
    assert "model's own loss scaled by 2, 2" in c["step.accumulation"].seen
    assert "averages over (44, 44)" in c["step.accumulation"].seen
    # LlamaForCausalLM with 1 layer, untied: embeddings, 4 attention, 3 MLP, 2 norms, the head = 12 tensors
    assert "all 12 parameter tensors are bitwise equal on the 2 ranks" in c["ddp.params_in_sync"].seen


def test_trainer_gradient_clipping_is_no_false_alarm(tmp_path):
    # max_grad_norm far below the gradient's norm: every update is clipped, by one factor on every rank
    r, c = run(tmp_path, TRAINER, ("learning_rate=1e-3,", "learning_rate=1e-3, max_grad_norm=1e-3,"))
    assert c["ddp.grad_is_mean"].status == "pass", c["ddp.grad_is_mean"]
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]


def test_trainer_plain_dataloader_feeds_every_rank_the_same_batches(tmp_path):
    # the Trainer seeds every rank with seed=0; a DataLoader with no distributed sampler shuffles alike on both
    r, c = run(tmp_path, TRAINER, (TRAIN, PLAIN_LOADER))
    assert r.status == "fail"
    assert "ranks 0 and 1 fed their models the same micro-batches at updates 1, 2, 3" in c["ddp.data_differs"].seen
    assert c["ddp.params_in_sync"].status == "pass" and c["ddp.grad_is_mean"].status == "pass"


VARIABLE = ('dataset = [{"input_ids": row, "labels": row} for row in ids]',
            'lengths = torch.randint(2, 12, (64,), generator=torch.Generator().manual_seed(2))\n'
            'dataset = [{"input_ids": row, "labels": torch.where(torch.arange(12) < n, row, -100)}\n'
            '           for row, n in zip(ids, lengths)]')


def test_trainer_ranks_with_different_token_counts_is_no_false_alarm(tmp_path):
    # labels masked (-100) after a random length per example: the ranks hold different token counts; the Trainer
    # divides by the update's count over both ranks and multiplies by 2, so rank 0's share alone is not the mean
    r, c = run(tmp_path, TRAINER, VARIABLE)
    acc = c["step.accumulation"]
    assert acc.status == "pass", acc
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]


def test_trainer_tokens_not_averaged_across_devices(tmp_path):
    # each rank divides by its own token count, DDP then averages the ranks alike: a token of the rank with fewer
    # tokens weighs more than one of the other
    r, c = run(tmp_path, TRAINER, VARIABLE,
               ("learning_rate=1e-3,", "learning_rate=1e-3, average_tokens_across_devices=False,"))
    acc = c["step.accumulation"]
    assert acc.status == "fail" and "scaled by 1, 1" in acc.seen, acc
    # the ranks' own gradients are still averaged: the weighting is what is wrong
    assert c["ddp.grad_is_mean"].status == "pass"


def test_accelerate_gradient_clipping_by_norm_and_by_value(tmp_path):
    # clipped by norm far below the gradient's, at the update's last micro-batch as accelerate's docs write it: one
    # factor on every rank, divided out (no false alarm); clipped entry by entry: the applied gradient is no
    # multiple of the mean, and grad_is_mean says it did not run
    step = "            optimizer.step()\n"
    guard = "            if accelerator.sync_gradients:\n"
    norm = guard + "                accelerator.clip_grad_norm_(model.parameters(), 1e-3)\n" + step
    r, c = run(tmp_path, ACCELERATE, (step, norm))
    assert c["ddp.grad_is_mean"].status == "pass" and r.status == "pass", c["ddp.grad_is_mean"]
    value = guard + "                torch.nn.utils.clip_grad_value_(model.parameters(), 1e-4)\n" + step
    r, c = run(tmp_path, ACCELERATE, (step, value))
    mean = c["ddp.grad_is_mean"]
    assert mean.status == "skipped" and "clip_grad_value_" in mean.seen and r.status == "not verified", mean
