"""`campaign check -- python SCRIPT ARGS`: the user's own training script, unchanged, run in a child process
(train/watch.py) for a few optimizer updates, and the checks drawn from what it was seen doing:

- watch.updates: the updates asked for were watched (fewer: the verdict is "not verified");
- step.train_mode: the forwards that fed an update ran their dropout in training mode (a model left in eval after an
  evaluation fails);
- step.grads_zeroed: each parameter's gradient was reset (None or zero) before the first backward of the next update;
  a gradient still holding the previous update's is a fail (several backwards within one update are accumulation);
- step.lr_per_update: the learning rate moved at most once, and the scheduler stepped at most once, between two
  updates (a scheduler stepped per micro-batch runs its warm-up and decay that many times too fast);
- params.in_optimizer, params.trainable_changed, params.frozen_unchanged: the optimizer holds exactly the trainable
  parameters; the last watched update changed every trainable one and no frozen one;
- step.finite_loss, step.finite_grads;
- step.accumulation: where the last watched update accumulated several backwards, the gradient the loop accumulated
  (each micro-batch's own model loss scaled as the loop scaled it) against one backward of the model's own loss over
  the micro-batches stacked (train/watch_accumulation.py);
- batch.labels_aligned: on a batch the loop fed, whether the model's own loss shifts the labels (from its loss
  against the cross-entropy of its logits, shifted and not) and whether the labels fit that;
- batch.padding_masked, batch.answer_truncated: read from every batch the loop fed (train/watch_batches.py):
  no target where the attention mask is 0 and no attended padding after an answer; answers not cut by truncation
  (their targets end on the end token the other rows end with);
- model.causal: for a next-token model, the outputs at positions <= t do not move when the inputs after t change;
- resume.next_step_equal: where the script saved a checkpoint within the watched updates and --resume-args say how
  it resumes, the script run again in a fresh process with them, its first update compared with the uninterrupted
  run's next one (train/watch_resume.py): the same batch, learning rates, scheduler position, optimizer state and
  parameters after the update; else skipped, saying how to enable it (the verdict is then "not verified");
- with processes=N (torchrun, train/watch_ranks.py): ddp.data_differs, ddp.params_in_sync and ddp.grad_is_mean
  across the ranks, step.accumulation over the ranks' micro-batches together, resume.next_step_equal on every rank
  (the script run again under torchrun), the other checks from rank 0.
"""
from __future__ import annotations

import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..checks import Check, check, listed
from ..errors import InputError
from ..results import Result
from .watch_probes import ALIGNED, LOSS_RTOL

SCHEMA = "campaign.watch/1"
INTERPRETER = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?$")
# the parent waits this much longer than the child's own --timeout watchdog before killing it
GRACE_S = 30.0
TRAINER_CHECKPOINT = re.compile(r"checkpoint-\d+$")


@dataclass(frozen=True)
class WatchReport(Result):
    """What the watched run saw, and the checks drawn from it."""

    checks: tuple[Check, ...]
    command: tuple[str, ...]
    updates_asked: int
    updates_watched: int
    model: str | None
    losses: tuple[float, ...]                     # per update: the mean of its backward losses, as backpropagated
    learning_rates: tuple[tuple[float, ...], ...]  # per update: each group's rate at its step
    micro_batches: tuple[int, ...]                # per update: backwards
    checkpoints: tuple[str, ...]
    seconds_to_first_update: float | None
    seconds_per_update: float | None
    wall_seconds: float
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA


def watched_command(words: Sequence[str]) -> bool:
    """Whether `campaign check WORDS` names a command to watch (python SCRIPT ARGS, or SCRIPT ARGS) rather than a
    setup (one FILE.py:FUNCTION)."""
    return len(words) > 1 or bool(words) and INTERPRETER.match(os.path.basename(words[0])) is not None


def _interpreter(command: Sequence[str]) -> tuple[str, list[str]]:
    """The Python that runs the script (this one for a bare `python`: campaign's observers are imported there) and
    the rest: SCRIPT ARGS or -m MODULE ARGS."""
    if not command:
        raise InputError("check: give the training command after --, e.g. campaign check -- python train.py")
    first, rest = command[0], list(command[1:])
    if first.endswith(".py"):
        return sys.executable, list(command)
    if INTERPRETER.match(os.path.basename(first)) is None:
        raise InputError(f"check: {first!r} is not a Python interpreter; give `campaign check -- python SCRIPT.py "
                         "ARGS` (or a setup as FILE.py:FUNCTION)")
    exe = sys.executable if os.sep not in first else first
    if not rest:
        raise InputError("check: no script after python; give `campaign check -- python SCRIPT.py ARGS`")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise InputError("check: no module after -m; give `campaign check -- python -m MODULE ARGS`")
        return exe, rest
    if rest[0].startswith("-"):
        raise InputError(f"check: python option {rest[0]!r} is not supported; give `campaign check -- python "
                         "SCRIPT.py ARGS`")
    if not Path(rest[0]).is_file():
        raise InputError(f"{rest[0]}: no such script; give `campaign check -- python SCRIPT.py ARGS`")
    return exe, rest


