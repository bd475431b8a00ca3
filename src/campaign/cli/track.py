"""`campaign run ...` and `campaign runs ...`: runs traced to decisions (question 3)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import common as o

# Help panels of run start (beside common's RECORDS and OUTPUT).
EXPERIMENT, RUN = "Experiment", "Run"

Root = Annotated[Path | None, typer.Option("--root", help="The campaign's record folder (default: "
                                                           "$CAMPAIGN_ROOT, else .campaign here).",
                                                           rich_help_panel=o.RECORDS)]
RunId = Annotated[str, typer.Argument(help="The run's id (campaign runs list).")]

run_app = typer.Typer(name="run", no_args_is_help=True, help="Start, log to, end and decide one run.")
runs_app = typer.Typer(name="runs", no_args_is_help=True, help="List, show, compare and check runs.")


def register(app: typer.Typer) -> None:
    app.add_typer(run_app, name="run")
    app.add_typer(runs_app, name="runs")


def _nested(pairs: list[str]) -> dict:
    """--param a.b=1 --param c=x -> {'a': {'b': 1}, 'c': 'x'}."""
    from ..errors import InputError
    from ..track.run import parse_records

    out: dict = {}
    for key, value in parse_records(pairs).items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise InputError(f"--param {key}: {p} is already a value, not a set of parameters")
        node[leaf] = value
    return out


def _duration(text: str) -> float:
    from ..errors import InputError

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise InputError(f"--stale-after {text!r} is not a duration; write e.g. 45m, 2h or 600") from None
    if not 0 < seconds < 10 * 365 * 86400:
        raise InputError(f"--stale-after {text!r} must be a positive duration")
    return seconds


@run_app.command("start", epilog="Example: campaign run start lora-r16 --baseline lora-r8-20261130T101500-ab12 "
                                 "--param lora.r=16 --guard \"f1\\[refund]>=-0.01\" --data data/train.jsonl")
def start(
    name: Annotated[str, typer.Argument(help="A short name for the variant (lora-r16).")],
    hypothesis: Annotated[str, typer.Option(help="What should improve, written before computing.",
                                            rich_help_panel=EXPERIMENT)] = "",
    guard: Annotated[list[str] | None, typer.Option(help="What must not regress, as campaign regress takes it "
                                                         "(repeat).", rich_help_panel=EXPERIMENT)] = None,
    param: Annotated[list[str] | None, typer.Option(help="A parameter, key=value (dotted keys nest: "
                                                         "lora.r=16; repeat).", rich_help_panel=RUN)] = None,
    baseline: Annotated[str | None, typer.Option(help="The run this one changes one thing against.",
                                                 rich_help_panel=EXPERIMENT)] = None,
    data: Annotated[list[Path] | None, typer.Option(help="A data file or folder, hashed (repeat).",
                                                    rich_help_panel=RUN)] = None,
    seed: Annotated[list[int] | None, typer.Option(help="A seed (repeat).", rich_help_panel=RUN)] = None,
    tag: Annotated[list[str] | None, typer.Option(help="A tag (repeat).", rich_help_panel=RUN)] = None,
    planned: Annotated[bool, typer.Option("--planned", help="Record it as planned, not yet running.",
                                          rich_help_panel=RUN)] = False,
    stale_after: Annotated[str, typer.Option("--stale-after", help="Shown as stopped when nothing is logged for "
                                                                   "this long (45m, 2h).", rich_help_panel=RUN)] = "1h",
    root: Root = None,
    as_json: o.Json = False,
) -> None:
    """Start a run: its manifest with the hypothesis, guards, baseline and the one change against it, data hashes,
    the git commit with the uncommitted diff, and the environment actually used. Prints the run's id."""
    from ..track.run import start_run
    from .render import progress_reporter

    with progress_reporter("run start", enabled=not as_json) as say:
        m = start_run(name, hypothesis=hypothesis, guards=guard or [], params=_nested(param or []),
                      baseline=baseline, data=data or [], seeds=seed or [], tags=tag or [], root=root, owner_pid=0,
                      stale_after=_duration(stale_after), status="planned" if planned else "running",
                      progress=say)
    if as_json:
        o.print_json(m.to_dict())
    else:
        print(m.id)


@run_app.command("log", epilog="Example: campaign run log lora-r16-20261130T101500-ab12 step=100 loss=1.25")
def log(run_id: RunId,
        pairs: Annotated[list[str], typer.Argument(
            help="key=value metrics: numbers (nan and inf kept), true or false.")],
        root: Root = None) -> None:
    """Append one record of metrics to a run (and keep it shown as running); a run that has ended is refused."""
    from ..track.run import log_run, parse_records

    log_run(run_id, [parse_records(pairs)], root=root)


@run_app.command("artifact", epilog="Example: campaign run artifact ID preds.jsonl --kind predictions")
def artifact(run_id: RunId, path: Annotated[Path, typer.Argument(help="A file or folder, hashed.")],
             kind: Annotated[str, typer.Option(help="adapter | checkpoint | config | model | predictions (these ship "
                                                    "in `campaign export`) | data | evaluation | log | memory | "
                                                    "other; KIND:label to tell two apart.")] = "",
             amend: Annotated[str, typer.Option("--amend", help="Record again an artifact of an ended run whose "
                                                               "contents changed, with the reason (kept in the "
                                                               "manifest with both hashes).")] = "",
             root: Root = None, as_json: o.Json = False) -> None:
    """Record a file or folder a run produced, with its sha256."""
    from ..track.run import record_artifact
    from .render.track import changed

    o.emit(record_artifact(run_id, path, kind, root=root, amend=amend), changed, as_json)


