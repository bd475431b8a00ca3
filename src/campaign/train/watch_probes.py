"""Probes run in the watched child (train/watch.py) after the watched updates, on the live model and a batch the
loop itself fed it (eval mode, no gradient): which input holds the token ids, whether the model's own loss shifts
the labels (its loss against the cross-entropy of its logits with and without the shift, never its class name),
and whether position t's output depends on inputs after t.

Each returns plain facts (a dict for JSON); train/watch_checks.py decides the checks."""
from __future__ import annotations

from typing import Any

# a label equal to the position's own token (or the next one) at this share of the loss positions says which
ALIGNED = 0.9
# the model's own loss within this relative distance of one cross-entropy: that is the loss it computes
LOSS_RTOL = 1e-3
# outputs at positions <= t moved by more than this share of their largest magnitude: they see the future
CAUSAL_RTOL = 1e-4


def _tensors(value: Any, limit: int = 8) -> list[Any]:
    """The tensors in a module's output (a tensor, a tuple, a dict or a ModelOutput), at most `limit`."""
    import torch

    found: list[Any] = []
    stack = [value]
    while stack and len(found) < limit:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, (tuple, list)):
            stack.extend(reversed(list(v)))
    return found


def _integer_2d(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dim() == 2 and not value.is_floating_point() \
        and not value.is_complex() and value.dtype != torch.bool and value.shape[1] >= 4


def _candidates(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, tensor) of the forward's 2-D integer inputs without negative values and with more than two distinct
    values (a mask has two): the token ids and the per-token targets (labels, nanoGPT's targets) are among them."""
    found = [(f"argument {i}", v) for i, v in enumerate(args) if _integer_2d(v)] + \
        [(k, v) for k, v in kwargs.items() if _integer_2d(v)]
    return [(w, v) for w, v in found if int(v.min()) >= 0 and int(v.unique().numel()) > 2]


def _targets(args: tuple[Any, ...], kwargs: dict[str, Any], ids: tuple[str, Any]) -> tuple[str, Any] | None:
    """The per-token targets: another 2-D integer input of the ids' shape (labels may hold -100)."""
    found = [(f"argument {i}", v) for i, v in enumerate(args) if _integer_2d(v)] + \
        [(k, v) for k, v in kwargs.items() if _integer_2d(v)]
    others = [(w, v) for w, v in found if w != ids[0] and tuple(v.shape) == tuple(ids[1].shape)
              and int(v.unique().numel()) > 2]
    return others[0] if others else None


def _ids(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], logits: Any) -> tuple[str, Any] | None:
    """The token ids: the candidate input whose change moves the per-position outputs (the targets only move the
    loss), decided by changing each in turn."""
    candidates = _candidates(args, kwargs)
    if len(candidates) <= 1 or logits is None:
        return candidates[0] if candidates else None
    for where, v in candidates:
        a, k = _replace(args, kwargs, where, (v + 1) % (int(v.max()) + 1))
        moved = _per_position(model(*a, **k), v)
        if moved is not None and not torch_equal(moved, logits):
            return where, v
    return candidates[0]


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b))


def _replace(args: tuple[Any, ...], kwargs: dict[str, Any], where: str, value: Any) -> tuple[tuple[Any, ...],
                                                                                           dict[str, Any]]:
    if where.startswith("argument "):
        i = int(where.split()[1])
        return (*args[:i], value, *args[i + 1:]), kwargs
    return args, {**kwargs, where: value}


def _per_position(out: Any, ids: Any) -> Any:
    """The first floating output of shape (rows, positions, ...): the logits."""
    for t in _tensors(out):
        if t.is_floating_point() and t.dim() >= 3 and tuple(t.shape[:2]) == tuple(ids.shape):
            return t
    return None


def _own_loss(out: Any) -> Any:
    for t in _tensors(out):
        if t.is_floating_point() and t.dim() == 0:
            return t
    return None


