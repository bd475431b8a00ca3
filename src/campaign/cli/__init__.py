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

# `campaign --help` grouped by the five questions of `campaign guide` (campaign/guide.py), in their order; a command
# the guide lists under two questions is shown under the first, the run store and the hand-over under their own.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Start here", ("guide",)),
    ("1. GPU memory: will it fit?", ("memory", "kv", "cards", "models", "trace", "measure", "explain")),
    ("2. The score goes up: can I trust it?", ("split", "leaks", "usage", "errors", "regress", "seeds")),
    ("3. Before training: what to check first?", ("check", "inspect", "batch")),
    ("4. Fine-tune or compress: which variant?", ("quant", "ablate")),
    ("5. A limited budget: what to run first?", ("budget", "bench")),
    ("Records and hand-over", ("run", "runs", "report", "export", "verify")),
)


def _group_by_question(t: typer.Typer) -> None:
    """Each command and group of `t` in its question's help panel, the panels in PANELS' order (typer prints a
    group's panels in the order their first command comes). A command PANELS does not name yet is listed first,
    under "Commands" (tests/cli/test_cli.py asks for every command in a panel)."""
    order = {name: (i, j) for i, (_, names) in enumerate(PANELS) for j, name in enumerate(names)}
    panel = {name: title for title, names in PANELS for name in names}
    for c in t.registered_commands:
        c.rich_help_panel = panel.get(c.name or "")
    for g in t.registered_groups:
        g.rich_help_panel = panel.get(g.name or "")
    t.registered_commands.sort(key=lambda c: order.get(c.name or "", (-1, 0)))
    t.registered_groups.sort(key=lambda g: order.get(g.name or "", (-1, 0)))


_group_by_question(app)


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


def _given_once(command: Any) -> Any:
    """Every option that takes one value refuses to be given twice (exit 2, naming both values): click keeps the
    last silently, so `memory --card H100 --card A100` would check one card while the user reads two. Options that
    collect values (multiple), flags and counters are left as they are."""
    for sub in getattr(command, "commands", {}).values():
        _given_once(sub)
    if getattr(command, "given_once", False):
        return command
    parse = command.parse_args

    def parse_args(ctx: Any, args: list[str]) -> Any:
        try:
            _, _, order = command.make_parser(ctx).parse_args(args=list(args))
        except Exception:        # click's own error comes from its own parse, next
            return parse(ctx, args)
        counts: dict[Any, int] = {}
        for param in order:
            if param.param_type_name == "option" and not (param.multiple or param.count or param.is_flag):
                counts[param] = counts.get(param, 0) + 1
        for param, n in counts.items():
            if n > 1:
                values = [a.split("=", 1)[1] if "=" in a else args[i + 1] for i, a in enumerate(args)
                          if a.split("=", 1)[0] in param.opts and ("=" in a or i + 1 < len(args))]
                name = max(param.opts, key=len)
                raise _usage_error(ctx, f"{name} is given {n} times ({', '.join(values)}); it takes one value: "
                                        "give it once")
        return parse(ctx, args)

    command.parse_args = parse_args
    command.given_once = True
    return command


def _usage_error(ctx: Any, message: str) -> Exception:
    """click's UsageError, from the click typer runs on (typer may bundle its own)."""
    import importlib

    exceptions = importlib.import_module(type(ctx).__module__.rsplit(".", 1)[0] + ".exceptions")
    return exceptions.UsageError(message, ctx)


def _finite(kind: type) -> type:
    class FiniteFloat(kind):  # type: ignore[misc, valid-type]
        finite_only = True

        def convert(self, value: Any, param: Any, ctx: Any) -> float:
            number = super().convert(value, param, ctx)
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number; give a number such as 0.5", param, ctx)
            return number

    return FiniteFloat


def _listing(t: typer.Typer) -> typer.Typer:
    """A copy of `t` whose commands and groups carry their names and help and no parameters: all that the top-level
    help page and click's suggestion of the closest name read. Each command's callback stands in as a function of
    no parameters with its name and docstring (typer takes a command's name and help from them)."""
    import copy

    def bare(callback: Any) -> Any:
        def command() -> None:
            raise AssertionError("a listing's command is never run")

        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(command, attr, getattr(callback, attr, None))
        return command

    new = copy.copy(t)
    new.registered_commands = []
    for c in t.registered_commands:
        stand_in = copy.copy(c)
        stand_in.callback = bare(c.callback) if c.callback is not None else None
        new.registered_commands.append(stand_in)
    new.registered_groups = []
    for g in t.registered_groups:
        group = copy.copy(g)
        if g.typer_instance is not None:
            group.typer_instance = _listing(g.typer_instance)
        new.registered_groups.append(group)
    return new


