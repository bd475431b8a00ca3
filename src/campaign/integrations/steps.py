"""The step checks of a training loop's own first optimizer steps, whatever the loop (the HF Trainer, Lightning):
the loop's callback calls `expect` when training begins, `before_step` right before each optimizer step (the
gradients are there, the weights not yet changed, the scheduler not yet stepped) and `after_step` once the step
is taken; `verdict()` is the result.

  - trainer.updates: every parameter that trains (requires_grad, or matching the `trainable` patterns given)
    changed in at least one checked step with a non-zero learning rate; one whose gradient was exactly zero at
    every checked step (LoRA's A while B is still zero) is not shown yet: the check is skipped, not passed;
  - trainer.frozen_unchanged: no other parameter changed;
  - trainer.grads_finite: every gradient at the checked steps was finite;
  - trainer.lr_applied: some checked step ran at a non-zero learning rate (a warm-up at 0 for every checked step
    leaves the update checks skipped: the verdict is "not verified", never a go);
  - trainer.train_mode: every dropout that ran in the checked steps ran in training mode (a compute_loss or a
    callback that calls model.eval() turns dropout off for the whole run; train/probes.py);
  - trainer.memory_as_estimated (informs, never gates): the memory per phase of one update of the loop's own step
    (integrations/memory.py) beside `campaign memory`'s estimate of the same workload; a phase off by more than
    ESTIMATE_BAND warns.
Parameters and gradients are compared by up to SAMPLE elements each (evenly spaced, copied to the CPU), so the
check costs little memory on a large model; a step changes every element an optimizer moves.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import Check, listed
from ..errors import InputError
from ..results import Result

SCHEMA = "campaign.trainer_check/1"
SAMPLE = 4096  # elements of each parameter compared before and after a step


@dataclass(frozen=True)
class TrainerCheck(Result):
    """The step checks of a loop's own first updates (see the module docstring)."""

    run: str | None
    loop: str                         # 'transformers.Trainer', 'lightning.Trainer'
    steps_checked: int
    learning_rates: tuple[float, ...]
    trained: tuple[str, ...]          # the parameters expected to change
    changed: tuple[str, ...]
    checks: tuple[Check, ...] = field(default=())
    memory: Any = None                # the measured update's Measurement (memory/measurement.py), None if none ran
    memory_vs_estimate: tuple[Any, ...] = ()   # train.check.PhaseMemory: measured (counted) beside estimated
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA


FAIL_ON = {None: (), "fail": ("fail",), "not verified": ("fail", "not verified")}


class ChecksFailed(RuntimeError):
    """Raised at the end of training by a callback given fail_on, when its verdict is one it was told to fail on."""


def fail_on_statuses(fail_on: str | None) -> tuple[str, ...]:
    """The verdicts a callback's fail_on fails the script on: None (record only), 'fail', or 'not verified' (a
    failure, or a check that could not run)."""
    if fail_on not in FAIL_ON:
        raise InputError(f"fail_on={fail_on!r}: give None (record the verdict only), 'fail', or 'not verified' "
                         "(also fail when a check could not run)")
    return FAIL_ON[fail_on]


def judge(result: TrainerCheck, run: Any) -> None:
    """A run whose checks failed ends 'invalid' (not 'completed') if it goes on to the end, so that `campaign runs
    show` says so."""
    if run is not None and result.status == "fail":
        failed = ", ".join(c.id for c in result.checks if c.status == "fail")
        run.invalidate(f"campaign's training checks failed: {failed} (campaign runs show {run.id})")


def failed_script(result: TrainerCheck | None, statuses: tuple[str, ...], run: Any) -> ChecksFailed | None:
    """The error that fails the script (fail_on), where the verdict is one of `statuses`."""
    if result is None or result.status not in statuses:
        return None
    named = ", ".join(f"{c.id} {c.status}" for c in result.checks if c.status in ("fail", "skipped")) or result.status
    where = f"; campaign runs show {run.id}" if run is not None else ""
    return ChecksFailed(f"campaign: the training checks' verdict is {result.status.upper()} ({named}){where}")


