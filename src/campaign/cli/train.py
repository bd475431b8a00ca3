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
    from .render.train import render_batch

    with progress_reporter("batch") as tell:
        tell(f"accumulating over {processes} process(es)")
        report = check_accumulation(setup, accumulation=accumulation, processes=processes,
                                    normalization=normalization.replace("-", "_") if normalization else None)
    o.emit(report, render_batch, as_json, failed=not report.passed)
