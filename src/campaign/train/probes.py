"""Checks of `campaign check` on what the step sees, each designed for a family of bugs (and batch.labels_aligned,
labels_check below: the labels as the collate carried them against whether the model shifts them):

- step.train_mode: the modules that draw random numbers in training (dropout: torch's Dropout modules, and the
  attention and hidden dropouts transformers' models apply as a rate attribute) ran in training mode during the
  checked step. A loss or loop that calls model.eval() (a helper shared with evaluation), a model switched to eval
  after an evaluation and never back, a submodule put in eval by hand: dropout is off for the whole run, so the
  model trains without the regularization its config plans and the run is not the one planned. A module whose
  neighbourhood trains nothing (a frozen teacher kept in eval) is left out.
- batch.padding_ignored: the loss does not depend on the padded positions (attention_mask 0): their input
  embeddings are perturbed (the token ids are kept: a model may find its padding by the pad id) and the loss computed
  again (eval mode, no gradient). A change means padding reaches the loss: the attention mask ignored (left padding,
  or a pooling over every position), or the padded positions kept in the labels.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..checks import Check, listed

PADDING_RTOL = 1e-5   # the loss recomputed with other padded ids: equal but for summation order


def _stochastic(module: Any) -> bool:
    import torch

    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return float(module.p) > 0
    return any("dropout" in k and isinstance(v, float) and v > 0 for k, v in vars(module).items())


@contextmanager
def dropout_modes(model: Any) -> Iterator[dict[str, bool]]:
    """While the block runs: for each module of `model` that draws random numbers in training and that ran, the
    training flag it ran with (name -> training), False if it ever ran in eval."""
    import torch

    names = {id(m): n for n, m in model.named_modules() if _stochastic(m)}
    seen: dict[str, bool] = {}

    def record(module: Any, args: Any) -> None:
        name = names.get(id(module))
        if name is not None:
            seen[name] = seen.get(name, True) and bool(module.training)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        yield seen
    finally:
        handle.remove()


def _trains_near(model: Any, name: str) -> bool:
    """Whether the block the module sits in (its nearest ancestor that holds parameters: a LoRA dropout's layer,
    not the ModuleDict around it) holds a parameter that trains."""
    while name:
        name = name.rpartition(".")[0]
        block = model.get_submodule(name) if name else model
        params = list(block.parameters())
        if params:
            return any(p.requires_grad for p in params)
    return False


def train_mode_check(model: Any, seen: dict[str, bool], cid: str = "step.train_mode") -> Check:
    if not seen:
        return Check(cid, "skipped", "no dropout in the model (nothing whose mode changes the step)", gates=False)
    off = sorted(n or "(the model)" for n, training in seen.items() if not training and _trains_near(model, n))
    if off:
        return Check(cid, "fail", f"dropout ran in eval mode during the training step: {listed(off)} "
                     f"({len(off)} of {len(seen)} dropout modules)",
                     "the model trains without the dropout its configuration sets: the run is not the one planned "
                     "(and evaluation-mode layers change what the step computes)",
                     "call model.train() before training steps (after any evaluation); do not call model.eval() in "
                     "the loss; set the dropout rate to 0 in the config if it is meant to be off")
    return Check(cid, "pass", f"{len(seen)} dropout module(s) ran in training mode")


def padding_check(model: Any, batch: Mapping[str, Any], loss_of: Any, loss_fn: Any) -> Check:
    """The loss on `batch` against the loss with the padded positions' embeddings perturbed (see the module
    docstring). A first batch without padding is padded on the right by PAD positions (attention_mask 0, labels
    -100, the model's pad id) when the model computes its own loss from the labels; with a loss of the setup's own,
    which may read any position, the check is skipped."""
    import torch

    cid = "batch.padding_ignored"
    ids, mask = batch.get("input_ids"), batch.get("attention_mask")
    if ids is None or mask is None or not hasattr(mask, "shape") or mask.shape != ids.shape or ids.dim() != 2:
        return Check(cid, "skipped", "the batch has no input_ids with an attention_mask of the same shape", gates=False)
    padded = mask == 0
    made = ""
    if not bool(padded.any()):
        if loss_fn is not None:
            return Check(cid, "skipped", "the first batch has no padding (every attention_mask is 1)", "",
                         "give a first batch of unequal lengths, padded as your collate pads", gates=False)
        batch, padded = _padded(model, batch)
        made = f" ({PAD} padding positions added on the right of each row)"
    elif loss_fn is None:
        batch, left = _boundary_unlabelled(batch, padded)
        if left:
            made = (f" (left padding: the first real token of {left} row(s), which a causal model predicts from the "
                    "padding, left out of both losses)")
    noise = _noise_hook(model, ids.shape, padded)
    if noise is None:
        return Check(cid, "skipped", "no embedding output of the batch's (rows x tokens) shape was seen", gates=False)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            a = float(loss_of(model, dict(batch), loss_fn).detach().float())
            with noise():
                b = float(loss_of(model, dict(batch), loss_fn).detach().float())
    finally:
        model.train(was)
    count = int(padded.sum())
    if abs(a - b) <= PADDING_RTOL * max(1.0, abs(a)):
        return Check(cid, "pass", f"the loss is the same ({a:.6g}) with the {count} padded positions' inputs "
                     f"perturbed{made}")
    return Check(cid, "fail", f"the loss changes from {a:.6g} to {b:.6g} when only the {count} padded positions' "
                 f"inputs change{made}", "padding reaches the loss: the attention mask is ignored somewhere (left "
                 "padding, a mean or max pooling over every position), or the padded positions are not masked in "
                 "the labels", "pass attention_mask to every layer that mixes positions (and to the pooling), and "
                 "set the labels of padded positions to -100")


PAD = 4    # positions added to a first batch without padding


def _padded(model: Any, batch: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    import torch

    ids = batch["input_ids"]
    pad_id = getattr(getattr(model, "config", None), "pad_token_id", None)
    fill = torch.full((ids.shape[0], PAD), int(pad_id) if isinstance(pad_id, int) else int(ids[0, -1]),
                      dtype=ids.dtype, device=ids.device)
    out = dict(batch)
    out["input_ids"] = torch.cat([ids, fill], dim=1)
    out["attention_mask"] = torch.cat([batch["attention_mask"], torch.zeros_like(fill)], dim=1)
    labels: Any = batch.get("labels")
    if hasattr(labels, "shape") and tuple(labels.shape) == tuple(ids.shape):
        out["labels"] = torch.cat([labels, torch.full_like(fill, -100)], dim=1)
    return out, out["attention_mask"] == 0


def _boundary_unlabelled(batch: Mapping[str, Any], padded: Any) -> tuple[Mapping[str, Any], int]:
    """Left-padded rows (padding a prefix): the label of the first real token set to -100. An HF causal model
    shifts the labels, so that token is predicted from the last padded position: a known cost of left padding in
    training, not the mask ignored."""
    labels: Any = batch.get("labels")
    if not hasattr(labels, "shape") or tuple(labels.shape) != tuple(padded.shape):
        return batch, 0
    labels = labels.clone()
    left = 0
    for row in range(int(padded.shape[0])):
        n = int(padded[row].sum())
        if 0 < n < int(padded.shape[1]) and bool(padded[row, :n].all()):
            labels[row, n] = -100
            left += 1
    return ({**batch, "labels": labels}, left) if left else (batch, 0)


def _noise_hook(model: Any, shape: Any, padded: Any) -> Any:
    """A context that adds a fixed perturbation to the input embeddings at the padded positions: on the model's
    input embedding (HF, peft), else on the first submodule output of (rows x tokens x features) shape."""
    import torch

    rows, tokens = int(padded.shape[0]), int(padded.shape[1])
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    targets = [embedding] if isinstance(embedding, torch.nn.Module) else [m for m in model.modules() if m is not model]
    if not targets:
        return None

    def perturb(_module: Any, _args: Any, out: Any) -> Any:
        if state["done"] or not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.dim() != 3 \
                or tuple(out.shape[:2]) != (rows, tokens):
            return None
        state["done"] = True
        g = torch.Generator(device="cpu").manual_seed(0)
        delta = torch.randn(out.shape, generator=g).to(out.device, out.dtype) * (out.detach().abs().mean() + 1)
        return out + delta * padded.to(out.device)[..., None].to(out.dtype)

    state = {"done": False}

    @contextmanager
    def active() -> Iterator[None]:
        handles = [m.register_forward_hook(perturb) for m in targets]
        state["done"] = False
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    return active


ALIGNED = 0.9        # the share of loss positions whose label is the token at (or after) the position


def labels_check(model: Any, batch: Mapping[str, Any], loss_fn: Any) -> Check:
    """batch.labels_aligned: for a model that computes its own loss from token labels, whether it shifts them
    (measured: its loss against cross-entropy of its logits with and without the shift), and whether the labels
    as the collate carried them fit that: a model that shifts, given labels already shifted (the collate and the
    model both shift: each position learns the token two ahead), or a model that does not shift, given labels equal
    to the input ids (each position learns to copy itself)."""
    import torch

    cid = "batch.labels_aligned"
    ids: Any = batch.get("input_ids")
    labels: Any = batch.get("labels")
    if loss_fn is not None or ids is None or not hasattr(labels, "shape") or tuple(labels.shape) != tuple(ids.shape) \
            or ids.dim() != 2 or ids.shape[1] < 3:
        return Check(cid, "skipped", "not a model computing its own loss from per-token labels", gates=False)
    keep = labels != -100
    n = int(keep.sum())
    same = int(((labels == ids) & keep).sum())
    ahead = int(((labels[:, :-1] == ids[:, 1:]) & keep[:, :-1]).sum())
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(**batch)
    finally:
        model.train(was)
    logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if logits is None or loss is None or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
        return Check(cid, "skipped", "the model's output has no per-token logits beside its loss", gates=False)
    ce = torch.nn.functional.cross_entropy
    flat = logits.float()
    shifted = float(ce(flat[:, :-1].reshape(-1, flat.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100))
    plain = float(ce(flat.reshape(-1, flat.shape[-1]), labels.reshape(-1), ignore_index=-100))
    own = float(loss.float())
    shifts = abs(own - shifted) < abs(own - plain)
    how = "the model shifts the labels itself" if shifts else "the model does not shift the labels"
    figures = (f"{how} (its loss {own:.5g}; cross-entropy shifted {shifted:.5g}, unshifted {plain:.5g}); the "
               f"label is the position's own token at {same} and the next token at {ahead} of {n} loss positions")
    if shifts and ahead >= ALIGNED * n > same:
        return Check(cid, "fail", f"{figures}: the labels are shifted twice",
                     "the collate shifted the labels and the model shifts them again: each position learns the token "
                     "two ahead", "give labels equal to input_ids (-100 where no loss): the model shifts them")
    if not shifts and same >= ALIGNED * n > ahead:
        return Check(cid, "fail", f"{figures}: each position is trained to copy its own token",
                     "a model that does not shift needs the next token as each position's label",
                     "shift the labels in the collate (labels[:, :-1] = input_ids[:, 1:]), or use a model that shifts")
    return Check(cid, "pass", figures)


__all__ = ["dropout_modes", "labels_check", "padding_check", "train_mode_check"]
