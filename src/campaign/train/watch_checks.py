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
- batch.labels_aligned: on a batch the loop fed, whether the model's own loss shifts the labels (from its loss
  against the cross-entropy of its logits, shifted and not) and whether the labels fit that;
- model.causal: for a next-token model, the outputs at positions <= t do not move when the inputs after t change;
- resume.next_step_equal: not compared by the watched run: skipped, saying whether the script saved a checkpoint
  within the watched updates and how to check it (the verdict is then "not verified", never a go).
"""
from __future__ import annotations

import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
          progress: Callable[[str], None] | None = None) -> WatchReport:
    """Run `python SCRIPT ARGS` (the command as the user types it) watched for `updates` optimizer updates.

    Raises:
        InputError: no such script, a script that fails, ends or times out before its first update.
    """
    if isinstance(updates, bool) or not isinstance(updates, int) or not 1 <= updates <= 1000:
        raise InputError(f"--updates {updates!r} must be a whole number from 1 to 1000")
    if not timeout > 0:
        raise InputError(f"--timeout {timeout!r} must be > 0 seconds")
    exe, rest = _interpreter(command)
    script = rest[1] if rest[0] == "-m" else rest[0]
    tell = progress or (lambda _phase: None)
    tell(f"running {script} for {updates} update{'s' if updates > 1 else ''}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="campaign-watch-") as tmp:
        out = Path(tmp) / "observed.json"
        cmd = [exe, "-m", "campaign.train.watch", "--out", str(out), "--updates", str(updates),
               "--timeout", str(timeout), "--", *rest]
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

        observed = load_json(out, "the watched run's record")
    wall = time.perf_counter() - started
    return _report(observed, tuple(command), script, updates, timeout, resume, wall)


def _report(o: dict[str, Any], command: tuple[str, ...], script: str, updates: int, timeout: float, resume: bool,
            wall: float) -> WatchReport:
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
    checks = [_updates(o, seen, updates), _train_mode(o), _zeroed(ups, seen), _lr(ups, seen),
              *_params(o.get("params")), *_finite(ups)]
    if "probes" in o:
        labels, next_token = _labels(o["probes"])
        checks += [labels, _causal(o["probes"], next_token)]
    else:        # the watchdog stopped the script (--timeout) before the probes could run on its model
        checks += [Check(cid, "skipped", "not run: the script was stopped at --timeout before the probes",
                         "", "raise --timeout or lower --updates") for cid in ("batch.labels_aligned", "model.causal")]
    checks.append(_resume(o, updates, resume))
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


def _lr(ups: list[dict[str, Any]], seen: int) -> Check:
    cid = "step.lr_per_update"
    between = [u for u in ups if "scheduler_steps" in u]
    if not between:
        return Check(cid, "skipped", f"{seen} update watched: the schedule's pace shows between two updates",
                     "a scheduler stepped per micro-batch runs its warm-up and decay too fast",
                     "watch two updates or more (--updates 2)")
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


def _resume(o: dict[str, Any], updates: int, resume: bool) -> Check:
    cid = "resume.next_step_equal"
    if not resume:
        return Check(cid, "skipped", "not run (--no-resume)", "", "run without --no-resume", gates=False)
    saves = o.get("saves") or []
    if saves:
        s = saves[0]
        return Check(cid, "skipped", f"the script wrote a checkpoint at update {s['update']} ({s['path']}); the "
                     "watched run does not yet reload it in a fresh process to compare the next update",
                     "a resume that restores less than the run needs (the optimizer, the scheduler, the data order) "
                     "restarts training from a different point", "check it with `campaign check SETUP.py:FUNCTION` "
                     "(a factory returning the loop's objects and its save/load), or pass --no-resume to leave "
                     "resume out of this verdict")
    return Check(cid, "skipped", f"the script wrote no checkpoint (torch.save) within the first {updates} updates",
                 "a resume is only proven by reloading a checkpoint in a fresh process",
                 "make the script save within the watched updates (its checkpoint interval), or check resume with "
                 "`campaign check SETUP.py:FUNCTION`; --no-resume leaves it out of this verdict")


__all__ = ["WatchReport", "watch", "watched_command"]
