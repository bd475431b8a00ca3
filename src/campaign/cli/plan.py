"""`campaign budget`, `campaign ablate plan|analyze`, `campaign bench`: my budget is limited, what do I run first?"""
from __future__ import annotations

from typing import Annotated

import typer

from . import common as o

# Help panels of these commands (beside common's INPUT and OUTPUT).
RENTALS, RUNS, DESIGN, BUDGET, STATS = "Rentals", "Runs", "Design", "Budget", "Statistics"

Prices = Annotated[str | None, typer.Option("--prices", help="Price file (YAML or JSON: per card an hourly price "
                                            "and 3/7/30-day packages); default: the bundled example prices.",
                                            rich_help_panel=RENTALS)]
Mfu = Annotated[float | None, typer.Option("--mfu", help="Model FLOPs utilization for hours estimated from FLOPs "
                                           "(default 0.40, Llama 3's reported 38-43% on H100).", rich_help_panel=RUNS)]


def register(app: typer.Typer) -> None:
    app.command("budget", epilog="Example: campaign budget examples/plan/plan.yaml --plot gantt.png")(budget)
    ablate = typer.Typer(no_args_is_help=True, help="Plan an ablation (design, seeds, budget) and analyze its "
                         "results (effects, interactions, comparisons with the control).")
    ablate.command("plan", epilog="Example: campaign ablate plan examples/plan/factors.yaml --budget-gpu-hours 40")(
        ablate_plan)
    ablate.command("analyze", epilog="Example: campaign ablate analyze examples/plan/ablation_results.csv --factors "
                   "examples/plan/factors.yaml")(ablate_analyze)
    app.add_typer(ablate, name="ablate")
    app.command("bench", epilog="Example: campaign bench examples/plan/cost.yaml --out bench")(bench)


def budget(
    plan: Annotated[str, typer.Argument(help="Plan file (YAML or JSON): phases with runs, hours or an estimate, "
                                        "cards and dependencies; see examples/plan/plan.yaml.")],
    prices: Prices = None,
    card: Annotated[list[str] | None, typer.Option("--card", help="Compare only this card, every offer of it, or "
                                                   "one offer as CARD@OFFER (the price file's 'offer'; repeatable; "
                                                   "default: the plan's 'compare', else every card priced).",
                                                   rich_help_panel=RENTALS)] = None,
    package: Annotated[list[str] | None, typer.Option("--package", help="Compare only this package of the price "
                                                      "file ('on-demand': the hourly price; repeatable); the "
                                                      "packages named are also combined (in a row, side by side).",
                                                      rich_help_panel=RENTALS)] = None,
    mfu: Mfu = None,
    recovery_margin: Annotated[float | None, typer.Option("--recovery-margin", help="Recovery margin on every run, "
                                                          "a share (overrides the plan's; e.g. 0.15).",
                                                          rich_help_panel=RUNS)] = None,
    old_margin: Annotated[float | None, typer.Option("--margin", hidden=True)] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write the recommended schedule as a Gantt chart: "
                                             ".png, .svg or .pdf.", rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """Which rental to take: the plan's phases scheduled on every package (3/7/30 days) and on-demand hours of each
    card, fits (the critical path, not only the total hours), slack, cost in USD, cost per useful result; the
    recommendation, and what to cut first when nothing fits.

    Exit 0 when a rental fits, 1 when none does, 2 on bad input.
    """
    from ..plan.budget import budget as run_budget
    from ..plan.runtime import MFU
    from .render import progress_reporter
    from .render.plan import budget as render_budget

    margin = o.renamed(old_margin, recovery_margin, old_name="budget --margin", new_name="budget --recovery-margin")
    with progress_reporter("budget", enabled=not as_json) as tell:   # memory estimates of the runs, schedules
        tell("the plan's runs estimated and scheduled on every rental" + (", the Gantt chart" if plot else ""))
        rep = run_budget(plan, prices=prices, cards=card, packages=package, mfu=MFU if mfu is None else mfu,
                         margin=margin, plot=plot)
    o.emit(rep, render_budget, as_json)


def ablate_plan(
    factors: Annotated[str, typer.Argument(help="Factors file (YAML or JSON): factors with levels and a control, "
                                           "hours per run, seeds or seed_sd + min_effect, a budget; see "
                                           "examples/plan/factors.yaml.")],
    design: Annotated[str | None, typer.Option(help="auto (the most informative that fits the budget) | ofat | "
                                               "full | fractional (default: the file's, else auto).",
                                               rich_help_panel=DESIGN)] = None,
    fraction: Annotated[int | None, typer.Option("--fraction", help="p of a 2^(k-p) fraction (standard "
                                                 "generators; or give 'generators' in the file).",
                                                 rich_help_panel=DESIGN)] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Seeds per cell (default: from the file, sized by "
                                              "power when it gives seed_sd and min_effect).",
                                              rich_help_panel=DESIGN)] = None,
    budget_gpu_hours: Annotated[float | None, typer.Option("--budget-gpu-hours", help="GPU-hour budget "
                                                           "(card-hours).", rich_help_panel=BUDGET)] = None,
    budget_usd: Annotated[str | None, typer.Option("--budget-usd", help="Budget in USD, at the cheapest rental "
                                                   "of the file's card (as campaign budget prices the runs).",
                                                   rich_help_panel=BUDGET)] = None,
    prices: Prices = None,
    as_json: o.Json = False,
) -> None:
    """An ablation plan: the design with its runs, seeds per cell, GPU-hours and cost; for a two-level fraction its
    resolution and aliases; under a budget what runs first, what is cut and which interactions remain estimable.

    Exit 0 when the plan fits the budget, 1 when it does not, 2 on bad input.
    """
    from ..plan.ablate import plan_ablation
    from .render.plan import ablate_plan as render

    rep = plan_ablation(factors, design=design, seeds=seeds, fraction=fraction, budget_gpu_hours=budget_gpu_hours,
                        budget_usd=budget_usd, prices=prices)
    o.emit(rep, render, as_json)


