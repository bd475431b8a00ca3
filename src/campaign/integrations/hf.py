"""The HF Trainer's own loop, recorded and checked by one line: `Trainer(..., callbacks=[CampaignCallback()])`.

On train begin (rank 0 only): a campaign run (`campaign.run`: its manifest, code, data hashes, environment) with the
TrainingArguments, the PEFT config, accumulation, checkpointing, precision, optimizer, DeepSpeed/FSDP config,
world size, rank and backend as parameters. On log: the metrics at their step. On save: each checkpoint folder
as an artifact with its hash. On train end: the run completed; an exception that ends training marks it failed
with its reason, SIGTERM (a preempted instance) stopped (campaign.run's rules).

The step checks run on the Trainer's own first updates, not on a re-creation of its loop:
  - trainer.updates: every parameter that trains (requires_grad, or matching the `trainable` patterns given)
    changed in at least one of the first `check_steps` optimizer steps with a non-zero learning rate (LoRA's A
    does not move at the first step, while B is zero: a later step counts);
  - trainer.frozen_unchanged: no other parameter changed;
  - trainer.grads_finite: every gradient before those optimizer steps was finite;
  - trainer.lr_applied: some checked step ran at a non-zero learning rate. A warm-up that keeps the rate at 0 for
    every checked step leaves the update checks skipped, so the verdict is "not verified", never READY: raise
    `check_steps` past the warm-up.
The verdict (`callback.result`, a campaign Result) is saved as a record (`campaign report` shows it) and noted in the
run; with `stop_on_fail=True` a failed check stops training at once.

Parameters are compared by up to SAMPLE elements each (evenly spaced, copied to the CPU), so the check costs little
memory on a large model; a step changes every element an optimizer moves.
"""
from __future__ import annotations

import fnmatch
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..checks import Check
from ..errors import InputError
from ..results import Result

SCHEMA = "campaign.trainer_check/1"
SAMPLE = 4096  # elements of each parameter compared before and after a step


