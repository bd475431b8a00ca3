"""The resume check on a training loop's own checkpoint (`CampaignCallback(resume_check=True)`, for the HF Trainer
in integrations/hf.py, for Lightning in integrations/lightning.py, the same design on `trainer.save_checkpoint` and
`trainer.fit(..., ckpt_path=...)`).

The run being checked (the parent) has the Trainer save its own checkpoint after update K (`resume_step`, default 2;
control.should_save, so the Trainer's `_save_checkpoint` writes it as it writes every checkpoint: weights,
optimizer, scheduler, scaler, RNG states, trainer state) and records the loss of each micro-batch of updates K+1 and
K+2, as the model's forward returns it. After update K+2 it runs the same script again in a fresh process (the same
command line, `sys.orig_argv`, from the same folder) with CAMPAIGN_TRAINER_RESUME set; there the callback calls the
Trainer's `train(resume_from_checkpoint=checkpoint-K)` instead of a fresh `train()`, records the same losses, stops
after update K+2 without saving, reporting or running the rest of the script, and writes them to a file.

Update K+1's loss shows the weights, the data position (which batch comes next) and the random generators
(dropout's masks) restored; update K+2's shows the update from the resumed state too: the optimizer's state and the
scheduler's rate. They must equal the uninterrupted run's: bitwise on the CPU, within RTOL on a GPU.

The test writes only in a folder of its own (`scratch_folder`: campaign-resume-XXXX beside the run's checkpoints,
its owner's host and pid in it) and removes only that folder when it ends. A run killed -9 cannot remove it: the
next resume test in the same place removes those of this host whose owner process is gone, and the fresh process
ends itself when the run that started it is gone (it must not hold the GPU, nor write into a removed folder).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..checks import Check

ENV = "CAMPAIGN_TRAINER_RESUME"
RESUME_STEP = 2
RTOL = 1e-5
SCRATCH = "campaign-resume-"          # the test's own folders: the prefix, and the file naming their owner
OWNER = "campaign-owner.json"
STATE_FILES = {"rng_state": "random generators (dropout, sampling)", "optimizer": "optimizer state",
               "scheduler": "learning-rate scheduler"}


def loss_of_output(out: Any) -> float | None:
    loss = out if hasattr(out, "numel") else out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if loss is None and hasattr(out, "get"):
        loss = out.get("loss")
    if loss is None or not hasattr(loss, "detach") or loss.numel() != 1:
        return None
    return float(loss.detach().float())


class LossProbe:
    """The loss of each micro-batch's forward in updates `wanted` (the loop sets `update` as each one begins)."""

    def __init__(self, wanted: tuple[int, ...]) -> None:
        self.wanted = wanted
        self.update = 0
        self.losses: dict[int, list[float | None]] = {}
        self._hook: Any = None

    def attach(self, model: Any) -> None:
        self._hook = model.register_forward_hook(self._record)

    def detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _record(self, module: Any, args: Any, out: Any) -> None:
        if module.training:
            self.record(out)

    def record(self, out: Any) -> None:
        """A micro-batch's output (a loss, or what holds one) in the current update; for loops that hand it over."""
        if self.update in self.wanted:
            self.losses.setdefault(self.update, []).append(loss_of_output(out))

    def done(self) -> bool:
        return all(u in self.losses for u in self.wanted)


def child_spec() -> dict[str, Any] | None:
    """In the fresh process: what to resume (checkpoint, step, out, parent), from the environment; the process
    then ends itself as soon as its parent (the run that started it) is gone."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    spec = json.loads(raw)
    if not isinstance(spec, dict):
        return None
    parent = spec.get("parent")
    if isinstance(parent, int) and not any(t.name == "campaign-resume-parent" for t in threading.enumerate()):
        threading.Thread(target=_end_with, args=(parent,), name="campaign-resume-parent", daemon=True).start()
    return spec


def _end_with(parent: int) -> None:
    """End this fresh process once its parent is gone (killed -9, it could not end it): it would hold the GPU."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def scratch_folder(parent: Path) -> Path:
    """A new folder of the resume test's own in `parent` (campaign-resume-XXXX, its owner written in it), after
    removing the ones that killed runs left there: those whose owner file names this host and a process gone.
    A folder without that file (a user's, or one cut before its file was written) is never touched."""
    from ..io import atomic_write_json
    from ..track.store import _alive

    parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for folder in parent.glob(SCRATCH + "*"):
        try:
            owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        mine = isinstance(owner, dict) and owner.get("host") == host and isinstance(owner.get("pid"), int)
        if mine and not folder.is_symlink() and not _alive(owner["pid"]):
            shutil.rmtree(folder, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH, dir=parent))
    atomic_write_json(folder / OWNER, {"host": host, "pid": os.getpid()})
    return folder


