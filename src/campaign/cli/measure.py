"""`campaign measure` and `campaign explain`: the peak measured phase by phase, and the gap to the estimate."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from . import common as o
from .workload import EXPLAIN, MEASURE, WorkloadOptions, workload_command


def register(app: typer.Typer) -> None:
    app.command("measure", epilog="Example: campaign measure llama-3.2-1b --batch 4 --seq-len 1024 "
                "--out measured.json")(workload_command(measure, *MEASURE))
    app.command("explain", epilog="Example: campaign explain llama-3.2-1b --batch 4 --seq-len 1024 "
                "--measured measured.json --trace")(workload_command(explain, *EXPLAIN))


# Help panels of these commands (beside common's CARD, OUTPUT and the workload's).
RUN, COMPARED = "Run", "Compared with"

Out = Annotated[Path | None, typer.Option("--out", help="Save the measurement as JSON (atomic write).",
                                          rich_help_panel=o.OUTPUT)]
Script = Annotated[Path | None, typer.Option("--script", help="Measure a Python script instead of a built model.",
                                             rich_help_panel=RUN)]
Device = Annotated[str | None, typer.Option(help="cuda (NVIDIA or ROCm) or cpu; default: cuda when visible.",
                                            rich_help_panel=RUN)]


def measure(
    model: Annotated[str | None, typer.Argument(
        help="Model to load (a local dir's safetensors) or build from its config with random weights; "
        "omit with --script.")] = None,
    *, workload: WorkloadOptions,
    weights: Annotated[str, typer.Option(
        help="auto: load a local model dir's safetensors when it has them, else random | load | random.",
        rich_help_panel=RUN)] = "auto",
    script: Script = None, device: Device = None, out: Out = None, as_json: o.Json = False,
    script_args: Annotated[list[str] | None, typer.Argument(help="Arguments after -- go to the script.")] = None,
) -> None:
    """Measure allocated, reserved and device memory per phase on the card (or the CPU) and save it.

    A built model runs load, then two training steps (the second is kept) or prefill and decode. A --script runs
    in this process with the arguments that follow it; it may mark phases with
    campaign.current_meter().phase("forward"). Exit 1 if the run crashes or runs out of memory (a measured failure:
    the phase it reached is named, the phases measured up to it are printed and saved with --out), 2 on bad input.
    """
    from ..memory.protocol import MeasurementFailed, measure_script, measure_workload
    from .render import progress_reporter
    from .render.memory import measurement as render_measurement

    try:
        if script is not None:
            # with --script there is no MODEL: every positional argument is the script's (`--` optional)
            args = ([model] if model else []) + list(script_args or [])
            m = measure_script(script, args, device=device)
        else:
            if not model:
                from ..errors import InputError

                raise InputError("give a MODEL to build, or --script train.py")
            # nothing of the checkpoint is read for the weight format: --dtype, else bf16
            w = o.workload_from(None, **workload)
            with progress_reporter("measuring", enabled=not as_json) as tell:
                m = measure_workload(model, w, device=device, weights=weights, progress=tell)
    except MeasurementFailed as failed:
        # the run was measured and failed (out of memory, a crash): a measured failure whose check
        # measure.completed fails (exit 1, as explain on it), not bad input; where it stopped goes to stderr
        sys.stderr.write(f"campaign: {failed}\n")
        m = failed.measurement
    if out:
        m.save(out)
    o.emit(m, lambda r: render_measurement(r, out), as_json)


def explain(
    first: Annotated[str, typer.Argument(help="ESTIMATE.json (from campaign memory --json), or a MODEL.")],
    second: Annotated[Path | None, typer.Argument(help="MEASURED.json when the first argument is an estimate.")] = None,
    measured: Annotated[Path | None, typer.Option("--measured", help="MEASURED.json (with a MODEL).",
                                                  rich_help_panel=COMPARED)] = None,
    traced_file: Annotated[Path | None, typer.Option("--traced", help="A traced estimate JSON to add.",
                                                     rich_help_panel=COMPARED)] = None,
    trace_now: Annotated[bool, typer.Option("--trace", help="Also trace the workload now (needs torch).",
                                            rich_help_panel=COMPARED)] = False,
    *, workload: WorkloadOptions,
    card: o.CardOpt = None, reserve: o.Reserve = "10%",
    force: Annotated[bool, typer.Option("--force", help="Compare even a measurement more than 3x off the estimate "
                                        "(by default refused as another workload).", rich_help_panel=COMPARED)] = False,
    as_json: o.Json = False,
) -> None:
    """Estimate vs measured per phase (and traced), the gap attributed, a safety margin, the verdict per card.

    Exit 1 when the measured run failed (no margin from it) or the --card does not fit the plan with its margin
    ('tight' included, as in campaign memory); 2 on bad input, or a measurement of another workload.
    """
    from ..errors import InputError
    from ..memory.breakdown import load_estimate
    from ..memory.explain import explain as explain_records, explain_model
    from ..memory.measurement import load_measurement
    from ..memory.plan import FEATURED_CARDS
    from ..models import load_spec
    from .render.memory import explanation as render_explanation

    if second is None and measured is not None and first.endswith(".json") and Path(first).is_file() \
            and Path(first).name != "config.json":
        second, measured = measured, None  # ESTIMATE.json --measured MEASURED.json reads as the two-file form
    if second is not None:
        if trace_now:
            raise InputError("--trace traces a MODEL's workload; with ESTIMATE.json give --traced TRACED.json "
                             "(from campaign trace --json)")
    cards = None if card else FEATURED_CARDS
    if second is not None:  # the records are files: read them here, then compare
        analytic = load_estimate(first)
        m = load_measurement(second)
        traced = load_estimate(traced_file) if traced_file else None
        result = explain_records(analytic, m, traced=traced, cards=cards, force=force, card=card)
    else:
        if measured is None:
            raise InputError("give MEASURED.json: campaign explain ESTIMATE.json MEASURED.json, "
                             "or MODEL --measured M.json")
        m = load_measurement(measured)
        spec = load_spec(first)
        w = o.workload_from(spec, **workload)
        traced = load_estimate(traced_file) if traced_file and not trace_now else None
        result = explain_model(spec, w, m, trace=trace_now, traced=traced, cards=cards, force=force, reserve=reserve,
                               card=card)
    o.emit(result, render_explanation, as_json)
