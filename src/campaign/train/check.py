"""`campaign check SETUP`: the checks a careful engineer runs before the first long training run, on the user's own
model, optimizer and batches (question 3 of the guide).

- step.*: one complete update (forward, backward, optimizer step) measured phase by phase with the memory protocol
  (MemoryMeter); the loss finite (a non-finite one is the only failure: nothing after it is run) and near
  ln(classes) at initialization (about positions x ln(classes): a summed loss, a failure); gradients finite; the
  scheduler steps the optimizer that updates the model.
- params.*: every parameter meant to train received a gradient, is held by the optimizer and changed (every one at
  learning rate 0 for the checked update: not verified); every other one is untouched; what trains is what the
  setup declares (peft's wrapped names match the model's own; a pattern that matches nothing is bad input).
- batch.independent: one row's output does not depend on another row's input, on any model (train/step.py).
- step.train_mode, batch.padding_ignored, batch.labels_aligned: dropout ran in training mode during the step; the
  loss does not depend on the padded positions; token labels fit whether the model shifts them (train/probes.py).
- step.overfit: a few updates on one batch bring its loss down to the target; a steady fall short of it warns.
- resume.*: a checkpoint written after one update, reloaded in a fresh process, gives the uninterrupted run's next
  step (train/resume.py).
- adapter.*: for a peft model, the trainable count LoRA's shapes plan, the adapter saved with its binding to the
  base's weights, and reloaded onto the bare base in a fresh process giving the same outputs (train/adapters.py).

The user's objects are put back as they were given (weights, optimizer and scheduler states, random generators).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ..checks import Check, listed
from ..errors import InputError
from ..results import Result
from .adapter_check import adapter_checks
from .resume_check import ResumeFigures, resume_checks
from .setup import Setup, load_setup
from .step import GroupNorm, StepFigures

SCHEMA = "campaign.check/1"
# At initialization a classifier over C outputs is uniform: loss ln(C). Well above it, the logits start too large
# (an init scale, a missing 1/sqrt(d)) or the loss is summed instead of averaged (Karpathy, "A recipe for training
# neural networks", 2019: "verify loss @ init").
INIT_LOSS_HIGH = 1.5
# A loss summed over N positions starts near N x ln(C); at least half of that is a sum, not a poorly scaled mean.
SUMMED_SHARE = 0.5
# ... over at least this many positions: 8 x ln(C) or more at init is no mean (a confidently wrong fine-tuned
# classifier on a handful of rows can reach a few times ln(C); it stays a warning).
SUMMED_POSITIONS = 16
# The overfit test's losses fall steadily when Kendall's tau against their order is at most this: noise around a level
# gives tau near 0 (its standard deviation is about 0.13 over 31 losses, so -0.5 is about 4 of them).
LEARNS_TREND = -0.5
# A step of at most this many parameter x token products (a forward of ~1.7e10 floating-point operations) runs on
# one CPU thread: the checks compare and count, they do not time, and a parallel region waits for every thread it
# spans, which on a shared machine (or beside the fresh process starting up) costs more than splitting the work
# gains: the example's step takes 15 ms on one thread and 73 ms on two of 2 shared cores (load 4.5), a 13M-parameter
# step on 1,024 tokens 1.6 s and 3.7-6.2 s.
ONE_THREAD_WORK = 2**33
# A measured phase within this factor of the estimate agrees (the estimate's published figures are within 10%; a
# small CPU step adds the allocator's 512-byte rounding and the kernels' scratch, which weigh more at that size).
ESTIMATE_BAND = 1.25


@dataclass(frozen=True)
class PhaseMemory:
    """One phase of the measured step beside `campaign memory`'s estimate for the same model and workload."""

    phase: str
    measured_bytes: int          # peak allocated
    estimated_bytes: int | None

    @property
    def ratio(self) -> float | None:
        return self.measured_bytes / self.estimated_bytes if self.estimated_bytes else None


