"""The resume check of `campaign check -- python SCRIPT ARGS --resume-args "ARGS"`, in the watched child
(train/watch.py): what one update looked like, captured so that two runs can be compared.

The first (uninterrupted) run captures the update that follows the script's last checkpoint (a torch.save seen
within the watched updates, after update K): the batch the loop fed (a digest of the model's training-forward
inputs), the learning rates it stepped with, the scheduler's position and the optimizer's state just before the
step, the losses, and the parameters just after the step. That goes to a file (the reference).

The resumed run is the same command line with the user's resume arguments appended (nanoGPT: --init_from=resume),
or, where the checkpoint is a transformers Trainer's (a checkpoint-N folder), the same command line with
Trainer.train made to resume from it, run in a fresh process: it captures its first update the same way, stops
after it (before the script can save again) and compares it with the reference:
- the same batch: the data order resumed where it stopped (a sampler or generator not restored restarts it);
- the same learning rates and scheduler position (last_epoch), and the optimizer state bitwise equal (a checkpoint
  loaded from disk restores the very values saved);
- the same parameters after the update, within a few units in the last place of each tensor's largest value (two
  computations of one update may sum in another order; a dropped optimizer state moves a parameter by about the
  learning rate, far beyond that).
"""
from __future__ import annotations

import hashlib
import weakref
from pathlib import Path
from typing import Any

# parameters after the update: |a - b| <= ULPS * eps(dtype) * max|a| per tensor
ULPS = 4


