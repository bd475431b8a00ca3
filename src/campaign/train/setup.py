"""The training setup a user hands to `campaign batch` (and the coming `check` and `inspect`): a Python factory
`path/to/setup.py:make_setup` returning the model, a few micro-batches as the training loop receives them, and
optionally the loss, the optimizer and which parameters train. `campaign inspect` reads the data side instead: the
whole dataset (raw examples), the collate function that turns a list of them into a batch, and the tokenizer; it needs
neither the model nor the batches. The file is the user's own code and is run as such; nothing is loaded from a model
directory here.
"""
from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError

FIELDS = ("model", "batches", "loss", "optimizer", "scheduler", "tokenizer", "trainable", "normalization",
          "accumulate", "save_checkpoint", "load_checkpoint", "dataset", "collate", "label_field", "target_field",
          "transform")
# What each command needs from the setup: batch and check train a model on micro-batches; inspect reads the data.
NEEDS_TRAINING = ("model", "batches")


@dataclass
class Setup:
    """model: a torch.nn.Module; batches: micro-batches (mappings of tensors: input_ids, attention_mask, labels);
    loss: loss(model, batch) -> scalar, or None when the model computes it from `labels` (HF models);
    normalization: what the training loop does when it accumulates: 'token' (every token of the update weighs
    the same: the loss is summed and divided by the update's token count) or 'micro_batch_mean' (each micro-batch's
    mean loss divided by the accumulation steps), None when not stated; accumulate(model, micro_batches): the
    training loop's own accumulation step, the forwards and backwards of one update over its micro-batches, leaving
    the update's gradient in each parameter's .grad (no optimizer step): what `campaign batch` runs and checks
    (the normalization is the fallback when it is not given); trainable: globs or module names of the
    parameters meant to train ('*lora_*', 'lm_head'); save_checkpoint(directory, model, optimizer, scheduler,
    position) and load_checkpoint(directory, model, optimizer, scheduler) -> position: the training loop's own
    checkpointing, which `campaign check` then tests (campaign's own, train/checkpoint.py, when not given).

    For `campaign inspect`: dataset: the raw examples (a list of dicts, a datasets.Dataset, any sequence);
    collate(examples) -> batch: the exact preprocessing the training loop applies (tokenize, truncate, pad, build
    labels; or transform images into `pixel_values`); label_field: the key of each example's class (default 'label'
    when the examples have one); target_field: the key of the answer text the loss should cover, to count exactly
    the examples whose answer truncation cut; transform: the image transforms, shown as given (a dict: one per
    class)."""

    model: Any = None
    batches: list[Mapping[str, Any]] = field(default_factory=list)
    loss: Callable[[Any, Mapping[str, Any]], Any] | None = None
    optimizer: Any = None
    scheduler: Any = None
    tokenizer: Any = None
    trainable: Sequence[str] | None = None
    normalization: str | None = None
    accumulate: Callable[[Any, list[Mapping[str, Any]]], Any] | None = None
    save_checkpoint: Callable[..., Any] | None = None
    load_checkpoint: Callable[..., Any] | None = None
    dataset: Any = None
    collate: Callable[[list[Any]], Any] | None = None
    label_field: str | None = None
    target_field: str | None = None
    transform: Any = None
    source: str = ""


def load_setup(ref: str | Callable[[], Any] | Setup, *, needs: tuple[str, ...] = NEEDS_TRAINING) -> Setup:
    """A Setup from 'path/setup.py:function' (the function is called with no argument), a callable, or a Setup.
    needs: the fields the command cannot do without (the model and the batches by default; `inspect` passes ()
    and checks the data fields itself).

    Raises:
        InputError: no such file or function, a factory that raises, or what it returns lacks a needed field
            (one line each, naming the file).
    """
    if isinstance(ref, Setup):
        return _checked(ref, ref.source or "the setup", needs)
    if callable(ref):
        return _checked(_from(call_factory(ref, getattr(ref, "__name__", "the factory")), "the factory", needs),
                        "the factory", needs)
    made, where = run_factory(str(ref))
    setup = _from(made, where, needs)
    setup.source = where
    return _checked(setup, where, needs)


