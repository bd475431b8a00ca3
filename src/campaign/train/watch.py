"""The child process of `campaign check -- python SCRIPT ARGS`: the user's script run unchanged, watched through
torch's global hooks, stopped after a few optimizer updates; what was seen goes to a JSON file the parent reads
(train/watch_checks.py turns it into checks).

    python -m campaign.train.watch --out OBSERVED.json --updates 3 --timeout 120 -- SCRIPT ARGS...
    python -m campaign.train.watch --out OBSERVED.json -- -m MODULE ARGS...

The observers, installed before the script's first line runs:
- module forward pre/post hooks (global): the outermost forward of each call (the "root": the model, or a loss
  module beside it), the dropout modules that ran inside it and their mode, its inputs (kept for the probes after
  the updates), and a gradient hook on its outputs that marks it as a training forward when a backward reaches it;
- torch.autograd.backward: the loss each backward starts from, and how many backwards an update has (beside the
  loss the model's forward returned: the loop's own scaling, for the accumulation probe, train/watch_accumulation.py);
  the forwards run inside a backward (gradient checkpointing's recomputation) are not the loop's and are not watched;
- optimizer step pre/post hooks: the update count, the learning rates, the gradients (finite; and, from the first
  update on, a hook on each parameter that sees its .grad just before the next gradient is added: still holding the
  previous update's gradient means no zero_grad ran between updates), the parameters before and after the last
  watched update; after the N-th update the script is stopped by a private exception (a BaseException, which the
  script's own `except Exception` does not catch). A step given a closure (Lightning's optimizer.step(closure))
  runs the update's last forward and backward inside the step: the update is read when its closure has run;
- LRScheduler.step: the scheduler steps between two updates (the outermost call only: SequentialLR steps its own);
- torch.save: the checkpoints written within the watched updates;
- with --resume-record / --resume-compare (train/watch_resume.py): the update after the last checkpoint (the first
  run) or the first update (the run resumed from it), captured to compare the two.
Under torchrun (WORLD_SIZE > 1: `campaign check --processes N`, train/watch_ranks.py) each rank writes its own
record, with a digest of the micro-batches it fed at each update, a checksum of each parameter tensor's bits after
it, and fingerprints of the gradient its optimizer applies and of its own gradient (hooks on the parameters add up
each gradient a backward computes for them, before DDP all-reduces it); the probes run on rank 0 only, on the model
DDP wraps.
A watchdog thread writes what was seen and ends the process at --timeout, naming where the script was.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from typing import Any

from .grad_fingerprint import fingerprint
from .watch_probes import _own_loss, _tensors

# the phases named when the script is stopped at --timeout
STARTING = "importing and starting the script (before its first model forward)"


class Enough(BaseException):
    """Raised from the optimizer's step post hook once the watched updates are done: not an Exception, so that the
    script's own `except Exception` lets it through."""


def _lrs(optimizer: Any) -> tuple[float, ...]:
    return tuple(float(g.get("lr", 0.0)) for g in optimizer.param_groups)


def _closure(optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, int | None]:
    """The closure an optimizer.step call was given, and where: None for the keyword, else its index in the hook's
    arguments (which start with the optimizer itself)."""
    if callable(kwargs.get("closure")):
        return kwargs["closure"], None
    first = 1 if args and args[0] is optimizer else 0
    if len(args) > first and callable(args[first]):
        return args[first], first
    return None, None


def _bits(t: Any) -> Any:
    """A tensor's bits as integers of its width (bitwise comparison without copying it off its device)."""
    import torch

    width = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()]
    return t.detach().contiguous().view(width)


def _digest(batches: list[tuple[Any, Any]]) -> str | None:
    """A digest of the tensors of the micro-batches an update fed its model (None: no tensor among them)."""
    import hashlib

    import torch

    h, found = hashlib.sha1(), False
    for args, kwargs in batches:
        for v in [*args, *(kwargs or {}).values()]:
            if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.element_size() in (1, 2, 4, 8) \
                    and not v.is_complex():
                h.update(_bits(v).flatten()[:1 << 20].cpu().numpy().tobytes())
                found = True
    return h.hexdigest() if found else None