def digest(args: Any, kwargs: Any) -> dict[str, str]:
    """A digest of each tensor a forward was fed (shape, dtype, values), by where it was fed, to tell two batches
    apart."""
    import torch

    found = {}
    items = [(f"argument {i}", v) for i, v in enumerate(args or ())] + sorted((kwargs or {}).items())
    for key, value in items:
        if isinstance(value, torch.Tensor):
            h = hashlib.sha1(usedforsecurity=False)
            t = value.detach().cpu().contiguous().reshape(-1)
            h.update(f"{tuple(value.shape)}:{value.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            found[key] = h.hexdigest()
    return found


def _scheduler_state(s: Any) -> dict[str, Any]:
    state = s.state_dict()
    return {k: v for k, v in state.items() if k in ("last_epoch", "_step_count", "_last_lr")}


class ResumeCapture:
    """Captures one update: in the first run the one after the last save ("record"), in the resumed run the first
    ("compare")."""

    def __init__(self, mode: str, path: str, rank: int | None = None) -> None:
        """rank: under torchrun, this rank's number: its capture is its own file (the reference path's
        `.rank{rank}` sibling), and a checkpoint any rank writes is shared through a marker file beside it (a loop
        saves on rank 0 only; every rank captures the update after it)."""
        self.mode, self.path = mode, path if rank is None else rank_path(path, rank)
        self.marker = None if rank is None else str(Path(path).with_name(MARKER))
        self.saved: tuple[int, str] | None = None     # (after update, path) of the checkpoint the capture follows
        self.schedulers: list[Any] = []          # weak references, in construction order
        self.captured: dict[str, Any] | None = None
        self.pending: dict[str, Any] | None = None
        self.save: Any = None                    # torch.save as it was before the watcher wrapped it

    def scheduler_built(self, scheduler: Any) -> None:
        self.schedulers.append(weakref.ref(scheduler))

    def shared(self, step: int, path: str) -> None:
        """Under torchrun: a checkpoint written by this rank after update `step`, told to the other ranks (the
        marker is replaced atomically; DDP's all-reduce of the next update makes every rank wait for this one)."""
        if self.marker is None or self.mode != "record":
            return
        import json
        import os

        tmp = f"{self.marker}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"update": step, "path": path}, f)
        os.replace(tmp, self.marker)

    def _marked(self) -> tuple[int, str] | None:
        import json

        if self.marker is None:
            return None
        try:
            with open(self.marker) as f:
                m = json.load(f)
            return int(m["update"]), str(m["path"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def wanted(self, step: int, saves: list[dict[str, Any]]) -> bool:
        if self.mode == "compare":
            return step == 0
        if saves and saves[-1]["update"] == step:
            self.saved = (step, saves[-1]["path"])
            return True
        marked = self._marked() if step else None
        if marked is not None and marked[0] == step:
            self.saved = marked
            return True
        return False

    def before(self, step: int, saves: list[dict[str, Any]], optimizer: Any, batches: list[tuple[Any, Any]],
               losses: list[float]) -> None:
        import torch

        state = optimizer.state_dict()["state"]
        opt = {f"{i}.{k}": v.detach().cpu().clone() for i, s in state.items() for k, v in s.items()
               if isinstance(v, torch.Tensor)}
        scheds = [_scheduler_state(s) for ref in self.schedulers if (s := ref()) is not None
                  and getattr(s, "optimizer", None) is optimizer]
        saved = self.saved or ((saves[-1]["update"], saves[-1]["path"]) if saves else (None, None))
        self.pending = {"update": step + 1, "saved_at": saved[0], "checkpoint": saved[1],
                        "batches": [digest(a, k) for a, k in batches], "losses": list(losses),
                        "lrs": [float(g.get("lr", 0.0)) for g in optimizer.param_groups],
                        "schedulers": scheds, "optimizer": opt, "optimizer_params": len(state)}

    def after(self, model: Any) -> None:
        if self.pending is None:
            return
        if model is not None:
            self.pending["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
        self.captured, self.pending = self.pending, None

    def finish(self) -> dict[str, Any] | None:
        """Record mode: the capture written to the reference file; compare mode: the comparison (JSON facts)."""
        if self.captured is None:
            return None
        if self.mode == "record":
            (self.save or __import__("torch").save)(self.captured, self.path)
            return None
        import torch

        reference = torch.load(self.path, weights_only=True)
        return compare(reference, self.captured)


# under torchrun: the checkpoint any rank wrote, beside the reference (train/watch_checks.py's temporary folder)
MARKER = "resume-saved.json"


def rank_path(path: str, rank: int) -> str:
    """Rank `rank`'s capture file under torchrun, beside the one-process one."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))


def resume_trainer_from(checkpoint: str) -> None:
    """Make transformers' Trainer.train (and the trainers built on it: TRL's) resume from `checkpoint`, as
    `trainer.train(resume_from_checkpoint=checkpoint)` would: the Trainer restores the weights, optimizer, scheduler,
    random generators and skips the batches already seen, each its own way."""
    from transformers import Trainer

    train = Trainer.train

    def resumed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (checkpoint, *args[1:])
        else:
            kwargs["resume_from_checkpoint"] = checkpoint
        return train(self, *args, **kwargs)

    Trainer.train = resumed  # type: ignore[method-assign]


def compare(ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """The resumed run's first update against the uninterrupted run's update after the checkpoint."""
    import torch

    opt_ref, opt_got = ref["optimizer"], got["optimizer"]
    opt_differ = sorted(k for k in opt_ref if k not in opt_got or not torch.equal(opt_ref[k], opt_got[k]))
    extra = sorted(k for k in opt_got if k not in opt_ref)
    params_ref, params_got = ref.get("params") or {}, got.get("params") or {}
    worst, differ = 0.0, []
    for name, a in params_ref.items():
        b = params_got.get(name)
        if b is None or b.shape != a.shape:
            differ.append(name)
            continue
        scale = float(a.detach().abs().max()) if a.numel() else 0.0
        allowed = ULPS * torch.finfo(a.dtype).eps * scale if a.is_floating_point() else 0.0
        gap = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
        worst = max(worst, gap / scale if scale else gap)
        if gap > allowed:
            differ.append(name)
    return {"update": ref["update"], "saved_at": ref["saved_at"], "checkpoint": ref["checkpoint"],
            "batches_equal": ref["batches"] == got["batches"], "batches": len(ref["batches"]),
            "inputs_differ": sorted({k for a, b in zip(ref["batches"], got["batches"], strict=False)
                                     for k in set(a) | set(b) if a.get(k) != b.get(k)}),
            "resumed_batches": len(got["batches"]),
            "first_batch_equal": bool(ref["batches"][:1] == got["batches"][:1]),
            "losses": ref["losses"], "resumed_losses": got["losses"],
            "lrs": ref["lrs"], "resumed_lrs": got["lrs"],
            "schedulers": ref["schedulers"], "resumed_schedulers": got["schedulers"],
            "optimizer_tensors": len(opt_ref), "resumed_optimizer_tensors": len(opt_got),
            "optimizer_differ": opt_differ + extra, "params": len(params_ref), "params_differ": differ,
            "params_worst": worst, "ulps": ULPS}


__all__ = ["MARKER", "ResumeCapture", "compare", "digest", "rank_path", "resume_trainer_from"]
