"""`campaign report`, `campaign export` and `campaign verify`: the campaign's records in one HTML file, the hand-over
bundle, and the receiver's check of it."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("report", epilog="Example: campaign report --out report.html")(report)
    app.command("export", epilog="Example: campaign export handover/ --run lora-r16-20261130T101500-ab12")(export)
    app.command("verify", epilog="Example: campaign verify handover/")(verify)


def report(out: Annotated[Path, typer.Option("--out", help="The HTML file to write.",
                                             rich_help_panel=o.OUTPUT)] = Path("report.html"),
           root: Annotated[Path | None, typer.Option("--root", help="The record folder (default: "
                                                                       "$CAMPAIGN_ROOT, else .campaign here).",
                                                                       rich_help_panel=o.RECORDS)] = None,
           title: Annotated[str, typer.Option(help="The report's title.",
                                              rich_help_panel=o.OUTPUT)] = "Campaign report",
           as_json: o.Json = False) -> None:
    """One HTML file, readable offline and printable: a section per question of the guide with the records saved by
    `campaign --record ...` and the runs, each figure saying how it was obtained and when, and what is missing."""
    from ..report.build import build_report
    from .render import progress_reporter
    from .render.report import report as render_report

    with progress_reporter("report", enabled=not as_json) as say:
        result = build_report(out, root=root, title=title, progress=say)
    o.emit(result, render_report, as_json)


def export(bundle: Annotated[Path, typer.Argument(help="A new folder for the bundle.")],
           run: Annotated[str | None, typer.Option(help="The accepted run to hand over (default: the newest "
                                                           "accepted one).", rich_help_panel=o.RECORDS)] = None,
           force: Annotated[bool, typer.Option("--force", help="Replace the folder if it exists.",
                                               rich_help_panel=o.OUTPUT)] = False,
           root: Annotated[Path | None, typer.Option("--root", help="The record folder (default: "
                                                                       "$CAMPAIGN_ROOT, else .campaign here).",
                                                                       rich_help_panel=o.RECORDS)] = None,
           as_json: o.Json = False) -> None:
    """The hand-over: the accepted run's model or adapter files (re-hashed against what the run recorded), its
    manifest and its baseline's, the report, and a README of the limits observed; every file in bundle.json with
    its sha256. Written beside and renamed into place when complete."""
    from ..report.bundle import export_bundle
    from .render import progress_reporter
    from .render.report import bundle as render_bundle

    with progress_reporter("export", enabled=not as_json) as say:
        result = export_bundle(bundle, run=run, root=root, force=force, progress=say)
    o.emit(result, render_bundle, as_json)


def verify(bundle: Annotated[Path, typer.Argument(help="The bundle folder campaign export wrote.")],
           as_json: o.Json = False) -> None:
    """The receiver's check of a hand-over bundle: every file's sha256 against bundle.json (and bundle.json's own
    against bundle.json.sha256), the artifacts against the run's manifest, the adapter's binding to its base, and the
    files missing or not from the bundle. Exit 0 VERIFIED, 1 with the failing files, 2 not a bundle."""
    from ..report.verify import check_bundle
    from .render.report import verify as render_verify

    o.emit(check_bundle(bundle), render_verify, as_json)
