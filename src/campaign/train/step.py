"""One complete training step, looked at piece by piece: the loss (finite, near ln(classes) at initialization), the
gradients (finite, one per trainable parameter, their norm per optimizer group), the update (every parameter meant
to train changed, every other one untouched, the optimizer holding them all) and the dtypes of parameters,
gradients and optimizer state. Also: overfitting one batch (the loss must fall) and batch independence (one row's
output must not depend on another row's input).

Each function takes the live model and optimizer and returns plain figures; `train/check.py` turns them into
checks. Parameters are compared bitwise against copies taken before the step.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ..errors import InputError


@dataclass(frozen=True)
class GroupNorm:
    """One optimizer parameter group: its learning rate, tensors and elements, and the gradient's L2 norm."""

    group: int
    lr: float
    tensors: int
    elements: int
    grad_norm: float


@dataclass(frozen=True)
class StepFigures:
    """What one step showed. Names are parameter names (model.named_parameters())."""

    loss: float
    classes: int | None                     # the output's last dimension (vocab or labels), None when not seen
    trainable: tuple[str, ...]              # requires_grad
    declared: tuple[str, ...] | None        # meant to train (the setup's patterns), None when not stated
    no_grad: tuple[str, ...]                # requires_grad, yet no gradient after backward
    zero_grad: tuple[str, ...]              # a gradient of all zeros
    nonfinite_grad: tuple[str, ...]
    not_in_optimizer: tuple[str, ...]       # requires_grad, but the optimizer does not hold it
    unchanged: tuple[str, ...]              # trainable, not changed by the update
    zero_lr: tuple[str, ...]                # in an optimizer group whose learning rate was 0 for this update
    changed_frozen: tuple[str, ...]         # not trainable, changed anyway
    groups: tuple[GroupNorm, ...]
    dtypes: dict[str, dict[str, int]]       # parameters / gradients / optimizer state -> dtype -> elements
    trainable_elements: int
    frozen_elements: int


def to_device(batch: Mapping[str, Any], device: Any) -> dict[str, Any]:
    """The batch's tensors on the model's device (other values as they are)."""
    return {k: v.to(device) if hasattr(v, "to") and hasattr(v, "dtype") else v for k, v in batch.items()}


def device_of(model: Any) -> Any:
    p = next(model.parameters(), None)
    if p is None:
        raise InputError("the model has no parameters: nothing to train")
    return p.device


def loss_of(model: Any, batch: Mapping[str, Any], loss_fn: Any = None) -> Any:
    """The setup's loss(model, batch), or the loss the model computes from the batch's labels (HF models)."""
    if loss_fn is not None:
        return loss_fn(model, batch)
    out = model(**batch)
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if loss is None:
        raise InputError("the model returned no loss from this batch; give the setup a loss(model, batch)")
    return loss


def output_tensor(out: Any) -> Any:
    """The per-row output of a forward: .logits, the first element of a tuple, or the tensor itself."""
    logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    return logits if logits is not None and hasattr(logits, "shape") else (out if hasattr(out, "shape") else None)


def last_per_row(model: Any, batch: Mapping[str, Any], loss_fn: Any) -> Any:
    """The last tensor with one row per batch row that a submodule computes while loss_fn(model, batch) runs (a
    model called by the user's own loss: its logits), or None."""
    import torch

    rows = first_rows(batch)
    seen: dict[str, Any] = {}

    def hook(_module: Any, _args: Any, out: Any) -> None:
        t = output_tensor(out)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and int(t.shape[0]) == rows:
            seen["last"] = t

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        loss_fn(model, batch)
    finally:
        for h in handles:
            h.remove()
    return seen.get("last")


