"""Renderer of the report command: where it was written and what it holds."""
from __future__ import annotations

from typing import Any

from . import console, escape, notes


def report(r: Any) -> None:
    console.print(f"wrote {escape(r.path)}: {r.records} records ({r.unreadable} unreadable), {r.runs} runs, "
                  f"{r.figures} figures")
    notes(r.missing, escaped=True)
