"""Trace the user's own model: `campaign trace FILE.py:FACTORY`. The factory returns the setup `campaign check`
takes (the model, its micro-batches, optionally the loss and the optimizer); the model's parameters, buffers and the
first micro-batch become fake tensors of the same shapes and dtypes, and two real training steps of the user's code
(forward, loss, backward, the user's optimizer class) run under PyTorch's FakeTensorMode with the storage tracker of
`campaign trace MODEL`: the same phases, allocator replay and card fit, the same JSON. No memory beyond bookkeeping.

An op that cannot run without the data (`.item()`, a Python `if` on a tensor, `torch.nonzero`...) is refused in one
line that names it and the module whose forward called it. The file is the user's own code, given explicitly, and is
run as such (as `campaign check` runs it); nothing is ever run from a model directory.
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..models.spec import ModelSpec, ParamGroup
from .breakdown import Phase
from .constants import CUDA_CONTEXT_BYTES
from .estimate import finish_estimate
from .plan import FEATURED_CARDS, MemoryPlan
from .workload import make_workload

TRACE_STEPS = 2  # optimizer states exist from the second step on, as in campaign trace MODEL
DEFAULT_OPTIMIZER = "torch.optim.AdamW(lr=1e-3, foreach=True)"  # traced when the setup gives none

# why an op cannot run on fake tensors, by the exception FakeTensorMode raises
_WHY = {"DataDependentOutputException": "its result is a value read from the data (.item(), .tolist(), a Python "
                                        "if or int() on a tensor)",
        "DynamicOutputShapeException": "the shape of its output depends on the data (nonzero, masked_select, "
                                       "unique, boolean-mask indexing)",
        "UnsupportedOperatorException": "it has no fake-tensor implementation"}
_FIX = ("campaign trace runs the step without data: compute it from shapes (a mask multiply instead of boolean "
        "indexing, a Python number instead of .item()), or measure a real step on a card (campaign measure --script)")


@dataclass(frozen=True)
class ModulePlan(MemoryPlan):
    """A traced step of the user's own model with its fit per card: MemoryPlan's checks and JSON (the estimate,
    the fits) plus `module`: where it came from, the model's class, the traced inputs, the optimizer class."""

    setup: str = ""                              # FILE.py:FACTORY
    model_class: str = ""                        # the module's class, qualified
    inputs: tuple[tuple[str, str], ...] = ()     # (name, 'shape dtype') of the traced micro-batch's tensors
    optimizer: str = ""                          # the optimizer class traced, qualified

    def fields_dict(self) -> dict[str, Any]:
        # by hand: memory's JSON (what load_estimate reads) with the module's own description beside it
        return super().fields_dict() | {"module": {
            "setup": self.setup, "class": self.model_class, "optimizer": self.optimizer,
            "inputs": [{"name": n, "tensor": t} for n, t in self.inputs]}}


def plan_module(setup: Any, *, card: str | None = None, all_cards: bool = False, reserve: str | float = "10%",
                context_bytes: int = CUDA_CONTEXT_BYTES, fragmentation: float | None = None,
                expandable_segments: bool = False, grads_kept: bool = False,
                progress: Callable[[str], None] | None = None) -> ModulePlan:
    """Trace two training steps of the user's own model on fake tensors and fit the step to cards (the trace
    command's call for FILE.py:FACTORY).

    Args:
        setup: 'FILE.py:FACTORY' (the factory returns the setup campaign check takes: model, batches, optionally
            loss(model, batch) and the optimizer), or a train.setup.Setup. The first micro-batch is traced.
        card: the card checked (a name, alias or size like '24GiB'), else every catalog card with all_cards, else
            the featured ones. reserve, context_bytes, fragmentation: as estimate_memory's.
        expandable_segments: PyTorch's allocator with expandable segments, in the replay.
        grads_kept: zero_grad(set_to_none=False) between the steps (the gradients stay through the forward).
        progress: called with the name of each phase as it starts.
    Raises:
        InputError: a factory that returns a bare module (no input), a setup that is not one, an op that cannot
            run on fake tensors (named with the module that called it). MissingDependencyError: no torch.
    """
    from ..hardware.cards import all_cards as catalog_cards, find_card
    from .fit import fit_cards

    loaded, where = _load(setup)
    traced = _trace(loaded, where, expandable=expandable_segments, grads_kept=grads_kept, progress=progress)
    spec, w = traced.spec, traced.workload
    est = finish_estimate(spec, w, traced.phases, reserve=reserve, context_bytes=context_bytes,
                          fragmentation=fragmentation, method="traced", notes=traced.notes, top_modules=traced.top,
                          simulated_reserved=traced.reserved if fragmentation is None else None)
    # the workload's own notes speak of campaign's options for a model it builds; the step here is the user's
    est = replace(est, trainable_params=traced.trainable,
                  notes=tuple(n for n in est.notes if not n.startswith("--grad-checkpointing")))
    cards = [find_card(card)] if card else list(catalog_cards()) if all_cards else [find_card(n) for n in
                                                                                     FEATURED_CARDS]
    fits = fit_cards(spec, w, cards, solve=False, estimate=est, reserve=reserve, fragmentation=fragmentation)
    return ModulePlan(est, tuple(fits), card, setup=where, model_class=traced.model_class, inputs=traced.inputs,
                      optimizer=traced.optimizer)


