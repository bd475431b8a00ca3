"""The accumulation probe of the watched run (train/watch.py), after the watched updates, on the live model and the
micro-batches the loop fed its last watched update: is the gradient the loop accumulated the gradient of the whole
update?

The loop's own scaling of each micro-batch is read from what it did: the loss it backpropagated over the loss the
model's forward returned (nanoGPT: loss / grad_accum, a factor 1/2; the Trainer: the model's loss over the update's
token count, a factor 1). The probe then computes, at the same weights (eval mode: no dropout, so both sides see one
function):
- the accumulated gradient: the sum over the micro-batches of factor x the gradient of the model's own loss on that
  micro-batch, fed exactly as the loop fed it;
- the whole update's gradient: one backward of the model's own loss over the micro-batches concatenated (rows
  stacked, right-padded to the longest with the ignore index for targets and 0 elsewhere; scalars such as
  transformers' num_items_in_batch left out, so that the model's loss is its own mean over every target of the
  update: token-weighted where its loss is per token).
They must agree within the tolerance of the dtype the model computes in (train/accumulation.py's TOLERANCE, its
relative-error measure): the lowest-precision floating output its layers produced in the probe's forward, so that a
forward run under autocast (accelerate wraps a bf16 model's forward in it; TRL defaults to bf16) is held to bf16's
tolerance though its weights are fp32.
"""
from __future__ import annotations

from typing import Any

from .grad_fingerprint import fingerprints
from .watch_probes import _own_loss


def _pad_value(tensors: list[Any]) -> int:
    """Right-padding for an integer input: its ignore index where it holds one (a negative value: -100, -1), else
    0 (token ids after the end, a 0 in a mask)."""
    low = min(int(t.min()) for t in tensors if t.numel())
    return low if low < 0 else 0


def concatenate(batches: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The micro-batches' rows stacked into one batch; raises ValueError where they cannot be (other inputs, other
    shapes beyond the length)."""
    import torch

    drop = object()

    def join(values: list[Any]) -> Any:
        if not all(isinstance(v, torch.Tensor) for v in values):
            if any(isinstance(v, torch.Tensor) for v in values):
                raise ValueError("an input is a tensor in some micro-batches only")
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                return drop                             # a count over the update (num_items_in_batch)
            if any(v != values[0] for v in values):
                raise ValueError("an input other than a tensor differs between the micro-batches")
            return values[0]
        if values[0].dim() == 0:
            return drop                                 # a count over the update (num_items_in_batch)
        if len({tuple(v.shape[2:]) for v in values}) > 1 or len({v.dim() for v in values}) > 1:
            raise ValueError("the micro-batches' inputs differ in shape beyond their rows and length")
        if values[0].dim() >= 2 and len({v.shape[1] for v in values}) > 1:
            if values[0].is_floating_point():
                raise ValueError("floating inputs of different lengths")
            length = max(v.shape[1] for v in values)
            fill = _pad_value(values)
            values = [torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, length - v.shape[1]), value=fill)
                      for v in values]
        return torch.cat(values, dim=0)

    args = [b[0] for b in batches]
    kwargs = [b[1] or {} for b in batches]
    if len({len(a) for a in args}) > 1 or len({tuple(sorted(k)) for k in kwargs}) > 1:
        raise ValueError("the micro-batches feed the model different inputs")
    whole_args = tuple(join([a[i] for a in args]) for i in range(len(args[0])))
    whole_kwargs = {k: join([kw[k] for kw in kwargs]) for k in kwargs[0]}
    if any(a is drop for a in whole_args):
        raise ValueError("a count over the update is passed positionally")
    return whole_args, {k: v for k, v in whole_kwargs.items() if v is not drop}


# the floating dtypes from the least precise: the one a forward computes in is the least precise its layers output
PRECISION = ("float16", "bfloat16", "float32", "float64")


def _outputs_dtypes(seen: set[str]) -> Any:
    """A global forward hook adding the dtype of each module's floating output to `seen`; returns its handle."""
    import torch

    def hook(_module: Any, _args: Any, output: Any) -> None:
        t = output[0] if isinstance(output, (tuple, list)) and output else output
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            seen.add(str(t.dtype).removeprefix("torch."))

    return torch.nn.modules.module.register_module_forward_hook(hook)


def _gradient(model: Any, params: list[Any]) -> Any:
    import torch

    return torch.cat([p.grad.detach().double().reshape(-1) if p.grad is not None
                      else torch.zeros(p.numel(), dtype=torch.float64, device=p.device) for p in params])