@dataclass(frozen=True)
class CheckReport(Result):
    """Every check with its status, and the figures behind them."""

    checks: tuple[Check, ...]
    loss: float
    expected_loss: float | None
    groups: tuple[GroupNorm, ...]
    dtypes: dict[str, dict[str, int]]
    trainable_elements: int
    frozen_elements: int
    memory: Any                                 # the step's Measurement (memory/measure.py)
    memory_vs_estimate: tuple[PhaseMemory, ...]
    overfit_losses: tuple[float, ...]
    resume: ResumeFigures | None
    device: str
    micro_batch: int
    sequence_length: int | None
    notes: tuple[str, ...] = ()
    source: str = ""
    schema: str = SCHEMA


def check(setup: str | Setup | Any, *, overfit_steps: int = 30, overfit_drop: float = 0.5,
          overfit_lr: float | None = None, checkpoint_dir: str | Path | None = None, resume: bool = True,
          timeout: float = 600, progress: Callable[[str], None] | None = None) -> CheckReport:
    """Run every check on a setup ('setup.py:make_setup', a factory, or a Setup with live objects).

    The fresh processes of the resume test (and, for a peft model, of the adapter reload) are started as soon as
    the setup file is known, so that their start-up (Python, torch, the setup's imports and build) runs while this
    process builds its own setup and takes its steps; each still builds everything from the file and receives
    only the checkpoint's folder (train/resume.py).

    Args:
        overfit_steps: updates on the first batch; its loss must fall by `overfit_drop` (a fraction) within them.
        overfit_lr: learning rate for that test only (default: the optimizer's own).
        checkpoint_dir: where the resume test writes its checkpoint (kept); default a temporary folder.
        resume: run the checkpoint/resume test (needs the setup as a file, to build it again in a fresh process).
        progress: called with each phase as it starts ('check 3/6: resume in a fresh process').
    Raises:
        InputError: a bad setup (no optimizer, a loss that is not a scalar), an unwritable checkpoint folder.
    """
    if isinstance(overfit_steps, bool) or not isinstance(overfit_steps, int) or not 1 <= overfit_steps <= 10_000:
        raise InputError(f"overfit steps {overfit_steps!r} must be a whole number from 1 to 10000")
    if not 0 < overfit_drop < 1:
        raise InputError(f"overfit drop {overfit_drop!r} must be a fraction between 0 and 1, e.g. 0.5")
    if overfit_lr is not None and not overfit_lr > 0:
        raise InputError(f"overfit learning rate {overfit_lr!r} must be > 0")
    if checkpoint_dir is not None and resume and _a_file(setup):       # before the setup is built
        from .resume_check import _writable

        _writable(Path(checkpoint_dir))
    tell = progress or (lambda _phase: None)
    from .resume import FreshProcess

    with ExitStack() as started:
        # the resume test's fresh process starts now: its start-up overlaps this process's own
        fresh = started.enter_context(FreshProcess(setup, "resume")) if resume and _a_file(setup) else None
        tell(f"building the setup{f' ({setup})' if isinstance(setup, str) else ''}")
        s = _loaded(setup)
        from .adapters import is_adapter_model

        adapter = is_adapter_model(s.model)
        adapter_fresh = started.enter_context(FreshProcess(setup, "adapter")) \
            if adapter and isinstance(setup, str) else None
        return _run(s, setup, fresh, adapter_fresh, adapter, tell, overfit_steps=overfit_steps,
                    overfit_drop=overfit_drop, overfit_lr=overfit_lr, checkpoint_dir=checkpoint_dir, resume=resume,
                    timeout=timeout)


def _a_file(setup: Any) -> TypeGuard[str]:
    """A 'FILE.py:FUNCTION' whose file exists: what a fresh process can build again."""
    if not isinstance(setup, str):
        return False
    path, sep, name = setup.rpartition(":")
    return bool(sep) and name.isidentifier() and Path(path).is_file()


