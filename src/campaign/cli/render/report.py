"""Renderers of report and export: where each was written and what it holds."""
from __future__ import annotations

from typing import Any

from . import console, escape, notes


def report(r: Any) -> None:
    console.print(f"wrote {escape(r.path)}: {r.records} records ({r.unreadable} unreadable), {r.runs} runs, "
                  f"{r.figures} figures")
    notes(r.missing, escaped=True)


def bundle(r: Any) -> None:
    console.print(f"wrote {escape(r.path)}: run {escape(r.run)}, {len(r.files)} files, {r.bytes / 2**20:.2f} MiB, "
                  "every one re-hashed (bundle.json)")
    notes(r.limits, escaped=True)


def verify(r: Any) -> None:
    """campaign verify: the verdict, the failing files one a line, then every check."""
    from . import checks

    head = {"pass": "[green]VERIFIED[/green]", "fail": "[red]FAILED[/red]"}.get(r.status, "[red]NOT VERIFIED[/red]")
    console.print(f"{head} {escape(r.path)}: run {escape(r.run or '?')}, {r.files:,} files listed")
    for f in r.failing:
        console.print(f"  [red]{escape(f)}[/red]")
    checks(r.checks)