def classes_of(model: Any, batch: Mapping[str, Any], loss_fn: Any = None) -> int | None:
    """The size of the output's last dimension (vocabulary or labels) from a forward without labels (with them, for
    a forward that needs them); None when the model does not take the batch's keys as its arguments (a setup with
    its own loss(model, batch), unless loss_fn is given: then the last per-row tensor its forward computes)."""
    import torch

    with torch.no_grad():
        try:
            out = model(**{k: v for k, v in batch.items() if k != "labels"})
        except TypeError:                              # a forward that needs its labels
            try:
                out = model(**batch)
            except TypeError:
                out = last_per_row(model, batch, loss_fn) if loss_fn is not None else None
                if out is None:
                    return None
    logits = output_tensor(out)
    return int(logits.shape[-1]) if logits is not None and logits.dim() >= 2 and logits.shape[-1] > 1 else None


# peft's wrappers around the model's own names: the prefix of a PeftModel, the trained copy of a module it saves in
# full (modules_to_save), and the frozen layer under a LoRA layer; the name a user declares is the model's own.
PEFT_PREFIXES = ("base_model.model.",)
PEFT_PARTS = (".modules_to_save.default.", ".base_layer.")


def own_name(name: str) -> str:
    """A parameter's name in the model peft wrapped ('base_model.model.lm_head.modules_to_save.default.weight' ->
    'lm_head.weight'); other names as they are."""
    for prefix in PEFT_PREFIXES:
        name = name.removeprefix(prefix)
    for part in PEFT_PARTS:
        name = name.replace(part, ".")
    return name


def matches(name: str, patterns: Sequence[str]) -> bool:
    """A parameter name matches a glob ('*lora_*') or names it or a module above it ('lm_head'), by its own name or
    by its name in the model peft wrapped (own_name)."""
    names = {name, own_name(name)}
    return any(fnmatchcase(n, p) or n.startswith(p + ".") or n == p for n in names for p in patterns)


def snapshot(model: Any) -> dict[str, Any]:
    """Copies of the parameters in host memory (so that they weigh nothing in a measurement on the card)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}


def full_state(model: Any) -> dict[str, Any]:
    """Copies, in host memory, of everything the model's state_dict holds: parameters and persistent buffers
    (BatchNorm's running statistics, step counters)."""
    return {n: t.detach().to("cpu", copy=True) for n, t in model.state_dict().items() if hasattr(t, "detach")}


def modes(model: Any) -> dict[str, bool]:
    """Each module's training flag (a user may keep a frozen BatchNorm in eval inside a model in train mode)."""
    return {n: m.training for n, m in model.named_modules()}


def set_modes(model: Any, saved: dict[str, bool]) -> None:
    for n, m in model.named_modules():
        if n in saved:
            m.training = saved[n]


def train_mode(model: Any) -> None:
    """Train mode as the loop's model.train() gives it, unless the model is in train mode already (then its
    modules' own flags are left as the user set them)."""
    if not model.training:
        model.train()


def first_rows(batch: Mapping[str, Any]) -> int:
    """Rows of a batch: the first dimension of its first tensor that has one (0-dim values such as a token count
    are skipped)."""
    for v in batch.values():
        if hasattr(v, "shape") and len(v.shape) >= 1:
            return int(v.shape[0])
    raise InputError("the batch holds no tensor with a batch dimension")


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _count(tensors: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        out[_dtype(t)] = out.get(_dtype(t), 0) + t.numel()
    return dict(sorted(out.items()))


def checked_step(model: Any, optimizer: Any, scheduler: Any, batch: Mapping[str, Any], *, loss_fn: Any = None,
                 trainable: Sequence[str] | None = None) -> StepFigures:
    """Run one full update (zero_grad, loss, backward, optimizer step, scheduler step) and look at each part."""
    import torch

    named = list(model.named_parameters())
    before = snapshot(model)
    classes = classes_of(model, batch, loss_fn)
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    still = {id(p) for g in optimizer.param_groups if g.get("lr", 1.0) == 0 for p in g["params"]}
    train_mode(model)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(model, batch, loss_fn)
    if not hasattr(loss, "backward") or loss.numel() != 1:
        raise InputError(f"the loss is a {type(loss).__name__} of shape {tuple(getattr(loss, 'shape', ()))}, not a "
                         "scalar tensor; return loss.mean() (or the sum divided by the tokens)")
    value = float(loss.detach().float())
    loss.backward()
    grads = {n: p.grad for n, p in named if p.requires_grad}
    groups = []
    for i, g in enumerate(optimizer.param_groups):
        present = [p.grad.detach().double() for p in g["params"] if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(x) for x in present]))) \
            if present else 0.0
        groups.append(GroupNorm(i, float(g.get("lr", math.nan)), len(g["params"]),
                                sum(p.numel() for p in g["params"]), norm))
    grad_dtypes = _count([g for g in grads.values() if g is not None])
    no_grad = tuple(n for n, g in grads.items() if g is None)
    zero = tuple(n for n, g in grads.items() if g is not None and not bool(g.detach().any()))
    nonfinite = tuple(n for n, g in grads.items() if g is not None and not bool(torch.isfinite(g).all()))
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    changed = {n for n, p in named if not torch.equal(p.detach().cpu(), before[n])}
    train_names = tuple(n for n, p in named if p.requires_grad)
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    return StepFigures(
        loss=value, classes=classes, trainable=train_names,
        declared=tuple(n for n, _ in named if matches(n, trainable)) if trainable is not None else None,
        no_grad=no_grad, zero_grad=zero, nonfinite_grad=nonfinite,
        not_in_optimizer=tuple(n for n, p in named if p.requires_grad and id(p) not in held),
        unchanged=tuple(n for n in train_names if n not in changed),
        zero_lr=tuple(n for n, p in named if id(p) in still),
        changed_frozen=tuple(n for n, p in named if not p.requires_grad and n in changed),
        groups=tuple(groups),
        dtypes={"parameters": _count([p for _, p in named]), "gradients": grad_dtypes,
                "optimizer state": _count(state)},
        trainable_elements=sum(p.numel() for _, p in named if p.requires_grad),
        frozen_elements=sum(p.numel() for _, p in named if not p.requires_grad))


