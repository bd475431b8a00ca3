"""A run recorded by the callbacks ends as it ended, whatever the script does afterwards: stopped on SIGTERM (a
preempted instance), failed on an exception raised inside training even when the script catches it and exits 0,
and a completed run stays completed when the script fails after training. Real tiny Trainer and Lightning scripts
in fresh processes (the models of test_hf.py and test_lightning.py); the status read from the store as recorded,
not as `runs list` infers it for a process that is gone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.track.store import Store
from tests.integrations.test_callback_safety import _until

pytest.importorskip("torch")

HF = '''
import signal, sys
from pathlib import Path
import transformers
from campaign.integrations.hf import CampaignCallback
from tests.integrations.test_hf import Tokens, llama

mode = sys.argv[1]


class Broken(Tokens):
    def __getitem__(self, i):
        raise ValueError(f"row {i} has no text")


class Held(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if mode == "sigterm" and state.global_step == 1:
            Path("step-1").write_text("")
            signal.pause()                                  # until the test's SIGTERM


args = transformers.TrainingArguments(output_dir="out", max_steps=3, per_device_train_batch_size=4, save_steps=100,
                                      report_to=[], use_cpu=True, disable_tqdm=True)
trainer = transformers.Trainer(model=llama(), args=args, train_dataset=Broken() if mode == "raise" else Tokens(),
                               callbacks=[CampaignCallback("state", memory_update=0), Held()])
try:
    trainer.train()
except ValueError as error:
    print("caught:", error)                                # the script goes on, and exits 0
if mode == "after":
    raise RuntimeError("the evaluation after training failed")
'''

LIGHTNING = '''
import signal, sys
from pathlib import Path
import lightning.pytorch as pl
from campaign.integrations.lightning import CampaignCallback
from tests.integrations.test_lightning import Module, data

mode = sys.argv[1]


class Broken(Module):
    def training_step(self, batch, batch_idx):
        raise ValueError(f"batch {batch_idx} has no labels")


class Held(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if mode == "sigterm" and trainer.global_step == 1:
            Path("step-1").write_text("")
            signal.pause()                                  # until the test's SIGTERM


trainer = pl.Trainer(accelerator="cpu", max_steps=3, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False,
                     callbacks=[CampaignCallback("state", memory_update=0), Held()])
try:
    trainer.fit(Broken() if mode == "raise" else Module(), data())
except ValueError as error:
    print("caught:", error)
if mode == "after":
    raise RuntimeError("the evaluation after training failed")
'''


def _start(tmp_path: Path, kind: str, mode: str) -> subprocess.Popen:
    pytest.importorskip("transformers" if kind == "hf" else "lightning.pytorch")
    script = tmp_path / "train.py"
    script.write_text(HF if kind == "hf" else LIGHTNING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CAMPAIGN_ROOT", None)
    return subprocess.Popen([sys.executable, str(script), mode], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _recorded(tmp_path: Path) -> tuple[str, str]:
    """The one run's status and reason as its manifest records them."""
    store = Store(tmp_path / ".campaign")
    [row] = store.list()
    m = store.read(row.id)
    return m.status, m.reason


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_sigterm_during_training_ends_the_run_stopped(tmp_path, kind):
    process = _start(tmp_path, kind, "sigterm")
    try:
        _until((tmp_path / "step-1").is_file, "the script to reach the end of update 1")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err[-2000:]
    assert _recorded(tmp_path) == ("stopped", "terminated by signal SIGTERM")


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_an_exception_in_training_fails_the_run_though_the_script_catches_it(tmp_path, kind):
    out, err = _start(tmp_path, kind, "raise").communicate(timeout=600)
    assert "caught:" in out, err[-2000:]
    status, reason = _recorded(tmp_path)
    assert status == "failed" and reason.startswith("ValueError: ") and "has no" in reason


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_a_script_failing_after_training_leaves_the_run_completed(tmp_path, kind):
    process = _start(tmp_path, kind, "after")
    _, err = process.communicate(timeout=600)
    assert process.returncode == 1 and "the evaluation after training failed" in err
    assert _recorded(tmp_path) == ("completed", "")