@dataclass(frozen=True)
class TrainerCheck(Result):
    """The step checks of a Trainer's own first updates (see the module docstring)."""

    run: str | None
    steps_checked: int
    learning_rates: tuple[float, ...]
    trained: tuple[str, ...]          # the parameters expected to change
    changed: tuple[str, ...]
    checks: tuple[Check, ...] = field(default=())
    schema: str = SCHEMA


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
        root: the campaign store (default: .campaign, or $CAMPAIGN_ROOT).
    """

    def __init__(self, name: str | None = None, *, hypothesis: str = "", baseline: str | None = None,
                 guards: Sequence[str] = (), tags: Sequence[str] = (), data: Sequence[str | Path] = (),
                 trainable: Sequence[str] | None = None, check_steps: int = 3, stop_on_fail: bool = False,
                 root: str | Path | None = None) -> None:
        if check_steps < 1:
            raise InputError(f"check_steps {check_steps}: check at least one optimizer step")
        self.name, self.hypothesis, self.baseline = name, hypothesis, baseline
        self.guards, self.tags, self.data = tuple(guards), tuple(tags), tuple(data)
        self.trainable = None if trainable is None else tuple(trainable)
        self.check_steps, self.stop_on_fail, self.root = check_steps, stop_on_fail, root
        self.run: Any = None
        self.result: TrainerCheck | None = None
        self._expected: set[str] = set()
        self._before: dict[str, Any] = {}
        self._changed: set[str] = set()
        self._rates: list[float] = []
        self._nonfinite: list[str] = []
        self._steps = 0
        self._rate = 0.0
        self._moved: set[str] = set()
        self._zero: set[str] = set()
        self._previous_hook: Any = None

    # -- the run -------------------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        names = [n for n, _ in model.named_parameters()] if model is not None else []
        if self.trainable is not None:
            for pattern in self.trainable:
                if not any(fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(n, f"*{pattern}*") for n in names):
                    raise InputError(f"trainable pattern {pattern!r} matches no parameter of the model (e.g. "
                                     f"{', '.join(names[:3])}); give patterns of its parameter names")
            self._expected = {n for n in names if any(fnmatch.fnmatchcase(n, p) or fnmatch.fnmatchcase(n, f"*{p}*")
                                                      for p in self.trainable)}
        elif model is not None:
            self._expected = {n for n, p in model.named_parameters() if p.requires_grad}
        if not state.is_world_process_zero:
            return
        from ..track.run import run

        name = self.name or getattr(args, "run_name", None) or Path(args.output_dir).name or "trainer"
        self.run = run(name, hypothesis=self.hypothesis, baseline=self.baseline, guards=self.guards, tags=self.tags,
                       data=self.data, params=training_params(args, model), root=self.root).__enter__()
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook

    def _excepthook(self, kind: Any, error: BaseException, tb: Any) -> None:
        """An exception that ends the training script: the run failed (stopped for Ctrl-C) with its reason."""
        self._end(kind, error, tb)
        (self._previous_hook or sys.__excepthook__)(kind, error, tb)

    def _end(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        if self.run is not None and self.run.manifest.status == "running":
            self.run.__exit__(kind, error, tb)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook or sys.__excepthook__

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
        if self.result is None:
            self._verdict()
        self._end(None, None, None)

    # -- the step checks -----------------------------------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self._steps < self.check_steps and model is not None:
            self._before = {n: _sample(p) for n, p in model.named_parameters()}

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                              **kwargs: Any) -> None:
        if self._steps >= self.check_steps or model is None:
            return
        import torch

        # the rate this optimizer step applies (the scheduler steps after it, before on_step_end)
        rates = [float(g.get("lr", 0.0)) for g in optimizer.param_groups] if optimizer is not None else []
        self._rate = max(rates, default=0.0)

        for n, p in model.named_parameters():
            if p.grad is None:
                continue
            if not bool(torch.isfinite(p.grad).all()):
                self._nonfinite.append(n)
            if bool(_sample(p.grad).any()):
                self._moved.add(n)  # a non-zero gradient reached it at a checked step
            else:
                self._zero.add(n)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                    **kwargs: Any) -> None:
        if self._steps >= self.check_steps or model is None or not self._before:
            return
        self._steps += 1
        self._rates.append(self._rate)
        import torch

        for n, p in model.named_parameters():
            before = self._before.get(n)
            if before is not None and not torch.equal(before, _sample(p)):
                self._changed.add(n)
        self._before = {}
        if self._steps == self.check_steps or self._failed_early():
            self._verdict()
            if self.stop_on_fail and self.result is not None and self.result.status == "fail":
                control.should_training_stop = True

    def _failed_early(self) -> bool:
        return bool(self._nonfinite) or bool(self._changed - self._expected)

    def _verdict(self) -> None:
        from ..checks import listed

        applied = any(r > 0 for r in self._rates)
        unchanged = self._expected - self._changed
        # a parameter whose gradient was exactly zero at every checked step (LoRA's A while B is still zero) is not
        # shown to train yet: not a failure, not a pass
        waiting = sorted(n for n in unchanged if n in self._zero and n not in self._moved)
        missing = sorted(unchanged - set(waiting))
        stray = sorted(self._changed - self._expected)
        checks = []
        if not self._rates:
            checks.append(Check("trainer.lr_applied", "skipped", "no optimizer step ran before training ended",
                                "nothing was checked", "train for at least one step"))
        elif applied:
            checks.append(Check("trainer.lr_applied", "pass",
                                f"learning rate {', '.join(f'{r:.3g}' for r in self._rates)} at the checked steps"))
        else:
            checks.append(Check("trainer.lr_applied", "skipped",
                                f"the learning rate was 0 at all {len(self._rates)} checked step(s) (a warm-up?)",
                                "a step at rate 0 changes nothing, so it cannot show what trains",
                                f"raise check_steps past the warm-up (now {self.check_steps})"))
        if self._nonfinite:
            checks.append(Check("trainer.grads_finite", "fail",
                                f"non-finite gradients in {listed(sorted(set(self._nonfinite)))}",
                                "the optimizer step spreads NaN or inf into the weights",
                                "lower the learning rate, check the loss and the data for NaN, or use bf16"))
        elif self._rates:
            checks.append(Check("trainer.grads_finite", "pass", "every gradient finite at the checked steps"))
        if applied and waiting and not missing:
            checks.append(Check("trainer.updates", "skipped",
                                f"{len(self._changed & self._expected)} of {len(self._expected)} parameters that should "
                                f"train changed; {listed(waiting)} had a zero gradient at every checked step",
                                "a zero gradient (LoRA's A while B is zero) does not show whether it trains",
                                f"raise check_steps (now {self.check_steps})"))
        elif applied:
            checks.append(Check("trainer.updates", "fail" if missing else "pass",
                                f"{len(self._expected) - len(missing)} of {len(self._expected)} parameters that "
                                "should train changed" + (f"; unchanged: {listed(missing)}" if missing else ""),
                                "a parameter meant to train that never moves is frozen, left out of the optimizer, "
                                "or cut from the graph" if missing else "",
                                "check requires_grad, the optimizer's parameter groups and the PEFT config"
                                if missing else ""))
        elif self._rates:
            checks.append(Check("trainer.updates", "skipped", "no checked step had a non-zero learning rate",
                                "what trains is not shown", "raise check_steps past the warm-up"))
        if self._rates:
            checks.append(Check("trainer.frozen_unchanged", "fail" if stray else "pass",
                                f"changed though not meant to train: {listed(stray)}" if stray else
                                "no parameter outside those that train changed",
                                "a parameter meant to stay frozen moved" if stray else "",
                                "freeze it (requires_grad False) or declare it in trainable" if stray else ""))
        self.result = TrainerCheck(self.run.id if self.run is not None else None, len(self._rates),
                                   tuple(self._rates), tuple(sorted(self._expected)), tuple(sorted(self._changed)),
                                   tuple(checks))
        if self.run is not None:
            from ..track.records import save_record

            self.run.artifact(save_record(self.result, command="trainer", root=self.run.store.root), "log:checks")


def _sample(p: Any) -> Any:
    """Up to SAMPLE elements of a parameter, evenly spaced, copied to the CPU (what on_step_end compares)."""
    flat = p.detach().reshape(-1)
    if flat.numel() > SAMPLE:
        flat = flat[:: max(1, flat.numel() // SAMPLE)][:SAMPLE]
    return flat.to("cpu", copy=True)


__all__ = ["CampaignCallback", "TrainerCheck", "training_params"]