@run_app.command("end", epilog="Example: campaign run end ID --status stopped --reason \"loss diverged at step 900\"")
def end(run_id: RunId,
        status: Annotated[str, typer.Option(help="completed | stopped | failed | invalid.")] = "completed",
        reason: Annotated[str, typer.Option(help="What happened (required unless completed).")] = "",
        force: Annotated[bool, typer.Option("--force", help="Change the status of a run that has ended (the earlier "
                                                            "one is kept in the reason).")] = False,
        root: Root = None, as_json: o.Json = False) -> None:
    """Close a run with its status and reason: stopped and failed runs stay on record."""
    from ..track.run import end_run
    from .render.track import changed

    o.emit(end_run(run_id, status, reason, root=root, force=force), changed, as_json)


@run_app.command("decide", epilog="Example: campaign run decide ID accepted --why \"+2.1 F1, guards hold\"")
def decide(run_id: RunId,
           decision: Annotated[str, typer.Argument(help="accepted | rejected | needs-more-evidence.")],
           why: Annotated[str, typer.Option(help="The rationale.")] = "",
           root: Root = None, as_json: o.Json = False) -> None:
    """Record the decision on a run and why."""
    from ..track.run import decide_run
    from .render.track import changed

    o.emit(decide_run(run_id, decision, why, root=root), changed, as_json)


@runs_app.command("list", epilog="Example: campaign runs list --status stopped")
def list_runs(status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
              tag: Annotated[str | None, typer.Option(help="Only runs with this tag.")] = None,
              root: Root = None, as_json: o.Json = False) -> None:
    """Every run, newest first, failed and stopped included; a run whose process died shows as stopped."""
    from ..track.store import list_runs as runs_of
    from .render.track import runs_table

    o.emit(runs_of(status=status, tag=tag, root=root), runs_table, as_json)


@runs_app.command("show", epilog="Example: campaign runs show ID --json")
def show(run_id: RunId, root: Root = None, as_json: o.Json = False) -> None:
    """One run's manifest, with its effective status."""
    from ..track.store import show_run
    from .render.track import manifest as render_manifest

    o.emit(show_run(run_id, root=root), render_manifest, as_json)


@runs_app.command("diff", epilog="Example: campaign runs diff BASELINE_ID RUN_ID")
def diff(a: RunId, b: RunId, root: Root = None, as_json: o.Json = False) -> None:
    """What differs between two runs (parameters, data, code, environment) and whether more than one set of
    parameters changed."""
    from ..track.compare import diff_runs
    from .render.track import run_diff

    o.emit(diff_runs(a, b, root=root), run_diff, as_json)


@runs_app.command("check", epilog="Example: campaign runs check RUN_ID")
def check(run_id: RunId, root: Root = None, as_json: o.Json = False) -> None:
    """The run's guards on its recorded predictions against its baseline's (campaign regress). Exit 1 when a guard
    fails."""
    from ..track.compare import check_run
    from .render import progress_reporter
    from .render.evaluate import regress

    with progress_reporter("runs check", enabled=not as_json) as say:
        report = check_run(run_id, root=root, progress=say)
    o.emit(report, regress, as_json)


@runs_app.command("to-mlflow", epilog="Example: campaign runs to-mlflow --mlflow mlruns-campaign")
def to_mlflow(mlflow: Annotated[Path, typer.Option("--mlflow", help="A new folder for an MLflow file store.",
                                                   rich_help_panel=o.OUTPUT)],
           force: Annotated[bool, typer.Option(
               "--force", help="Replace an earlier export in that folder (only an earlier export: anything else is "
                               "refused).", rich_help_panel=o.OUTPUT)] = False,
           root: Root = None) -> None:
    """Every run into an MLflow file store (parameters, metrics at their steps, status, tags, data as dataset
    inputs, artifacts, packages), written with MLflow's own client (the mlflow extra)."""
    from ..track.export import export_mlflow
    from .render import progress_reporter

    with progress_reporter("runs to-mlflow") as say:
        exported = export_mlflow(mlflow, root=root, force=force, progress=say)
    print(f"exported {exported} runs to {mlflow}; MLflow 3 reads a file store only with MLFLOW_ALLOW_FILE_STORE=true "
          f"(e.g. MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {mlflow.resolve().as_uri()})")


@runs_app.command("export", hidden=True)
def export(mlflow: Annotated[Path, typer.Option("--mlflow", help="A new folder for an MLflow file store.")],
           force: Annotated[bool, typer.Option("--force", help="Replace an earlier export in that folder.")] = False,
           root: Root = None) -> None:
    """The old name of `runs to-mlflow`, kept for one release (CONTRIBUTING.md, "Option names")."""
    o.say_renamed("runs export", "runs to-mlflow")
    to_mlflow(mlflow, force=force, root=root)


@runs_app.command("rebuild")
def rebuild(root: Root = None) -> None:
    """Make the SQLite index again from the manifest files."""
    from ..track.store import Store

    print(f"indexed {Store(root).rebuild()} runs")
