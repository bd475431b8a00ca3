"""Memory per phase of the loop's own step (forward, backward, optimizer step), beside `campaign memory`'s estimate
of the same workload read off the loop: the micro-batch and sequence length of the update's first micro-batch, the
weights' dtype and the Trainer's mixed precision, gradient checkpointing, the optimizer, the PEFT config.

One update is measured (by default the second: from then on the optimizer's state exists, as in every later step
and in the estimate), with the memory protocol of `campaign measure` (memory/measure.py, MemoryMeter): on a GPU
torch.cuda's peak allocated bytes per phase; on the CPU the bytes the CPU allocator handed out and freed, read off
its own records through the PyTorch profiler, with the model's and optimizer's tensors made before the step
counted too (MemoryMeter.track). Both are counts of what was allocated, not an estimate.

The phases' boundaries come from the loop: the update begins before its first micro-batch's forward (the loop's
step-begin hook); a forward ends when the model's forward returns (a forward hook on the model the loop calls);
a micro-batch's backward ends when the next micro-batch's forward starts or, for the last one, right before the
optimizer step (gradient clipping is counted in it); the optimizer step ends once the loop's optimizer has stepped.
With gradient accumulation each micro-batch's forward and backward are measured, and each phase's row is its
highest: from the second micro-batch on, the gradients summed so far are alive through them, as in the estimate
(Workload.grad_accumulation, which the callbacks read off the loop), made for the micro-batch with the most tokens
(padded per batch, micro-batches differ). A loop whose model is never called as a
module (a LightningModule whose training_step calls a function) gives one phase, "forward and backward".
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from typing import Any

MEASURED_UPDATE = 2


def inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer under the loop's wrappers (accelerate's AcceleratedOptimizer, Lightning's)."""
    seen = 0
    while optimizer is not None and hasattr(optimizer, "optimizer") and seen < 4:
        optimizer, seen = optimizer.optimizer, seen + 1
    return optimizer


def called_module(module: Any) -> Any:
    """The module a LightningModule's training_step calls: the Hugging Face model inside it (the first submodule
    with a `config`), else the module itself (a training_step that calls self(...))."""
    for sub in module.modules():
        if sub is not module and hasattr(sub, "config") and hasattr(sub, "named_parameters"):
            return sub
    return module


