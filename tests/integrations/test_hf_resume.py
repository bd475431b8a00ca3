"""The resume check on the HF Trainer's own checkpoint, through the callback (`resume_check=True`): the script run
as a user runs it, in a fresh process from its folder; the callback has the Trainer save after update 2 and runs the
script again resumed from that checkpoint; updates 3 and 4 must give the uninterrupted run's losses, bitwise on the
CPU. The model has dropout, so the random generators matter; the schedule warms up, so the scheduler does.
The correct setup is examples/trainer/train.py (tests/integrations/test_hf.py runs it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = '''
import json, os, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from campaign.integrations.hf import CampaignCallback


class NoRng(Trainer):                 # planted: the checkpoint without the random generators' state
    def _save_rng_state(self, output_dir):
        pass


class NoScheduler(Trainer):           # planted: the optimizer saved, the scheduler not
    def _save_optimizer_and_scheduler(self, output_dir):
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))


torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                     num_hidden_layers=2, vocab_size=1000, max_position_embeddings=256, attention_dropout=0.1)
ids = torch.randint(0, 1000, (32, 12), generator=torch.Generator().manual_seed(1))
args = TrainingArguments(output_dir="out", max_steps=5, per_device_train_batch_size=4, learning_rate=1e-3,
                         warmup_steps=2, gradient_accumulation_steps=2, save_steps=100, report_to=[], use_cpu=True,
                         disable_tqdm=True, seed=0)
callback = CampaignCallback("resume", resume_check=True)
kind = {"rng": NoRng, "scheduler": NoScheduler}[sys.argv[1]]
kind(model=LlamaForCausalLM(config), args=args, train_dataset=[{"input_ids": r, "labels": r} for r in ids],
     callbacks=[callback]).train()
print(json.dumps({c.id: [c.status, c.seen] for c in callback.result.checks}))
print("after train()")                # the fresh process never gets here: it ends when its train() returns
'''


def run(tmp_path: Path, bug: str) -> tuple[dict, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CAMPAIGN_ROOT", None)
    done = subprocess.run([sys.executable, str(script), bug], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "after train()" and lines.count("after train()") == 1
    return json.loads(lines[-2]), done.stdout


def test_a_checkpoint_without_the_random_generators_fails_at_the_next_update(tmp_path):
    checks, _ = run(tmp_path, "rng")
    status, seen = checks["trainer.resume_next_loss"]
    assert status == "fail"
    assert "update 3 differs" in seen and "no random generators" in seen
    assert not any((tmp_path / "out" / "checkpoint-2").glob("rng_state*"))


def test_a_checkpoint_without_the_scheduler_fails_at_the_update_after(tmp_path):
    checks, _ = run(tmp_path, "scheduler")
    status, seen = checks["trainer.resume_next_loss"]
    assert status == "fail"
    # update 3 comes from the weights, the data position and the generators, all restored; update 4 from the
    # optimizer's state and the warm-up's rate, which were not
    assert "update 4 differs" in seen and "no learning-rate scheduler" in seen
    u3 = seen.split("update 3: ")[1].split(";")[0].split(" vs resumed ")
    assert u3[0] == u3[1]