def probes(model: Any, batch: tuple[Any, Any] | None) -> dict[str, Any]:
    import torch

    if batch is None:
        return {"error": "no training forward of the model was captured"}
    args, kwargs = tuple(batch[0]), dict(batch[1] or {})
    # scalar inputs (transformers' num_items_in_batch: a count over the whole update) are left out, so that the
    # model's loss on this batch alone is its own mean
    kwargs = {k: v for k, v in kwargs.items() if not (isinstance(v, torch.Tensor) and v.dim() == 0)
              and not isinstance(v, (int, float)) or isinstance(v, bool)}
    candidates = _candidates(args, kwargs)
    if not candidates:
        return {"ids": None}
    was = model.training
    model.eval()
    ids: tuple[str, Any] | None = None
    try:
        with torch.no_grad():
            out = model(*args, **kwargs)
            # the call whose outputs are per position: the one the loop made, else the same tensors without its
            # switches (TRL's fused_lm_head=True returns the labels' log-probabilities, no logits)
            view, shown = kwargs, out
            if _per_position(out, candidates[0][1]) is None:
                plain = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
                if len(plain) < len(kwargs):
                    again = model(*args, **plain)
                    if _per_position(again, candidates[0][1]) is not None:
                        view, shown = plain, again
            logits = _per_position(shown, candidates[0][1])
            ids = _ids(model, args, view, logits)
            if ids is None:
                return {"ids": None}
            targets = _targets(args, kwargs, ids)
            facts: dict[str, Any] = {"ids": ids[0], "targets": targets[0] if targets else None,
                                     "shape": list(ids[1].shape)}
            # the loss of the call the loop made (the one it trained on), against the cross-entropy of the logits
            own = out if _own_loss(out) is not None else shown
            facts["labels"] = _labels(own, logits, ids[1], targets[1] if targets else None)
            facts["causal"] = _causal(model, args, view, ids, _per_position(shown, ids[1]))
    except Exception as e:  # the user's model refusing a probe: the check is skipped, saying why
        return {"ids": (ids or candidates[0])[0], "error": f"{type(e).__name__}: {str(e).strip()[:200]}"}
    finally:
        model.train(was)
    return facts


def _labels(out: Any, logits: Any, ids: Any, labels: Any) -> dict[str, Any]:
    import torch

    if labels is None:
        return {"applies": False, "why": "no per-token targets among the model's inputs (the loss is computed "
                                         "outside the model)"}
    keep = labels != -100
    n = int(keep.sum())
    same = int(((labels == ids) & keep).sum())
    ahead = int(((labels[:, :-1] == ids[:, 1:]) & keep[:, :-1]).sum())
    facts: dict[str, Any] = {"applies": True, "positions": n, "same": same, "ahead": ahead}
    loss = _own_loss(out)
    if loss is None or logits is None:
        return facts | {"own": None}
    ce = torch.nn.functional.cross_entropy
    flat = logits.float()
    shifted = float(ce(flat[:, :-1].reshape(-1, flat.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100))
    plain = float(ce(flat.reshape(-1, flat.shape[-1]), labels.reshape(-1), ignore_index=-100))
    return facts | {"own": float(loss.float()), "shifted": shifted, "plain": plain}


def _causal(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ids: tuple[str, Any], logits: Any) \
        -> dict[str, Any]:
    if logits is None:
        return {"applies": False, "why": "the model's outputs are not per position"}
    where, x = ids
    length = x.shape[1]
    positions = sorted({max(0, length // 4 - 1), length // 2 - 1, (3 * length) // 4 - 1} - {length - 1})
    top = int(x.max()) + 1
    scale = float(logits.float().abs().max()) or 1.0
    worst_before, least_after, leaks = 0.0, float("inf"), []
    for t in positions:
        changed = x.clone()
        changed[:, t + 1:] = (x[:, t + 1:] + 1) % top      # other valid ids after t
        a, k = _replace(args, kwargs, where, changed)
        moved = (_per_position(model(*a, **k), x).float() - logits.float()).abs()
        before = float(moved[:, :t + 1].max()) / scale
        after = float(moved[:, t + 1:].max()) / scale
        worst_before, least_after = max(worst_before, before), min(least_after, after)
        if before > CAUSAL_RTOL:
            first = int((moved[:, :t + 1].flatten(2).amax(dim=(0, 2)) > CAUSAL_RTOL * scale).nonzero()[0])
            leaks.append({"t": t, "first_position_moved": first, "relative_change": before})
    return {"applies": True, "positions": positions, "before": worst_before, "after": least_after, "leaks": leaks}


__all__ = ["probes"]