def _from_trainer(depth: int = 8) -> bool:
    """Whether the torch.save being called comes from transformers' Trainer (its checkpoint), a few frames up."""
    frame: Any = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").startswith("transformers.") and \
                frame.f_code.co_name.startswith("_save"):
            return True
        frame = frame.f_back
    return False


class Watcher:
    """What the observers saw, and the hooks that see it."""

    def __init__(self, updates: int, bare: bool = False, resume: Any = None) -> None:
        self.target = updates
        self.bare = bare
        self.resume = resume                            # a watch_resume.ResumeCapture, or None
        self.step = 0
        self.phase = STARTING
        self.depth = 0
        # inside a backward: the forwards that run there are gradient checkpointing's recomputation (stopped early by
        # an exception, so their post hooks may never run), not the loop's forwards
        self.backward_depth = 0
        self.current: dict[str, Any] | None = None      # the root forward running now
        self.forwards: list[dict[str, Any]] = []        # root forwards with grad since the last update
        self.updates: list[dict[str, Any]] = []
        self.losses: list[float] = []                   # backward losses since the last update
        self.scheduler_depth = 0
        self.scheduler_steps = 0
        # the scheduler's steps since the last update, in bursts: steps with no forward, backward or optimizer step
        # between them are one call of the loop's (accelerate's prepared scheduler steps its scheduler once per
        # process at each call: the schedule counts one process's batches)
        self.scheduler_bursts: list[int] = []
        self.burst_open = False
        self.lr_changes = 0
        self.last_lrs: tuple[float, ...] | None = None
        self.saves: list[dict[str, Any]] = []
        self.optimizer: Any = None
        self.model: Any = None
        self.batch: tuple[Any, Any] | None = None       # (args, kwargs) of the last training forward of the model
        self.last_update: dict[str, Any] | None = None  # the model's micro-batches, own and backward losses
        self.fed: list[tuple[Any, Any]] = []            # every micro-batch the model was trained on
        self.first_grads: dict[int, Any] = {}           # param id -> |old .grad| summed (0-dim), or None
        self.stochastic: dict[int, bool] = {}
        self.names: dict[int, str] = {}
        self.module_names: dict[int, str] = {}
        self.eval_dropout: dict[str, int] = {}          # dropout module -> the first update it ran in eval
        self.dropout_seen: set[str] = set()
        self.root_eval: list[int] = []
        self.before: dict[str, Any] | None = None
        self.max_lrs: list[float] = []
        self.params: dict[str, Any] | None = None
        self.started = time.perf_counter()
        self.ranked = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1      # under torchrun: cross-rank facts
        self.param_names: list[str] = []
        # under torchrun: each trainable parameter's gradient fingerprint summed over the backwards of the update,
        # read by a hook on the parameter as each gradient arrives, before DDP all-reduces it (the rank's own)
        self.local: dict[int, Any] = {}
        self.hooked: set[int] = set()
        self.probe: dict[int, Any] = {}
        # under torchrun: the factor gradient clipping (clip_grad_norm_) scaled the gradients by since the last
        # update, so that the gradient the optimizer applies is compared with the ranks' mean before clipping
        self.clipped = 1.0
        self.step_times: list[float] = []
        self.handles: list[Any] = []
        self.lock = threading.Lock()

    # --- installing -----------------------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        from torch.optim import optimizer as opt
        self.handles.append(opt.register_optimizer_step_post_hook(self.after_step))
        if self.bare:
            return
        self.handles.append(opt.register_optimizer_step_pre_hook(self.before_step))
        mod = torch.nn.modules.module
        self.handles.append(mod.register_module_forward_pre_hook(self.forward_pre))
        try:    # the kwargs of a module's very first call reach only a global hook given them
            self.handles.append(mod.register_module_forward_hook(self.forward_post_kwargs, with_kwargs=True))
        except TypeError:    # an older torch: the module's own hook, from its second call on
            self.handles.append(mod.register_module_forward_hook(self.forward_post))
        backward = torch.autograd.backward

        def watched_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self.depth = 0            # a forward that raised never ran its post hook
            self.burst_open = False
            self.phase = f"backward (after {self.step} updates)"
            t = tensors[0] if isinstance(tensors, (tuple, list)) and tensors else tensors
            if isinstance(t, torch.Tensor) and t.numel() == 1:
                self.losses.append(float(t.detach().float()))
            self.backward_depth += 1
            try:
                return backward(tensors, *args, **kwargs)
            finally:
                self.backward_depth -= 1
                self.depth = 0

        torch.autograd.backward = watched_backward   # Tensor.backward calls torch.autograd.backward
        if self.ranked:
            self._watch_clipping()
        sched = torch.optim.lr_scheduler.LRScheduler
        step = sched.step

        def watched_step(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
            self.scheduler_depth += 1
            try:
                return step(scheduler, *args, **kwargs)
            finally:
                self.scheduler_depth -= 1
                if self.scheduler_depth == 0:
                    self.scheduler_steps += 1
                    if self.burst_open:
                        self.scheduler_bursts[-1] += 1
                    else:
                        self.scheduler_bursts.append(1)
                        self.burst_open = True
                    self._lr_moved()

        sched.step = watched_step  # type: ignore[method-assign]
        if self.resume is not None:
            init = sched.__init__
            capture = self.resume

            def watched_init(scheduler: Any, *args: Any, **kwargs: Any) -> None:
                init(scheduler, *args, **kwargs)
                capture.scheduler_built(scheduler)

            sched.__init__ = watched_init  # type: ignore[method-assign]
        save = torch.save
        if self.resume is not None:
            self.resume.save = save

        def watched_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            if self.step:
                self.saves.append({"update": self.step, "path": os.fspath(f) if isinstance(f, (str, os.PathLike))
                                   else type(f).__name__, "trainer": _from_trainer()})
                if self.resume is not None and self.ranked:
                    self.resume.shared(self.step, self.saves[-1]["path"])
            return save(obj, f, *args, **kwargs)

        torch.save = watched_save

    def _watch_clipping(self) -> None:
        """Gradient clipping by the total norm (torch's clip_grad_norm_, the Trainer's and accelerate's
        clip_grads_with_norm_): the factor it multiplies every gradient by, min(1, max_norm / (norm + 1e-6)) as
        torch computes it, recorded for ddp.grad_is_mean."""
        import torch.nn.utils as utils
        from torch.nn.utils import clip_grad

        clip = clip_grad._clip_grads_with_norm_

        def watched_clip(parameters: Any, max_norm: float, total_norm: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                self.clipped *= min(1.0, float(max_norm) / (float(total_norm) + 1e-6))
            except (TypeError, ValueError):    # a norm that is not one number: nothing recorded
                pass
            return clip(parameters, max_norm, total_norm, *args, **kwargs)

        clip_grad._clip_grads_with_norm_ = watched_clip  # type: ignore[assignment]
        utils.clip_grads_with_norm_ = watched_clip  # type: ignore[assignment]
        by_value = clip_grad.clip_grad_value_

        def watched_value(*args: Any, **kwargs: Any) -> Any:
            self.clipped = float("nan")       # clipped entry by entry: no one factor
            return by_value(*args, **kwargs)

        clip_grad.clip_grad_value_ = watched_value  # type: ignore[assignment]
        utils.clip_grad_value_ = watched_value  # type: ignore[assignment]

    # --- forwards -----------------------------------------------------------------------------------------
    def _is_stochastic(self, module: Any) -> bool:
        known = self.stochastic.get(id(module))
        if known is None:
            from .probes import _stochastic

            known = self.stochastic[id(module)] = _stochastic(module)
        return known

    def forward_pre(self, module: Any, args: Any) -> None:
        import torch

        if self.backward_depth:
            return
        if self.depth == 0:
            self.burst_open = False
            self.phase = f"forward of {type(module).__name__} (after {self.step} updates)"
            self.current = {"module": module, "drop": {}, "grad": False, "args": args, "kwargs": None,
                            "training": bool(module.training)} if torch.is_grad_enabled() else None
            if self.current is not None and not getattr(module, "_campaign_watched", False):
                try:   # the kwargs reach only a module's own hook; the global one sees the positional inputs
                    module.register_forward_pre_hook(self._kwargs, with_kwargs=True)
                    setattr(module, "_campaign_watched", True)  # noqa: B010 - nn.Module's __setattr__
                except Exception:  # noqa: S110 - a module that refuses attributes: positional inputs only
                    pass
            if self.optimizer is not None:
                self._lr_moved()
            if self.ranked and self.current is not None:
                self._hook_local(module)
        elif self.current is not None and self._is_stochastic(module):
            drop = self.current["drop"]
            drop[id(module)] = drop.get(id(module), True) and bool(module.training)
        self.depth += 1

    def _hook_local(self, module: Any) -> None:
        """Hooks on the parameters of a root module trained under torchrun: each gradient a backward computes for
        them, added to the rank's own (local) gradient fingerprint of the update, before any communication."""
        for p in module.parameters():
            if p.requires_grad and id(p) not in self.hooked:
                self.hooked.add(id(p))
                p.register_hook(lambda g, p=p: self._local(p, g))

    def _local(self, p: Any, g: Any) -> None:
        if self.step >= self.target or g is None:
            return
        f = fingerprint(g, self.probe)
        had = self.local.get(id(p))
        self.local[id(p)] = f if had is None else had + f

    def _kwargs(self, module: Any, args: Any, kwargs: Any) -> None:
        if self.current is not None and self.current["module"] is module:
            self.current["kwargs"] = dict(kwargs)

    def forward_post_kwargs(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if self.depth == 1 and self.current is not None and self.current["module"] is module \
                and self.current["kwargs"] is None:
            self.current["kwargs"] = dict(kwargs)
        self.forward_post(module, args, output)

    def forward_post(self, module: Any, args: Any, output: Any) -> None:
        if self.backward_depth:
            return
        self.depth = max(self.depth - 1, 0)
        if self.depth or self.current is None or self.current["module"] is not module:
            return
        record, self.current = self.current, None
        outs = [t for t in _tensors(output) if t.requires_grad]
        if not outs:
            return

        def reached(_grad: Any, record: dict[str, Any] = record) -> None:
            record["grad"] = True

        for t in outs:
            t.register_hook(reached)
        own = _own_loss(output)
        # a copy: the loop may scale it in place (the Trainer: loss *= world size); no sync: read after the updates
        record["own"] = own.detach().clone() if own is not None else None
        self.forwards.append(record)
        self.phase = f"the loop's own code after a forward of {type(module).__name__} (after {self.step} updates)"

    def _lr_moved(self) -> None:
        if self.optimizer is None:
            return
        now = _lrs(self.optimizer)
        if self.last_lrs is not None and now != self.last_lrs:
            self.lr_changes += 1
        self.last_lrs = now

    # --- updates ------------------------------------------------------------------------------------------
    def _model_of(self, trained: list[dict[str, Any]], optimizer: Any) -> Any:
        if self.model is not None and any(r["module"] is self.model for r in trained):
            return self.model          # found at an earlier update: not counted again (the per-update cost)
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best, size = None, 0
        for r in trained:
            n = sum(p.numel() for p in r["module"].parameters() if id(p) in held)
            if n > size:
                best, size = r["module"], n
        return best

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """The optimizer's step pre hook. A step given a closure (Lightning, LBFGS: optimizer.step(closure)) runs
        the update's last forward and backward inside the step, after this hook: the update is read once the
        closure has run (the closure is wrapped, through the hook's returned arguments), so that it is the update
        the optimizer applies, not the previous one's last micro-batch with this one's first."""
        self.phase = f"optimizer step {self.step + 1}"
        self.depth = 0
        closure, where = _closure(optimizer, args, kwargs)
        if closure is None:
            self._before_update(optimizer)
            return None
        ran = [False]

        def watched_closure(*a: Any, **k: Any) -> Any:
            if ran[0]:         # an optimizer that calls it again (LBFGS's line search) re-evaluates the same update:
                forwards, losses = len(self.forwards), len(self.losses)     # not micro-batches of the next one
                try:
                    return closure(*a, **k)
                finally:
                    del self.forwards[forwards:], self.losses[losses:]
                    self.first_grads = {}
            result = closure(*a, **k)
            ran[0] = True
            self.phase = f"optimizer step {self.step + 1}"
            self.depth = 0
            self._before_update(optimizer)
            return result

        if where is None:
            return args, {**kwargs, "closure": watched_closure}
        return (*args[:where], watched_closure, *args[where + 1:]), kwargs

    def _before_update(self, optimizer: Any) -> None:
        import torch

        trained = [r for r in self.forwards if r["grad"]]
        if self.optimizer is None:
            self.optimizer = optimizer
        if optimizer is not self.optimizer:
            return
        model = self._model_of(trained, optimizer)
        if model is not None and model is not self.model:
            self.model = model
            self.names = {id(p): n for n, p in model.named_parameters()}
            self.module_names = {id(m): n for n, m in model.named_modules()}
        self._lr_moved()
        update: dict[str, Any] = {"update": self.step + 1, "lrs": list(_lrs(optimizer)),
                                  "backwards": len(self.losses), "losses": list(self.losses),
                                  "forwards": len(trained)}
        if self.step >= 1:
            update["scheduler_steps"] = self.scheduler_steps
            update["scheduler_bursts"] = list(self.scheduler_bursts)
            update["lr_changes"] = self.lr_changes
            seen = [(pid, n) for pid, n in self.first_grads.items() if n is not None]
            carried: list[str] = []
            if seen:
                nonzero = torch.stack([n.float() for _, n in seen]).ne(0).tolist()
                carried = [self.names.get(pid, "?") for (pid, _), hit in zip(seen, nonzero, strict=True) if hit]
            update["grads_checked"] = len(self.first_grads)
            update["grads_carried"] = carried
        grads = [(p, p.grad) for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            norms = torch._foreach_norm([g.detach().float() for _, g in grads])
            finite = bool(torch.isfinite(torch.stack(norms)).all())
            update["grads_finite"] = finite
            if not finite:
                update["nonfinite"] = [self.names.get(id(p), "?") for (p, _), n in zip(grads, norms, strict=True)
                                       if not bool(torch.isfinite(n))][:20]
        if self.resume is not None and self.resume.wanted(self.step, self.saves):
            self.resume.before(self.step, self.saves, optimizer,
                               [(r["args"], r["kwargs"]) for r in trained if r["module"] is self.model], self.losses)
        mine = [r for r in trained if r["module"] is self.model]
        if self.ranked:
            update["fed"] = _digest([(r["args"], r["kwargs"]) for r in mine])
            self._gradients(optimizer, update, mine)
        self.fed.extend((r["args"], r["kwargs"]) for r in mine)
        self.last_update = {"batches": [(r["args"], r["kwargs"]) for r in mine], "backward": list(self.losses),
                            "own": [r.get("own") for r in mine]}
        for r in trained:
            if r["module"] is self.model:
                self.batch = (r["args"], r["kwargs"])
                if not r["training"]:
                    self.root_eval.append(self.step + 1)
                for mid, training in r["drop"].items():
                    name = self.module_names.get(mid)
                    if name is None:
                        continue
                    self.dropout_seen.add(name)
                    if not training:
                        from .probes import _trains_near

                        if _trains_near(self.model, name):
                            self.eval_dropout.setdefault(name, self.step + 1)
        if self.step == 0:
            self._membership(optimizer)
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if p.requires_grad:
                        p.register_hook(lambda _g, p=p: self._incoming(p))
        if self.step == 0 and self.model is not None:     # compared after the last watched update
            self.before = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.max_lrs = [max(a, b) for a, b in zip(self.max_lrs, _lrs(optimizer), strict=False)] \
            if self.max_lrs else list(_lrs(optimizer))
        self.updates.append(update)
        self.forwards, self.losses = [], []
        self.scheduler_steps = self.lr_changes = 0
        self.scheduler_bursts, self.burst_open = [], False
        self.first_grads = {}

    def _gradients(self, optimizer: Any, update: dict[str, Any], mine: list[dict[str, Any]]) -> None:
        """Under torchrun: the fingerprints of the gradient the optimizer applies and of the rank's own gradient,
        over the trainable parameters the optimizer holds, for ddp.grad_is_mean; and, where the model returns its
        own loss, the loop's scaling of each micro-batch (the loss it backpropagated over the model's)."""
        import torch

        held = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        if held and all(id(p) in self.hooked for p in held):
            zero = torch.zeros(2, dtype=torch.float64)
            applied = [fingerprint(p.grad, self.probe) if p.grad is not None else zero.to(p.device) for p in held]
            local = [self.local.get(id(p), zero.to(p.device)) for p in held]
            update["grad_applied"] = torch.stack([a.cpu() for a in applied]).tolist()
            update["grad_local"] = torch.stack([a.cpu() for a in local]).tolist()
            update["grad_dtype"] = str(held[0].dtype).removeprefix("torch.")
            update["grad_clipped"] = self.clipped
        own = [o for r in mine if (o := r.get("own")) is not None]
        if own and len(own) == len(mine) == len(self.losses):
            own_f = [float(o.float()) for o in own]
            if all(o != 0 and abs(o) < float("inf") for o in own_f):
                update["loss_factors"] = [b / o for b, o in zip(self.losses, own_f, strict=True)]
        self.local = {}
        self.clipped = 1.0

    def _incoming(self, p: Any) -> None:
        if self.step >= 1 and id(p) not in self.first_grads:
            self.first_grads[id(p)] = None if p.grad is None else p.grad.detach().abs().sum()

    def _membership(self, optimizer: Any) -> None:
        if self.model is None:
            return
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        named = list(self.model.named_parameters())
        self.params = {
            "trainable": sum(p.requires_grad for _, p in named), "frozen": sum(not p.requires_grad for _, p in named),
            "missing": [n for n, p in named if p.requires_grad and id(p) not in held],
            "frozen_held": [n for n, p in named if not p.requires_grad and id(p) in held]}

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.optimizer is not None and optimizer is not self.optimizer:
            return
        self.optimizer = optimizer
        self.step += 1
        self.step_times.append(time.perf_counter())
        if self.ranked and self.model is not None and self.updates:
            import torch

            named = list(self.model.named_parameters())
            self.param_names = [n for n, _ in named]
            sums = [_bits(p).sum(dtype=torch.int64) for _, p in named]
            self.updates[-1]["param_sums"] = torch.stack(sums).tolist() if sums else []
        if self.resume is not None and self.resume.pending is not None:
            self.resume.after(self.model)
        self.phase = f"the loop's own code after update {self.step}"
        if self.step >= self.target and self.before is not None and self.params is not None \
                and self.model is not None:
            import torch

            zero = {id(p) for g, top in zip(optimizer.param_groups, self.max_lrs, strict=False) if top == 0
                    for p in g["params"]}
            named = list(self.model.named_parameters())
            moved = {n for n, p in named if not torch.equal(p.detach(), self.before[n])}
            self.params |= {"update": self.step,
                            "unchanged": [n for n, p in named if p.requires_grad and n not in moved],
                            "frozen_changed": [n for n, p in named if not p.requires_grad and n in moved],
                            "zero_lr": [n for n, p in named if id(p) in zero]}
            self.before = None
        if self.step >= self.target:
            raise Enough()

    # --- the record -----------------------------------------------------------------------------------------
    def observed(self, finished: str, error: str | None = None) -> dict[str, Any]:
        times = self.step_times
        return {"finished": finished, "error": error, "phase": self.phase, "updates_seen": self.step,
                "model": type(self.model).__name__ if self.model is not None else None,
                "updates": self.updates, "params": self.params, "saves": self.saves,
                "dropout_seen": sorted(self.dropout_seen), "eval_dropout": self.eval_dropout,
                "root_eval": self.root_eval, "param_names": self.param_names,
                "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
                "seconds_to_first_update": times[0] - self.started if times else None,
                "seconds_per_update": (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None}


def _write(path: str, data: dict[str, Any]) -> None:
    from ..io import atomic_write_json

    atomic_write_json(path, data)


def _error_line(e: BaseException, script: str) -> str:
    """The exception and the innermost line of the user's script it came through."""
    where = ""
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == os.path.abspath(script):
            where = f" at line {frame.lineno}"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}{where}: {text[0] if text else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m campaign.train.watch")
    parser.add_argument("--out", required=True)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--bare", action="store_true", help="only count and stop the updates (overhead baseline)")
    parser.add_argument("--resume-record", help="capture the update after the last checkpoint into this file")
    parser.add_argument("--resume-compare", help="compare the first update with the capture in this file")
    parser.add_argument("--trainer-checkpoint", help="make transformers' Trainer.train resume from this checkpoint")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    module = command[0] == "-m"
    target = command[1] if module else command[0]
    capture = None
    rank = int(os.environ.get("RANK", "0") or 0)
    ranked = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    if ns.resume_record or ns.resume_compare:
        from .watch_resume import ResumeCapture

        capture = ResumeCapture("compare" if ns.resume_compare else "record", ns.resume_compare or ns.resume_record,
                                rank if ranked else None)
    watcher = Watcher(ns.updates, bare=ns.bare, resume=capture)
    if watcher.ranked:
        from .watch_ranks import rank_record

        ns.out = rank_record(ns.out, rank)
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(ns.timeout):
            _write(ns.out, watcher.observed("timeout"))
            os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    watcher.install()
    if ns.trainer_checkpoint:
        from .watch_resume import resume_trainer_from

        resume_trainer_from(ns.trainer_checkpoint)
    import runpy

    if module:
        sys.argv = [target, *command[2:]]
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = [target, *command[1:]]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    finished, error = "ended", None
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except Enough:
        finished = "stopped"
    except SystemExit as e:
        if e.code not in (None, 0):
            finished, error = "error", f"the script called exit({e.code!r})"
    except BaseException as e:  # noqa: B036 - the user's script: every failure is reported, then the parent decides
        finished, error = "error", _error_line(e, target)
    for h in watcher.handles:
        h.remove()
    observed = watcher.observed(finished, error)
    if capture is not None:
        watcher.phase = "campaign's comparison of the resumed update"
        try:
            compared = capture.finish()
        except Exception as e:  # noqa: BLE001 - a reference or capture that cannot be read: the check says why
            compared = {"error": f"{type(e).__name__}: {str(e).strip()[:200]}"}
        if compared is not None:
            observed["resume"] = compared
    if watcher.step and watcher.model is not None and not ns.bare and not ns.resume_compare:
        from .watch_probes import probes

        if watcher.ranked:      # the model DDP wraps: its forward and backward start no collective of the ranks
            from torch.nn.parallel import DistributedDataParallel

            if isinstance(watcher.model, DistributedDataParallel):
                watcher.model = watcher.model.module
        if rank == 0:
            watcher.phase = "campaign's probes on the model after the watched updates"
            observed["probes"] = probes(watcher.model, watcher.batch)
            found = observed["probes"]
            if found.get("ids") and not found.get("error"):
                from .watch_batches import batch_facts

                watcher.phase = "campaign's reading of the batches the loop fed"
                observed["batches"] = batch_facts(watcher.fed, found["ids"], found.get("targets"))
        if watcher.last_update is not None:     # on every rank under torchrun: the update is the ranks' together
            from .watch_accumulation import accumulation

            watcher.phase = "campaign's accumulation probe on the last watched update"
            u = watcher.last_update
            observed["accumulation"] = accumulation(watcher.model, u["batches"], u["backward"], u["own"],
                                                    ranked=watcher.ranked)
    done.set()
    _write(ns.out, observed)
    sys.stdout.flush()
    os._exit(0)   # the script's threads (data loader workers, loggers) do not hold the process


if __name__ == "__main__":
    sys.exit(main())