def _loaded(setup: Any) -> Setup:
    import torch

    s = load_setup(setup)
    if s.optimizer is None or not isinstance(s.optimizer, torch.optim.Optimizer):
        raise InputError(f"{s.source or 'the setup'}: needs the optimizer (a torch.optim.Optimizer over the model's "
                         "parameters) to check a full step; return it as 'optimizer'")
    where = s.source or "the setup"
    if not any(p.requires_grad for p in s.model.parameters()):
        raise InputError(f"{where}: the model has no trainable parameter (requires_grad is False everywhere): "
                         "nothing to check; unfreeze what is meant to train before building the optimizer")
    for i, batch in enumerate(s.batches):
        for key, value in batch.items():
            if not isinstance(value, (torch.Tensor, int, float, bool, str, type(None))):
                raise InputError(f"{where}: batch {i} field {key!r} is a {type(value).__name__}, not a tensor; "
                                 "return batches as your loop gives them to the model (torch.tensor(...), a "
                                 "collate's output)")
    if isinstance(s.trainable, str):
        s.trainable = [s.trainable]
    if s.trainable is not None and (not isinstance(s.trainable, (list, tuple))
                                    or not all(isinstance(t, str) for t in s.trainable)):
        raise InputError(f"{s.source or 'the setup'}: trainable must be a list of parameter-name globs or module "
                         f"names (e.g. ['*lora_*', 'score']), not {s.trainable!r}")
    if s.trainable is not None:
        from .step import matches

        names = [n for n, _ in s.model.named_parameters()]
        idle = [t for t in s.trainable if not any(matches(n, [t]) for n in names)]
        if idle:
            shown = ", ".join(repr(t) for t in idle)
            raise InputError(f"{s.source or 'the setup'}: trainable pattern(s) {shown} match no parameter of the "
                             f"model (its names look like {', '.join(own_name_sample(names))}); give globs or module "
                             "names that exist, e.g. '*lora_*', 'lm_head'")
    return s


def own_name_sample(names: list[str], k: int = 2) -> list[str]:
    """A few parameter names, as a user would declare them, for an error message."""
    from .step import own_name

    return [repr(own_name(n)) for n in names[:k]]


def _run(s: Setup, setup: Any, fresh: Any, adapter_fresh: Any, adapter: bool, tell: Callable[[str], None], *,
         overfit_steps: int, overfit_drop: float, overfit_lr: float | None, checkpoint_dir: str | Path | None,
         resume: bool, timeout: float) -> CheckReport:
    from .step import cross_row_gradient, device_of, overfit, to_device

    device = device_of(s.model)
    batches = [to_device(b, device) for b in s.batches]
    runs_resume = resume and isinstance(setup, str) and len(batches) >= 2
    phases = ["one step: loss, gradients, update", "the step's memory beside campaign memory's estimate",
              *(["resume in a fresh process"] if runs_resume else []),
              *(["the adapter: saved, bound to its base, reloaded in a fresh process"] if adapter else []),
              "batch independence",
              f"overfitting one batch ({overfit_steps} update{'s' if overfit_steps > 1 else ''})"]
    done = iter(range(1, len(phases) + 1))

    def next_phase() -> None:
        n = next(done)
        tell(f"check {n}/{len(phases)}: {phases[n - 1]}")

    kept = _keep(s)
    threads = ExitStack()
    try:
        threads.enter_context(_threads_for(s.model, batches[0]))
        next_phase()
        try:
            meter, fig, dropouts = _first_step(s, batches[0])
        except InputError:
            raise
        except Exception as e:          # the user's forward or loss: one line naming it, not a traceback (exit 3)
            from .setup import first_line

            raise InputError(f"{s.source or 'the setup'}: the first step raised {type(e).__name__} in your model's "
                             f"forward or loss: {first_line(e)}") from None
        measured = meter.result(label="campaign check: one step")
        if not math.isfinite(fig.loss):
            # one message about the loss: every later figure (gradients, the update, rows, overfitting) is NaN too
            return _report(s, _not_finite(fig), fig, measured, (), (), None, device, batches, [])
        checks = _step_checks(fig, s, batches[0])
        from .probes import train_mode_check

        checks.append(train_mode_check(s.model, dropouts))
        next_phase()
        compared, notes = _beside_estimate(s, batches[0], measured)
        checks.append(estimate_check(compared))
        resumed = None
        if not resume:
            checks.append(Check("resume.next_step_equal", "skipped", "not run (--no-resume)", "",
                                "run without --no-resume", gates=False))  # the user chose
        elif not isinstance(setup, str):
            checks.append(Check("resume.next_step_equal", "skipped", "the setup was given as live objects",
                                "a resume is only proven by a fresh process that builds everything again",
                                "give the setup as setup.py:make_setup"))
        elif len(batches) < 2:
            checks.append(Check("resume.next_step_equal", "skipped", "the setup gives one batch; the resume test "
                                "needs two (one before the checkpoint, one after)", "", "return two batches or more",
                                gates=False))
        else:
            next_phase()
            resumed, found = resume_checks(s, setup, batches[1], checkpoint_dir, timeout, device, fresh)
            checks.extend(found)
        if fresh is not None:
            fresh.close()              # not needed (one batch), or already done
        if adapter:
            next_phase()
            checks.extend(adapter_checks(s, setup if isinstance(setup, str) else None, batches[0], fig, timeout,
                                         adapter_fresh))
        next_phase()
        checks.append(_independence(s, batches[0], cross_row_gradient))
        from .probes import padding_check
        from .step import loss_of

        checks.append(padding_check(s.model, batches[0], loss_of, s.loss))
        from .probes import labels_check

        checks.append(labels_check(s.model, batches[0], s.loss))
        next_phase()
        losses = overfit(s.model, s.optimizer, batches[0], steps=overfit_steps, loss_fn=s.loss, lr=overfit_lr)
        checks.append(_overfit_check(losses, overfit_drop, overfit_lr, s.optimizer))
    finally:
        threads.close()
        _restore(s, kept)
    return _report(s, checks, fig, measured, compared, losses, resumed, device, batches, notes)