def _click_command(args: list[str]) -> Any:
    """The click command for this command line. Reading a command's parameters from its function's signature is
    the costliest part of start-up, so only the command (or group) named first is built; for `campaign --help`, no
    command, or a name that is not a command (click then suggests the closest), every command by its name and help
    only (_listing)."""
    first = args[1:2] if args[:1] == ["--"] else args[:1]  # `campaign -- cards`: click reads past the --
    name = first[0] if first and not first[0].startswith("-") else None
    commands = [c for c in app.registered_commands
                if (c.name or typer.main.get_command_name(getattr(c.callback, "__name__", ""))) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if name is None or not commands and not groups:
        return typer.main.get_command(_listing(app))
    everything = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = commands, groups
    try:
        return typer.main.get_group(app)   # a group, as the whole tree's, even with one command in it
    finally:
        app.registered_commands, app.registered_groups = everything


def _help_wanted(args: list[str]) -> bool:
    """Whether this command line may print a help page: --help/-h anywhere, no command, or a group alone (`campaign
    runs`). A guess for speed only: typer imports its formatter itself whenever it prints help."""
    return not args or any(a in ("--help", "-h") for a in args) or \
        len(args) == 1 and any(g.name == args[0] for g in app.registered_groups)


def _import_help_formatter() -> None:
    """Import typer's help formatter (typer.rich_utils) without the two modules it imports at its top for features
    campaign leaves off: rich.markdown (markdown-it, for markdown help text) and rich.traceback (pygments, for
    pretty exceptions), about 90 ms of a 200 ms start. Each is stood in for while the formatter is imported, by a
    class that imports the real one when it is used; the real modules stay importable by anyone afterwards."""
    import importlib
    import types

    if "typer.rich_utils" in sys.modules:
        return

    class Deferred(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            return cls.real()(*args, **kwargs)

        def __getattr__(cls, attr: str) -> Any:
            return getattr(cls.real(), attr)

    stand_ins = {}
    for module, name in (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback")):
        if module not in sys.modules:
            stub = types.ModuleType(module)

            def real(module: str = module, name: str = name) -> Any:
                return getattr(importlib.import_module(module), name)

            setattr(stub, name, Deferred(name, (), {"real": staticmethod(real)}))
            stand_ins[module] = sys.modules[module] = stub
    try:
        importlib.import_module("typer.rich_utils")
    except ImportError:   # typer without rich: its plain help needs neither
        pass
    finally:
        for module, stub in stand_ins.items():
            if sys.modules.get(module) is stub:
                del sys.modules[module]


class _QuietOptionalLibraries:
    """Optional libraries' import-time chatter (torchao's missing GPU kernels, torch's pytree deprecations, seen when
    transformers imports torchao) is not the command's output: their loggers are set to errors as torch is first
    looked up (an import finder that finds nothing), so that the commands that never import torch do not load
    logging (9 ms of every start-up). It stays in sys.meta_path, inert once done: removing itself while the import
    system walks that list would skip the finder after it."""

    done = False

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> None:
        if name != "torch" or cls.done:
            return None
        cls.done = True
        import logging

        for logger in ("torchao", "torch.utils._pytree"):
            logging.getLogger(logger).setLevel(logging.ERROR)
        return None


def main(argv: list[str] | None = None) -> None:
    """Entry point: CampaignError -> one line on stderr and exit 2 (traceback only with --debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "torch" in sys.modules:
        _QuietOptionalLibraries.find_spec("torch")
    elif _QuietOptionalLibraries not in sys.meta_path:
        sys.meta_path.insert(0, _QuietOptionalLibraries)  # type: ignore[arg-type]
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    from . import common

    # `campaign --record COMMAND ...`: only before the command (`campaign usage --record SPLIT`, the old spelling of
    # usage --use, is usage's own option until it goes)
    record = bool(args) and args[0] == "--record"
    if record:
        args.pop(0)
    record = record or os.environ.get("CAMPAIGN_RECORD", "") not in ("", "0")
    common.RECORDING.update(on=record, argv=list(args))
    if record and args[:1] == ["run"] and not _help_wanted(args):  # a run is its own record: say so, save no copy
        print("campaign: a run is recorded in the run store (.campaign/runs, `campaign runs show ID`); --record saves "
              "the results of the other commands", file=sys.stderr)
    try:
        if _help_wanted(args):
            _import_help_formatter()
        command = _given_once(_finite_floats(_click_command(args)))
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
            if type(e).__name__ == "NoArgsIsHelpError":  # `campaign`, `campaign runs`: the help page was the answer
                sys.exit(2)
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
