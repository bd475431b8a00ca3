"""The training setup a user hands to `campaign batch` (and the coming `check` and `inspect`): a Python factory
`path/to/setup.py:make_setup` returning the model, a few micro-batches as the training loop receives them, and
optionally the loss, the optimizer and which parameters train. The file is the user's own code and is run as such;
nothing is loaded from a model directory here.
"""
from __future__ import annotations

import runpy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

FIELDS = ("model", "batches", "loss", "optimizer", "scheduler", "tokenizer", "trainable", "normalization",
          "save_checkpoint", "load_checkpoint")


@dataclass
class Setup:
    """model: a torch.nn.Module; batches: micro-batches (mappings of tensors: input_ids, attention_mask, labels);
    loss: loss(model, batch) -> scalar, or None when the model computes it from `labels` (HF models);
    normalization: what the training loop does when it accumulates: 'token' (every token of the update weighs
    the same: the loss is summed and divided by the update's token count) or 'micro_batch_mean' (each micro-batch's
    mean loss divided by the accumulation steps), None when not stated; trainable: globs or module names of the
    parameters meant to train ('*lora_*', 'lm_head'); save_checkpoint(directory, model, optimizer, scheduler,
    position) and load_checkpoint(directory, model, optimizer, scheduler) -> position: the training loop's own
    checkpointing, which `campaign check` then tests (campaign's own, train/checkpoint.py, when not given)."""

    model: Any
    batches: list[Mapping[str, Any]]
    loss: Callable[[Any, Mapping[str, Any]], Any] | None = None
    optimizer: Any = None
    scheduler: Any = None
    tokenizer: Any = None
    trainable: Sequence[str] | None = None
    normalization: str | None = None
    save_checkpoint: Callable[..., Any] | None = None
    load_checkpoint: Callable[..., Any] | None = None
    source: str = ""


def load_setup(ref: str | Callable[[], Any] | Setup) -> Setup:
    """A Setup from 'path/setup.py:function' (the function is called with no argument), a callable, or a Setup.

    Raises:
        InputError: no such file or function, a factory that raises, or what it returns lacks the model or the
            batches (one line each, naming the file).
    """
    if isinstance(ref, Setup):
        return _checked(ref, ref.source or "the setup")
    if callable(ref):
        return _checked(_from(_call(ref, getattr(ref, "__name__", "the factory")), "the factory"), "the factory")
    path, sep, name = str(ref).rpartition(":")
    if not sep or not name.isidentifier():
        raise InputError(f"setup {ref!r} must be FILE.py:FUNCTION, e.g. setup.py:make_setup")
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{file}: no such setup file; give FILE.py:FUNCTION")
    try:
        namespace = runpy.run_path(str(file), run_name="campaign_setup")
    except SystemExit as e:
        raise InputError(f"{file}: exited ({e.code}) while loading; a setup file defines a function") from None
    except Exception as e:
        raise InputError(f"{file}: raised {type(e).__name__} while loading: {_first_line(e)}") from None
    factory = namespace.get(name)
    if not callable(factory):
        found = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_"))[:5]
        raise InputError(f"{file}: no function {name!r}; it defines {', '.join(found) or 'none'}")
    where = f"{file}:{name}"
    setup = _from(_call(factory, where), where)
    setup.source = where
    return _checked(setup, where)


def _call(factory: Callable[[], Any], where: str) -> Any:
    try:
        return factory()
    except Exception as e:
        raise InputError(f"{where} raised {type(e).__name__}: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def _from(made: Any, where: str) -> Setup:
    if isinstance(made, Setup):
        return made
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(FIELDS))
        if unknown:
            raise InputError(f"{where} returned unknown field(s) {', '.join(unknown)}; the fields are "
                             f"{', '.join(FIELDS)}")
        get = made.get
    else:
        get = lambda k: getattr(made, k, None)  # noqa: E731
    if get("model") is None or get("batches") is None:
        raise InputError(f"{where} must return the model and the batches (a dict or an object with .model and "
                         ".batches); got {type(made).__name__}")
    return Setup(**{k: get(k) for k in FIELDS})


def _checked(setup: Setup, where: str) -> Setup:
    import torch

    if not isinstance(setup.model, torch.nn.Module):
        raise InputError(f"{where}: model is a {type(setup.model).__name__}, not a torch.nn.Module")
    batches = list(setup.batches)
    if not batches or not all(isinstance(b, Mapping) for b in batches):
        raise InputError(f"{where}: batches must be a non-empty list of micro-batches (dicts of tensors)")
    if setup.loss is None and not all("labels" in b for b in batches):
        raise InputError(f"{where}: without a loss function every batch needs 'labels' (the model computes the "
                         "loss from them); add labels or return a loss(model, batch)")
    if setup.normalization not in (None, "token", "micro_batch_mean"):
        raise InputError(f"{where}: normalization {setup.normalization!r} must be 'token' or 'micro_batch_mean'")
    setup.batches = batches
    return setup
