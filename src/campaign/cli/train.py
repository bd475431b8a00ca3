"""`campaign batch SETUP`: effective batch and gradient accumulation, checked numerically (question 3)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("batch", epilog="Example: campaign batch examples/train_setup.py:make_setup --normalization token "
                                "--processes 2")(batch)


def batch(
    setup: Annotated[str, typer.Argument(help="FILE.py:FUNCTION returning the model and micro-batches (a dict or an "
                                              "object with .model and .batches; see examples/train_setup.py).")],
    accumulation: Annotated[Optional[int], typer.Option(help="Micro-batches per update on each process (default: "
                                                             "all given, split over the processes).")] = None,
    processes: Annotated[int, typer.Option(help="Processes (DDP under torchrun; gloo on the CPU).")] = 1,
    normalization: Annotated[Optional[str], typer.Option(help="What your loop does: token (summed token losses / "
                                                              "tokens of the update) | micro-batch-mean (loss / steps; "
                                                              "default).")] = None,
    as_json: o.Json = False,
) -> None:
    """Effective batch = micro-batch x accumulation x processes, tokens per update, and whether the accumulated
    gradient equals the whole update's gradient under your loss normalization (and what the other one would give).

    Exit 0 when it does, 1 when it does not, 2 on bad input (needs the torch extra).
    """
    from ..train.accumulation import check_accumulation
    from .render import progress_reporter

    with progress_reporter("batch") as tell:
        tell(f"accumulating over {processes} process(es)")
        report = check_accumulation(setup, accumulation=accumulation, processes=processes,
                                    normalization=normalization.replace("-", "_") if normalization else None)
    o.emit(report, render_batch, as_json, failed=not report.passed)


def render_batch(r) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from .render import console

    ok = r.passed
    verdict = "[green]EQUIVALENT[/green]" if ok else "[red]NOT EQUIVALENT[/red]"
    console.print(f"{verdict} — effective batch {r.micro_batch} x {r.accumulation} x {r.processes} = "
                  f"{r.effective_batch} rows; {r.tokens_per_update:,} tokens per update "
                  f"({min(r.tokens_per_micro_batch):,}-{max(r.tokens_per_micro_batch):,} per micro-batch"
                  + (f"; per process {', '.join(f'{t:,}' for t in r.tokens_per_process)}" if r.tokens_per_process
                     else "") + f"); your normalization: {r.normalization.replace('_', ' ')}")
    t = Table(title="Accumulated gradient against the whole update's", title_justify="left")
    for col, just in (("normalization", "left"), ("relative error", "right"), ("cosine", "right"), ("meaning", "left")):
        t.add_column(col, justify=just)
    for v in r.variants:
        mark = " <- yours" if v.normalization == r.normalization else ""
        t.add_row(v.normalization.replace("_", " ") + mark, f"{v.relative_error:.2e}", f"{v.cosine:.6f}", v.meaning)
    console.print(t)
    for c in r.checks:
        style = {"pass": "green", "fail": "red"}.get(c.status, "yellow")
        console.print(f"{c.id}: [{style}]{c.status}[/{style}] — {c.seen}")
        if c.status != "pass" and c.fix:
            console.print(f"  [dim]why: {c.why}; fix: {c.fix}[/dim]")
    for n in r.notes:
        console.print(f"[dim]- {n}[/dim]")