def _report(s: Setup, checks: list[Check], fig: StepFigures, measured: Any, compared: tuple[PhaseMemory, ...],
            losses: tuple[float, ...], resumed: Any, device: Any, batches: list[Any], notes: list[str]) -> CheckReport:
    from .step import first_rows

    classes = fig.classes
    first = batches[0].get("input_ids")
    if classes is None:
        notes.append("the model's output has no class dimension: the loss at initialization was not compared")
    notes.append("the user's model, optimizer, scheduler and random generators are put back as they were given")
    return CheckReport(
        checks=tuple(checks), loss=fig.loss, expected_loss=math.log(classes) if classes else None,
        groups=fig.groups, dtypes=fig.dtypes, trainable_elements=fig.trainable_elements,
        frozen_elements=fig.frozen_elements, memory=measured, memory_vs_estimate=compared,
        overfit_losses=losses, resume=resumed, device=str(device),
        micro_batch=first_rows(batches[0]),
        sequence_length=int(first.shape[1]) if first is not None and first.dim() == 2 else None,
        notes=tuple(notes), source=s.source)


@contextmanager
def _threads_for(model: Any, batch: Any) -> Iterator[None]:
    """One intra-op thread for a small step on the CPU (ONE_THREAD_WORK), the caller's setting otherwise; put back
    afterwards. The fresh processes compute on as many threads as this process (train/resume.py)."""
    import torch

    ids = batch.get("input_ids") if hasattr(batch, "get") else None
    tokens = int(ids.numel()) if ids is not None and hasattr(ids, "numel") else 1
    params = sum(p.numel() for p in model.parameters())
    before = torch.get_num_threads()
    small = next(model.parameters()).device.type == "cpu" and params * tokens <= ONE_THREAD_WORK
    if small and before > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _first_step(s: Setup, batch: Any) -> tuple[Any, StepFigures, dict[str, bool]]:
    """The first update, checked (with the mode each dropout ran in); then a second one measured phase by phase
    (the optimizer's state exists from the first update on, as in every later step)."""
    from ..memory.measure import MemoryMeter
    from .probes import dropout_modes
    from .step import checked_step, measured_step

    with dropout_modes(s.model) as seen:
        fig = checked_step(s.model, s.optimizer, s.scheduler, batch, loss_fn=s.loss, trainable=s.trainable)
    device = next(s.model.parameters()).device
    meter = MemoryMeter("cuda" if device.type == "cuda" else "cpu")
    measured_step(s.model, s.optimizer, s.scheduler, batch, meter, loss_fn=s.loss)
    return meter, fig, dict(seen)


def _beside_estimate(s: Setup, batch: Any, measured: Any) -> tuple[tuple[PhaseMemory, ...], list[str]]:
    from .workload import estimate_for

    est, notes = estimate_for(s.model, s.optimizer, batch)
    estimated = {p.name: p.bytes for p in est.phases} if est is not None else {}
    return tuple(PhaseMemory(p.name, p.peak_allocated_bytes, estimated.get(p.name)) for p in measured.phases), notes


