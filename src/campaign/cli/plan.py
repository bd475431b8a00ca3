"""`campaign budget`, `campaign ablate plan|analyze`: my budget is limited, what do I run first?"""
from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import common as o

Prices = Annotated[Optional[str], typer.Option("--prices", help="Price file (YAML or JSON: per card an hourly price "
                                               "and 3/7/30-day packages); default: the bundled example prices.")]
Mfu = Annotated[Optional[float], typer.Option("--mfu", help="Model FLOPs utilization for hours estimated from FLOPs "
                                              "(default 0.40, Llama 3's reported 38-43% on H100).")]


def register(app: typer.Typer) -> None:
    app.command("budget", epilog="Example: campaign budget examples/plan/plan.yaml --plot gantt.png")(budget)


def budget(
    plan: Annotated[str, typer.Argument(help="Plan file (YAML or JSON): phases with runs, hours or an estimate, "
                                        "cards and dependencies; see examples/plan/plan.yaml.")],
    prices: Prices = None,
    card: Annotated[Optional[List[str]], typer.Option("--card", help="Compare only this card (repeatable; default: "
                                                      "the plan's 'compare', else every card priced).")] = None,
    package: Annotated[Optional[List[str]], typer.Option("--package", help="Compare only this package of the price "
                                                         "file ('on-demand': the hourly price; repeatable).")] = None,
    mfu: Mfu = None,
    margin: Annotated[Optional[float], typer.Option("--margin", help="Recovery margin on every run, a share "
                                                    "(overrides the plan's; e.g. 0.15).")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write the recommended schedule as a Gantt chart: "
                                                ".png, .svg or .pdf.")] = None,
    as_json: o.Json = False,
) -> None:
    """Which rental to take: the plan's phases scheduled on every package (3/7/30 days) and on-demand hours of each
    card, fits (the critical path, not only the total hours), slack, cost in USD, cost per useful result; the
    recommendation, and what to cut first when nothing fits.

    Exit 0 when a rental fits, 1 when none does, 2 on bad input.
    """
    from ..plan.budget import budget as run_budget
    from ..plan.runtime import MFU
    from .render.plan import budget as render_budget

    rep = run_budget(plan, prices=prices, cards=card, packages=package, mfu=MFU if mfu is None else mfu, margin=margin, plot=plot)
    o.emit(rep, render_budget, as_json, failed=not rep.passed)
