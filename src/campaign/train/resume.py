"""Checkpoint and resume (and an adapter reloaded onto its base), checked in a fresh process: the step after a reload
must be the step the uninterrupted run takes. The parent saves after one update and goes on one more; a new Python
process builds the setup again from its file, reloads the checkpoint and takes that same next step. Weights as reloaded,
the next loss, its gradients and the weights after the next update are compared: bitwise on the CPU, where the same
kernels run in the same order.

Run as `python -m campaign.train.resume resume|adapter SETUP` (the fresh process: it builds the setup, then reads the
checkpoint's folder and the output file from stdin); `next_step` and `FreshProcess` are the parent's side, which starts
it ahead of need so that its start-up overlaps the parent's own work. In `adapter` mode the fresh process builds the
setup, takes the adapters off its model to get the bare base, loads the saved adapter onto it through
`adapters.load_adapter` (which refuses another base) and writes the outputs on the first batch.
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


class FreshProcess:
    """A fresh Python process started ahead of need: it starts, imports, runs the setup file and builds the setup
    (in adapter mode, the bare base too) while the parent works, then waits for the checkpoint's folder on its
    stdin. It has nothing of the parent's but the environment and the setup file's path, as when it was started
    at the moment of need: only the imports and the build overlap the parent's own work. `run` sends the folder
    and waits for what it wrote; `close` (or leaving the `with`) ends a process that was not used.
    """

    def __init__(self, setup_ref: str, mode: str = "resume") -> None:
        import tempfile

        self.mode = mode
        self._stderr = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "campaign.train.resume", mode, setup_ref]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr,
                                      env=env)

    def run(self, directory: Path, out: Path, *, timeout: float = 600) -> dict[str, Any]:
        """Hand the process the checkpoint (or adapter) folder and read what it wrote: {'position', 'loss', 'grads',
        'after', 'loaded', 'lrs'} (tensors); in adapter mode {'outputs'}. It computes on as many threads as this
        process does (so that the two computations of a step are the same on the CPU).

        Raises:
            FreshProcessFailed: the process failed (its last line is quoted).
            InputError: it ran past the timeout (counted from the hand-over).
        """
        import json

        import torch

        order = json.dumps({"directory": str(directory), "out": str(out), "threads": torch.get_num_threads()})
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(order.encode() + b"\n")
            self._proc.stdin.close()
        except (BrokenPipeError, OSError):    # it has already exited: its stderr says why
            pass
        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise InputError(f"the fresh process ({self.mode}) did not finish in {timeout:.0f} s") from None
        self._stderr.seek(0)
        err = self._stderr.read().decode(errors="replace")
        self._stderr.close()
        if code != 0 or not out.is_file():
            lines = [line for line in err.splitlines() if line.strip()]
            raise FreshProcessFailed(f"the fresh process ({self.mode}) failed: {(lines or ['no output'])[-1][:300]}")
        return _read(out, self.mode)

    def close(self) -> None:
        """End the process if it is still running (a check that did not need it, or an error in the parent)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for f in (self._proc.stdin, self._stderr):
            if f is not None and not f.closed:
                f.close()

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_fresh(setup_ref: str, directory: Path, out: Path, *, mode: str = "resume",
              timeout: float = 600) -> dict[str, Any]:
    """Start a fresh process now and run it on `directory` (FreshProcess.run)."""
    with FreshProcess(setup_ref, mode) as fresh:
        return fresh.run(directory, out, timeout=timeout)


def _read(out: Path, mode: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors = load_file(str(out))
    if mode == "adapter":
        return {"outputs": tensors["outputs"]}
    result: dict[str, Any] = {"loss": tensors.pop("loss"), "position": int(tensors.pop("position")),
                              "lrs": tensors.pop("lrs")}
    for part in ("grads", "after", "loaded"):
        prefix = part + "/"
        result[part] = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    return result


def _order() -> dict[str, Any] | None:
    """The parent's hand-over, one JSON line on stdin: {'directory', 'out', 'threads'}; None when the parent closed
    stdin without one (it did not need this process)."""
    import json

    line = sys.stdin.readline()
    return json.loads(line) if line.strip() else None


def _worker(setup_ref: str) -> None:
    """The fresh process: build the setup, wait for the checkpoint, reload, take the next step, write everything
    as safetensors."""
    import torch
    from safetensors.torch import save

    from ..io import atomic_write_bytes
    from .setup import load_setup

    setup = load_setup(setup_ref)
    order = _order()
    if order is None:
        return
    torch.set_num_threads(int(order["threads"]))
    position = load(setup, Path(order["directory"]))
    if position >= len(setup.batches):
        raise InputError(f"the checkpoint's next batch is {position}; the setup gives {len(setup.batches)}")
    loaded = full_state(setup.model)
    device = device_of(setup.model)
    step = next_step(setup.model, setup.optimizer, setup.scheduler, to_device(setup.batches[position], device),
                     setup.loss)
    tensors = {"loss": step.loss.cpu(), "position": torch.tensor(position), "lrs": step.lrs}
    for part, values in (("grads", step.grads), ("after", step.after), ("loaded", loaded)):
        tensors.update({f"{part}/{k}": v.cpu().contiguous() for k, v in values.items()})
    atomic_write_bytes(order["out"], save(tensors))


def _adapter_worker(setup_ref: str) -> None:
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
    order = _order()
    if order is None:
        return
    torch.set_num_threads(int(order["threads"]))
    model = load_adapter(base, order["directory"])
    model.eval()
    batch = to_device(setup.batches[0], device_of(model))
    with torch.no_grad():
        outputs = output_tensor(model(**{k: v for k, v in batch.items() if k != "labels"}))
    atomic_write_bytes(order["out"], save({"outputs": outputs.detach().cpu().contiguous()}))


if __name__ == "__main__":
    try:
        mode, ref = sys.argv[1:3]
        (_adapter_worker if mode == "adapter" else _worker)(ref)
    except Exception as e:  # the parent quotes the last line
        from .setup import first_line

        sys.stderr.write(f"{type(e).__name__}: {first_line(e)}\n")
        sys.exit(1)