def estimate_check(rows: tuple[PhaseMemory, ...], check_id: str = "step.memory_as_estimated") -> Check:
    ratios = [(r.phase, r.ratio) for r in rows if r.ratio is not None]
    if not ratios:
        return Check(check_id, "skipped", "no estimate for this step (see the notes)", gates=False)
    phase, worst = max(ratios, key=lambda pr: max(pr[1], 1 / pr[1]))
    seen = ", ".join(f"{p} {r:.2f}x" for p, r in ratios) + " of campaign memory's estimate"
    if 1 / ESTIMATE_BAND <= worst <= ESTIMATE_BAND:
        return Check(check_id, "pass", seen)
    return Check(check_id, "warn", seen,
                 f"the {phase} phase is {worst:.2f}x the estimate: a budget planned on the estimate is off by as "
                 "much", "read the notes; on the card, `campaign measure` and `campaign explain` on this workload "
                 "say which term differs")


NOT_FINITE_SKIPS = ("step.finite_grads", "params.received_grad", "params.trainable_changed", "params.frozen_unchanged",
                    "batch.independent", "batch.padding_ignored", "batch.labels_aligned", "step.overfit",
                    "resume.next_step_equal")


def _not_finite(f: StepFigures) -> list[Check]:
    """A non-finite loss on the first batch: that failure alone, and every later check said not run for it."""
    first = Check("step.finite_loss", "fail", f"loss {f.loss} on the first batch", "nothing trains from a "
                  "non-finite loss; every later figure (gradients, the update, batch independence, overfitting) is "
                  "not finite either, so they were not run", "look for log(0), a division by a zero token count "
                  "(every label -100) or fp16 overflow; run the forward in fp32 to compare")
    return [first, *(Check(i, "skipped", "not run: the loss on the first batch is not finite (step.finite_loss)",
                           gates=False) for i in NOT_FINITE_SKIPS)]


def _positions(batch: Any) -> int:
    """Positions the loss is computed on in a batch: labels that are not -100 (a class per row: the rows)."""
    labels = batch.get("labels") if hasattr(batch, "get") else None
    if labels is None or not hasattr(labels, "numel"):
        return 0
    return int((labels != -100).sum()) if labels.dim() >= 2 else int(labels.numel())


