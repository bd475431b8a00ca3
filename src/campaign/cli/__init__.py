"""The `campaign` command: a thin typer layer over the library (parse -> call -> render)."""
from __future__ import annotations

import math
import os
import sys
from typing import Any

import typer

from ..errors import CampaignError
from . import cards, data, evaluate, guide, kv, measure, memory, models, plan, quant, report, trace, track, train

app = typer.Typer(
    name="campaign", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Estimate, measure and record what a GPU compute campaign needs. Start with `campaign guide`. Add --record "
         "(or set CAMPAIGN_RECORD=1) to any command to save its result in the record folder (.campaign/records, or "
         "$CAMPAIGN_ROOT/records).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
for module in (guide, memory, kv, cards, models, trace, measure, data, evaluate, train, track, quant, plan, report):
    module.register(app)


def _finite_floats(command: Any) -> Any:
    """Every float option of every command refuses nan and infinity at parsing (exit 2, naming the option): no
    quantity campaign takes on the command line is meaningful as either. (typer may bundle its own click, so the
    float type is recognised by name and refined by subclassing whatever class it is.)"""
    for param in command.params:
        kind = type(param.type)
        if kind.__name__ == "FloatParamType" and not getattr(kind, "finite_only", False):
            param.type = _finite(kind)()
    for sub in getattr(command, "commands", {}).values():
        _finite_floats(sub)
    return command


def _finite(kind: type) -> type:
    class FiniteFloat(kind):  # type: ignore[misc, valid-type]
        finite_only = True

        def convert(self, value: Any, param: Any, ctx: Any) -> float:
            number = super().convert(value, param, ctx)
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number; give a number such as 0.5", param, ctx)
            return number

    return FiniteFloat


def main(argv: list[str] | None = None) -> None:
    """Entry point: CampaignError -> one line on stderr and exit 2 (traceback only with --debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # optional libraries' import-time chatter (torchao's missing GPU kernels, torch's pytree deprecations, seen when
    # transformers imports torchao) is not the command's output
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    from . import common

    # `campaign --record COMMAND ...`: only before the command (`campaign usage --record SPLIT` is usage's own option)
    record = bool(args) and args[0] == "--record"
    if record:
        args.pop(0)
    record = record or os.environ.get("CAMPAIGN_RECORD", "") not in ("", "0")
    common.RECORDING.update(on=record, argv=list(args))
    try:
        command = _finite_floats(typer.main.get_command(app))
        code = command.main(args=args, prog_name="campaign", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except CampaignError as e:
        if debug:
            raise
        sys.stderr.write(f"campaign: error: {e}\n")
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.stderr.write("campaign: interrupted\n")
        sys.exit(130)
    except OSError as e:  # an output path that cannot be written, a disk that is full
        if debug:
            raise
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        sys.stderr.write(f"campaign: error: {where}{e.strerror or e}; check the path and its permissions\n")
        sys.exit(2)
    except Exception as e:
        # usage errors (unknown option, missing argument, bad value) come from click, which typer may bundle
        if hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int):
            ctx = getattr(e, "ctx", None)
            path = ctx.command_path if ctx is not None else "campaign"
            sys.stderr.write(f"{path}: error: {e.format_message()} (see '{path} --help')\n")
            sys.exit(2)
        if type(e).__name__ == "Abort":
            sys.exit(130)
        if debug:
            raise
        sys.stderr.write(f"campaign: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)\n")
        sys.exit(3)