def _load(setup: Any) -> tuple[Any, str]:
    """The Setup and its 'FILE.py:FACTORY'; a bare module is refused (nothing to run it on)."""
    from ..train.setup import Setup, _checked, _from, run_factory

    if isinstance(setup, Setup):
        where = setup.source or "the setup"
        return _checked(setup, where), where
    made, where = run_factory(str(setup))
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    if isinstance(made, torch.nn.Module):
        raise InputError(f"{where} returned a bare {type(made).__name__}: campaign trace needs an input to run it on; "
                         "return the setup instead: {'model': model, 'batches': [batch], 'loss': loss_fn, "
                         "'optimizer': optimizer} (loss(model, batch) and the optimizer optional)")
    loaded = _from(made, where)
    loaded.source = where
    return _checked(loaded, where), where


@dataclass(frozen=True)
class _Traced:
    spec: ModelSpec
    workload: Any
    phases: tuple[Phase, ...]
    reserved: int
    top: tuple[tuple[str, int], ...]
    trainable: int
    notes: tuple[str, ...]
    model_class: str
    inputs: tuple[tuple[str, str], ...]
    optimizer: str


def _trace(setup: Any, where: str, *, expandable: bool, grads_kept: bool,
           progress: Callable[[str], None] | None) -> _Traced:
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    from ..train.step import loss_of
    from .trace import _as_on_cuda, _phase

    tell = progress or (lambda _phase: None)
    real = setup.model
    notes: list[str] = [f"your own model ({where}), traced on fake CPU tensors: the first micro-batch, two steps of "
                        "your loss and optimizer; the phases shown are the second step's"]
    mode = FakeTensorMode(allow_non_fake_inputs=True)  # a tensor kept outside parameters and buffers: a constant
    phases: list[Phase] = []
    with mode, _as_on_cuda(torch, notes):
        tell("build")
        net, fake_of = _fake_model(torch, mode, real)
        batch = {k: _fake_value(torch, mode, v) for k, v in setup.batches[0].items()}
        optimizer, opt_name, opt_note = _fake_optimizer(torch, setup.optimizer, fake_of, net)
        if opt_note:
            notes.append(opt_note)
        tracker = _naming_tracker(expandable)
        tracker.modules_at_peak = {}
        for t in [*net.parameters(), *net.buffers()]:
            tracker.register(t, "weights")
        for t in _tensors(torch, batch):
            tracker.register(t, "activations")   # the micro-batch on the card
        tracker.track_gradients(net.parameters())
        with tracker:
            tracker.phase("activations")
            phases.append(_phase(tracker, "load", "weights and the micro-batch on the card"))
            for step in range(TRACE_STEPS):
                tracker.phase("activations")
                tell(f"forward (step {step + 1})")
                loss = _run(tracker, net, where, "forward and loss", lambda: loss_of(net, batch, setup.loss))
                fwd = _phase(tracker, "forward", "peak of the forward, loss included")
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
                    raise InputError(f"{where}: the loss is not a scalar tensor with a gradient (got "
                                     f"{_describe(loss)}); return loss(model, batch) -> a scalar")
                tracker.phase("temporaries")
                tell(f"backward (step {step + 1})")
                _run(tracker, net, where, "backward", loss.backward)
                del loss
                bwd = _phase(tracker, "backward", "peak of the backward")
                for p in net.parameters():
                    if p.grad is not None:
                        tracker.register(p.grad, "gradients")
                tracker.phase("temporaries")
                tell(f"optimizer step (step {step + 1})")
                _run(tracker, net, where, "optimizer step", optimizer.step)
                st = _phase(tracker, "optimizer step", "peak inside optimizer.step()")
                host_steps = not (optimizer.defaults.get("fused") or optimizer.defaults.get("capturable"))
                for state in optimizer.state.values():
                    for key, value in state.items():
                        if not isinstance(value, torch.Tensor):
                            continue
                        if key == "step" and value.dim() == 0 and host_steps:
                            tracker.forget(value)  # torch keeps step counters on the host unless fused
                        else:
                            tracker.register(value, "optimizer states")
                optimizer.zero_grad(set_to_none=not grads_kept)
                if step == TRACE_STEPS - 1:
                    phases += [fwd, bwd, st]
    peak_name = max(phases, key=lambda p: p.bytes).name
    top = tuple(sorted(((m, b) for m, b in tracker.modules_at_peak.get(peak_name, {}).items() if b > 0),
                       key=lambda r: -r[1])[:8])
    params = {id(p): p for p in real.parameters()}
    total = sum(p.numel() for p in params.values())
    trainable = sum(p.numel() for p in params.values() if p.requires_grad)
    dtype = _dtype_name(torch, params.values())
    inputs = tuple((k, f"{' x '.join(map(str, v.shape))} {str(v.dtype).removeprefix('torch.')}")
                   for k, v in setup.batches[0].items() if isinstance(v, torch.Tensor))
    rows = next((int(v.shape[0]) for v in setup.batches[0].values() if isinstance(v, torch.Tensor) and v.dim()), 1)
    opt_kind = ("sgd" if isinstance(optimizer, torch.optim.SGD) else
                "adamw" if isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam)) else
                "adafactor" if isinstance(optimizer, getattr(torch.optim, "Adafactor", ())) else "none")
    impl = "fused" if optimizer.defaults.get("fused") else "loop" if optimizer.defaults.get("foreach") is False \
        else "foreach"
    w = make_workload(mode="train", method="full", dtype=dtype, batch=max(rows, 1), seq_len=1, optimizer=opt_kind,
                      optimizer_impl=impl, expandable_segments=expandable, grads_kept=grads_kept)
    model_class = f"{type(real).__module__}.{type(real).__qualname__}"
    spec = ModelSpec(name=f"{type(real).__name__} ({where})", model_type="module", architecture=type(real).__name__,
                     source=where, hidden_size=0, num_layers=0, num_heads=0, num_kv_heads=0, head_dim=0,
                     intermediate_size=0, vocab_size=0, max_position=1, tie_embeddings=False, mlp="plain",
                     groups=(ParamGroup("parameters", "other", (total,)),) if total else (), attention=(),
                     params_exact=total, params_method="module")
    return _Traced(spec, w, tuple(phases), tracker.allocator.peak_reserved, top, trainable, tuple(notes),
                   model_class, inputs, opt_name)