def ablate_analyze(
    results: Annotated[str | None, typer.Argument(help="Results (JSONL, CSV/TSV or Parquet): a column per factor, "
                                                  "the seed and the metric, one row per run.")] = None,
    factors: Annotated[str, typer.Option("--factors", help="The factors file the ablation was planned with.",
                                         rich_help_panel=o.INPUT)] = "",
    runs: Annotated[str | None, typer.Option("--runs", help="Read the completed runs with this tag instead of a "
                                             "file (campaign run start --tag; factors from their params).",
                                             rich_help_panel=o.INPUT)] = None,
    metric: Annotated[str | None, typer.Option("--metric-field", help="Column of the metric (default: the "
                                               "factors file's metric).", rich_help_panel=o.INPUT)] = None,
    seed_field: Annotated[str, typer.Option("--seed-field", help="Column of the seed.",
                                            rich_help_panel=o.INPUT)] = "seed",
    confidence: Annotated[float, typer.Option(help="Confidence level of the intervals.", rich_help_panel=STATS)] = 0.95,
    min_effect: Annotated[float, typer.Option("--min-effect", help="Smallest improvement worth having, in metric "
                                              "units.", rich_help_panel=STATS)] = 0.0,
    lower_is_better: Annotated[bool, typer.Option("--lower-is-better", help="The metric is a loss or an error "
                                                  "rate.", rich_help_panel=STATS)] = False,
    plot: Annotated[str | None, typer.Option("--plot", help="Write the half-normal plot of an unreplicated "
                                             "two-level design's effects, with Lenth's ME and SME: .png, .svg "
                                             "or .pdf.", rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """Main effects and two-factor interactions with intervals from the seeds (aliases stated for a fraction), and
    every cell against the control with Holm's correction.

    Exit 0 when analyzed, 2 on bad input.
    """
    from ..errors import InputError
    from ..plan.effects import analyze_ablation
    from .render.plan import ablate_analysis as render

    if not factors:
        raise InputError("--factors FILE is required: the factors file the ablation was planned with")
    o.plot_file(plot)                          # a bad suffix refused before the results are read
    rep = analyze_ablation(results, factors, runs_tag=runs, metric=metric, seed_field=seed_field, confidence=confidence,
                           higher_is_better=not lower_is_better, min_effect=min_effect)
    if plot is not None:
        from .. import plots

        if not rep.half_normal:
            raise InputError(f"--plot {plot}: the half-normal plot is for an unreplicated two-level design "
                             f"(one seed per cell, 3 effects or more); this one's error is {rep.error_method}; "
                             "drop --plot")
        plots.write(plots.half_normal(rep.to_dict()), plot)
    o.emit(rep, render, as_json)


def bench(
    cost: Annotated[str, typer.Argument(help="Cost file (YAML or JSON): the target quality, the protocol and, per "
                                        "configuration, its runs' hours to the target or their curves; see "
                                        "examples/plan/cost.yaml.")],
    prices: Prices = None,
    out: Annotated[str | None, typer.Option("--out", help="Folder to write raw.csv (one row per run) and "
                                            "protocol.md into, together.", rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """Cost at equal quality: for each configuration the time its runs took to reach the target, its cost under
    each rental, the cheapest way to reach the target; configurations that never reach it are marked.

    Exit 0 when a configuration reaches the target in every run, 1 when none does, 2 on bad input.
    """
    from ..plan.bench import bench as run_bench
    from .render.plan import bench as render

    rep = run_bench(cost, prices=prices, out=out)
    o.emit(rep, render, as_json)