def discard(folder: Path | None) -> None:
    """Remove a folder scratch_folder made (and nothing else: the callbacks hold only that one)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def run_child(checkpoint: Path, step: int, timeout: float, folder: Path) -> tuple[dict[str, Any] | None, str]:
    """Run the script again in a fresh process that resumes from `checkpoint` and writes its losses into `folder`
    (the test's own); what it wrote, or None and why."""
    out = folder / "resumed.json"
    env = {**os.environ, ENV: json.dumps({"checkpoint": str(checkpoint), "step": step, "out": str(out),
                                          "parent": os.getpid()}),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    argv[0] = sys.executable
    if len(argv) < 2 or argv[1] == "-c":
        return None, "the training was not started from a script (python -c or a notebook): nothing to run again"
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"the fresh process did not finish within {timeout:.0f} s"
    if not out.is_file():
        tail = [line for line in (done.stderr or "").strip().splitlines() if line.strip()][-1:]
        return None, (f"the fresh process exited {done.returncode} without resuming"
                      + (f": {tail[0][:200]}" if tail else ""))
    return json.loads(out.read_text(encoding="utf-8")), ""


def finish_child(out: str | Path, probe: LossProbe | None) -> None:
    """End the fresh process once its loop returned: the losses it recorded written to `out`, the process ended
    at once, so nothing after the training call in the script runs (no save, no upload)."""
    from ..io import atomic_write_json

    losses = probe.losses if probe is not None else {}
    if Path(out).parent.is_dir():        # else the run that asked is gone and its folder removed: make none again
        atomic_write_json(out, {"losses": {str(k): v for k, v in losses.items()}})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


TRAINER_FIX = ("let the Trainer save its whole state (do not override _save_checkpoint, _save_rng_state or "
               "_save_optimizer_and_scheduler), keep the same seed and data order, and resume with "
               "trainer.train(resume_from_checkpoint=...)")


def resume_check(parent: dict[int, list[float | None]], resumed: dict[str, Any] | None, why: str, checkpoint: Path,
                 step: int, exact: bool, *, missing_state: list[str] | None = None, hint: str = "",
                 fix: str = TRAINER_FIX) -> Check:
    """Compare the uninterrupted run's losses of updates step+1 and step+2 with the resumed run's.

    missing_state: what the checkpoint lacks (default: the HF Trainer's state files absent from its folder);
    hint: what the loop knows of why update step+1 could differ (Lightning: a mid-epoch checkpoint); fix: the
    loop's way to save and resume its whole state."""
    cid = "trainer.resume_next_loss"
    if resumed is None:
        return Check(cid, "skipped", f"the resume test did not run: {why}",
                     "a checkpoint that does not resume the run is found only when it is needed",
                     "run the training script with `python script.py` from its folder, or check a factory with "
                     "`campaign check setup.py:make_trainer`")
    theirs = {int(k): v for k, v in resumed.get("losses", {}).items()}
    if missing_state is None:
        files = [p.name for p in checkpoint.iterdir()] if checkpoint.is_dir() else None
        missing_state = [what for stem, what in STATE_FILES.items()
                         if files is not None and not any(name.startswith(stem) for name in files)]
    rows = []
    worst = 0.0
    for update in sorted(parent):
        mine, other = parent[update], theirs.get(update)
        if other is None or len(other) != len(mine) or None in mine or None in other:
            return Check(cid, "skipped", f"update {update}'s losses were not seen in both runs (the model's forward "
                         "returned no loss)", "", "compute the loss in the model's forward (labels in the batch)")
        diff = max(abs(a - b) for a, b in zip(mine, other, strict=True))
        worst = max(worst, diff)
        rows.append(f"update {update}: {', '.join(f'{a:.6g}' for a in mine)} vs resumed "
                    f"{', '.join(f'{b:.6g}' for b in other)}")
    allowed = 0.0 if exact else RTOL * max(1.0, max(abs(v) for vs in parent.values() for v in vs if v is not None))
    seen = f"from {checkpoint.name}: " + "; ".join(rows)
    if worst <= allowed and all(math.isfinite(v) for vs in parent.values() for v in vs if v is not None):
        return Check(cid, "pass", seen + (" (bitwise)" if exact else f" (within {allowed:.1g})"))
    first = min(u for u in parent if max(abs(a - b) for a, b in zip(parent[u], theirs[u], strict=True)) > allowed)
    cause = (f"update {first} differs: " + ("the weights, the data position or the random generators were not "
             "restored" + hint if first == step + 1 else "the optimizer's state or the scheduler was not restored"))
    lacking = f"; the checkpoint has no {', no '.join(missing_state)} file" if missing_state else ""
    return Check(cid, "fail", f"{seen}: {cause}{lacking}",
                 "a run resumed from this checkpoint (after a preemption or a crash) is not the run that was planned: "
                 "its losses and weights drift from the uninterrupted run's", fix)


__all__ = ["ENV", "OWNER", "RESUME_STEP", "SCRATCH", "TRAINER_FIX", "LossProbe", "child_spec", "discard",
           "finish_child", "resume_check", "run_child", "scratch_folder"]
