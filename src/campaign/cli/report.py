"""`campaign report`: the campaign's records and runs in one self-contained HTML file."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("report", epilog="Example: campaign report --out report.html")(report)


def report(out: Annotated[Path, typer.Option("--out", help="The HTML file to write.")] = Path("report.html"),
           root: Annotated[Optional[Path], typer.Option("--root", help="The record folder (default: "
                                                                       "$CAMPAIGN_ROOT, else .campaign here).")] = None,
           title: Annotated[str, typer.Option(help="The report's title.")] = "Campaign report",
           as_json: o.Json = False) -> None:
    """One HTML file, readable offline and printable: a section per question of the guide with the records saved by
    `campaign --record ...` and the runs, each figure saying how it was obtained and when, and what is missing."""
    from ..report.build import build_report
    from .render.report import report as render_report

    o.emit(build_report(out, root=root, title=title), render_report, as_json)
