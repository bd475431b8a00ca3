"""campaign check -- python train_lightning.py (issue 47): a Lightning script (examples/watch/train_lightning.py)
watched unchanged. Lightning runs the update's last forward and backward inside optimizer.step(closure), after the
step's pre hook: the watch reads each update once its closure has run. Planted: a model left in eval mode, a
zero_grad that does nothing, a scheduler stepped per batch beside Lightning's own per-step interval; clean: the
script as it is, with and without gradient accumulation."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lightning")

from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

LIGHTNING = Path(__file__).resolve().parents[2] / "examples" / "watch" / "train_lightning.py"
HOOKS = "    def validation_step("


def run(tmp_path: Path, *edits: tuple[str, str], args: tuple[str, ...] = (), updates: int = 3):
    script = planted(tmp_path, *edits, source=LIGHTNING)
    r = watch(["python", script, *args], updates=updates, timeout=180, resume=False)
    return r, by_id(r)


@pytest.mark.parametrize("accumulate", [2, 1])
def test_watch_lightning_clean(tmp_path, accumulate):
    r, c = run(tmp_path, args=("--accumulate", str(accumulate)))
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # every backward belongs to the update that applies it: accumulate_grad_batches backwards per update
    assert r.micro_batches == (accumulate,) * 3
    # LambdaLR(min(1, (s + 1) / 10)) on lr 1e-3, stepped by Lightning once per update: 1e-4, 2e-4, 3e-4
    assert [round(x[0], 10) for x in r.learning_rates] == [1e-4, 2e-4, 3e-4]
    assert c["step.grads_zeroed"].status == "pass" and c["step.train_mode"].status == "pass"
    assert "scheduler steps per update: 1" in c["step.lr_per_update"].seen
    if accumulate == 2:    # Lightning divides each micro-batch's loss by accumulate_grad_batches
        assert c["step.accumulation"].status == "pass" and "by 0.5, 0.5)" in c["step.accumulation"].seen


def test_watch_lightning_model_left_in_eval(tmp_path):
    # a sample generated before training, the model not put back in train mode (Lightning leaves a submodule's mode
    # as the module set it)
    hook = ("    def on_train_start(self):\n        self.model.eval()\n        with torch.no_grad():\n"
            "            self.model.generate(torch.zeros(1, 1, dtype=torch.long), max_new_tokens=4,\n"
            "                                do_sample=False)\n\n")
    r, c = run(tmp_path, (HOOKS, hook + HOOKS))
    mode = c["step.train_mode"]
    # the attention's dropout (attention_dropout=0.1) of both layers ran in eval from the first update on
    assert mode.status == "fail" and "update 1" in mode.seen and "(2 of 2 dropout modules)" in mode.seen


def test_watch_lightning_zero_grad_that_does_nothing(tmp_path):
    hook = "    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):\n        pass\n\n"
    r, c = run(tmp_path, (HOOKS, hook + HOOKS))
    zeroed = c["step.grads_zeroed"]
    # every one of the 21 tensors (2 layers x (4 attention + 3 MLP + 2 norms) + embeddings, final norm, lm_head)
    assert zeroed.status == "fail" and "before update 2, 21 of 21" in zeroed.seen


def test_watch_lightning_scheduler_stepped_per_batch(tmp_path):
    # interval "step" already steps it once per optimizer update; a manual step per batch adds one per micro-batch
    hook = "    def on_train_batch_end(self, outputs, batch, batch_idx):\n        self.lr_schedulers().step()\n\n"
    r, c = run(tmp_path, (HOOKS, hook + HOOKS))
    lr = c["step.lr_per_update"]
    # 2 micro-batches (accumulate 2) + Lightning's own step: 3 between two updates
    assert lr.status == "fail" and "the scheduler stepped 3 times" in lr.seen


LBFGS = '''
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))
x, y = torch.randn(64, 8), torch.randn(64, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
model.train()
for step in range(10):
    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    optimizer.step(closure)
'''


def test_watch_closure_called_again_by_the_optimizer_is_the_same_update(tmp_path):
    # LBFGS calls the closure up to max_iter=4 times per step: one micro-batch per update, no gradient carried over
    script = planted(tmp_path, source=LBFGS)
    r = watch(["python", script], updates=3, timeout=120, resume=False)
    c = by_id(r)
    assert r.micro_batches == (1, 1, 1), r.micro_batches
    assert c["step.grads_zeroed"].status == "pass" and c["step.train_mode"].status == "pass"
