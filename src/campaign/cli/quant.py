"""`campaign quant SETUP`: quantization variants compared on the same evaluation data (question 4)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("quant", epilog="Example: campaign quant examples/quant_setup.py:make_setup --formats int8,int4 "
                                "--guard \"perplexity<=0.5\" --csv quant.csv --plot quant.png")(quant)


def _progress(label: str, as_json: bool) -> Any:
    """The spinner (render.progress_reporter), off under --json."""
    from contextlib import nullcontext

    from .render import progress_reporter

    return nullcontext(lambda _phase: None) if as_json else progress_reporter(label)


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


# Help panels of quant (beside common's OUTPUT).
VARIANTS, QUALITY, KV, COST = "Variants", "Quality", "KV cache estimate", "Cost"


def quant(
    setup: Annotated[str, typer.Argument(help="FILE.py:FUNCTION returning the model (a module, a function making "
                                              "it, or a model dir), the evaluation batches and the metric "
                                              "(perplexity, or classification/extraction with predict and gold); "
                                              "optionally calibration batches (see examples/quant_setup.py).")],
    formats: Annotated[str | None, typer.Option("--formats", help="Variants after the reference, comma-"
                                                   "separated: int8, int4, awq-int8 (calibrated; torchao, CPU or "
                                                   "GPU); fp8, nf4, bnb-int8 (GPU); fp32, bf16, fp16 (default: every "
                                                   "format this machine runs).", rich_help_panel=VARIANTS)] = None,
    reference: Annotated[str | None, typer.Option("--reference", help="fp32 | bf16 | fp16 (default: the model's "
                                                     "own precision).", rich_help_panel=VARIANTS)] = None,
    guard: Annotated[list[str] | None, typer.Option("--guard", help="What must not get worse, as campaign regress "
                                                       "takes it: \"perplexity<=0.5\", \"f1\\[refund]>=-0.01\" "
                                                       "(repeatable); a variant that breaks one is flagged.",
                                                       rich_help_panel=QUALITY)] = None,
    group_size: Annotated[int, typer.Option("--group-size", help="Group size of int4/gptq/awq scales.",
                                            rich_help_panel=VARIANTS)] = 128,
    context: Annotated[int | None, typer.Option("--context", help="KV cache estimate: tokens per sequence "
                                                   "(default: the longest evaluation row).",
                                                   rich_help_panel=KV)] = None,
    sequences: Annotated[int, typer.Option("--sequences", help="KV cache estimate: concurrent sequences.",
                                           rich_help_panel=KV)] = 1,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", help="KV cache precisions estimated, comma-"
                                                    "separated (default: the reference's, fp8, int8).",
                                                    rich_help_panel=KV)] = None,
    confidence: Annotated[float, typer.Option("--confidence", help="Level of the paired interval.",
                                              rich_help_panel=QUALITY)] = 0.95,
    equivalence_margin: Annotated[float | None, typer.Option("--equivalence-margin", help="Also test that each "
                                                    "variant is equivalent to the reference within +/- this (TOST on "
                                                    "the paired per-example scores, at the 5% level, beside the "
                                                    "difference test): accuracy points as a fraction (0.01 = one "
                                                    "point), or for perplexity nats of per-example mean NLL (0.01 "
                                                    "is about 1% of perplexity).", rich_help_panel=QUALITY)] = None,
    old_margin: Annotated[float | None, typer.Option("--margin", hidden=True)] = None,
    prices: Annotated[Path | None, typer.Option("--prices", help="campaign budget's price file: each variant's "
                                                                    "cheapest card by the hour among those it fits "
                                                                    "(default: the bundled example prices).",
                                                                    rich_help_panel=COST)] = None,
    csv: Annotated[Path | None, typer.Option("--csv", help="Write the table (one row per variant) to this "
                                                "CSV file.", rich_help_panel=o.OUTPUT)] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write memory against quality: .png, .svg or "
                                                ".pdf.", rich_help_panel=o.OUTPUT)] = None,
    as_json: o.Json = False,
) -> None:
    """The reference precision and each weight format on the same evaluation data: weights estimated (campaign
    memory's formats), stored and measured (the measuring protocol), the KV cache by precision (estimated),
    quality with a paired test against the reference (per-example NLL, or campaign regress on predictions), and
    forward latency per token.

    Exit 0 when no variant breaks a guard, 1 when one does (flagged), when a variant's quality is NaN or inf, or
    when one is not shown within --equivalence-margin; 2 on bad input: a format this machine cannot run,
    calibration data missing, evaluation sets that differ between variants, the user's model or predict raising
    (named by its file and function) (needs the torch and quant extras).
    """
    from .. import plots
    from ..compress.files import write_csv
    from ..compress.inputs import check_outputs
    from ..compress.quant import compare_quant
    from .render.quant import render_quant

    margin = o.renamed(old_margin, equivalence_margin, old_name="quant --margin", new_name="quant --equivalence-margin")
    check_outputs(csv=csv, plot=plot)          # the files written at the end: checked before anything runs
    with _progress("quant", as_json) as tell:
        report = compare_quant(setup, formats=_names(formats), reference=reference, guards=guard or (), prices=prices,
                               group_size=group_size, context=context, sequences=sequences,
                               kv_dtypes=_names(kv_dtype), confidence=confidence, margin=margin,
                               progress=tell)
    if csv is not None:
        write_csv(report, csv)
    if plot is not None:                       # the figure the report draws of a quant record
        plots.write(plots.quant(report.to_dict()), plot)
    o.emit(report, render_quant, as_json)
