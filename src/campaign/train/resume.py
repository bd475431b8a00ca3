"""Checkpoint and resume (and an adapter reloaded onto its base), checked in a fresh process: the step after a reload must be the step the uninterrupted run
takes. The parent saves after one update and goes on one more; a new Python process builds the setup again from its
file, reloads the checkpoint and takes that same next step. Weights as reloaded, the next loss, its gradients and
the weights after the next update are compared: bitwise on the CPU, where the same kernels run in the same order.

Run as `python -m campaign.train.resume resume|adapter SETUP DIR OUT` (the fresh process); `next_step` and
`run_fresh` are the parent's side. In `adapter` mode the fresh process builds the setup, takes the adapters off its
model to get the bare base, loads the saved adapter onto it through `adapters.load_adapter` (which refuses another
base) and writes the outputs on the first batch.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .step import device_of, full_state, loss_of, to_device, train_mode


class FreshProcessFailed(InputError):
    """The fresh process raised: a setup that does not rebuild, a checkpoint it cannot load, another base."""


@dataclass
class NextStep:
    """One update's loss, gradients (trainable parameters) and the weights after it."""

    loss: Any
    grads: dict[str, Any]
    after: dict[str, Any]      # the state_dict after the update: parameters and persistent buffers
    lrs: Any                   # each group's rate for the update after this one, then the scheduler's last_epoch
    drew_random: bool          # the step changed torch's generator (dropout): a generator not restored would show


def next_step(model: Any, optimizer: Any, scheduler: Any, batch: Mapping[str, Any], loss_fn: Any = None) -> NextStep:
    import torch

    train_mode(model)
    optimizer.zero_grad(set_to_none=True)
    rng = torch.get_rng_state()
    loss = loss_of(model, batch, loss_fn)
    loss.backward()
    drew = not torch.equal(rng, torch.get_rng_state())
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    # the rates of the update after this one, and the scheduler's position (a schedule whose rate follows a
    # multiplicative rule can give the same next rate from a lost state, and drift later)
    position = [float(scheduler.last_epoch)] if scheduler is not None and hasattr(scheduler, "last_epoch") else []
    lrs = torch.tensor([float(g.get("lr", 0.0)) for g in optimizer.param_groups] + position, dtype=torch.float64)
    return NextStep(loss.detach().clone().reshape(()), grads, full_state(model), lrs, drew)


def save(setup: Any, directory: Path, position: int) -> None:
    """The setup's own save_checkpoint(directory, model, optimizer, scheduler, position) if it has one, else
    campaign's (train/checkpoint.py)."""
    if setup.save_checkpoint is not None:
        directory.mkdir(parents=True, exist_ok=True)
        setup.save_checkpoint(directory, setup.model, setup.optimizer, setup.scheduler, position)
        return
    from .checkpoint import save_checkpoint

    save_checkpoint(directory, model=setup.model, optimizer=setup.optimizer, scheduler=setup.scheduler,
                    position=position)


def load(setup: Any, directory: Path) -> int:
    if setup.load_checkpoint is not None:
        position = setup.load_checkpoint(directory, setup.model, setup.optimizer, setup.scheduler)
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise InputError(f"load_checkpoint returned {position!r}; it must return the index of the next batch")
        return position
    from .checkpoint import load_checkpoint

    return load_checkpoint(directory, model=setup.model, optimizer=setup.optimizer, scheduler=setup.scheduler)


def run_fresh(setup_ref: str, directory: Path, out: Path, *, mode: str = "resume",
              timeout: float = 600) -> dict[str, Any]:
    """Run the fresh process and read what it wrote: {'position', 'loss', 'grads', 'after', 'loaded'} (tensors);
    in adapter mode {'outputs'}.

    Raises:
        InputError: the process failed (its last line is quoted) or ran past the timeout.
    """
    from safetensors.torch import load_file

    cmd = [sys.executable, "-m", "campaign.train.resume", mode, setup_ref, str(directory), str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(f"the fresh process ({mode}) did not finish in {timeout:.0f} s") from None
    if done.returncode != 0 or not out.is_file():
        lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
        raise FreshProcessFailed(f"the fresh process ({mode}) failed: {(lines or ['no output'])[-1][:300]}")
    tensors = load_file(str(out))
    if mode == "adapter":
        return {"outputs": tensors["outputs"]}
    result: dict[str, Any] = {"loss": tensors.pop("loss"), "position": int(tensors.pop("position")),
                              "lrs": tensors.pop("lrs")}
    for part in ("grads", "after", "loaded"):
        prefix = part + "/"
        result[part] = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    return result


def _worker(setup_ref: str, directory: str, out: str) -> None:
    """The fresh process: build the setup, reload, take the next step, write everything as safetensors."""
    import torch
    from safetensors.torch import save

    from ..io import atomic_write_bytes
    from .setup import load_setup

    setup = load_setup(setup_ref)
    position = load(setup, Path(directory))
    if position >= len(setup.batches):
        raise InputError(f"the checkpoint's next batch is {position}; the setup gives {len(setup.batches)}")
    loaded = full_state(setup.model)
    device = device_of(setup.model)
    step = next_step(setup.model, setup.optimizer, setup.scheduler, to_device(setup.batches[position], device),
                     setup.loss)
    tensors = {"loss": step.loss.cpu(), "position": torch.tensor(position), "lrs": step.lrs}
    for part, values in (("grads", step.grads), ("after", step.after), ("loaded", loaded)):
        tensors.update({f"{part}/{k}": v.cpu().contiguous() for k, v in values.items()})
    atomic_write_bytes(out, save(tensors))


def _adapter_worker(setup_ref: str, directory: str, out: str) -> None:
    """The fresh process for an adapter: the setup's base without its adapters, the saved adapter loaded onto it
    (refused on another base), the outputs on the first batch in eval mode."""
    import torch
    from safetensors.torch import save

    from ..io import atomic_write_bytes
    from .adapters import load_adapter
    from .setup import load_setup
    from .step import output_tensor

    setup = load_setup(setup_ref)
    if setup.model is None:
        raise InputError("the setup returned no model")
    base = setup.model.unload()                  # the bare base: adapter layers taken off, nothing merged
    model = load_adapter(base, directory)
    model.eval()
    batch = to_device(setup.batches[0], device_of(model))
    with torch.no_grad():
        outputs = output_tensor(model(**{k: v for k, v in batch.items() if k != "labels"}))
    atomic_write_bytes(out, save({"outputs": outputs.detach().cpu().contiguous()}))


if __name__ == "__main__":
    try:
        mode, *args = sys.argv[1:5]
        (_adapter_worker if mode == "adapter" else _worker)(*args)
    except Exception as e:  # the parent quotes the last line
        from .setup import first_line

        sys.stderr.write(f"{type(e).__name__}: {first_line(e)}\n")
        sys.exit(1)