class StepMemory:
    """Measures update number `update` of a loop phase by phase (see the module docstring)."""

    def __init__(self, update: int = MEASURED_UPDATE, workload: dict[str, Any] | None = None) -> None:
        self.update = update
        self.workload = dict(workload or {})  # what the loop says that the model does not (mixed precision)
        self.updates = 0
        self.measured: Any = None            # the Measurement, once the update is done
        self.batch: dict[str, Any] = {}      # the first micro-batch's input_ids (for the estimate)
        self.model: Any = None
        self.optimizer: Any = None
        self._meter: Any = None
        self._stack: ExitStack | None = None
        self._phase: ExitStack | None = None
        self._phase_name: str | None = None
        self._hooks: list[Any] = []
        self._forwards = 0

    # -- the loop's hooks ------------------------------------------------------------------------------------------
    def begin(self, model: Any, optimizer: Any, watched: Any = None) -> None:
        """Before an update's first forward. watched: the module whose forward the loop calls (default: model)."""
        if self._stack is not None or self.measured is not None:
            return
        self.updates += 1
        if self.updates != self.update:
            return
        import torch

        from ..memory.measure import MemoryMeter

        device = next(model.parameters()).device
        self.model, self.optimizer = model, inner_optimizer(optimizer)
        self._meter = MemoryMeter("cuda" if device.type == "cuda" else "cpu")
        self._stack = ExitStack()
        self._stack.enter_context(self._meter.around("step"))
        self._meter.track(model)
        if isinstance(self.optimizer, torch.optim.Optimizer):
            self._meter.track(self.optimizer)
        target = watched if watched is not None else model
        if hasattr(target, "config"):
            self.model = target    # the Hugging Face model the loop calls: its config is what the estimate reads
        self._hooks = [target.register_forward_pre_hook(self._forward_starts, with_kwargs=True),
                       target.register_forward_hook(self._forward_ends)]
        self._enter("forward")

    def before_step(self) -> None:
        """Right before the optimizer step: the backward (and clipping) is done."""
        if self._stack is None:
            return
        self._leave()
        self._enter("optimizer step")

    def after_step(self) -> None:
        """The optimizer has stepped: the measured update is done (nothing when no optimizer step is under way: a
        micro-batch that only accumulates)."""
        if self._stack is None or self._phase_name != "optimizer step":
            return
        self._leave()
        self.close()

    def close(self) -> None:
        """End the measurement (also when training ends or fails mid-update: what was measured is kept)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._stack is None:
            return
        self._leave()
        stack, self._stack = self._stack, None
        stack.close()
        measured = self._meter.result(label="the loop's own step", workload=self._shape())
        highest: dict[str, Any] = {}  # per phase name its highest micro-batch, in the order the names came
        for p in measured.phases:
            kept = highest.get(p.name)  # a phase that raised stays: it is where the update failed
            if kept is None or not p.complete or (kept.complete and p.peak_allocated_bytes > kept.peak_allocated_bytes):
                highest[p.name] = p
        measured = replace(measured, phases=tuple(highest.values()))
        if self._forwards == 0 and measured.phases and measured.phases[0].name == "forward":
            # the hooked module was never called: the first phase spans the forward and the backward
            phases = (replace(measured.phases[0], name="forward and backward"), *measured.phases[1:])
            measured = replace(measured, phases=phases)
        self.measured = measured

    # -- phases ----------------------------------------------------------------------------------------------------
    def _forward_starts(self, module: Any, args: Any, kwargs: Any) -> None:
        # the estimate is made for the micro-batch with the most tokens: each row is its phase's highest micro-batch
        ids = kwargs.get("input_ids") if kwargs else None
        if ids is None and args and hasattr(args[0], "dim"):
            ids = args[0]
        if ids is None and args and isinstance(args[0], dict):
            ids = args[0].get("input_ids")
        if ids is not None and hasattr(ids, "dim") and (
                not self.batch or ids.numel() > self.batch["input_ids"].numel()):
            self.batch = {"input_ids": ids}
        if self._forwards > 0 and self._phase_name == "backward":   # the next micro-batch: the last one's backward
            self._leave()
            self._enter("forward")

    def _forward_ends(self, module: Any, args: Any, out: Any) -> None:
        self._forwards += 1
        if self._phase_name == "forward":
            self._leave()
            self._enter("backward")

    def _enter(self, name: str) -> None:
        self._phase = ExitStack()
        self._phase.enter_context(self._meter.phase(name))
        self._phase_name = name

    def _leave(self) -> None:
        if self._phase is not None:
            phase, self._phase, self._phase_name = self._phase, None, None
            phase.close()

    def _shape(self) -> dict[str, Any] | None:
        ids = self.batch.get("input_ids")
        if ids is None or ids.dim() != 2:
            return None
        return {"batch": int(ids.shape[0]), "seq_len": int(ids.shape[1])}

    # -- beside the estimate ---------------------------------------------------------------------------------------
    def compared(self) -> tuple[tuple[Any, ...], list[str]]:
        """Each measured phase beside campaign memory's estimate of the same workload (PhaseMemory rows), and the
        notes: how it was counted, what the estimate could not read."""
        from ..train.check import PhaseMemory
        from ..train.workload import estimate_for

        if self.measured is None:
            return (), [f"memory per phase: training ended before update {self.update}, the one measured"]
        how = ("counted from the CPU allocator's own records (PyTorch profiler), with the model's and optimizer's "
               "tensors made before the step" if self._meter.device == "cpu" else
               "torch.cuda's peak allocated bytes per phase")
        notes = [f"memory per phase of update {self.update} of the loop's own step: {how}"]
        estimate, more = (estimate_for(self.model, self.optimizer, self.batch, self.workload) if self.batch else
                          (None, ["no estimate: the model's forward received no input_ids"]))
        notes += more
        estimated = {p.name: p.bytes for p in estimate.phases} if estimate is not None else {}
        rows = tuple(PhaseMemory(p.name, p.peak_allocated_bytes, estimated.get(p.name))
                     for p in self.measured.phases)
        return rows, notes


__all__ = ["MEASURED_UPDATE", "StepMemory", "called_module", "inner_optimizer"]
