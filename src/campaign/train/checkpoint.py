"""A training checkpoint that resumes exactly: everything the next step depends on, written all-or-nothing.

The next update after a resume equals the uninterrupted one only if the checkpoint holds the weights, the
optimizer's state (Adam's moments and step count), the scheduler's, every random generator the step draws from
(torch's CPU and CUDA generators for dropout, Python's and NumPy's for data order and augmentation) and the position
in the data. Tensors go to safetensors (no code runs on load); the optimizer, scheduler and generator states go
through `torch.save` and come back with `torch.load(weights_only=True)`, which refuses anything but tensors and
plain containers. The folder is written as one file set (io.file_set): a kill at any instant leaves the previous
checkpoint or the complete new one.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, cast

from ..errors import InputError
from ..io import atomic_write_json, file_set, load_json, sha256_file
from ..validate import JsonObject

MODEL = "model.safetensors"
OPTIMIZER = "optimizer.pt"
SCHEDULER = "scheduler.pt"
RNG = "rng.pt"
STATE = "state.json"
SCHEMA = "campaign.checkpoint/1"


def rng_state() -> dict[str, Any]:
    """Every generator a training step may draw from, in a form `torch.load(weights_only=True)` reads back."""
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    version, internal, gauss = random.getstate()
    state["python"] = [version, list(internal), gauss]
    try:
        import numpy as np
    except ImportError:
        return state
    # legacy=True (the default) gives the tuple, not the dict numpy's stubs also allow
    name, keys, pos, has_gauss, cached = cast("tuple[str, Any, int, int, float]", np.random.get_state())
    state["numpy"] = [name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what rng_state() captured (generators it did not capture are left as they are)."""
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def save_checkpoint(directory: str | Path, *, model: Any, optimizer: Any, scheduler: Any = None,
                    position: int = 0) -> Path:
    """Write the checkpoint folder (model.safetensors, optimizer.pt, scheduler.pt, rng.pt, state.json with each
    file's sha256) as one file set; `position` is the index of the next batch. Returns the folder."""
    import torch
    from safetensors.torch import save_model

    out = Path(directory)
    with file_set(out, replaces=(MODEL, OPTIMIZER, SCHEDULER, RNG, STATE)) as stage:
        save_model(model, str(stage / MODEL))        # tied weights stored once, as transformers does
        torch.save(optimizer.state_dict(), stage / OPTIMIZER)
        if scheduler is not None:
            torch.save(scheduler.state_dict(), stage / SCHEDULER)
        torch.save(rng_state(), stage / RNG)
        files = sorted(p.name for p in stage.iterdir())
        atomic_write_json(stage / STATE, {"schema": SCHEMA, "position": position,
                                          "sha256": {f: sha256_file(stage / f) for f in files}})
    return out


def load_checkpoint(directory: str | Path, *, model: Any, optimizer: Any, scheduler: Any = None) -> int:
    """Restore model, optimizer, scheduler and generators from save_checkpoint's folder, after checking every file
    against its recorded hash. Returns the position of the next batch.

    Raises:
        InputError: a missing or altered file, a checkpoint of another model (names or shapes differ).
    """
    import torch
    from safetensors.torch import load_model

    from .setup import first_line

    folder = Path(directory)
    state = JsonObject(load_json(folder / STATE, "checkpoint state"), f"{folder / STATE}")
    position = state.count("position")
    for name, digest in state.obj("sha256").data.items():
        path = folder / name
        if Path(name).name != name or not isinstance(digest, str):
            raise InputError(f"{folder / STATE}: names {name!r}, not a file of the checkpoint folder")
        if not path.is_file():
            raise InputError(f"{path}: missing from the checkpoint (state.json names it)")
        if sha256_file(path) != digest:
            raise InputError(f"{path}: changed since the checkpoint was written (sha256 differs)")
    try:
        missing, unexpected = load_model(model, str(folder / MODEL), strict=False)
    except RuntimeError as e:
        raise InputError(f"{folder / MODEL}: does not fit this model: {first_line(e)}") from None
    if missing or unexpected:
        raise InputError(f"{folder / MODEL}: another model's weights ({len(missing)} missing, e.g. "
                         f"{(missing or ['-'])[0]}; {len(unexpected)} unexpected, e.g. {(unexpected or ['-'])[0]})")
    optimizer.load_state_dict(torch.load(folder / OPTIMIZER, weights_only=True))
    if scheduler is not None:
        if not (folder / SCHEDULER).is_file():
            raise InputError(f"{folder / SCHEDULER}: missing, and the setup has a scheduler")
        scheduler.load_state_dict(torch.load(folder / SCHEDULER, weights_only=True))
    set_rng_state(torch.load(folder / RNG, weights_only=True))
    return position


__all__ = ["load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]
