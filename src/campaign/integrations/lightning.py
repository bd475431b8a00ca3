"""Lightning's own loop, recorded and checked by one line:
`lightning.pytorch.Trainer(..., callbacks=[CampaignCallback()])`.

On train start (global rank 0 only): a campaign run with the LightningModule's hyperparameters and the Trainer's
settings (accumulation, precision, strategy, devices, world size, rank). Each optimizer step: the metrics the
module logged (trainer.callback_metrics) at the global step. On train end: the checkpoints ModelCheckpoint wrote as
artifacts, the run completed; an exception marks it failed (stopped for Ctrl-C), through Lightning's on_exception.

The step checks (integrations/steps.py) run on the loop's own first optimizer steps: the weights before the
update's first forward, the gradients and the rate right before `optimizer.step`, the weights after it.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from .memory import MEASURED_UPDATE, StepMemory, called_module
from .steps import StepWatch, TrainerCheck


def lightning_params(trainer: Any, module: Any) -> dict[str, Any]:
    """What the run is: the module's hyperparameters (JSON values), the Trainer's settings memory and the step
    depend on."""
    hparams = dict(getattr(module, "hparams", {}) or {})
    kept = {k: v for k, v in hparams.items() if isinstance(v, (str, int, float, bool)) or v is None}
    strategy = type(trainer.strategy).__name__
    return {"hparams": kept, "trainer": {
        "accumulate_grad_batches": trainer.accumulate_grad_batches, "precision": str(trainer.precision),
        "strategy": strategy, "max_steps": trainer.max_steps, "world_size": trainer.world_size,
        "global_rank": trainer.global_rank, "num_devices": trainer.num_devices,
        "gradient_clip_val": trainer.gradient_clip_val}}


class CampaignCallback(pl.Callback):  # type: ignore[misc]  # lightning ships no complete stubs
    """Record and check a Lightning run (see the module docstring); the arguments are those of the HF Trainer's
    callback (campaign.integrations.hf.CampaignCallback)."""

    def __init__(self, name: str | None = None, *, hypothesis: str = "", baseline: str | None = None,
                 guards: Sequence[str] = (), tags: Sequence[str] = (), data: Sequence[str | Path] = (),
                 trainable: Sequence[str] | None = None, check_steps: int = 3, stop_on_fail: bool = False,
                 root: str | Path | None = None, memory_update: int = MEASURED_UPDATE) -> None:
        self.watch = StepWatch("lightning.Trainer", trainable=trainable, steps=check_steps)
        self.memory = StepMemory(memory_update) if memory_update > 0 else None
        self._due = False
        self.name, self.hypothesis, self.baseline = name, hypothesis, baseline
        self.guards, self.tags, self.data = tuple(guards), tuple(tags), tuple(data)
        self.stop_on_fail, self.root = stop_on_fail, root
        self.run: Any = None
        self.result: TrainerCheck | None = None
        self._logged_step = 0  # the global step last logged: metrics go with each optimizer step

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.watch.expect(pl_module)
        if self.memory is not None and "mixed" in str(trainer.precision):
            self.memory.workload["mixed_precision"] = True    # '16-mixed', 'bf16-mixed': autocast over fp32 weights
        if not trainer.is_global_zero:
            return
        from ..track.run import run

        name = self.name or type(pl_module).__name__
        self.run = run(name, hypothesis=self.hypothesis, baseline=self.baseline, guards=self.guards, tags=self.tags,
                       data=self.data, params=lightning_params(trainer, pl_module), root=self.root).__enter__()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.watch.begin(pl_module)
        first = batch_idx % max(1, int(trainer.accumulate_grad_batches)) == 0   # an update's first micro-batch
        if self.memory is not None and self.result is None and first and trainer.optimizers:
            self.memory.begin(pl_module, trainer.optimizers[0], called_module(pl_module))

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.watch.before_step(pl_module, optimizer)
        if self.memory is not None:
            self.memory.before_step()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.memory is not None:
            self.memory.after_step()    # ends the measured update once its optimizer step ran
        if self.result is None:
            self._due = self.watch.after_step(pl_module) or self._due
            failing = bool(self.watch.nonfinite or self.watch.changed - self.watch.expected)
            if self._due and (failing or self.memory is None or self.memory.measured is not None):
                self._verdict()
                if self.stop_on_fail and self.result is not None and self.result.status == "fail":
                    trainer.should_stop = True
        if self.run is not None and trainer.global_step > self._logged_step:
            numbers = {k: float(v) for k, v in trainer.callback_metrics.items()
                       if getattr(v, "numel", lambda: 0)() == 1 or isinstance(v, (int, float))}
            if numbers:
                self.run.log(step=trainer.global_step, **numbers)
            self._logged_step = trainer.global_step

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.memory is not None:
            self.memory.close()
        if self.result is None:
            self._verdict()
        if self.run is None:
            return
        for checkpoint in getattr(trainer, "checkpoint_callbacks", []):
            folder = getattr(checkpoint, "dirpath", None)
            for path in sorted(Path(folder).glob("*.ckpt")) if folder and Path(folder).is_dir() else []:
                self.run.artifact(path, f"checkpoint:{path.stem}")
        self._end(None, None, None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end(type(exception), exception, exception.__traceback__)

    def _end(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.watch.close()
        if self.memory is not None:
            self.memory.close()
        if self.run is not None and self.run.manifest.status == "running":
            self.run.__exit__(kind, error, tb)

    def _verdict(self) -> None:
        if self.memory is not None:
            self.memory.close()
        self.result = self.watch.verdict(self.run.id if self.run is not None else None, self.memory)
        if self.run is not None:
            from ..track.records import save_record

            self.run.artifact(save_record(self.result, command="trainer", root=self.run.store.root), "log:checks")


__all__ = ["CampaignCallback", "lightning_params"]
