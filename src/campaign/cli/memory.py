"""`campaign memory MODEL`: will it fit, on which card, with what margin."""
from __future__ import annotations

import typer

from . import common as o
from .workload import MEMORY, WorkloadOptions, workload_command


def register(app: typer.Typer) -> None:
    app.command("memory", epilog="Example: campaign memory llama-3.1-8b --method qlora --batch 4 --seq-len 2048")(
        workload_command(memory, *MEMORY))


def memory(
    model: o.Model, workload: WorkloadOptions, card: o.CardOpt = None, reserve: o.Reserve = "10%",
    fragmentation: o.Fragmentation = None, cuda_context: o.CudaContext = None,
    all_cards: bool = typer.Option(False, "--all-cards", help="Fit table over every catalog card."),
    no_solve: bool = typer.Option(False, "--no-solve", help="Skip the largest-batch / longest-context solve."),
    as_json: o.Json = False,
) -> None:
    """GPU memory per card for a training step or inference: breakdown, phases, card fit.

    Exit 0 when it fits the --card (or without --card), 1 when it does not fit, 2 on bad input.
    """
    from ..memory.plan import plan_memory
    from ..models import load_spec
    from .render.memory import plan as render_plan

    spec = load_spec(model)
    w = o.workload_from(spec, **workload)
    result = plan_memory(spec, w, card=card, all_cards=all_cards, solve=not no_solve, reserve=reserve,
                         **o.overheads(fragmentation, cuda_context))
    o.emit(result, render_plan, as_json)
