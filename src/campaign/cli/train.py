"""`campaign batch SETUP`: effective batch and gradient accumulation, checked numerically (question 3)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from . import common as o

# check's, batch's and inspect's option panels (campaign COMMAND --help)
STEP, OVERFIT, RESUME, DDP, WATCH, SHOWN = "Step", "Overfit test", "Resume test", "Processes", "Watched script", "Shown"


def register(app: typer.Typer) -> None:
    app.command("check", epilog="Example: campaign check examples/check_setup.py:make_setup --out check.json; "
                                "campaign check -- python examples/watch/train_gpt.py --max_iters 20")(check)
    app.command("batch", epilog="Example: campaign batch examples/train_setup.py:make_setup --normalization token "
                                "--processes 2")(batch)
    app.command("inspect", epilog="Example: campaign inspect examples/inspect_setup.py:make_setup")(inspect)


def _progress(label: str, as_json: bool) -> Any:
    """The spinner on stderr (render.progress_reporter: only on a terminal), off under --json."""
    from contextlib import nullcontext

    from .render import progress_reporter

    return nullcontext(lambda _phase: None) if as_json else progress_reporter(label)


@contextmanager
def _users_code(setup: str) -> Iterator[None]:
    """The setup's code (its loss, accumulate, collate, model) calling sys.exit while the command runs it: one line
    naming the setup, exit 2, whatever code it exited with (exit(0) would read as a go)."""
    try:
        yield
    except SystemExit as e:
        from ..errors import InputError
        from ..train.setup import exited

        raise InputError(exited(setup, e, "while campaign ran it (the model, its loss, accumulate or collate)")) \
            from None


def batch(
    setup: Annotated[str, typer.Argument(help="FILE.py:FUNCTION returning the model and micro-batches (a dict or an "
                                              "object with .model and .batches; see examples/train_setup.py, and "
                                              "examples/plain_setup.py for a plain nn.Module taking idx and "
                                              "targets).")],
    accumulation: Annotated[int | None, typer.Option(help="Micro-batches per update on each process (default: "
                                                             "all given, split over the processes).",
        rich_help_panel=STEP)] = None,
    processes: Annotated[int, typer.Option(help="Processes (DDP under torchrun; gloo on the CPU).",
        rich_help_panel=STEP)] = 1,
    normalization: Annotated[str | None, typer.Option(help="What your loop does, checked when the setup does "
                                                              "not return its accumulate(model, micro_batches): token "
                                                              "(summed token losses / tokens of the update) | "
                                                              "micro-batch-mean (loss / steps).",
        rich_help_panel=STEP)] = None,
    as_json: o.Json = False,
) -> None:
    """Effective batch = micro-batch x accumulation x processes, tokens per update, and whether the accumulated
    gradient equals the whole update's gradient: your loop's own accumulate (a setup field) when given, else the
    normalization you declare (and what the other one would give).

    Exit 0 when it does, 1 when it does not or when neither your loop nor its normalization was given and the
    micro-batches' token counts differ ("not verified"), 2 on bad input (needs the torch extra).
    """
    from ..train.accumulation import check_accumulation
    from .render.train import render_batch

    with _progress("batch", as_json) as tell, _users_code(setup):
        report = check_accumulation(setup, accumulation=accumulation, processes=processes,
                                    normalization=normalization.replace("-", "_") if normalization else None,
                                    progress=tell)
    o.emit(report, render_batch, as_json)


def check(
    setup: Annotated[list[str], typer.Argument(
        help="FILE.py:FUNCTION returning the model, the optimizer (and scheduler), a few batches, optionally the "
             "loss, what is meant to train and the loop's own save/load (see examples/check_setup.py); or, after "
             "--, your training command as you run it: -- python train.py ARGS (watched, unchanged, for a few "
             "updates).", show_default=False)],
    overfit_steps: Annotated[int, typer.Option("--overfit-steps", help="Updates on the first batch.",
        rich_help_panel=OVERFIT)] = 30,
    overfit_drop: Annotated[float, typer.Option("--overfit-drop", help="Fraction the first batch's loss must fall "
                                                                       "by within those updates (a steady fall short "
                                                                       "of it warns; no fall fails).",
        rich_help_panel=OVERFIT)] = 0.5,
    overfit_lr: Annotated[float | None, typer.Option(
        "--overfit-lr", help="Learning rate for the overfit test only (default: the optimizer's).",
        rich_help_panel=OVERFIT)] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option("--checkpoint-dir", help="Keep the resume test's "
                                                                                   "checkpoint here (default: a "
                                                                                   "temporary folder).",
        rich_help_panel=RESUME)] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Reload a checkpoint in a fresh process and "
                                                                      "compare the next step.",
        rich_help_panel=RESUME)] = True,
    processes: Annotated[int, typer.Option(help="Run one update of your step under torchrun with this many "
                                                "processes (DDP; gloo on the CPU) and check the ranks stay in sync "
                                                "instead of the one-process checks; with -- python SCRIPT: the "
                                                "script under torchrun, each rank watched, and whether the ranks "
                                                "fed different data, stayed in sync and applied the mean "
                                                "gradient (resume: run again under torchrun, each rank "
                                                "compared).", rich_help_panel=DDP)] = 1,
    updates: Annotated[int, typer.Option("--updates", help="With -- python SCRIPT: the optimizer updates to watch "
                                                           "before stopping the script.", rich_help_panel=WATCH)] = 3,
    timeout: Annotated[float, typer.Option("--timeout", help="With -- python SCRIPT: seconds before a script that "
                                                             "has not finished its updates is stopped.",
        rich_help_panel=WATCH)] = 600.0,
    resume_args: Annotated[str | None, typer.Option(
        "--resume-args", help="With -- python SCRIPT: the arguments that make the script resume from the checkpoint "
                              "it saved (e.g. \"--init_from=resume\"); appended to its command line in a fresh "
                              "process whose first update is compared with the uninterrupted run's next one.",
        rich_help_panel=WATCH)] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Save the record (JSON, written atomically).",
        rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """Before the long run: one full step (loss, gradients, update, memory per phase), the parameters that train
    and those that must not, batch independence, overfitting one batch, and a checkpoint reloaded in a fresh
    process giving the same next step.

    With --processes N (N >= 2): one update of your step on each rank's own batch, the model wrapped in DDP, and
    whether every rank applied the average gradient and holds the same weights after it.

    With -- python train.py ARGS: your script runs unchanged in a child process, watched through torch's hooks for
    --updates optimizer updates, then stopped: train mode, gradients zeroed between updates, the learning rate's
    pace, the parameters that train and stay frozen, finite loss and gradients, the accumulated gradient against
    the whole update's, padding and truncation in the batches it fed, the labels' shift and causality on a batch
    your loop fed; where it saves a checkpoint within those updates and --resume-args say how it resumes, the
    script run again in a fresh process from it, its first update compared with the uninterrupted run's next one
    (else resume is "not verified", or --no-resume). With --processes N as well: the script under torchrun, each
    rank watched, and whether the ranks fed different batches, hold bitwise equal parameters after each update and
    applied the mean of their gradients; the resume run is then under torchrun too, each rank's first update
    compared with the same rank's.

    Exit 0 when every check passes (warnings are shown as such), 1 when one fails or one the verdict waits on was
    skipped ("not verified"), 2 on bad input (needs the torch extra).
    """
    from ..errors import InputError
    from ..train.check import check as run_checks
    from .render.train import render_check

    if updates < 1:
        raise InputError(f"--updates {updates}: watch at least 1 optimizer update; give --updates 1 or more")
    if not timeout > 0:
        raise InputError(f"--timeout {timeout:g}: give a positive number of seconds")
    if out is not None:
        from ..train.setup import writable_file

        writable_file(out, "--out")   # the record is written at the end: its path is checked before anything runs
    report: Any
    render: Any = render_check
    from ..train.watch_checks import watched_command

    if watched_command(setup):       # -- python train.py ARGS: the script itself, watched
        from ..train.watch_checks import watch
        from .render.watch import render_watch

        with _progress("check", as_json) as tell:
            import shlex

            try:
                extra = shlex.split(resume_args) if resume_args else []
            except ValueError as e:
                raise InputError(f"--resume-args {resume_args!r}: {e}; quote it as the shell would") from None
            report = watch(setup, updates=updates, timeout=timeout, resume=resume, resume_args=extra, progress=tell,
                           processes=processes)
        if out is not None:
            from ..io import atomic_write_json

            atomic_write_json(out, report.to_dict())
        o.emit(report, render_watch, as_json)
        return
    setup_ref = setup[0]
    # the spinner reads "campaign: check 3/5: resume in a fresh process"
    with _progress("campaign", as_json) as tell, _users_code(setup_ref):
        if processes != 1:
            from ..train.ddp_check import check_ddp

            report, render = check_ddp(setup_ref, processes, progress=tell), _render_ddp
        else:
            report = run_checks(setup_ref, overfit_steps=overfit_steps, overfit_drop=overfit_drop,
                                overfit_lr=overfit_lr, checkpoint_dir=checkpoint_dir, resume=resume, progress=tell)
    if out is not None:
        from ..io import atomic_write_json

        atomic_write_json(out, report.to_dict())
    o.emit(report, render, as_json)


def _render_ddp(r: Any) -> None:
    from .render import checks, console

    verdict = "[green]IN SYNC[/green]" if r.passed else "[red]NOT IN SYNC[/red]"
    console.print(f"{verdict} — one update under DDP on {r.processes} processes ({r.backend}): loss per rank "
                  + ", ".join(f"{x:.4f}" for x in r.losses))
    checks(r.checks)


def inspect(
    setup: Annotated[str, typer.Argument(help="FILE.py:FUNCTION returning the dataset (raw examples), the collate "
                                              "function (examples -> batch) and the tokenizer; optionally "
                                              "label_field and target_field (see examples/inspect_setup.py).")],
    examples: Annotated[int, typer.Option("--examples", help="Examples shown per class, collated together.",
        rich_help_panel=SHOWN)] = 2,
    as_json: o.Json = False,
) -> None:
    """The batch after the exact preprocessing: your collate run over the whole dataset; truncation, answers lost
    and loss positions counted over every example; special tokens and the padding side; a few examples per class
    decoded with the loss positions marked; for images, shapes and pixel ranges per class.

    Exit 0 when every check passes (warnings are shown as such), 1 when one fails or one the verdict waits on was
    skipped ("not verified"), 2 on bad input (needs the torch extra).
    """
    from ..train.inspect import inspect as run_inspect
    from .render.train import render_inspect

    with _progress("inspect", as_json) as tell, _users_code(setup):
        report = run_inspect(setup, examples=examples, progress=tell)
    o.emit(report, render_inspect, as_json)
