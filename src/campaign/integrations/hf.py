"""The HF Trainer's own loop, recorded and checked by one line: `Trainer(..., callbacks=[CampaignCallback()])`.

On train begin (rank 0 only): a campaign run (`campaign.run`: its manifest, code, data hashes, environment) with the
TrainingArguments, the PEFT config, accumulation, checkpointing, precision, optimizer, DeepSpeed/FSDP config,
world size, rank and backend as parameters. On log: the metrics at their step. On save: each checkpoint folder
as an artifact with its hash. On train end: the run completed. The Trainer has no exception event: its `train()` is
wrapped (once, for every Trainer; transparent for one without this callback), so an exception that ends training
marks the run failed with its reason and SIGTERM (a preempted instance) stopped (campaign.run's rules), before the
script sees it, whether or not the script then catches it.

The step checks (integrations/steps.py: trainer.updates, frozen_unchanged, grads_finite, lr_applied, train_mode) run
on the Trainer's own first optimizer steps, not on a re-creation of its loop; its second update is measured phase by
phase beside `campaign memory`'s estimate (integrations/memory.py); with resume_check=True its own checkpoint is
resumed in a fresh process running the same script (integrations/resume.py): the Trainer's own `_save_checkpoint`
writes it into a folder of the test's own in output_dir, never over the run's checkpoints. Their verdict
(`callback.result`) is saved as a record (`campaign report` shows it) and as an artifact of the run; with
`stop_on_fail=True` a failed check stops training at once.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..checks import Check
from ..errors import InputError
from .memory import MEASURED_UPDATE, StepMemory
from .resume import RESUME_STEP, LossProbe, child_spec, discard, finish_child
from .steps import StepWatch, TrainerCheck, fail_on_statuses, failed_script, judge


def training_params(args: Any, model: Any) -> dict[str, Any]:
    """What the run is, from the Trainer: its TrainingArguments (JSON values only), the PEFT config, and the
    facts memory and the step depend on, under 'trainer'."""
    raw = args.to_dict() if hasattr(args, "to_dict") else {}
    kept = {k: v for k, v in raw.items() if isinstance(v, (str, int, float, bool)) or v is None}
    peft = getattr(model, "peft_config", None)
    peft_dict = {}
    if isinstance(peft, dict):
        for name, config in peft.items():
            d = config.to_dict() if hasattr(config, "to_dict") else {}
            peft_dict[name] = {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in d.items()
                               if isinstance(v, (str, int, float, bool, list, set, frozenset)) or v is None}
    world = {"world_size": getattr(args, "world_size", 1), "process_index": getattr(args, "process_index", 0),
             "local_process_index": getattr(args, "local_process_index", 0), "backend": _backend()}
    trainer = {"gradient_accumulation_steps": raw.get("gradient_accumulation_steps"),
               "gradient_checkpointing": raw.get("gradient_checkpointing"), "bf16": raw.get("bf16"),
               "fp16": raw.get("fp16"), "optim": str(raw.get("optim")), "deepspeed": _plain(raw.get("deepspeed")),
               "fsdp": _plain(raw.get("fsdp")), "fsdp_config": _plain(raw.get("fsdp_config")), **world}
    return {"training_args": kept, "peft": peft_dict, "trainer": trainer}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, list, dict)) or value is None else str(value)


def _backend() -> str | None:
    try:
        import torch.distributed as dist

        return dist.get_backend() if dist.is_available() and dist.is_initialized() else None
    except (ImportError, RuntimeError, ValueError):
        return None


class CampaignCallback(TrainerCallback):  # type: ignore[misc]  # transformers ships no stubs
    """Record and check the Trainer's own run (see the module docstring).

    Args:
        name: the run's name (default: TrainingArguments.run_name, else the output folder's name).
        hypothesis, baseline, guards, tags, data: as `campaign run start`.
        trainable: patterns (fnmatch, on the model's parameter names) of what must train; default: every parameter
            that requires a gradient when training begins.
        check_steps: the first optimizer steps checked.
        stop_on_fail: stop training when a check fails.
        fail_on: 'fail' stops training when a check fails and raises ChecksFailed when train() ends, so that the
            script fails; 'not verified' does so also when a check could not run; None (default) records only. A
            run whose checks failed ends 'invalid' rather than 'completed' either way.
        root: the campaign store (default: .campaign, or $CAMPAIGN_ROOT).
        memory_update: the update whose forward, backward and optimizer step are measured beside `campaign
            memory`'s estimate (integrations/memory.py; default the second, when the optimizer state exists);
            0 measures none.
        resume_check: have the Trainer save its own checkpoint after update `resume_step`, run the script again in
            a fresh process resumed from it, and compare the next two updates' losses (integrations/resume.py).
        resume_timeout: seconds the fresh process may take (it runs the script's set-up again).
    """

    def __init__(self, name: str | None = None, *, hypothesis: str = "", baseline: str | None = None,
                 guards: Sequence[str] = (), tags: Sequence[str] = (), data: Sequence[str | Path] = (),
                 trainable: Sequence[str] | None = None, check_steps: int = 3, stop_on_fail: bool = False,
                 fail_on: str | None = None, root: str | Path | None = None, memory_update: int = MEASURED_UPDATE,
                 resume_check: bool = False, resume_step: int = RESUME_STEP, resume_timeout: float = 600) -> None:
        self.child = child_spec()     # in the fresh process of a resume test: resume, record, stop
        if self.child is not None:
            resume_step, resume_check, memory_update = int(self.child["step"]), False, 0
        _wrap_train()
        if resume_step < 1:
            raise InputError(f"resume_step {resume_step}: save the checkpoint after one update or more")
        self.watch = StepWatch("transformers.Trainer", trainable=trainable, steps=check_steps)
        self.memory = StepMemory(memory_update) if memory_update > 0 else None
        self._due = False
        self.resume_check, self.resume_step, self.resume_timeout = resume_check, resume_step, resume_timeout
        self.probe = LossProbe((resume_step + 1, resume_step + 2)) if resume_check or self.child else None
        self.resumed: Check | None = None
        self.name, self.hypothesis, self.baseline = name, hypothesis, baseline
        self.guards, self.tags, self.data = tuple(guards), tuple(tags), tuple(data)
        self.stop_on_fail, self.root = stop_on_fail, root
        self.fail_statuses = fail_on_statuses(fail_on)
        self.run: Any = None
        self.result: TrainerCheck | None = None
        self.trainer: Any = None              # the Trainer whose train() is running (set by the wrapper)
        self._scratch: Path | None = None     # the resume test's own folder (resume.py's scratch_folder)

    # -- the run -------------------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.probe is not None and model is not None:
            self.probe.attach(model)
        if self.child is not None:
            return
        if self.resume_check and (getattr(args, "world_size", 1) > 1 or 0 < state.max_steps < self.resume_step + 2):
            why = (f"{args.world_size} processes: the fresh process would start one of them" if args.world_size > 1
                   else f"the training has {state.max_steps} updates; the test needs {self.resume_step + 2}")
            self._resume_skipped(why)
        if model is not None:
            self.watch.expect(model)
        if self.memory is not None and model is not None:
            # Trainer.compute_loss returns the loss only: the logits are freed before backward (memory/workload.py)
            self.memory.workload["logits_held"] = False
            # the summed gradients stay through micro-batches 2..K (memory/workload.py, grad_accumulation)
            self.memory.workload["grad_accumulation"] = max(1, int(getattr(args, "gradient_accumulation_steps", 1)
                                                                   or 1))
            params = next(model.parameters(), None)
            mixed = bool(getattr(args, "bf16", False) or getattr(args, "fp16", False))
            if mixed and params is not None and params.dtype.is_floating_point and params.element_size() == 4:
                self.memory.workload["mixed_precision"] = True    # autocast over fp32 weights
        if not state.is_world_process_zero:
            return
        from ..track.run import run

        name = self.name or getattr(args, "run_name", None) or Path(args.output_dir).name or "trainer"
        self.run = run(name, hypothesis=self.hypothesis, baseline=self.baseline, guards=self.guards, tags=self.tags,
                       data=self.data, params=training_params(args, model), root=self.root).__enter__()

    def _end(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.watch.close()
        if self.memory is not None:
            self.memory.close()
        discard(self._scratch)
        self._scratch = None
        if self.run is not None and self.run.manifest.status == "running":
            self.run.__exit__(kind, error, tb)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.run is not None and logs:
            numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if numbers:
                self.run.log(step=state.global_step, **numbers)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is None:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            self.run.artifact(folder, f"checkpoint:step-{state.global_step}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.child is not None:
            return
        if self.resume_check and self.resumed is None:
            self._resume_skipped(f"the training ended after {state.global_step} updates; the test needs "
                                 f"{self.resume_step + 2}")
        if self.memory is not None:
            self.memory.close()
        if self.result is None:
            self._verdict()
        self._end(None, None, None)
        error = failed_script(self.result, self.fail_statuses, self.run)
        if error is not None:
            raise error

    # -- the step checks (integrations/steps.py) ------------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                      **kwargs: Any) -> None:
        if self.probe is not None:
            self.probe.update = state.global_step + 1
        if self.child is not None:
            return
        if model is not None:
            self.watch.begin(model)
            if self.memory is not None and self.result is None:
                self.memory.begin(model, optimizer)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                              **kwargs: Any) -> None:
        if model is not None:
            self.watch.before_step(model, optimizer)
        if self.memory is not None:
            self.memory.before_step()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.memory is not None:
            self.memory.after_step()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.child is not None:
            control.should_save = False      # the fresh process writes nothing of the run's
            control.should_training_stop = state.global_step >= self.resume_step + 2
            return
        if self.resume_check and self.resumed is None and model is not None:
            self._resume_step(args, state, control, model)
        if model is None or self.result is not None:
            return
        self._due = self.watch.after_step(model) or self._due
        failing = bool(self.watch.nonfinite or self.watch.changed - self.watch.expected)
        waiting = self.memory is not None and self.memory.measured is None or \
            self.resume_check and self.resumed is None
        if self._due and (failing or not waiting):
            self._verdict()    # the step checks and the measured update both done, or a failure already certain
            if self.result is not None and (self.stop_on_fail and self.result.status == "fail"
                    or self.result.status in self.fail_statuses):
                control.should_training_stop = True

    # -- the resume test (integrations/resume.py) -------------------------------------------------------------------
    def _resume_step(self, args: Any, state: Any, control: Any, model: Any) -> None:
        if state.global_step == self.resume_step:
            if self.trainer is None:
                self._resume_skipped("train() is not transformers.Trainer.train (a subclass replaces it): the "
                                     "Trainer that runs is unknown to the callback")
                return
            from .resume import scratch_folder

            self._scratch = scratch_folder(Path(args.output_dir).resolve())
            _save_into(self.trainer, self._scratch)
        elif state.global_step >= self.resume_step + 2 and self.probe is not None and self._scratch is not None:
            from .resume import resume_check, run_child

            checkpoint = self._scratch / f"checkpoint-{self.resume_step}"
            resumed, why = run_child(checkpoint, self.resume_step, self.resume_timeout, self._scratch)
            exact = next(model.parameters()).device.type == "cpu"
            self.resumed = resume_check(self.probe.losses, resumed, why, checkpoint, self.resume_step, exact)
            self.probe.detach()
            discard(self._scratch)
            self._scratch = None

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


def _save_into(trainer: Any, folder: Path) -> None:
    """The Trainer's own checkpoint of this update (its `_save_checkpoint`, as it writes every one: weights,
    optimizer, scheduler, scaler, generators, state), written into `folder` rather than output_dir: output_dir
    pointed there and pushing to the Hub off for this call only, and the state it keeps of its checkpoints (the
    best one, the callbacks' states) put back, so that the run's own checkpoints and their rotation are untouched."""
    import copy

    args, state = trainer.args, trainer.state
    kept = args.output_dir, args.push_to_hub, state.best_model_checkpoint, copy.deepcopy(state.stateful_callbacks)
    args.output_dir, args.push_to_hub = str(folder), False
    try:
        trainer._save_checkpoint(trainer.model_wrapped, None)
    finally:
        args.output_dir, args.push_to_hub = kept[0], kept[1]
        state.best_model_checkpoint, state.stateful_callbacks = kept[2], kept[3]


def _wrap_train() -> None:
    """Wrap transformers.Trainer.train once: for a Trainer given a CampaignCallback, the callback knows the Trainer
    while train() runs (the resume test saves through it), and a BaseException leaving train() ends its run
    (failed, or stopped for SIGTERM and Ctrl-C) before it reaches the script. In the fresh process of a resume test,
    train() resumes from the checkpoint instead, stops after the two compared updates, writes their losses and ends
    the process, so nothing after train() in the script runs (no save, no upload)."""
    import transformers

    original = transformers.Trainer.train
    if getattr(original, "_campaign", False):
        return

    @functools.wraps(original)
    def train(trainer: Any, *args: Any, **kwargs: Any) -> Any:
        mine = [c for c in trainer.callback_handler.callbacks if isinstance(c, CampaignCallback)]
        if not mine:
            return original(trainer, *args, **kwargs)
        child = next((c for c in mine if c.child is not None), None)
        if child is not None and child.child is not None:
            # the fresh process reports nowhere: only transformers' own flow callbacks and this one stay
            trainer.callback_handler.callbacks = [c for c in trainer.callback_handler.callbacks if c is child or
                                                  type(c).__module__ == "transformers.trainer_callback"]
            original(trainer, resume_from_checkpoint=child.child["checkpoint"])
            finish_child(child.child["out"], child.probe)
        for callback in mine:
            callback.trainer = trainer
        try:
            return original(trainer, *args, **kwargs)
        except BaseException as error:
            for callback in mine:
                callback._end(type(error), error, error.__traceback__)
            raise
        finally:
            for callback in mine:
                callback.trainer = None

    train._campaign = True  # type: ignore[attr-defined]  # the mark that it is wrapped already
    transformers.Trainer.train = train


__all__ = ["CampaignCallback", "training_params"]