def measured_step(model: Any, optimizer: Any, scheduler: Any, batch: Mapping[str, Any], meter: Any, *,
                  loss_fn: Any = None) -> None:
    """One more update with its forward, backward and optimizer step measured as phases: after a first update, so
    that the optimizer's state exists, as in every step of a run (and in `campaign memory`'s estimate)."""
    train_mode(model)
    optimizer.zero_grad(set_to_none=True)
    with meter.around("step"):
        meter.track(model, optimizer)
        with meter.phase("forward"):
            loss = loss_of(model, batch, loss_fn)
        with meter.phase("backward"):
            loss.backward()
        del loss
        with meter.phase("optimizer step"):
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def overfit(model: Any, optimizer: Any, batch: Mapping[str, Any], *, steps: int, loss_fn: Any = None,
            lr: float | None = None) -> tuple[float, ...]:
    """Train `steps` updates on the one batch and return the loss before each update and after the last. The rate
    is `lr`, else each group's peak under its schedule (`initial_lr`, which torch's schedulers set: a warm-up does
    not stall the test), else its current one. The caller restores the model and optimizer afterwards."""
    import torch

    for g in optimizer.param_groups:
        if lr is not None:
            g["lr"] = lr
        elif "initial_lr" in g:
            g["lr"] = g["initial_lr"]
    train_mode(model)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model, batch, loss_fn)
        losses.append(float(loss.detach().float()))
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        losses.append(float(loss_of(model, batch, loss_fn).detach().float()))
    return tuple(losses)