def _sample(t: Any) -> Any:
    """Up to SAMPLE elements of a tensor, evenly spaced, copied to the CPU."""
    flat = t.detach().reshape(-1)
    if flat.numel() > SAMPLE:
        flat = flat[:: max(1, flat.numel() // SAMPLE)][:SAMPLE]
    return flat.to("cpu", copy=True)


class StepWatch:
    """Watches the first `steps` optimizer steps of a model (see the module docstring)."""

    def __init__(self, loop: str, *, trainable: Sequence[str] | None = None, steps: int = 3) -> None:
        if steps < 1:
            raise InputError(f"check_steps {steps}: check at least one optimizer step")
        self.loop, self.trainable, self.steps = loop, None if trainable is None else tuple(trainable), steps
        self.expected: set[str] = set()
        self.changed: set[str] = set()
        self.rates: list[float] = []
        self.nonfinite: set[str] = set()
        self.moved: set[str] = set()     # a non-zero gradient reached it at a checked step
        self.zero: set[str] = set()
        self._before: dict[str, Any] = {}
        self._rate = 0.0
        self.dropouts: dict[str, bool] = {}   # each dropout that ran in a checked step: its training flag
        self._modes: Any = None               # the dropout_modes context while a checked update runs
        self._model: Any = None

    @property
    def watching(self) -> bool:
        return len(self.rates) < self.steps

    def expect(self, model: Any) -> None:
        """What should train: the `trainable` patterns (each must match a parameter), else what requires grad."""
        names = [n for n, _ in model.named_parameters()]

        def matches(n: str, pattern: str) -> bool:
            return fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(n, f"*{pattern}*")

        if self.trainable is not None:
            for pattern in self.trainable:
                if not any(matches(n, pattern) for n in names):
                    raise InputError(f"trainable pattern {pattern!r} matches no parameter of the model (e.g. "
                                     f"{', '.join(names[:3])}); give patterns of its parameter names")
            self.expected = {n for n in names if any(matches(n, p) for p in self.trainable)}
        else:
            self.expected = {n for n, p in model.named_parameters() if p.requires_grad}

    def begin(self, model: Any) -> None:
        """Before the forward of an update's first micro-batch: the weights as the update finds them (so a
        weight changed inside the forward counts too)."""
        if self.watching and not self._before:
            self._before = {n: _sample(p) for n, p in model.named_parameters()}
            if self._modes is None:
                from contextlib import ExitStack

                from ..train.probes import dropout_modes

                self._model, self._modes = model, ExitStack()
                self._seen = self._modes.enter_context(dropout_modes(model))

    def before_step(self, model: Any, optimizer: Any) -> None:
        """Right before an optimizer step: the gradients (finite, zero or not) and the rate it applies (the weights
        too, when `begin` was not called)."""
        if not self.watching:
            return
        import torch

        rates = [float(g.get("lr", 0.0)) for g in optimizer.param_groups] if optimizer is not None else []
        self._rate = max(rates, default=0.0)
        self.begin(model)
        for n, p in model.named_parameters():
            if p.grad is None:
                continue
            if not bool(torch.isfinite(p.grad).all()):
                self.nonfinite.add(n)
            (self.moved if bool(_sample(p.grad).any()) else self.zero).add(n)

    def after_step(self, model: Any) -> bool:
        """Once the step is taken: which parameters changed. True when the verdict is due (the last checked step,
        or a failure already certain)."""
        if not self._before:
            return False
        import torch

        self.close()
        self.rates.append(self._rate)
        for n, p in model.named_parameters():
            before = self._before.get(n)
            if before is not None and not torch.equal(before, _sample(p)):
                self.changed.add(n)
        self._before = {}
        return not self.watching or bool(self.nonfinite) or bool(self.changed - self.expected)

    def close(self) -> None:
        """Stop watching the dropouts' modes (the end of a checked update, or of training)."""
        if self._modes is not None:
            modes, self._modes = self._modes, None
            modes.close()
            for name, training in self._seen.items():
                self.dropouts[name] = self.dropouts.get(name, True) and training

    def verdict(self, run: str | None, memory: Any = None, extra: Sequence[Check] = ()) -> TrainerCheck:
        """The checks so far; memory: the loop's StepMemory (integrations/memory.py), whose measured update is
        shown beside the estimate; extra: checks the loop ran besides (the resume test)."""
        applied = any(r > 0 for r in self.rates)
        unchanged = self.expected - self.changed
        waiting = sorted(n for n in unchanged if n in self.zero and n not in self.moved)
        missing = sorted(unchanged - set(waiting))
        stray = sorted(self.changed - self.expected)
        checks = []
        if not self.rates:
            checks.append(Check("trainer.lr_applied", "skipped", "no optimizer step ran before training ended",
                                "nothing was checked", "train for at least one step"))
        elif applied:
            checks.append(Check("trainer.lr_applied", "pass",
                                f"learning rate {', '.join(f'{r:.3g}' for r in self.rates)} at the checked steps"))
        else:
            checks.append(Check("trainer.lr_applied", "skipped",
                                f"the learning rate was 0 at all {len(self.rates)} checked step(s) (a warm-up?)",
                                "a step at rate 0 changes nothing, so it cannot show what trains",
                                f"raise check_steps past the warm-up (now {self.steps})"))
        if self.nonfinite:
            checks.append(Check("trainer.grads_finite", "fail",
                                f"non-finite gradients in {listed(sorted(self.nonfinite))}",
                                "the optimizer step spreads NaN or inf into the weights",
                                "lower the learning rate, check the loss and the data for NaN, or use bf16"))
        elif self.rates:
            checks.append(Check("trainer.grads_finite", "pass", "every gradient finite at the checked steps"))
        trained = len(self.changed & self.expected)
        if applied and waiting and not missing:
            checks.append(Check("trainer.updates", "skipped",
                                f"{trained} of {len(self.expected)} parameters that should train changed; "
                                f"{listed(waiting)} had a zero gradient at every checked step",
                                "a zero gradient (LoRA's A while B is zero) does not show whether it trains",
                                f"raise check_steps (now {self.steps})"))
        elif applied:
            checks.append(Check("trainer.updates", "fail" if missing else "pass",
                                f"{trained} of {len(self.expected)} parameters that should train changed"
                                + (f"; unchanged: {listed(missing)}" if missing else ""),
                                "a parameter meant to train that never moves is frozen, left out of the optimizer, "
                                "or cut from the graph" if missing else "",
                                "check requires_grad, the optimizer's parameter groups and the PEFT config"
                                if missing else ""))
        elif self.rates:
            checks.append(Check("trainer.updates", "skipped", "no checked step had a non-zero learning rate",
                                "what trains is not shown", "raise check_steps past the warm-up"))
        if self.rates:
            checks.append(Check("trainer.frozen_unchanged", "fail" if stray else "pass",
                                f"changed though not meant to train: {listed(stray)}" if stray else
                                "no parameter outside those that train changed",
                                "a parameter meant to stay frozen moved" if stray else "",
                                "freeze it (requires_grad False) or declare it in trainable" if stray else ""))
        self.close()
        if self.rates and self._model is not None:
            from ..train.probes import train_mode_check

            checks.append(train_mode_check(self._model, self.dropouts, "trainer.train_mode"))
        checks.extend(extra)
        rows: tuple[Any, ...] = ()
        notes: list[str] = []
        if memory is not None:
            from ..train.check import estimate_check

            rows, notes = memory.compared()
            checks.append(estimate_check(rows, "trainer.memory_as_estimated") if rows else
                          Check("trainer.memory_as_estimated", "skipped", notes[0], gates=False))
        return TrainerCheck(run, self.loop, len(self.rates), tuple(self.rates), tuple(sorted(self.expected)),
                            tuple(sorted(self.changed)), tuple(checks),
                            memory.measured if memory is not None else None, rows, tuple(notes))


__all__ = ["SAMPLE", "SCHEMA", "ChecksFailed", "StepWatch", "TrainerCheck", "fail_on_statuses", "failed_script",
           "judge"]
