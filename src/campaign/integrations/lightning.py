"""Lightning's own loop, recorded and checked by one line:
`lightning.pytorch.Trainer(..., callbacks=[CampaignCallback()])`.

On train start (global rank 0 only): a campaign run with the LightningModule's hyperparameters and the Trainer's
settings (accumulation, precision, strategy, devices, world size, rank). Each optimizer step: the metrics the
module logged (trainer.callback_metrics) at the global step. On train end: the checkpoints ModelCheckpoint wrote as
artifacts, the run completed; an exception marks it failed (stopped for Ctrl-C), through Lightning's on_exception.

The step checks (integrations/steps.py) run on the loop's own first optimizer steps: the weights before the
update's first forward, the gradients and the rate right before `optimizer.step`, the weights after it.

With resume_check=True (integrations/resume.py, the HF Trainer's design): Lightning's own checkpoint of update K
(`trainer.save_checkpoint`, as ModelCheckpoint(every_n_train_steps=K) writes it: weights, optimizer, schedulers,
loops, callbacks, and whatever the module adds in on_save_checkpoint) is resumed in a fresh process running the same
script, `trainer.fit(..., ckpt_path=...)`, whose losses of updates K+1 and K+2 must be this run's. Lightning's
checkpoint holds no random generator state, and a plain DataLoader resumed mid-epoch starts its epoch again from the
first batch: both are caught at update K+1. The checkpoint goes in a folder of the test's own in default_root_dir
(campaign-resume-XXXX, resume.py's scratch_folder), removed when the test or the run ends.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from ..checks import Check
from ..errors import InputError
from .memory import MEASURED_UPDATE, StepMemory, called_module
from .resume import RESUME_STEP, LossProbe, child_spec, discard
from .steps import StepWatch, TrainerCheck, fail_on_statuses, failed_script, judge

FIX = ("save what Lightning does not (torch.get_rng_state() and the other generators in the module's "
       "on_save_checkpoint, set back in on_load_checkpoint), checkpoint at an epoch's end or give the DataLoader a "
       "state_dict (torchdata's StatefulDataLoader), and resume with trainer.fit(..., ckpt_path=...)")


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
    callback (campaign.integrations.hf.CampaignCallback). resume_check: save Lightning's own checkpoint after update
    `resume_step` (in a folder of its own in default_root_dir, removed after the test), run the script again in a fresh
    process resumed from it, and compare the next two updates' losses."""

    def __init__(self, name: str | None = None, *, hypothesis: str = "", baseline: str | None = None,
                 guards: Sequence[str] = (), tags: Sequence[str] = (), data: Sequence[str | Path] = (),
                 trainable: Sequence[str] | None = None, check_steps: int = 3, stop_on_fail: bool = False,
                 fail_on: str | None = None, root: str | Path | None = None, memory_update: int = MEASURED_UPDATE,
                 resume_check: bool = False, resume_step: int = RESUME_STEP, resume_timeout: float = 600) -> None:
        self.child = child_spec()     # in the fresh process of a resume test: resume, record, stop
        if self.child is not None:
            resume_step, resume_check, memory_update = int(self.child["step"]), False, 0
            _resume_in_child(self)
        if resume_step < 1:
            raise InputError(f"resume_step {resume_step}: save the checkpoint after one update or more")
        self.resume_check, self.resume_step, self.resume_timeout = resume_check, resume_step, resume_timeout
        self.probe = LossProbe((resume_step + 1, resume_step + 2)) if resume_check or self.child else None
        self.resumed: Check | None = None
        self._checkpoint: Path | None = None
        self._scratch: Path | None = None     # the resume test's own folder (resume.py's scratch_folder)
        self._hint = ""
        self.watch = StepWatch("lightning.Trainer", trainable=trainable, steps=check_steps)
        self.memory = StepMemory(memory_update) if memory_update > 0 else None
        self._due = False
        self.name, self.hypothesis, self.baseline = name, hypothesis, baseline
        self.guards, self.tags, self.data = tuple(guards), tuple(tags), tuple(data)
        self.stop_on_fail, self.root = stop_on_fail, root
        self.fail_statuses = fail_on_statuses(fail_on)
        self.run: Any = None
        self.result: TrainerCheck | None = None
        self._logged_step = 0  # the global step last logged: metrics go with each optimizer step
        self._watched_step = 0  # the global step at the last batch's end: a micro-batch that steps moves it
        self._batch_idx = 0  # the micro-batch under way

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.child is not None:
            return
        if self.resume_check and (trainer.world_size > 1 or 0 < trainer.max_steps < self.resume_step + 2):
            self._resume_skipped(f"{trainer.world_size} processes: the fresh process would start one of them"
                                 if trainer.world_size > 1 else f"the training has {trainer.max_steps} updates; "
                                 f"the test needs {self.resume_step + 2}")
        self.watch.expect(pl_module)
        if self.memory is not None and "mixed" in str(trainer.precision):
            self.memory.workload["mixed_precision"] = True    # '16-mixed', 'bf16-mixed': autocast over fp32 weights
        if self.memory is not None:  # the summed gradients stay through micro-batches 2..K (Workload.grad_accumulation)
            self.memory.workload["grad_accumulation"] = max(1, int(trainer.accumulate_grad_batches or 1))
        if not trainer.is_global_zero:
            return
        from ..track.run import run

        name = self.name or type(pl_module).__name__
        self.run = run(name, hypothesis=self.hypothesis, baseline=self.baseline, guards=self.guards, tags=self.tags,
                       data=self.data, params=lightning_params(trainer, pl_module), root=self.root).__enter__()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.probe is not None:
            self.probe.update = trainer.global_step + 1
        if self.child is not None:
            return
        self.watch.begin(pl_module)
        self._batch_idx = batch_idx
        first = batch_idx % max(1, int(trainer.accumulate_grad_batches)) == 0   # an update's first micro-batch
        if self.memory is not None and self.result is None and first and trainer.optimizers:
            self.memory.begin(pl_module, trainer.optimizers[0], called_module(pl_module))

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.child is not None:
            return
        self.watch.before_step(pl_module, optimizer)
        # a strategy that accumulates itself (DeepSpeed) has Lightning step at every micro-batch: the measured update's
        # optimizer step is its last micro-batch's
        accumulates = getattr(trainer.strategy, "handles_gradient_accumulation", False)
        last = (self._batch_idx + 1) % max(1, int(trainer.accumulate_grad_batches)) == 0
        if self.memory is not None and (last or not accumulates):
            self.memory.before_step()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.probe is not None and outputs is not None:
            self.probe.record(outputs)
        if self.child is not None:
            trainer.should_stop = trainer.should_stop or trainer.global_step >= self.resume_step + 2
            return
        if self.memory is not None:
            self.memory.after_step()    # ends the measured update once its optimizer step ran
        if self.resume_check and self.resumed is None:
            self._resume_step(trainer, pl_module, batch_idx)    # after the measured phases: the save is no phase
        stepped = trainer.global_step > self._watched_step   # this micro-batch ended an update (accumulation)
        self._watched_step = trainer.global_step
        if self.result is None and stepped:
            self._due = self.watch.after_step(pl_module) or self._due
            failing = bool(self.watch.nonfinite or self.watch.changed - self.watch.expected)
            waiting = self.memory is not None and self.memory.measured is None or \
                self.resume_check and self.resumed is None
            if self._due and (failing or not waiting):
                self._verdict()
                if self.result is not None and (self.stop_on_fail and self.result.status == "fail"
                        or self.result.status in self.fail_statuses):
                    trainer.should_stop = True
        if self.run is not None and trainer.global_step > self._logged_step:
            numbers = {k: float(v) for k, v in trainer.callback_metrics.items()
                       if getattr(v, "numel", lambda: 0)() == 1 or isinstance(v, (int, float))}
            if numbers:
                self.run.log(step=trainer.global_step, **numbers)
            self._logged_step = trainer.global_step

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.child is not None:
            return
        if self.resume_check and self.resumed is None:
            self._resume_skipped(f"the training ended after {trainer.global_step} updates; the test needs "
                                 f"{self.resume_step + 2}")
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
        error = failed_script(self.result, self.fail_statuses, self.run)
        if error is not None:
            raise error

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end(type(exception), exception, exception.__traceback__)

    def _end(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.watch.close()
        if self.memory is not None:
            self.memory.close()
        discard(self._scratch)
        self._scratch = None
        if self.run is not None and self.run.manifest.status == "running":
            self.run.__exit__(kind, error, tb)

    # -- the resume test (integrations/resume.py) -------------------------------------------------------------------
    def _resume_step(self, trainer: Any, pl_module: Any, batch_idx: int) -> None:
        if trainer.global_step == self.resume_step and self._checkpoint is None:
            # the update's optimizer step ran in this batch: Lightning's own checkpoint, as ModelCheckpoint writes it
            from .resume import scratch_folder

            self._scratch = scratch_folder(Path(trainer.default_root_dir).resolve())
            self._checkpoint = self._scratch / f"step={self.resume_step}.ckpt"
            trainer.save_checkpoint(self._checkpoint)
            batches = trainer.num_training_batches
            loader = getattr(trainer.fit_loop, "_combined_loader", None)
            stateful = loader is not None and all(callable(getattr(d, "state_dict", None))
                                                  for d in getattr(loader, "flattened", []))
            if isinstance(batches, int) and batch_idx + 1 < batches and not stateful:
                self._hint = (f" (the checkpoint is mid-epoch, after batch {batch_idx + 1} of {batches}, and the "
                              "DataLoader has no state_dict: Lightning starts the epoch again from its first batch; "
                              "nor does its checkpoint hold the random generators unless the module saves them)")
            else:
                self._hint = (" (Lightning's checkpoint holds no random generator state unless the module saves it: "
                              "dropout's masks and the shuffle differ)")
        elif trainer.global_step >= self.resume_step + 2 and self.probe is not None and self._checkpoint is not None:
            from .resume import resume_check, run_child

            resumed, why = run_child(self._checkpoint, self.resume_step, self.resume_timeout, self._checkpoint.parent)
            missing = [what for key, what in (("optimizer_states", "optimizer state"),
                                              ("lr_schedulers", "learning-rate scheduler")) if key not in self._keys()]
            self.resumed = resume_check(self.probe.losses, resumed, why, self._checkpoint, self.resume_step,
                                        pl_module.device.type == "cpu", missing_state=missing, hint=self._hint,
                                        fix=FIX)
            self.probe.detach()
            discard(self._scratch)
            self._scratch = None

    def _keys(self) -> set[str]:
        """The top-level keys of the saved checkpoint (weights_only: never unpickled); all when unreadable."""
        import torch

        try:
            return set(torch.load(self._checkpoint, map_location="cpu", weights_only=True, mmap=True))
        except Exception:  # a checkpoint holding objects weights_only refuses: nothing to report
            return {"optimizer_states", "lr_schedulers"}

    def _resume_skipped(self, why: str) -> None:
        from .resume import resume_check

        self.resumed = resume_check({}, None, why, Path("."), self.resume_step, True)
        if self.probe is not None:
            self.probe.detach()

    def _verdict(self) -> None:
        if self.memory is not None:
            self.memory.close()
        self.result = self.watch.verdict(self.run.id if self.run is not None else None, self.memory,
                                         (self.resumed,) if self.resumed is not None else ())
        if self.run is not None:
            from ..track.records import save_record

            self.run.artifact(save_record(self.result, command="trainer", root=self.run.store.root), "log:checks")
            judge(self.result, self.run)


def _resume_in_child(callback: CampaignCallback) -> None:
    """The fresh process of a resume test: the Trainer this callback is given to fits from the checkpoint
    (fit(..., ckpt_path=...)) without its checkpointing callbacks, stops after the two compared updates, writes their
    losses and ends the process, so nothing after fit() in the script runs. Other Trainers fit as written."""
    from lightning.pytorch.callbacks import Checkpoint

    original = pl.Trainer.fit
    spec = callback.child or {}

    def fit(trainer: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(c is callback for c in trainer.callbacks):
            return original(trainer, *args, **kwargs)
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, Checkpoint)]  # writes nothing
        original(trainer, *args[:4], **{**kwargs, "ckpt_path": spec["checkpoint"]})
        from .resume import finish_child

        finish_child(spec["out"], callback.probe)

    pl.Trainer.fit = fit


__all__ = ["CampaignCallback", "lightning_params"]
