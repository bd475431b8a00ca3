"""The resume test of `campaign check`, the parent's side: write a checkpoint after the first updates (the loop's
own save, or campaign's), take the next update, have a fresh process reload and take it too (train/resume.py), and
compare weights and buffers as reloaded, the next loss and gradients, and the weights, buffers, learning rates and
scheduler position after the update: bitwise on the CPU, within RTOL on a GPU (atomic adds may reorder sums).
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import Check, listed
from ..errors import InputError
from .setup import Setup

RTOL = 1e-5          # GPU: relative agreement of two computations of one step (fp32 summation order)
ATOL = 1e-5          # GPU: absolute floor for outputs near zero (adapter reload)


@dataclass(frozen=True)
class ResumeFigures:
    """The fresh process against the uninterrupted run (largest absolute differences; 0.0 is bitwise equal)."""

    position: int
    files: tuple[tuple[str, int], ...]           # the checkpoint's files and their sizes
    weights_differ: tuple[str, ...]
    loss: float
    resumed_loss: float
    grads_max_diff: float
    after_max_diff: float
    drew_random: bool


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".campaign-probe-")
        probe.close()
    except OSError as e:
        raise InputError(f"{e.filename or folder}: cannot write the checkpoint ({e.strerror or e}); give a writable "
                         "--checkpoint-dir") from None


def _first(e: BaseException) -> str:
    from .setup import first_line

    return f"{type(e).__name__}: {first_line(e)}"


def resume_checks(s: Setup, ref: str, batch: Any, checkpoint_dir: str | Path | None, timeout: float,
                  device: Any, fresh: Any = None) -> tuple[ResumeFigures | None, list[Check]]:
    """fresh: a FreshProcess (train/resume.py) started ahead for `ref` in resume mode; one is started here when
    None. It is used or ended before this returns."""
    from .resume import FreshProcess, FreshProcessFailed, next_step, save
    from .step import full_state

    with (fresh or FreshProcess(ref, "resume")) as process, \
            tempfile.TemporaryDirectory(prefix="campaign-check-") as tmp:
        folder = Path(checkpoint_dir) / "step-1" if checkpoint_dir is not None else Path(tmp) / "step-1"
        if checkpoint_dir is not None:
            _writable(Path(checkpoint_dir))
        try:
            save(s, folder, 1)
        except Exception as e:  # the loop's own save_checkpoint, or campaign's: either way the resume is not there
            return None, [Check("resume.files_written", "fail", f"saving the checkpoint raised {_first(e)}",
                                "a run that cannot save cannot resume", "fix save_checkpoint (see the error)")]
        files = tuple(sorted((p.name, p.stat().st_size) for p in folder.rglob("*") if p.is_file()))
        saved = full_state(s.model)
        ours = next_step(s.model, s.optimizer, s.scheduler, batch, s.loss)
        try:
            theirs = process.run(folder, Path(tmp) / "resumed.safetensors", timeout=timeout)
        except FreshProcessFailed as e:
            return None, [Check("resume.files_written", "pass" if files else "fail", f"{len(files)} files"),
                          Check("resume.next_step_equal", "fail", f"reloading in a fresh process failed: {e}",
                                "a checkpoint that does not reload is no checkpoint",
                                "make load_checkpoint read what save_checkpoint writes (strict, same names)")]
    exact = device.type == "cpu"
    differ = tuple(n for n, t in saved.items() if n not in theirs["loaded"]
                   or not _same(t, theirs["loaded"][n], exact))
    grads = _max_diff(ours.grads, theirs["grads"])
    after = _max_diff(ours.after, theirs["after"])
    rates = _max_diff({"lr": ours.lrs}, {"lr": theirs["lrs"]})
    after = max(after, rates)
    resumed_loss = float(theirs["loss"])
    loss = float(ours.loss)
    figures = ResumeFigures(theirs["position"], files, differ, loss, resumed_loss, grads, after, ours.drew_random)
    how = "bitwise" if exact else "within 1e-5 relative (GPU kernels may sum in another order)"
    checks = []
    checks.append(Check("resume.files_written", "pass" if files else "fail",
                        f"{len(files)} files, {sum(b for _, b in files) / 2**20:.2f} MiB: "
                        f"{', '.join(n for n, _ in files)}" if files else "the checkpoint folder is empty",
                        "" if files else "nothing to resume from", "" if files else "save_checkpoint wrote nothing"))
    if differ:
        checks.append(Check("resume.weights_equal", "fail", f"reloaded weights differ: {listed(differ)}",
                            "the resumed run starts from other weights than the ones saved",
                            "save and load the full state_dict (tied weights once), strict"))
    else:
        checks.append(Check("resume.weights_equal", "pass", f"{len(saved)} tensors reloaded {how} equal (parameters "
                            "and buffers)"))
    same_step = _close(loss, resumed_loss, exact) and grads <= _allowed(ours.grads, exact)
    if same_step:
        checks.append(Check("resume.next_step_equal", "pass",
                            f"next loss {loss:.6f} and gradients equal {how} in a fresh process (batch "
                            f"{figures.position})"))
    else:
        rng = " The step draws random numbers (dropout): a generator not restored changes it." if ours.drew_random \
            else ""
        checks.append(Check("resume.next_step_equal", "fail",
                            f"next loss {loss:.6f} uninterrupted vs {resumed_loss:.6f} resumed; gradients differ by "
                            f"up to {grads:.2e}.{rng}",
                            "a run that resumes differently from how it would have gone on makes every interrupted "
                            "run a different experiment",
                            "save and restore the random generators (torch, cuda, python, numpy) and the data position "
                            "with the weights; keep state out of Python attributes"))
    if same_step and after > _allowed(ours.after, exact):
        checks.append(Check("resume.next_update_equal", "fail",
                            f"the same gradients give other weights, buffers or next learning rates after the "
                            f"update (up to {after:.2e} apart)",
                            "the optimizer or scheduler restarted: Adam's moments, its step count or the learning "
                            "rate differ after a resume", "save and load optimizer.state_dict() and "
                            "scheduler.state_dict()"))
    elif same_step:
        checks.append(Check("resume.next_update_equal", "pass", f"weights, buffers and the next learning rates after "
                            f"the next update equal {how} (optimizer and scheduler restored)"))
    else:
        checks.append(Check("resume.next_update_equal", "skipped", "the next step already differs", gates=False))
    if same_step and not ours.drew_random:
        checks.append(Check("resume.random_exercised", "warn", "the step draws no random numbers (no dropout in "
                            "train mode): a generator not restored would go unseen here",
                            "training with dropout or random augmentation needs the generators restored",
                            "if the real run uses dropout, enable it in the setup"))
    return figures, checks


def _same(a: Any, b: Any, exact: bool) -> bool:
    import torch

    a = a.cpu()
    if exact:
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=RTOL, atol=0)


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    if set(a) != set(b):
        return math.inf
    return max((float((a[k].cpu().double() - b[k].double()).abs().max()) for k in a if a[k].numel()), default=0.0)


def _allowed(tensors: dict[str, Any], exact: bool) -> float:
    """The largest difference two computations of these tensors may show: 0 on the CPU, RTOL of their scale on a
    GPU."""
    return 0.0 if exact else RTOL * max(1.0, _scale(tensors))


def _scale(tensors: dict[str, Any]) -> float:
    return max((float(t.abs().max()) for t in tensors.values() if t.numel()), default=0.0)


def _close(a: float, b: float, exact: bool) -> bool:
    return a == b if exact else abs(a - b) <= RTOL * max(1.0, abs(a))




__all__ = ["ATOL", "RTOL", "ResumeFigures", "resume_checks"]