def _count(batches: list[tuple[Any, Any]]) -> tuple[str, Any] | None:
    """A count over the update the micro-batches pass by keyword, the same in each (transformers'
    num_items_in_batch): (its keyword, its value), or None."""
    import torch

    first = batches[0][1] or {}
    for key, v in first.items():
        scalar = isinstance(v, (int, float)) and not isinstance(v, bool) or \
            isinstance(v, torch.Tensor) and v.dim() == 0
        if scalar and all(float((kw or {}).get(key, float("nan"))) == float(v) for _, kw in batches):
            return key, v
    return None


def accumulation(model: Any, batches: list[tuple[Any, Any]], backward: list[float], own: list[Any],
                 ranked: bool = False) -> dict[str, Any]:
    """Facts for the step.accumulation check (JSON). ranked (under torchrun): also the fingerprints of the
    accumulated and the whole gradients, and the rank's weight in the update, for the check across the ranks
    (train/watch_ranks.py): where the micro-batches pass a count over the update (num_items_in_batch), the number
    of terms the model's own loss averages over on the rank's micro-batches stacked, read from the model itself
    (count x its loss given the count / its loss without it); else none (the ranks weigh alike, as DDP's mean
    does)."""
    import torch

    from .accumulation import TOLERANCE, _compare

    k = len(batches)
    if k < 2:
        return {"applies": False, "why": "one backward per update: nothing is accumulated"}
    if len(backward) != k or len(own) != k or any(o is None for o in own):
        return {"applies": False, "why": "the loss is computed outside the model (or its forwards and backwards do "
                                         "not pair up): the model's own loss cannot be put beside the loop's"}
    own_f = [float(o.float()) for o in own]
    if any(o == 0 or not (abs(o) < float("inf")) for o in own_f):
        return {"applies": False, "why": "a micro-batch's loss is zero or not finite"}
    factors = [b / o for b, o in zip(backward, own_f, strict=True)]
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return {"applies": False, "why": "no trainable parameters"}
    try:
        whole = concatenate([(tuple(a), dict(kw or {})) for a, kw in batches])
    except ValueError as e:
        return {"applies": False, "why": f"the micro-batches cannot be stacked into one batch: {e}"}
    was = model.training
    model.eval()
    computed: set[str] = set()
    try:
        with torch.enable_grad():
            for p in params:
                p.grad = None
            for (a, kw), f in zip(batches, factors, strict=True):
                loss = _own_loss(model(*a, **(kw or {})))
                (loss * f).backward()
            accumulated = _gradient(model, params)
            probe: dict[int, Any] = {}
            acc_fp = fingerprints(params, probe) if ranked else None
            for p in params:
                p.grad = None
            handle = _outputs_dtypes(computed)
            try:
                loss = _own_loss(model(*whole[0], **whole[1]))
            finally:
                handle.remove()
            if loss is None:
                return {"applies": False, "why": "the model returns no loss on the whole update"}
            loss.backward()
            reference = _gradient(model, params)
            ref_fp = fingerprints(params, probe) if ranked else None
            weight = None
            count = _count(batches) if ranked else None
            if count is not None and float(count[1]) > 0:
                with torch.no_grad():
                    kept = _own_loss(model(*whole[0], **{**whole[1], count[0]: count[1]}))
                if kept is not None and float(loss.detach()) != 0:
                    weight = float(count[1]) * float(kept.detach()) / float(loss.detach())
    except Exception as e:  # the user's model refusing the stacked batch: the check is skipped, saying why
        return {"applies": False, "why": f"the model refused the stacked update: {type(e).__name__}: "
                                         f"{str(e).strip()[:160]}"}
    finally:
        model.train(was)
        for p in params:
            p.grad = None
    rel, cos = _compare(accumulated, reference)
    weights = str(params[0].dtype).removeprefix("torch.")
    dtype = next((d for d in PRECISION if d in computed), weights)
    ranks = {"accumulated": acc_fp, "whole": ref_fp, "weight": weight} if ranked else {}
    return {**ranks, "applies": True, "micro_batches": k, "factors": factors, "relative_error": rel, "cosine": cos,
            "tolerance": TOLERANCE.get(dtype, 1e-4), "dtype": dtype, "weights": weights,
            "rows": [int(next((t.shape[0] for t in [*a, *(kw or {}).values()] if isinstance(t, torch.Tensor)
                                  and t.dim() >= 1), 0)) for a, kw in batches]}


__all__ = ["accumulation", "concatenate"]