def cross_row_gradient(model: Any, batch: Mapping[str, Any], *, row: int = 0, seed: int = 0,
                       loss_fn: Any = None) -> tuple[float, float]:
    """(largest |d out[row] / d input[other rows]|, largest |d out[row] / d input[row]|), in eval mode.

    Works on any model. The input is, in this order: the output of the input embedding for token ids (HF and peft
    models), the batch's first floating-point tensor (pixel values, input embeddings), else the first floating
    tensor with one row per input row that any submodule computes (a plain nn.Module's own embedding); it is made
    a leaf by a forward hook. The output is the forward's per-row output (.logits, a tuple's first element, the
    tensor), else the last per-row tensor a submodule computed (a forward that returns only its loss). A forward
    that needs the labels gets them. out[row] is projected on a fixed random direction so that no cancellation
    hides a dependence. A model that takes no batch keys as arguments is run through the setup's loss_fn(model,
    batch) (its result unused: the output is then the last per-row tensor). Rows computed independently give
    exactly 0 for the first figure.

    Raises:
        InputError: no floating tensor with one row per input row is seen in the forward, or no per-row output.
    """
    import torch

    rows = first_rows(batch)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    captured: dict[str, Any] = {}
    handles = []

    def per_row(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1 and int(t.shape[0]) == rows

    def leaf_hook(_module: Any, _args: Any, out: Any) -> Any:
        first: Any = (out if isinstance(out, torch.Tensor) else out[0] if isinstance(out, (tuple, list)) and out
                      else None)
        if "x" in captured or not per_row(first):
            return None
        leaf = first.detach().requires_grad_(True)
        captured["x"] = leaf
        return leaf if first is out else (leaf, *out[1:]) if isinstance(out, tuple) else [leaf, *out[1:]]

    def last_hook(_module: Any, _args: Any, out: Any) -> None:
        t = output_tensor(out)
        if per_row(t) and t.requires_grad:
            captured["last"] = t

    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    key = next((k for k, v in inputs.items() if per_row(v)), None)
    if isinstance(embedding, torch.nn.Module) and "input_ids" in inputs:
        handles.append(embedding.register_forward_hook(leaf_hook))
    elif key is not None:
        inputs[key] = captured["x"] = inputs[key].detach().clone().requires_grad_(True)
    else:
        handles += [m.register_forward_hook(leaf_hook) for m in model.modules() if m is not model]
    handles += [m.register_forward_hook(last_hook) for m in model.modules() if m is not model]
    saved = modes(model)
    model.eval()
    try:
        with torch.enable_grad():
            try:
                result = model(**inputs)
            except TypeError:                          # a forward that needs its labels
                captured.pop("last", None)
                if "x" in captured and key is None:
                    captured.pop("x")
                try:
                    result = model(**batch)
                except TypeError as e:                 # a forward the user's loss calls its own way
                    if loss_fn is None:
                        raise InputError(f"the model does not take the batch's keys as arguments ({e}) and the "
                                         "setup gives no loss(model, batch) to call it") from None
                    captured.pop("last", None)
                    result = loss_fn(model, {**batch, key: inputs[key]} if key is not None else batch)
            if "x" not in captured:
                raise InputError("batch independence: no floating-point tensor with one row per input row was seen "
                                 "in the forward (an embedding's output, pixel values)")
            out = output_tensor(result)
            if not per_row(out):
                out = captured.get("last")
            if out is None or not per_row(out):
                raise InputError("batch independence needs an output with one row per input row (logits)")
            direction = torch.randn(out[row].shape, generator=torch.Generator().manual_seed(seed))
            (out[row].float() * direction.to(out.device)).sum().backward()
    finally:
        for h in handles:
            h.remove()
        set_modes(model, saved)
        for p in model.parameters():
            p.grad = None
    g = captured["x"].grad
    if g is None:
        return 0.0, 0.0
    others = torch.cat([g[:row], g[row + 1:]])
    return float(others.abs().max()) if others.numel() else 0.0, float(g[row].abs().max())


__all__ = ["GroupNorm", "StepFigures", "checked_step", "classes_of", "cross_row_gradient", "loss_of", "matches",
           "first_rows", "full_state", "measured_step", "modes", "output_tensor", "overfit", "own_name", "set_modes",
           "train_mode", "snapshot", "to_device"]