def run_factory(ref: str, example: str = "setup.py:make_setup") -> tuple[Any, str]:
    """Load 'FILE.py:FUNCTION' (the user's own code, run as such) and call the function with no argument: what it
    returned and 'FILE.py:FUNCTION'. Every setup-taking command (batch, check, inspect, quant) loads its factory here.

    Raises:
        InputError: a malformed reference, no such file or function, a file or function that raises or exits.
    """
    path, sep, name = ref.rpartition(":")
    if not sep or not name.isidentifier():
        raise InputError(f"setup {ref!r} must be FILE.py:FUNCTION, e.g. {example}")
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{file}: no such setup file; give FILE.py:FUNCTION")
    folder = str(file.resolve().parent)
    if folder not in sys.path:       # as `python FILE.py` does: the setup imports the scripts beside it
        sys.path.insert(0, folder)
    try:
        namespace = runpy.run_path(str(file), run_name="campaign_setup")
    except SystemExit as e:
        raise InputError(exited(str(file), e, "while loading (a setup file defines a function; put the script's "
                                              "own run under `if __name__ == '__main__':`)")) from None
    except Exception as e:
        raise InputError(f"{file}: raised {type(e).__name__} while loading: {first_line(e)}") from None
    factory = namespace.get(name)
    if not callable(factory):
        found = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_"))[:5]
        raise InputError(f"{file}: no function {name!r}; it defines {', '.join(found) or 'none'}")
    where = f"{file}:{name}"
    return call_factory(factory, where), where


def call_factory(factory: Callable[[], Any], where: str) -> Any:
    """The factory's result; an exception it raises becomes one line naming `where`, and so does a call to
    sys.exit / exit() (even exit(0): a command that exits 0 with no output would read as a go in a CI step).
    Ctrl-C (KeyboardInterrupt) is not the factory's failure: it goes through as the user's interrupt."""
    try:
        return factory()
    except SystemExit as e:
        raise InputError(exited(where, e, "instead of returning the setup")) from None
    except Exception as e:
        raise InputError(f"{where} raised {type(e).__name__}: {first_line(e)}") from None


def exited(where: str, e: SystemExit, when: str) -> str:
    """One line for the user's code calling sys.exit: who, with what code, and the fix."""
    return (f"{where} called exit({e.code!r}) {when}; campaign needs it to return (or raise an error): remove the "
            "sys.exit / exit() from the code it runs")


def writable_file(path: str | os.PathLike[str], what: str) -> Path:
    """A file a command writes at its end (--out, --csv, --plot), checked before it starts: not a folder, in a
    folder that exists or can be made (the writers make the missing ones) and that this user can write in.

    Raises:
        InputError: one line naming the option and the path.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {str(p)!r} is a folder; give a file name in it")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"{what} {str(p)!r}: {str(folder)!r} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what} {str(p)!r}: the folder {str(folder)!r} is not writable; choose another path")
    return p


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def _from(made: Any, where: str, needs: tuple[str, ...] = NEEDS_TRAINING) -> Setup:
    if isinstance(made, Setup):
        return made
    from .loops import from_loop, is_lightning, is_trainer

    if is_trainer(made) or is_lightning(made):    # the training loop itself: its own objects (train/loops.py)
        try:
            made = from_loop(made, where)
        except InputError:
            raise
        except Exception as e:       # the loop's own dataloader, collator or optimizer set-up
            raise InputError(f"{where}: reading the {type(made).__name__}'s model, optimizer and first batches "
                             f"raised {type(e).__name__}: {first_line(e)}") from None
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(FIELDS))
        if unknown:
            raise InputError(f"{where} returned unknown field(s) {', '.join(unknown)}; the fields are "
                             f"{', '.join(FIELDS)}")
        get: Callable[[str], Any] = made.get
    else:
        get = lambda k: getattr(made, k, None)  # noqa: E731
    if "model" in needs and "batches" in needs and (get("model") is None or get("batches") is None):
        raise InputError(f"{where} must return the model and the batches (a dict or an object with .model and "
                         f".batches); got {type(made).__name__}")
    if not isinstance(made, Mapping) and not any(get(k) is not None for k in FIELDS):
        raise InputError(f"{where} must return a dict (or an object) with the setup's fields ({', '.join(FIELDS)}); "
                         f"got {type(made).__name__}")
    return Setup(**{k: v for k in FIELDS if (v := get(k)) is not None})


def _checked(setup: Setup, where: str, needs: tuple[str, ...] = NEEDS_TRAINING) -> Setup:
    for name in ("label_field", "target_field"):
        value = getattr(setup, name)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{where}: {name} must be the name of a field of the examples (a str), not "
                             f"{type(value).__name__}")
    if setup.accumulate is not None and not callable(setup.accumulate):
        raise InputError(f"{where}: accumulate must be a function (model, micro_batches) -> None, not "
                         f"{type(setup.accumulate).__name__}")
    if setup.collate is not None and not callable(setup.collate):
        raise InputError(f"{where}: collate must be a function (examples -> batch), not {type(setup.collate).__name__}")
    if "model" not in needs and "batches" not in needs:
        return setup
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