def _step_checks(f: StepFigures, s: Setup, batch: Any = None) -> list[Check]:
    out = []
    if math.isfinite(f.loss):
        out.append(Check("step.finite_loss", "pass", f"loss {f.loss:.4f}"))
    else:
        out.append(Check("step.finite_loss", "fail", f"loss {f.loss} on the first batch",
                         "nothing trains from a non-finite loss", "look for log(0), a division by a zero token count "
                         "(every label -100) or fp16 overflow; run the forward in fp32 to compare"))
    if f.classes and math.isfinite(f.loss):
        expected = math.log(f.classes)
        ratio = f.loss / expected
        positions = _positions(batch) if batch is not None else 0
        if positions >= SUMMED_POSITIONS and ratio >= SUMMED_SHARE * positions:
            out.append(Check("step.initial_loss", "fail",
                             f"loss {f.loss:.3f} is {ratio:.1f}x ln({f.classes}) = {expected:.3f}, about the "
                             f"{positions:,} positions the batch computes a loss on: the loss is summed, not averaged",
                             "a summed loss scales the gradient (and the effective learning rate) by the batch's "
                             "token count, which changes from batch to batch",
                             "divide by the tokens (reduction='mean', or the sum / the update's token count)"))
        elif ratio > INIT_LOSS_HIGH:
            out.append(Check("step.initial_loss", "warn",
                             f"loss {f.loss:.3f} is {ratio:.1f}x ln({f.classes}) = {expected:.3f}",
                             "an untrained model guesses uniformly (loss ln(classes)); far above it the logits start "
                             "too large or the loss is summed, and the first steps are spent undoing it",
                             "check the output layer's initialization and that the loss is a mean"))
        else:
            what = "near" if ratio >= 1 / INIT_LOSS_HIGH else "below (a trained model: expected when fine-tuning)"
            out.append(Check("step.initial_loss", "pass",
                             f"loss {f.loss:.3f}, {what} ln({f.classes}) = {expected:.3f} (uniform guess)"))
    if s.scheduler is not None:
        bound = getattr(s.scheduler, "optimizer", None)
        if bound is not None and bound is not s.optimizer:
            out.append(Check("step.scheduler_bound", "fail", f"the scheduler ({type(s.scheduler).__name__}) steps "
                             "another optimizer than the one that updates the model",
                             "the learning rate schedule never reaches the training: the warm-up and decay change "
                             "the rates of an optimizer that does not step", "build the scheduler on the optimizer "
                             "you return (after any rebuild of the optimizer)"))
        else:
            out.append(Check("step.scheduler_bound", "pass", f"the scheduler ({type(s.scheduler).__name__}) steps "
                             "the optimizer that updates the model"))
    if f.nonfinite_grad:
        out.append(Check("step.finite_grads", "fail", f"non-finite gradients in {listed(f.nonfinite_grad)}",
                         "one inf or nan gradient spreads to every weight at the next update",
                         "clip gradients, run the loss in fp32, or use bf16 / a loss scaler"))
    else:
        out.append(Check("step.finite_grads", "pass", f"{len(f.trainable)} gradients, all finite"))
    if f.declared is not None:
        # peft keeps a frozen copy of a module it trains in full (modules_to_save) as '.original_module.'
        frozen_declared = tuple(n for n in f.declared if n not in set(f.trainable) and ".original_module." not in n)
        undeclared = tuple(n for n in f.trainable if n not in set(f.declared))
        if frozen_declared or undeclared:
            parts = ([f"declared to train but frozen (requires_grad False): {listed(frozen_declared)}"]
                     if frozen_declared else []) + \
                    ([f"trains but not declared: {listed(undeclared)}"] if undeclared else [])
            out.append(Check("params.trainable_as_declared", "fail", "; ".join(parts),
                             "the run would train other parameters than the plan (and the memory estimate) says",
                             "set requires_grad for exactly the declared parameters (freeze before building the "
                             "optimizer), or correct `trainable`"))
        else:
            out.append(Check("params.trainable_as_declared", "pass",
                             f"{len(f.trainable)} tensors train, as declared ({listed(list(s.trainable or []))})"))
    else:
        out.append(Check("params.trainable_as_declared", "skipped", "the setup does not say what is meant to train",
                         "", "return trainable=['*lora_*', 'score'] (globs or module names)", gates=False))
    # LoRA's B starts at zero, so A's gradient is exactly zero at the first update: expected, not a broken branch
    lora_a = tuple(n for n in f.zero_grad if ".lora_A." in n or ".lora_embedding_A." in n)
    zero = tuple(n for n in f.zero_grad if n not in set(lora_a))
    if f.no_grad:
        out.append(Check("params.received_grad", "fail", f"requires_grad but no gradient: {listed(f.no_grad)}",
                         "these parameters are counted as trainable (memory, optimizer state) but never learn: a "
                         "branch not used in the forward, or a detach", "use them in the forward or freeze them"))
    elif zero:
        out.append(Check("params.received_grad", "warn", f"gradient exactly zero: {listed(zero)}",
                         "an all-zero gradient often means a disconnected or masked-out branch",
                         "check that the branch is used with this batch (it may be legitimately unused here)"))
    else:
        out.append(Check("params.received_grad", "pass", f"{len(f.trainable)} of {len(f.trainable)} trainable tensors "
                         "received a gradient" + (f" ({len(lora_a)} lora_A at exactly 0, as LoRA's B starts at 0)"
                                                  if lora_a else "")))
    if f.not_in_optimizer:
        out.append(Check("params.in_optimizer", "fail", f"trainable but not in the optimizer: "
                         f"{listed(f.not_in_optimizer)}", "their gradients are computed and thrown away",
                         "build the optimizer after freezing/unfreezing and after wrapping the model (peft)"))
    else:
        out.append(Check("params.in_optimizer", "pass", "the optimizer holds every trainable tensor"))
    stuck = tuple(n for n in f.unchanged if n not in set(f.zero_lr) and n not in set(f.zero_grad))
    if stuck:
        out.append(Check("params.trainable_changed", "fail", f"unchanged by the update: {listed(stuck)} "
                         f"({len(stuck)} of {len(f.trainable)})",
                         "parameters meant to train did not move: a group left out of the optimizer, no gradient, "
                         "or a step that is skipped", "check the optimizer's groups and that optimizer.step() runs"))
    elif f.trainable and set(f.trainable) <= set(f.zero_lr):
        out.append(Check("params.trainable_changed", "skipped", f"every one of the {len(f.trainable)} trainable "
                         "tensors had learning rate 0 at the checked update (a warm-up that starts at 0): whether "
                         "the update reaches them was not seen",
                         "a step that changes nothing proves nothing about the update",
                         "check a later step: step the scheduler once before returning the setup, or start the "
                         "warm-up above 0"))
    elif set(f.unchanged) & set(f.zero_lr):
        out.append(Check("params.trainable_changed", "warn", f"{len(set(f.unchanged) & set(f.zero_lr))} of "
                         f"{len(f.trainable)} trainable "
                         "tensors unchanged: their learning rate was 0 for this update",
                         "a warm-up that starts at 0 (transformers' linear and cosine schedules do) wastes the first "
                         "update, and hides whether the step reaches these parameters",
                         "start the warm-up above 0, or run the check with a scheduler past its first step"))
    else:
        moved = len(f.trainable) - len(f.unchanged)
        out.append(Check("params.trainable_changed", "pass", f"all {len(f.trainable)} trainable tensors changed" if
                         not f.unchanged else f"{moved} of {len(f.trainable)} trainable tensors changed; the "
                         f"{len(f.unchanged)} others had a zero gradient (params.received_grad)"))
    if f.changed_frozen:
        out.append(Check("params.frozen_unchanged", "fail", f"frozen yet changed: {listed(f.changed_frozen)}",
                         "a frozen base that moves is no longer the base the adapter or the comparison assumes",
                         "find what writes to them in the step (a hook, weight tying to a trained tensor, an "
                         "optimizer built before freezing with weight decay)"))
    else:
        frozen = f.frozen_elements
        adapted = [n for n in f.trainable if "lora_" in n]
        if not frozen and adapted:
            out.append(Check("params.frozen_unchanged", "fail", f"no frozen parameters, yet the model has "
                             f"{len(adapted)} LoRA tensors: the base trains in full beside the adapter",
                             "the run costs a full fine-tuning (gradients and optimizer state for every weight) and "
                             "the base no longer matches the adapter's binding", "freeze the base before building "
                             "the optimizer (peft's get_peft_model does; do not call model.train(True) on "
                             "requires_grad)"))
        else:
            out.append(Check("params.frozen_unchanged", "pass", f"{frozen:,} frozen elements unchanged" if frozen
                             else "no frozen parameters (full fine-tuning)"))
    return out


