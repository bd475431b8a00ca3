"""Every renderer of the `campaign` command, gathered by family: a renderer takes one result object and prints it
for a person, the verdict first, then the tables, then the notes. JSON never passes through here (common.emit
prints the result's to_dict()).

This module holds what every family shares: the console, the verdict and status styles, one unit per table
(Scale), the progress spinner, user text escaped, the notes and the list of Check rows. One module per family:
memory.py (memory, trace, kv, measure, explain), data.py (split, leaks, usage), evaluate.py (errors, regress,
seeds), models.py (models, cards, guide), train.py (batch, check, inspect), quant.py (quant). A new result type gets
its renderer in its family's module; the command imports it there and hands it to common.emit.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ...units import GiB

if TYPE_CHECKING:
    from rich.table import Table

    from ...checks import Check

# Pipes and captured output get 120 columns rather than rich's 80, so tables stay readable in logs (and the
# README's examples show this width).
PIPE_WIDTH = 120
console = Console(highlight=False, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)

VERDICT_STYLE = {"fits": "green", "tight": "yellow", "does not fit": "red"}
STATUS_STYLE = {"pass": "green", "fail": "red", "warn": "yellow", "skipped": "yellow", "not verified": "red"}


def gib(n: int | float) -> str:
    """GiB with two decimals, no unit (tables say GiB in the header)."""
    return f"{n / GiB:,.2f}"


class Scale:
    """One unit for a whole table: GiB, or MiB when every figure is under 1 GiB (a small model, a CPU check)."""

    def __init__(self, *values: int | None) -> None:
        self.unit, self.div = ("GiB", GiB) if max((abs(v) for v in values if v is not None), default=0) >= GiB \
            else ("MiB", 2**20)

    def __call__(self, n: int | float | None, signed: bool = False) -> str:
        return "-" if n is None else f"{n / self.div:{'+' if signed else ''},.2f}"

    def with_unit(self, n: int | float) -> str:
        return f"{self(n)} {self.unit}"


@contextmanager
def progress_reporter(label: str, *, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner with the current phase on stderr when it is a terminal; a no-op otherwise, and when not enabled
    (a command's --json: whoever reads the JSON reads the command's output, not a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _phase: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label)
        yield lambda phase: bar.update(task, description=f"{label}: {phase}")


@contextmanager
def progress_after(label: str, *, after: float = 1.0, enabled: bool = True) -> Iterator[None]:
    """A spinner naming slow work on stderr, shown only once the work has run `after` seconds: a fast run prints
    (and imports) nothing more. On a terminal only, and not when disabled (a command's --json)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    import threading

    lock = threading.Lock()
    shown: list[Any] = []
    done = threading.Event()

    def start() -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with lock:
            if done.is_set():
                return
            bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                           console=Console(stderr=True), transient=True)
            bar.add_task(label)
            bar.start()
            shown.append(bar)

    timer = threading.Timer(after, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            done.set()
            for bar in shown:
                bar.stop()


def escape(text: Any) -> str:
    """User text (file names, labels, ids, guards) shown literally, so '[refund]' is not read as rich markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(str(text))


def status(s: str) -> str:
    """A check status in its colour."""
    style = STATUS_STYLE.get(s, "white")
    return f"[{style}]{s}[/{style}]"


def table(title: str, columns: Iterable[tuple[str, str]]) -> Table:
    """A table titled on the left, with (name, justify) columns."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for name, justify in columns:
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    return t


def notes(lines: Iterable[str], style: str = "dim", *, escaped: bool = False) -> None:
    """Notes after the tables, one '- ' line each (escaped when they quote user text)."""
    for n in lines:
        console.print(f"[{style}]- {escape(n) if escaped else n}[/{style}]")


def checks(rows: Iterable[Check], explain: tuple[str, ...] = ("fail", "warn"), *, escaped: bool = True) -> None:
    """One line per Check (id: status — what was seen); why and fix under those whose status is in `explain`
    (only the parts that are given). A skipped check says how to run it, and whether the verdict waits on it."""
    def text(value: str) -> str:
        return escape(value) if escaped else value

    for c in rows:
        console.print(f"{c.id}: {status(c.status)} — {text(c.seen)}")
        if c.status == "skipped":
            waits = "the verdict waits on it" if c.gates else "the verdict does not depend on it"
            how = f"to run it: {text(c.fix)}; " if c.fix else ""
            if c.gates or "skipped" in explain:
                console.print(f"  [dim]not run: {how}{waits}[/dim]")
        elif c.status in explain and c.fix:
            console.print(f"  [dim]{f'why: {c.why}; ' if c.why else ''}fix: {c.fix}[/dim]")
