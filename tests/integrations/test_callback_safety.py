"""The callbacks' resume test (`resume_check=True`) deletes and overwrites nothing it did not create, and a run
killed -9 while its fresh process runs leaves its records intact, no process behind, and nothing that the next run
does not clean. The HF Trainer and Lightning scripts run as users run them, in fresh processes from their folder,
on the tiny models of test_hf.py and test_lightning.py."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.integrations.resume import OWNER, SCRATCH, scratch_folder
from campaign.track.store import Store, _alive

HF = '''
import os, signal, sys
from pathlib import Path
import transformers
from campaign.integrations.hf import CampaignCallback
from tests.integrations.test_hf import Tokens, llama

callback = CampaignCallback("safety", resume_check=True, memory_update=0)
if os.environ.get("CAMPAIGN_TRAINER_RESUME") and len(sys.argv) > 1:   # the fresh process, held for the kill
    Path(sys.argv[1]).write_text(str(os.getpid()))
    signal.pause()
args = transformers.TrainingArguments(output_dir="out", max_steps=4, per_device_train_batch_size=4, save_steps=100,
                                      report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
transformers.Trainer(model=llama(), args=args, train_dataset=Tokens(), callbacks=[callback]).train()
print({c.id: c.status for c in callback.result.checks}["trainer.resume_next_loss"])
'''

LIGHTNING = '''
import os, signal, sys
from pathlib import Path
import lightning.pytorch as pl
from campaign.integrations.lightning import CampaignCallback
from tests.integrations.test_lightning import Module, data

callback = CampaignCallback("safety", resume_check=True, memory_update=0)
if os.environ.get("CAMPAIGN_TRAINER_RESUME") and len(sys.argv) > 1:   # the fresh process, held for the kill
    Path(sys.argv[1]).write_text(str(os.getpid()))
    signal.pause()
trainer = pl.Trainer(accelerator="cpu", max_steps=4, accumulate_grad_batches=2, logger=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
trainer.fit(Module(), data())          # 4 batches an epoch, 2 an update: update 2 ends the first epoch
print({c.id: c.status for c in callback.result.checks}["trainer.resume_next_loss"])
'''

# where each callback writes: the store, the test's checkpoint under the folder name it used to take, a user's
# folder that starts like the test's own, and (HF) the Trainer's checkpoint path of the update the test saves
STORE = (".campaign/.gitignore", ".campaign/notes.txt", ".campaign/records/trainer/notes.txt")
PLANTED = {"hf": STORE + ("out/checkpoint-2/model.safetensors", "out/checkpoint-2/notes.txt",
                          "out/campaign-resume/notes.txt", "out/campaign-resume-mine/notes.txt"),
           "lightning": STORE + ("campaign-resume/step=2.ckpt", "campaign-resume/notes.txt",
                                 "campaign-resume-mine/notes.txt")}
SCRIPTS = {"hf": HF, "lightning": LIGHTNING}
FOLDER = {"hf": "out", "lightning": "."}          # where the test's own folder goes: output_dir, default_root_dir


def _needs(kind: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers" if kind == "hf" else "lightning.pytorch")


def _plant(tmp_path: Path, kind: str) -> dict[Path, bytes]:
    """A user's file in each place, with bytes of its own; returns them to compare after."""
    planted = {}
    for i, name in enumerate(PLANTED[kind]):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"the user's {name}, not campaign's ({i})\n".encode())
        planted[path] = path.read_bytes()
    return planted


def _start(tmp_path: Path, kind: str, *args: str) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(SCRIPTS[kind])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CAMPAIGN_ROOT", None)
    return subprocess.Popen([sys.executable, str(script), *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> str:
    """The script's last line, once it exited 0."""
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, err[-3000:]
    return out.strip().splitlines()[-1]


def _until(ready, what: str, timeout: float = 600) -> None:
    """Wait for an observable event (a file, a process gone); fail naming it after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.05)


def _scratch(tmp_path: Path, kind: str) -> list[Path]:
    return sorted(p for p in (tmp_path / FOLDER[kind]).glob(SCRATCH + "*") if p.name != "campaign-resume-mine")


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_the_resume_test_keeps_every_file_it_did_not_write(tmp_path, kind):
    _needs(kind)
    planted = _plant(tmp_path, kind)
    assert _finish(_start(tmp_path, kind)) == "pass"
    changed = [str(p.relative_to(tmp_path)) for p, data in planted.items() if not p.is_file() or p.read_bytes() != data]
    assert changed == []
    assert _scratch(tmp_path, kind) == []              # its own folder removed after the test
    [row] = Store(tmp_path / ".campaign").list()
    assert row.status == "completed"


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_killed_during_the_fresh_process_the_next_run_finds_its_records_and_cleans_up(tmp_path, kind):
    _needs(kind)
    planted = _plant(tmp_path, kind)
    ready = tmp_path / "child.pid"
    parent = _start(tmp_path, kind, str(ready))
    child = 0
    try:
        _until(ready.is_file, "the fresh process of the resume test to start")
        child = int(ready.read_text())
        parent.kill()                                   # SIGKILL: the run cannot mark itself
        parent.communicate(timeout=60)
        _until(lambda: not _alive(child), "the fresh process to end with the run that started it", 60)
    finally:
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
    store = Store(tmp_path / ".campaign")
    [killed] = store.list()
    assert killed.status == "stopped" and "ended without closing the run (killed?)" in killed.reason
    assert store.read(killed.id).status == "running"   # as recorded: readable, not corrupt, shown as stopped
    store.metrics(killed.id)
    # the checkpoint lies in the test's own folder, marked with its owner: the Trainer's checkpoint-2 (which
    # resume_from_checkpoint=True would pick up) is not there
    [left] = _scratch(tmp_path, kind)
    assert json.loads((left / OWNER).read_text()) == {"host": socket.gethostname(), "pid": parent.pid}
    assert not (tmp_path / "out" / "checkpoint-2" / "trainer_state.json").exists()

    assert _finish(_start(tmp_path, kind)) == "pass"    # the next run, to its end
    assert _scratch(tmp_path, kind) == []              # the killed run's folder removed, and its own
    assert sorted(r.status for r in store.list()) == ["completed", "stopped"]
    assert [p for p, data in planted.items() if not p.is_file() or p.read_bytes() != data] == []


def test_a_new_folder_removes_only_its_own_folders_whose_owner_is_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()                                          # a process of this host that has ended

    def folder(name: str, owner: dict | None) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "data").write_text(name)
        if owner is not None:
            (path / OWNER).write_text(json.dumps(owner))
        return path

    here = socket.gethostname()
    stale = folder(SCRATCH + "stale", {"host": here, "pid": gone.pid})
    kept = [folder(SCRATCH + "live", {"host": here, "pid": os.getpid()}),       # another training under way
            folder(SCRATCH + "elsewhere", {"host": here + "-other", "pid": gone.pid}),  # another host's
            folder(SCRATCH + "mine", None),                                     # a user's, no owner
            folder(SCRATCH + "odd", None), folder("campaign-resume", {"host": here, "pid": gone.pid})]
    (tmp_path / (SCRATCH + "odd") / OWNER).write_text("not json")
    new = scratch_folder(tmp_path)
    assert not stale.exists() and all((p / "data").read_text() == p.name for p in kept)
    assert new.parent == tmp_path and new.name.startswith(SCRATCH)
    assert json.loads((new / OWNER).read_text()) == {"host": here, "pid": os.getpid()}