def watch(command: Sequence[str], *, updates: int = 3, timeout: float = 600.0, resume: bool = True,
          resume_args: Sequence[str] = (), progress: Callable[[str], None] | None = None,
          processes: int = 1) -> WatchReport:
    """Run `python SCRIPT ARGS` (the command as the user types it) watched for `updates` optimizer updates.

    resume_args: the arguments that make the script resume from the checkpoint it wrote (nanoGPT:
    `--init_from=resume`); given, and a checkpoint written within the watched updates, the script is run again in a
    fresh process with them appended, and its first update compared with the uninterrupted run's next one.

    processes: N >= 2 runs the script under torchrun with N ranks (gloo on the CPU, NCCL on GPUs) and adds the
    checks across ranks (train/watch_ranks.py); resume is then checked on every rank (the script run again under
    torchrun from its checkpoint, each rank's first update against the same rank's update after it).

    Raises:
        InputError: no such script, a script that fails, ends or times out before its first update.
    """
    if isinstance(updates, bool) or not isinstance(updates, int) or not 1 <= updates <= 1000:
        raise InputError(f"--updates {updates!r} must be a whole number from 1 to 1000")
    if not timeout > 0:
        raise InputError(f"--timeout {timeout!r} must be > 0 seconds")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise InputError(f"--processes {processes!r} must be a whole number >= 1")
    exe, rest = _interpreter(command)
    script = rest[1] if rest[0] == "-m" else rest[0]
    tell = progress or (lambda _phase: None)
    if processes > 1:
        return _watch_ranks(exe, rest, tuple(command), script, updates, timeout, resume, processes, tell,
                            tuple(resume_args))
    tell(f"running {script} for {updates} update{'s' if updates > 1 else ''}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="campaign-watch-") as tmp:
        reference = Path(tmp) / "resume-reference.pt"
        record = ["--resume-record", str(reference)] if resume else []
        observed = _run_watched(exe, [*record, "--updates", str(updates)], rest, Path(tmp) / "observed.json",
                                timeout, script)
        trainer = _trainer_checkpoint(observed.get("saves") or [])
        if record and (resume_args or trainer) and observed.get("saves") and reference.is_file():
            tell(f"running {script} again in a fresh process, resumed from its checkpoint")
            how = [] if resume_args else ["--trainer-checkpoint", trainer or ""]
            try:
                again = _run_watched(exe, ["--resume-compare", str(reference), "--updates", "1", *how],
                                     [*rest, *resume_args], Path(tmp) / "resumed.json", timeout, script)
            except InputError as e:
                again = {"finished": "error", "error": str(e)}
            observed["resumed"] = again
    wall = time.perf_counter() - started
    return _report(observed, tuple(command), script, updates, timeout, resume, wall, tuple(resume_args))


def _watch_ranks(exe: str, rest: list[str], command: tuple[str, ...], script: str, updates: int, timeout: float,
                 resume: bool, processes: int, tell: Callable[[str], None], resume_args: tuple[str, ...] = ()) \
        -> WatchReport:
    """The script under torchrun, each rank watched; with resume, where it checkpoints within the watched updates
    and how it resumes is known (--resume-args, or a Trainer's checkpoint), run again under torchrun from the
    checkpoint, each rank's first update compared with the same rank's update after the checkpoint."""
    from .accumulation import check_processes
    from .watch_ranks import rank_accumulation, rank_checks, run_ranks
    from .watch_resume import rank_path

    check_processes(processes)
    tell(f"running {script} under torchrun: {processes} processes, {updates} update{'s' if updates > 1 else ''}")
    started = time.perf_counter()
    again: list[dict[str, Any]] | None = None
    with tempfile.TemporaryDirectory(prefix="campaign-watch-") as tmp:
        reference = Path(tmp) / "resume-reference.pt"
        record = ["--resume-record", str(reference)] if resume else []
        records = run_ranks(exe, [*record, "--updates", str(updates)], rest, Path(tmp), timeout, script, processes,
                            GRACE_S)
        trainer = _trainer_checkpoint(records[0].get("saves") or [])
        refs = [Path(rank_path(str(reference), r)) for r in range(processes)]
        if record and (resume_args or trainer) and records[0].get("saves") and all(p.is_file() for p in refs):
            tell(f"running {script} again under torchrun, resumed from its checkpoint")
            how = [] if resume_args else ["--trainer-checkpoint", trainer or ""]
            (Path(tmp) / "resumed").mkdir()
            try:
                again = run_ranks(exe, ["--resume-compare", str(reference), "--updates", "1", *how],
                                  [*rest, *resume_args], Path(tmp) / "resumed", timeout, script, processes, GRACE_S)
            except InputError as e:
                again = [{"finished": "error", "error": str(e)}] * processes
    report = _report(records[0], command, script, updates, timeout, False, time.perf_counter() - started)
    across = rank_accumulation(records)     # the update is the ranks' together: rank 0's own share is not it
    checks = [across if across is not None and c.id == "step.accumulation" else c for c in report.checks
              if c.id != "resume.next_step_equal"]
    checks += rank_checks(records)
    checks.append(_resume_ranks(records, again, updates, resume, resume_args))

    return replace(report, checks=tuple(checks))


def _resume_ranks(records: list[dict[str, Any]], again: list[dict[str, Any]] | None, updates: int, resume: bool,
                  resume_args: tuple[str, ...]) -> Check:
    """resume.next_step_equal under torchrun: each rank's first resumed update against the same rank's update after
    the checkpoint (rank 0's checkpoint: a loop commonly saves on rank 0 only). Every rank must pass; the first
    rank that does not is the verdict."""
    saves = records[0].get("saves") or []
    found = [_resume({**r, "saves": saves, "resumed": again[rank] if again else None}, updates, resume, resume_args)
             for rank, r in enumerate(records)]
    if again is None:          # not run: why (no checkpoint, no way to resume given, --no-resume) is rank 0's
        return found[0]
    n = len(records)
    for rank, c in enumerate(found):
        if c.status != "pass":
            return replace(c, seen=f"rank {rank} of {n}: {c.seen}")
    return replace(found[0], seen=f"on each of the {n} ranks, {found[0].seen}")


def _trainer_checkpoint(saves: list[dict[str, Any]]) -> str | None:
    """The folder of the last checkpoint where it is a transformers Trainer's (saved from the Trainer's own _save
    methods, into checkpoint-N)."""
    if not saves or not saves[-1].get("trainer"):
        return None
    folder = os.path.dirname(saves[-1]["path"])
    return folder if TRAINER_CHECKPOINT.match(os.path.basename(folder)) else None


def _run_watched(exe: str, options: list[str], rest: list[str], out: Path, timeout: float, script: str) \
        -> dict[str, Any]:
    """One watched run of the script in a child process: its record."""
    cmd = [exe, "-m", "campaign.train.watch", "--out", str(out), "--timeout", str(timeout), *options, "--", *rest]
    from .accumulation import launch

    # in a session of its own: on a timeout or Ctrl-C the script and every process it started (DataLoader
    # workers) are killed and waited for
    code, stderr = launch(cmd, os.environ, timeout + GRACE_S, f"{script} (the watchdog did not stop it: stuck "
                          "in native code; raise --timeout or run it with a smaller config)")
    if not out.is_file():
        tail = [line for line in stderr.strip().splitlines() if line.strip()]
        raise InputError(f"{script}: the watched process ended (exit {code}) without a record: "
                         f"{tail[-1] if tail else 'no message'}")
    from ..io import load_json

    observed: dict[str, Any] = load_json(out, "the watched run's record")
    return observed


def _report(o: dict[str, Any], command: tuple[str, ...], script: str, updates: int, timeout: float, resume: bool,
            wall: float, resume_args: tuple[str, ...] = ()) -> WatchReport:
    seen = int(o.get("updates_seen") or 0)
    if o["finished"] == "error":
        raise InputError(f"{script}: raised {o['error']} (after {seen} updates); fix the script, or run it as "
                         "`python SCRIPT ARGS` to see the traceback")
    if seen == 0:
        if o["finished"] == "timeout":
            raise InputError(f"{script}: no optimizer update within {timeout:g} s (--timeout); it was in "
                             f"{o['phase']}; raise --timeout, or give the script a smaller config")
        raise InputError(f"{script}: ended without an optimizer update (no torch.optim optimizer stepped); give the "
                         "arguments that make it train")
    ups = o["updates"]
    checks = [_updates(o, seen, updates), _train_mode(o), _zeroed(ups, seen),
              _lr(ups, seen, int(o.get("world_size") or 1)), *_params(o.get("params")), *_finite(ups)]
    if "probes" in o:
        labels, next_token = _labels(o["probes"])
        checks += [_accumulation(o.get("accumulation")), labels, *_fed(o.get("batches")),
                   _causal(o["probes"], next_token)]
    else:        # the watchdog stopped the script (--timeout) before the probes could run on its model
        checks += [Check(cid, "skipped", "not run: the script was stopped at --timeout before the probes",
                         "", "raise --timeout or lower --updates")
                   for cid in ("step.accumulation", "batch.labels_aligned", "batch.padding_masked",
                               "batch.answer_truncated", "model.causal")]
    checks.append(_resume(o, updates, resume, resume_args))
    losses = tuple(sum(u["losses"]) / len(u["losses"]) if u["losses"] and all(map(_finite_number, u["losses"]))
                   else math.nan for u in ups)
    notes: tuple[str, ...] = ()
    if o["finished"] == "ended" and seen < updates:
        notes = (f"the script ended after {seen} updates",)
    return WatchReport(tuple(checks), command, updates, seen, o.get("model"), losses,
                       tuple(tuple(u["lrs"]) for u in ups), tuple(int(u["backwards"]) for u in ups),
                       tuple(sorted({s["path"] for s in o.get("saves", [])})), o.get("seconds_to_first_update"),
                       o.get("seconds_per_update"), wall, notes)


def _updates(o: dict[str, Any], seen: int, asked: int) -> Check:
    if seen >= asked:
        return Check("watch.updates", "pass", f"{seen} updates of {o.get('model') or 'the model'} watched")
    how = "ran past --timeout" if o["finished"] == "timeout" else "ended"
    return Check("watch.updates", "skipped", f"the script {how} after {seen} of the {asked} updates asked for",
                 "the checks that need two updates or more saw fewer",
                 f"give the script more iterations, or --updates {seen}")


def _train_mode(o: dict[str, Any]) -> Check:
    cid = "step.train_mode"
    off = o.get("eval_dropout") or {}
    dropout = o.get("dropout_seen") or []
    if off:
        first = min(off.values())
        return Check(cid, "fail", f"dropout ran in eval mode in the forwards that fed update {first}: "
                     f"{listed(sorted(off))} ({len(off)} of {len(dropout)} dropout modules)",
                     "the model trains without the dropout its configuration sets (a model left in eval mode after "
                     "an evaluation trains that way until the end of the run)",
                     "call model.train() after every evaluation, before the next training forward")
    if o.get("root_eval"):
        return Check(cid, "warn", f"the model ran its training forwards in eval mode (updates "
                     f"{', '.join(map(str, o['root_eval']))}); it has no dropout, but norm layers with running "
                     "statistics compute differently there", "", "call model.train() after every evaluation")
    if not dropout:
        return Check(cid, "skipped", "no dropout in the model (nothing whose mode changes the step)", gates=False)
    return Check(cid, "pass", f"{len(dropout)} dropout module(s) ran in training mode in every watched update")


def _zeroed(ups: list[dict[str, Any]], seen: int) -> Check:
    cid = "step.grads_zeroed"
    checked = [u for u in ups if u.get("grads_checked")]
    if not checked:
        return Check(cid, "skipped", f"{seen} update watched: gradients carried over show from the second update",
                     "gradients that add up across updates make every update a sum of all earlier ones",
                     "watch two updates or more (--updates 2)")
    bad = [u for u in checked if u["grads_carried"]]
    if bad:
        u = bad[0]
        return Check(cid, "fail", f"gradients carried over: before update {u['update']}, {len(u['grads_carried'])} "
                     f"of {u['grads_checked']} parameters still held the previous update's gradient when the next "
                     f"one was added ({listed(u['grads_carried'])})",
                     "without zero_grad each update applies the sum of every gradient so far: the steps grow and "
                     "the run diverges or crawls", "call optimizer.zero_grad() (or model.zero_grad()) once per "
                     "update, after optimizer.step()")
    return Check(cid, "pass", f"before updates {', '.join(str(u['update']) for u in checked)}, every parameter's "
                 "gradient was reset before the first backward")


def _per_process(u: dict[str, Any], world: int) -> bool:
    """Under torchrun with `world` ranks: the scheduler stepped `world` times at once between two updates, with no
    forward or backward between (one call of the loop's stepping it once per process, as accelerate's prepared
    scheduler does when each process's dataloader yields a `world`th of the batches: the schedule is written in one
    process's batches and keeps its pace)."""
    return world > 1 and u.get("scheduler_bursts") == [world] and u["lr_changes"] <= world


def _lr(ups: list[dict[str, Any]], seen: int, world: int = 1) -> Check:
    cid = "step.lr_per_update"
    between = [u for u in ups if "scheduler_steps" in u]
    if not between:
        return Check(cid, "skipped", f"{seen} update watched: the schedule's pace shows between two updates",
                     "a scheduler stepped per micro-batch runs its warm-up and decay too fast",
                     "watch two updates or more (--updates 2)")
    if all(_per_process(u, world) for u in between):
        rates = sorted({r for u in ups for r in u["lrs"]})
        return Check(cid, "pass", f"the scheduler stepped {world} times in one call between updates, once per "
                     f"process ({world} processes: the schedule counts one process's batches, as accelerate's "
                     f"prepared scheduler does); rates seen {listed([f'{r:.3g}' for r in rates])}")
    worst = max(between, key=lambda u: (u["scheduler_steps"], u["lr_changes"]))
    steps, moves = worst["scheduler_steps"], worst["lr_changes"]
    if steps > 1 or moves > 1:
        return Check(cid, "fail", f"between updates {worst['update'] - 1} and {worst['update']} the scheduler "
                     f"stepped {steps} times and the learning rate moved {moves} times "
                     f"({worst['backwards']} backwards in the update)",
                     "the schedule advances once per call: stepped per micro-batch, its warm-up ends and its decay "
                     "reaches the end that many times too early", "call scheduler.step() once per update, next to "
                     "optimizer.step() (inside the accumulation boundary)")
    rates = sorted({r for u in ups for r in u["lrs"]})
    return Check(cid, "pass", f"the learning rate moved at most once between updates (scheduler steps per update: "
                 f"{max(u['scheduler_steps'] for u in between)}; rates seen {listed([f'{r:.3g}' for r in rates])})")


def _params(p: dict[str, Any] | None) -> list[Check]:
    ids = ("params.in_optimizer", "params.trainable_changed", "params.frozen_unchanged")
    if not p:
        return [Check(i, "skipped", "the model of the updates was not identified (no forward whose parameters the "
                      "optimizer holds reached a backward)", "", "") for i in ids]
    out = []
    if p["missing"]:
        out.append(Check(ids[0], "fail", f"trainable but not in the optimizer: {listed(p['missing'])} "
                         f"({len(p['missing'])} of {p['trainable']})", "their gradients are computed and thrown away",
                         "build the optimizer after freezing/unfreezing and after wrapping the model (peft)"))
    elif p["frozen_held"]:
        out.append(Check(ids[0], "warn", f"the optimizer holds {len(p['frozen_held'])} frozen parameters "
                         f"({listed(p['frozen_held'])})", "they never receive a gradient, so the optimizer skips "
                         "them; a freeze after the optimizer was built often means another mistake nearby",
                         "build the optimizer over [p for p in model.parameters() if p.requires_grad]"))
    else:
        out.append(Check(ids[0], "pass", f"the optimizer holds exactly the {p['trainable']} trainable tensors"))
    if "unchanged" not in p:
        out += [Check(i, "skipped", "the last watched update was not seen whole", "", "") for i in ids[1:]]
        return out
    stuck = [n for n in p["unchanged"] if n not in set(p["zero_lr"])]
    if stuck:
        out.append(Check(ids[1], "fail", f"unchanged over updates 1-{p['update']}: {listed(stuck)} "
                         f"({len(stuck)} of {p['trainable']})", "parameters meant to train did not move",
                         "check the optimizer's groups, and that these parameters reach the loss"))
    elif p["unchanged"]:
        out.append(Check(ids[1], "skipped", f"{len(p['unchanged'])} trainable tensors had learning rate 0 at every "
                         f"watched update (1-{p['update']})", "whether the update reaches them was not seen",
                         "watch more updates (--updates), past a warm-up that starts at 0"))
    else:
        out.append(Check(ids[1], "pass", f"all {p['trainable']} trainable tensors changed over updates "
                         f"1-{p['update']}"))
    if p["frozen_changed"]:
        out.append(Check(ids[2], "fail", f"frozen yet changed over updates 1-{p['update']}: "
                         f"{listed(p['frozen_changed'])}",
                         "a frozen base that moves is no longer the base the plan assumes",
                         "find what writes to them (weight tying to a trained tensor, an in-place op in the loop)"))
    else:
        out.append(Check(ids[2], "pass", f"{p['frozen']} frozen tensors unchanged" if p["frozen"]
                         else "no frozen parameters (full fine-tuning)"))
    return out


def _finite_number(x: Any) -> bool:
    """A loss as the record holds it: strict JSON writes inf and nan as null."""
    return x is not None and math.isfinite(x)


def _finite(ups: list[dict[str, Any]]) -> list[Check]:
    losses = [x for u in ups for x in u["losses"]]
    bad = [u["update"] for u in ups if not all(_finite_number(x) for x in u["losses"])]
    loss = check("step.finite_loss", not bad, f"non-finite loss in update {bad[0]}" if bad else
                 f"{len(losses)} backward losses, all finite", "a nan or inf loss spreads to every weight",
                 "lower the learning rate; run the loss in fp32 or bf16") if losses else \
        Check("step.finite_loss", "skipped", "no backward loss was seen (a loss with more than one element)", "",
              "", gates=False)
    grads = [u for u in ups if u.get("grads_finite") is False]
    return [loss, check("step.finite_grads", not grads,
                        f"non-finite gradients before update {grads[0]['update']}: {listed(grads[0]['nonfinite'])}"
                        if grads else "gradients finite at every watched update",
                        "one inf or nan gradient spreads to every weight at the next update",
                        "clip gradients, run the loss in fp32, or use bf16 / a loss scaler")]


def _accumulation(f: dict[str, Any] | None) -> Check:
    cid = "step.accumulation"
    if not f:
        return Check(cid, "skipped", "the last watched update was not probed", gates=False)
    if not f["applies"]:
        return Check(cid, "skipped", f["why"], gates=False)
    k, rel, tol = f["micro_batches"], f["relative_error"], f["tolerance"]
    scaled = ", ".join(f"{x:.4g}" for x in f["factors"])
    seen = (f"the gradient accumulated over the last update's {k} micro-batches (the loop scaled the model's own loss "
            f"by {scaled}) is {_share(rel)} off the gradient of one backward over them stacked (cosine "
            f"{f['cosine']:.4f}; {f['dtype']} tolerance {tol:g}"
            + (f": the forward computes in {f['dtype']} over {f['weights']} weights (autocast)"
               if f.get("weights", f["dtype"]) != f["dtype"] else "") + ")")
    if rel is not None and rel <= tol:
        return Check(cid, "pass", seen)
    factors = f["factors"]
    hint = ""
    if all(abs(x - 1) < 1e-6 for x in factors):
        hint = f": each micro-batch's loss was backpropagated whole, not divided by the {k} accumulation steps"
    elif all(abs(x - 1 / k) < 1e-6 for x in factors):
        hint = ": each micro-batch's mean was divided by the steps, so a token of a short micro-batch weighs more"
    return Check(cid, "fail", seen + hint,
                 "the update is not the one the effective batch promises: too large a step (a sum of means), or "
                 "micro-batches weighted by their length rather than their tokens",
                 "divide each micro-batch's loss by the accumulation steps where micro-batches hold equal tokens; "
                 "else sum the token losses and divide by the update's token count (transformers: "
                 "num_items_in_batch)")


def _fed(f: dict[str, Any] | None) -> list[Check]:
    pad, cut = "batch.padding_masked", "batch.answer_truncated"
    if not f or not f["applies"]:
        why = f["why"] if f else "the batches the loop fed were not read (no token ids among the model's inputs)"
        return [Check(pad, "skipped", why, gates=False), Check(cut, "skipped", why, gates=False)]
    n = f["rows"]
    if f["pad_learned"]:
        b, r = f["first_pad_learned"]
        padding = Check(pad, "fail", f"{f['pad_learned']} of the {f['padded']} padded rows (of {n} fed) have a target "
                        f"where the attention mask is 0 (e.g. micro-batch {b + 1}, row {r + 1})",
                        "the model learns to predict padding after every answer",
                        "set labels to -100 where attention_mask is 0")
    elif f["pad_attended"]:
        padding = Check(pad, "fail", f"{f['pad_attended']} of {n} rows fed end in a run of one repeated token after "
                        "their last target, left out of the loss yet at attention mask 1: the mask covers the padding",
                        "the model attends to the padding, so a row's output depends on how long the others in its "
                        "batch are", "build attention_mask from the padding (the tokenizer's pad() returns it), 0 on "
                        "every padded position")
    elif not f["masked"]:
        padding = Check(pad, "skipped", "the model is fed no attention mask", gates=False)
    elif not f["padded"]:
        padding = Check(pad, "skipped", f"no row of the {n} fed was padded (attention mask all 1)", gates=False)
    else:
        padding = Check(pad, "pass", f"the {f['padded']} padded rows of {n} fed have no target where the attention "
                        "mask is 0")
    k = f["completion_rows"]
    if not k:
        return [padding, Check(cut, "skipped", f"no row of the {n} fed masks a prompt before its targets (labels from "
                               "the first position: pre-training text)", gates=False)]
    end = f["end_token"]
    if f["cut"]:
        truncated = Check(cut, "fail", f"{f['cut']} of {k} rows with an answer have their targets run to the batch's "
                          f"last column and end on another token than the end token (id {end}) that "
                          f"{f['ending_with_end']} other rows' targets end with: truncation cut the answer and its EOS",
                          "the model is trained to stop mid-answer, and never sees the EOS that ends an answer",
                          "raise max_length (max_seq_length), shorten the prompt, or drop the examples that do not fit")
    elif f.get("cut_at_length"):
        low, high = f["prompt_lengths"]
        truncated = Check(cut, "fail", f"all {k} rows with an answer end at exactly {f['cut_at_length']} tokens, the "
                          f"batches' width, though their prompts run from {low} to {high} tokens, and their targets "
                          f"end on {f['final_tokens']} different tokens: truncation at {f['cut_at_length']} cut every "
                          "answer and its EOS",
                          "the model is trained to stop mid-answer, and never sees the EOS that ends an answer",
                          "raise max_length (max_seq_length), shorten the prompt, or drop the examples that do not fit")
    elif f.get("all_at_edge_unended"):
        truncated = Check(cut, "warn", f"all {k} rows with an answer run to the batch's last column and end on "
                          "different tokens: truncation cut every answer, or the answers carry no EOS",
                          "an answer cut by max_length, or trained without its EOS, does not teach the model to stop",
                          "raise max_length (max_seq_length); append the EOS to every answer before tokenizing")
    elif f["no_end"]:
        truncated = Check(cut, "warn", f"{f['no_end']} of {k} rows with an answer end their targets on another token "
                          f"than the end token (id {end}) the other {f['ending_with_end']} end with",
                          "an answer trained without its EOS does not teach the model to stop",
                          "append the EOS to every answer before tokenizing")
    elif end is not None:
        truncated = Check(cut, "pass", f"the targets of all {k} rows with an answer end with one token (id {end})")
    else:
        truncated = Check(cut, "skipped", f"the {k} rows with an answer share no end token", gates=False)
    return [padding, truncated]


def _share(rel: float) -> str:
    return f"{rel:.2%}" if rel >= 1e-3 else f"{rel:.1e} (relative)"


def _labels(probes: dict[str, Any]) -> tuple[Check, bool | None]:
    """The check, and whether the model learns the next token (None: not known)."""
    cid = "batch.labels_aligned"
    if probes.get("ids") is None:
        return Check(cid, "skipped", "no token ids among the model's inputs", gates=False), None
    if probes.get("error"):
        return Check(cid, "skipped", f"the probe on a batch the loop fed raised {probes['error']}", "",
                     "run `campaign batch` or `campaign check SETUP` on the same model"), None
    f = probes["labels"]
    if not f["applies"]:
        return Check(cid, "skipped", f["why"], "", "", gates=False), None
    n, same, ahead = f["positions"], f["same"], f["ahead"]
    if f.get("own") is None:
        return Check(cid, "skipped", "the model returns no loss of its own beside per-token logits", "", "",
                     gates=False), None
    own, shifted, plain = f["own"], f["shifted"], f["plain"]
    if not all(map(_finite_number, (own, shifted, plain))):
        return Check(cid, "skipped", "the model's loss on the batch is not finite (after a non-finite update)",
                     gates=False), None
    shifts = abs(own - shifted) < abs(own - plain)
    if min(abs(own - shifted), abs(own - plain)) > LOSS_RTOL * max(abs(own), 1e-8):
        return Check(cid, "skipped", f"the model's own loss {own:.5g} is neither the shifted ({shifted:.5g}) nor "
                     f"the unshifted ({plain:.5g}) cross-entropy of its logits (label smoothing, an extra term)",
                     "", "", gates=False), None
    how = "the model's own loss shifts the labels" if shifts else "the model's own loss does not shift the labels"
    where = f"{probes['targets']} against {probes['ids']}"
    figures = (f"{how} (its loss {own:.5g}; cross-entropy shifted {shifted:.5g}, unshifted {plain:.5g}); the label "
               f"({where}) is the position's own token at {same} and the next token at {ahead} of {n} positions")
    if shifts and ahead >= ALIGNED * n > same:
        return Check(cid, "fail", f"{figures}: the labels are shifted twice",
                     "the batch shifted the labels and the model shifts them again: each position learns the token "
                     "two ahead", "give labels equal to the input ids (-100 where no loss): the model shifts them"), \
            False
    if not shifts and same >= ALIGNED * n > ahead:
        return Check(cid, "fail", f"{figures}: each position is trained to copy its own token",
                     "a model that does not shift needs the next token as each position's label",
                     "shift the targets in the batch (y = x[1:]), or use a loss that shifts"), False
    next_token = (same >= ALIGNED * n) if shifts else (ahead >= ALIGNED * n)
    return Check(cid, "pass", figures), next_token


def _causal(probes: dict[str, Any], next_token: bool | None) -> Check:
    cid = "model.causal"
    if probes.get("ids") is None:
        return Check(cid, "skipped", "no token ids among the model's inputs", gates=False)
    if probes.get("error"):
        return Check(cid, "skipped", f"the probe on a batch the loop fed raised {probes['error']}", "",
                     "check that the model runs in eval mode on a batch it was fed")
    c = probes["causal"]
    if not c["applies"]:
        return Check(cid, "skipped", c["why"], gates=False)
    at = ", ".join(map(str, c["positions"]))
    if c["after"] is None or c["before"] is None:      # strict JSON: nan and inf are null
        return Check(cid, "skipped", "the model's outputs are not finite (after a non-finite update)", gates=False)
    if c["after"] <= 0:
        return Check(cid, "skipped", f"changing the inputs after t={at} changed no output", "", "", gates=False)
    if c["leaks"]:
        leak = c["leaks"][0]
        seen = (f"changing the inputs after position {leak['t']} moved the outputs at positions <= {leak['t']} "
                f"(from position {leak['first_position_moved']}; by {leak['relative_change']:.2g} of the largest "
                "output)")
        if next_token is False:
            return Check(cid, "skipped", f"{seen}; the model does not learn the next token (a bidirectional "
                         "model may look ahead)", gates=False)
        return Check(cid, "fail" if next_token else "warn", seen,
                     "a next-token model that sees the tokens after t learns to copy them: the training loss falls "
                     "and generation is garbage", "apply a causal mask in attention (is_causal=True, or a lower-"
                     "triangular mask over the positions)")
    return Check(cid, "pass", f"outputs at positions <= t unchanged when the inputs after t change (t = {at}; the "
                 f"outputs after t moved by at least {c['after']:.2g} of the largest)")


def _resume(o: dict[str, Any], updates: int, resume: bool, resume_args: tuple[str, ...] = ()) -> Check:
    cid = "resume.next_step_equal"
    why = "a resume that restores less than the run needs (the optimizer, the scheduler, the data order) restarts " \
          "training from a different point"
    if not resume:
        return Check(cid, "skipped", "not run (--no-resume)", "", "run without --no-resume", gates=False)
    saves = o.get("saves") or []
    if not saves:
        return Check(cid, "skipped", f"the script wrote no checkpoint (torch.save) within the first {updates} "
                     "updates", "a resume is only proven by reloading a checkpoint in a fresh process",
                     "make the script save within the watched updates (its checkpoint interval) and give "
                     "--resume-args with the arguments that make it resume; --no-resume leaves it out of this verdict")
    s = saves[-1]
    trainer = _trainer_checkpoint(saves)
    if not resume_args and not trainer:
        return Check(cid, "skipped", f"the script wrote a checkpoint at update {s['update']} ({s['path']}); how it "
                     "resumes from it was not given", why,
                     "give --resume-args with the arguments that make the script resume from it (nanoGPT: "
                     "--resume-args \"--init_from=resume\"): it is run again in a fresh process and its first update "
                     "compared; --no-resume leaves resume out of this verdict")
    args = " ".join(resume_args) if resume_args else \
        f"Trainer.train(resume_from_checkpoint={os.path.basename(trainer or '')!r})"
    again = o.get("resumed")
    if again is None:
        return Check(cid, "skipped", f"the update after the checkpoint at update {s['update']} was not watched whole",
                     why, f"watch one update more (--updates {s['update'] + 1})")
    if again.get("finished") == "error" or not again.get("updates_seen"):
        what = again.get("error") or (f"no optimizer update within --timeout (it was in {again.get('phase')})"
                                      if again.get("finished") == "timeout" else "it ended without an update")
        return Check(cid, "fail", f"the script run again with {args} did not resume: {what}",
                     "a checkpoint that does not reload is no checkpoint",
                     "make the script resume from what it saved with these arguments (or give the right ones)")
    f = again.get("resume")
    if f is None or "error" in f:
        return Check(cid, "skipped", "the resumed update could not be compared"
                     + (f": {f['error']}" if f else ""), why, "")
    u, k = f["update"], f["saved_at"]
    head = f"resumed with {args} from the checkpoint at update {k}, its first update against update {u}"
    bad = []
    if not f["batches_equal"]:
        first = "the same" if f["first_batch_equal"] else "differs"
        bad.append(f"another batch was fed ({listed(f['inputs_differ'])} differ; {f['resumed_batches']} "
                   f"micro-batches against {f['batches']}, the first {first}): the data order restarted")
    if f["optimizer_differ"]:
        bad.append(f"the optimizer state differs ({f['resumed_optimizer_tensors']} tensors against "
                   f"{f['optimizer_tensors']}; {listed(f['optimizer_differ'])}): it was not restored")
    if f["lrs"] != f["resumed_lrs"] or f["schedulers"] != f["resumed_schedulers"]:
        pos = [x.get("last_epoch") for x in f["schedulers"]]
        got = [x.get("last_epoch") for x in f["resumed_schedulers"]]
        bad.append(f"the learning rate or the scheduler differs (rates {_rates(f['lrs'])} against "
                   f"{_rates(f['resumed_lrs'])}; scheduler position {pos} against {got}): the schedule restarted")
    if f["params_differ"]:
        bad.append(f"after the update {len(f['params_differ'])} of {f['params']} parameter tensors differ (by up to "
                   f"{f['params_worst']:.2g} of their largest value; {listed(f['params_differ'])})")
    if bad:
        return Check(cid, "fail", f"{head}: " + "; ".join(bad), why,
                     "save and load the whole state: model, optimizer.state_dict(), scheduler.state_dict(), the "
                     "random generators and the data position (sampler / iteration), and resume the loop after the "
                     "saved update")
    return Check(cid, "pass", f"{head}: the same {f['batches']} micro-batches, learning rates {_rates(f['lrs'])} "
                 f"and scheduler position, optimizer state bitwise equal ({f['optimizer_tensors']} tensors), all "
                 f"{f['params']} parameter tensors equal after the update (within {f['ulps']} units in the last "
                 "place of each tensor's largest value)")


def _rates(lrs: list[float]) -> str:
    return ", ".join(f"{x:.4g}" for x in lrs)


__all__ = ["WatchReport", "watch", "watched_command"]