def _naming_tracker(expandable: bool) -> Any:
    """The storage tracker, remembering the first op that failed and the module whose forward was running."""
    from .tracker import StorageTracker

    class NamingTracker(StorageTracker):
        failed: tuple[Any, str | None] | None = None

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            try:
                out = super().__torch_dispatch__(func, types, args, kwargs)
            except Exception:
                if self.failed is None:  # the innermost op: an op that fails inside another fails first
                    self.failed = (func, self.mods.current)
                raise
            self.failed = None  # a failure the code caught and went on from is not the one that stops it
            return out

    return NamingTracker(expandable=expandable)


def _run(tracker: Any, net: Any, where: str, what: str, fn: Callable[[], Any]) -> Any:
    """fn(), an exception turned into one line: the op that failed on fake tensors and the module that called it."""
    try:
        return fn()
    except InputError:
        raise
    except Exception as e:
        from ..train.setup import first_line

        func, module = tracker.failed or (None, None)
        in_module = _module_words(net, module)
        kind = type(e).__name__
        if func is not None and kind in _WHY:
            raise InputError(f"{where}: {_op_name(func)} cannot run on fake tensors in {in_module}, during the "
                             f"{what}: "
                             f"{_WHY[kind]}; {_FIX}") from None
        op = f" at {_op_name(func)}" if func is not None else ""
        raise InputError(f"{where}: the {what} raised {kind}{op} in {in_module} on fake tensors: {first_line(e)}")\
            from None


_OPS = {"_local_scalar_dense": "Tensor.item()"}  # aten ops a user writes under another name


def _op_name(func: Any) -> str:
    """'aten.nonzero.default' -> 'torch.nonzero (aten.nonzero.default)'; '.item()' by its own name."""
    name = str(func)
    if not name.startswith("aten."):
        return name
    base = name.split(".")[1]
    return f"{_OPS.get(base, 'torch.' + base)} ({name})"


def _module_words(net: Any, path: str | None) -> str:
    """'the module Net.blocks.1 (Gate)', from the module stack's path (its root's class name first)."""
    if path is None:
        return "no module's forward (the loss function, autograd or the optimizer)"
    sub = path.split(".", 1)[1] if "." in path else ""
    try:
        cls = type(net.get_submodule(sub)).__name__
    except AttributeError:
        return f"the module {path}"
    return f"the module {path} ({cls})"