def _independence(s: Setup, batch: Any, cross_row_gradient: Any) -> Check:
    from .step import first_rows

    rows = first_rows(batch)
    if rows < 2:
        return Check("batch.independent", "skipped", "the first batch has one row", "",
                     "give a batch of two rows or more", gates=False)
    try:
        other, own = cross_row_gradient(s.model, batch, loss_fn=s.loss)
    except InputError as e:
        return Check("batch.independent", "skipped", str(e), "rows that leak into each other go unseen",
                     "return per-row outputs (logits) from the forward")
    if not (math.isfinite(other) and math.isfinite(own)):
        return Check("batch.independent", "skipped", "not run: the gradient on the inputs is not finite", gates=False)
    if own == 0.0 and other == 0.0:
        return Check("batch.independent", "skipped", "the input tensor watched does not reach row 0's output: "
                     "nothing was measured", "rows that leak into each other go unseen",
                     "return per-row outputs (logits) computed from the token embeddings or the batch's tensors")
    if other == 0.0:
        return Check("batch.independent", "pass", f"row 0's output has no gradient on the other {rows - 1} rows' "
                     f"inputs (own: {own:.2e})")
    return Check("batch.independent", "fail",
                 f"row 0's output depends on other rows' inputs: largest gradient {other:.2e} (own row: {own:.2e})",
                 "rows leak into each other: a reshape or transpose that mixes the batch dimension, a norm over the "
                 "batch, or attention across rows; results then depend on what else is in the batch",
                 "find the view/reshape that puts the batch dimension elsewhere (use .transpose, keep dim 0 the "
                 "batch)")


