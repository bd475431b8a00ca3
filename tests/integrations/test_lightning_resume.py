"""The resume check on Lightning's own checkpoint, through the callback (`resume_check=True`): the script run as a
user runs it, in a fresh process from its folder; the callback has Lightning save its checkpoint after update 2
(`trainer.save_checkpoint`) and runs the script again with `trainer.fit(..., ckpt_path=...)`; updates 3 and 4 must
give the uninterrupted run's losses, bitwise on the CPU. The module has dropout and the DataLoader shuffles, so the
random generators matter; the schedule warms up, so the scheduler does. Lightning's checkpoint holds no random
generator state and a plain DataLoader resumed mid-epoch starts its epoch again: a correct setup saves the
generators itself and checkpoints at an epoch's end (examples/trainer/lightning_train.py, test_lightning.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning.pytorch")

SCRIPT = '''
import json, sys
import lightning.pytorch as pl
import torch
from campaign.integrations.lightning import CampaignCallback

rng, samples = sys.argv[1] == "rng", int(sys.argv[2])


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body, self.drop, self.head = torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(self.drop(torch.relu(self.body(x)))), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: (step + 1) / 4)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint):
        checkpoint["torch_rng"] = torch.get_rng_state()

    def on_load_checkpoint(self, checkpoint):
        if rng:                       # planted when not: the generator saved but never set back
            torch.set_rng_state(checkpoint["torch_rng"])


pl.seed_everything(0)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(samples, 8, generator=g), torch.randint(0, 3, (samples,), generator=g)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True)
callback = CampaignCallback("resume", resume_check=True)
trainer = pl.Trainer(accelerator="cpu", max_steps=5, accumulate_grad_batches=2, logger=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
trainer.fit(Module(), data)
print(json.dumps({c.id: [c.status, c.seen] for c in callback.result.checks}))
print("after fit()")                  # the fresh process never gets here: it ends when its fit() returns
'''


def run(tmp_path: Path, rng: str, samples: int) -> dict:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CAMPAIGN_ROOT", None)
    done = subprocess.run([sys.executable, str(script), rng, str(samples)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "after fit()" and lines.count("after fit()") == 1
    assert not list(tmp_path.glob("campaign-resume*"))          # the test's checkpoint removed after it
    return json.loads(lines[-2])


def losses(seen: str, update: int) -> tuple[str, str]:
    mine, resumed = seen.split(f"update {update}: ")[1].split(";")[0].split(" (")[0].split(" vs resumed ")
    return mine, resumed


def test_generators_saved_and_set_back_at_an_epoch_end_resume_bitwise(tmp_path):
    # 32 samples in batches of 8, two per update: update 2 ends the first epoch
    checks = run(tmp_path, "rng", 32)
    status, seen = checks["trainer.resume_next_loss"]
    assert status == "pass", seen
    assert seen.endswith("(bitwise)") and seen.startswith("from step=2.ckpt: update 3: ")
    for update in (3, 4):
        mine, resumed = losses(seen, update)
        assert mine == resumed and len(mine.split(", ")) == 2     # two micro-batches an update
    # the checked updates at the warm-up's rates, 1e-2 * (step + 1) / 4 (optimizer steps, not micro-batches)
    assert checks["trainer.lr_applied"][1] == "learning rate 0.0025, 0.005, 0.0075 at the checked steps"
    # every other check passes; the memory beside the estimate informs only (no HF model inside to estimate)
    assert {k: s for k, (s, _) in checks.items() if s != "pass"} == {"trainer.memory_as_estimated": "skipped"}


def test_generators_not_set_back_fail_at_the_next_update(tmp_path):
    checks = run(tmp_path, "none", 32)
    status, seen = checks["trainer.resume_next_loss"]
    assert status == "fail"
    assert "update 3 differs" in seen and "no random generator state" in seen and "mid-epoch" not in seen
    mine, resumed = losses(seen, 3)
    assert mine != resumed


def test_a_plain_dataloader_resumed_mid_epoch_fails_at_the_next_update(tmp_path):
    # 64 samples: update 2 ends after batch 4 of 8; the generators are set back, the data position is not
    checks = run(tmp_path, "rng", 64)
    status, seen = checks["trainer.resume_next_loss"]
    assert status == "fail"
    assert "update 3 differs" in seen and "mid-epoch, after batch 4 of 8" in seen