def _fake_model(torch: Any, mode: Any, real: Any) -> tuple[Any, dict[int, Any]]:
    """A copy of the user's module whose parameters and buffers are fake tensors of the same shapes, dtypes and
    strides (ties kept: one fake per real tensor); meta tensors become fake CPU ones. The user's module is not
    touched: the copy is made with a deepcopy memo that maps each real tensor to its fake."""
    fake_of: dict[int, Any] = {}
    memo: dict[int, Any] = {}
    for p in real.parameters():
        if id(p) not in fake_of:
            fake = _fake_tensor(torch, mode, p.detach())
            fake_of[id(p)] = memo[id(p)] = torch.nn.Parameter(fake, requires_grad=p.requires_grad)
    for b in real.buffers():
        if id(b) not in memo:
            memo[id(b)] = _fake_tensor(torch, mode, b)
    try:
        return copy.deepcopy(real, memo), fake_of
    except Exception as e:
        from ..train.setup import first_line

        raise InputError(f"the setup's model ({type(real).__name__}) cannot be copied onto fake tensors: deepcopy "
                         f"raised {type(e).__name__}: {first_line(e)}; keep what cannot be copied (a file, a lock, "
                         "a process) out of the module's attributes") from None


def _fake_tensor(torch: Any, mode: Any, t: Any) -> Any:
    if t.is_meta:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)
    return mode.from_tensor(t)


def _fake_value(torch: Any, mode: Any, v: Any) -> Any:
    """A batch value with its tensors fake (nested lists, tuples and dicts too); other values as they are."""
    if isinstance(v, torch.Tensor):
        return _fake_tensor(torch, mode, v)
    if isinstance(v, Mapping):
        return {k: _fake_value(torch, mode, x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_fake_value(torch, mode, x) for x in v)
    return v


def _tensors(torch: Any, v: Any) -> list[Any]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, Mapping):
        return [t for x in v.values() for t in _tensors(torch, x)]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(torch, x)]
    return []


def _fake_optimizer(torch: Any, real: Any, fake_of: dict[int, Any], net: Any) -> tuple[Any, str, str]:
    """The user's optimizer class over the fake parameters, with each group's settings (the optimizer, its
    qualified class name, a note). Left to its default (foreach=None), torch's own optimizers take the foreach path
    on a CUDA card and the loop on the CPU: traced as a card runs them (foreach)."""
    if real is None:
        params = [p for p in net.parameters() if p.requires_grad]
        return (torch.optim.AdamW(params, lr=1e-3, foreach=True), "torch.optim.AdamW",
                f"the setup gives no optimizer: traced with {DEFAULT_OPTIMIZER}; return yours as the setup's "
                "optimizer")
    cls = type(real)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(real, torch.optim.Optimizer):
        raise InputError(f"the setup's optimizer is a {type(real).__name__}, not a torch.optim.Optimizer")
    groups = []
    for g in real.param_groups:
        missing = [p for p in g["params"] if id(p) not in fake_of]
        if missing:
            raise InputError(f"the setup's optimizer ({cls.__name__}) holds {len(missing)} tensor(s) that are not "
                             "parameters of the model: build it from model.parameters()")
        groups.append({**g, "params": [fake_of[id(p)] for p in g["params"]]})
    defaults = dict(real.defaults)
    note = ""
    if "foreach" in defaults and defaults["foreach"] is None and not defaults.get("fused"):
        defaults["foreach"] = True
        for g in groups:
            if g.get("foreach") is None:
                g["foreach"] = True
        note = (f"{cls.__name__} with foreach=None (its default) traced with foreach=True, as torch runs it on a "
                "CUDA card (the CPU would take its per-tensor loop)")
    try:  # the constructor's own keywords from the defaults (each group carries every setting anyway)
        accepted = inspect.signature(cls.__init__).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
            defaults = {k: v for k, v in defaults.items() if k in accepted}
        return cls(groups, **defaults), name, note
    except Exception as e:
        from ..train.setup import first_line

        raise InputError(f"the setup's optimizer: {name}(param_groups, **defaults) raised {type(e).__name__}: "
                         f"{first_line(e)}; campaign traces a new one of the same class over fake parameters")\
            from None


def _dtype_name(torch: Any, params: Any) -> str:
    """The dtype most parameter elements have, as campaign names it (fp32, bf16, fp16)."""
    counts: dict[Any, int] = {}
    for p in params:
        counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    if not counts:
        return "fp32"
    top = max(counts, key=lambda d: counts[d])
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(top, "fp32")


def _describe(v: Any) -> str:
    shape = getattr(v, "shape", None)
    return f"a tensor of shape {tuple(shape)}" if shape is not None else type(v).__name__