def trend(losses: tuple[float, ...]) -> float:
    """Kendall's tau of the losses against their order: -1 every later loss is lower, 0 no trend (noise around a
    level: a loss the update does not reach), +1 every later loss higher. Ties count for neither."""
    n = len(losses)
    pairs = n * (n - 1) // 2
    if not pairs:
        return 0.0
    score = sum((losses[j] > losses[i]) - (losses[j] < losses[i]) for i in range(n) for j in range(i + 1, n))
    return score / pairs


def _overfit_check(losses: tuple[float, ...], drop: float, lr: float | None, optimizer: Any) -> Check:
    """Pass when the loss reaches the target; a steady fall that misses it is a warning with the figures (a correct
    setup with dropout, or LoRA at a modest rate, learns slowly: missing a fixed target by luck is no bug); no fall
    beyond the noise (tau above LEARNS_TREND, or a final loss not below the first) fails: the update does not reach
    the loss."""
    start, end = losses[0], losses[-1]
    best = min(losses)
    steps = len(losses) - 1
    if not all(math.isfinite(v) for v in losses):
        return Check("step.overfit", "fail", f"the loss became non-finite within {steps} updates on one batch",
                     "the learning rate or the precision diverges", "lower the learning rate; check fp16 overflow")
    target = (1 - drop) * start
    if end <= target:
        return Check("step.overfit", "pass", f"loss {start:.3f} -> {end:.3f} in {steps} updates on one batch "
                     f"(target {target:.3f})")
    rates = sorted({g.get("lr", 0.0) for g in optimizer.param_groups})
    tau = trend(losses)
    figures = (f"loss {start:.3f} -> {end:.3f} (best {best:.3f}) in {steps} updates on one batch; target "
               f"{target:.3f} ({drop:.0%} lower) at learning rate {lr if lr is not None else rates}; trend "
               f"{tau:+.2f} (Kendall's tau: -1 a steady fall, 0 noise)")
    if end < start and tau <= LEARNS_TREND:
        return Check("step.overfit", "warn", f"{figures}: the loss falls steadily, short of the target",
                     "the update reaches the loss; at this rate and step count the batch is not memorized yet, which "
                     "a correct setup with dropout or a small learning rate can show",
                     "to see it reach the target: raise the rate for this test (--overfit-lr) or the updates "
                     "(--overfit-steps)")
    return Check("step.overfit", "fail", f"{figures}: no fall beyond the noise",
                 "a model that cannot memorize one batch will not learn the data set: the update does not reach the "
                 "loss (a detached output, a learning rate of 0, the wrong parameters in the optimizer)",
                 "if the step checks pass, raise the rate for this test (--overfit-lr) or the updates "
                 "(--overfit-steps)")


def _keep(s: Setup) -> dict[str, Any]:
    """The user's objects as given, in host memory (a copy on the card would weigh in the measured step)."""
    from .checkpoint import rng_state
    from .step import modes

    return {"model": {k: v.detach().to("cpu", copy=True) for k, v in s.model.state_dict().items()},
            "modes": modes(s.model),
            "optimizer": copy.deepcopy(s.optimizer.state_dict()),
            "scheduler": copy.deepcopy(s.scheduler.state_dict()) if s.scheduler is not None else None,
            "rng": rng_state()}


def _restore(s: Setup, kept: dict[str, Any]) -> None:
    from .checkpoint import set_rng_state

    s.model.load_state_dict(kept["model"])
    s.optimizer.load_state_dict(kept["optimizer"])
    if s.scheduler is not None:
        s.scheduler.load_state_dict(kept["scheduler"])
    set_rng_state(kept["rng"])
    from .step import set_modes

    set_modes(s.model, kept["modes"])
    s.optimizer.zero_grad(set_to_none=True)


__all__ = ["CheckReport", "ResumeFigures", "check"]
