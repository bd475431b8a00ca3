"""Shared CLI pieces: option types reused across commands, JSON output, and the error boundary."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

T = TypeVar("T")

# The workload options of the memory commands are generated from the Workload fields (cli/workload.py); kv's
# --expandable-segments is written here as long as reading those fields imports the memory package (campaign kv
# --help stays light).
# Help panels shared by the commands (`campaign COMMAND --help` groups each command's options under them).
CARD, OVERHEADS, OUTPUT, INPUT, RECORDS = "Card", "Overheads", "Output", "Input", "Record folder"

Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON (the library object's to_dict()).",
                                    rich_help_panel=OUTPUT)]
Model = Annotated[str, typer.Argument(
    help="Catalog name (see `campaign models`), model dir, config.json, or HF repo id (ORG/NAME[@REVISION]: the "
         "local caches, else the Hub's config and safetensors headers).")]
Revision = Annotated[str | None, typer.Option("--revision", help="The Hub revision (branch, tag or commit) of a "
                                              "repo id; default main.", rich_help_panel=INPUT)]
CardOpt = Annotated[str | None, typer.Option("--card", help="Check one card (name, alias or a size like 24GiB).",
                                             rich_help_panel=CARD)]
Reserve = Annotated[str, typer.Option(
    help="Explicit safety margin: a share of device bytes ('10%') or a size ('4GiB').", rich_help_panel=CARD)]
Fragmentation = Annotated[str | None, typer.Option("--fragmentation", help="Allocator overhead as a flat share "
                                                   "of the transient tensors (default: the step's tensors replayed "
                                                   "through the caching allocator's rules; campaign explain "
                                                   "measures yours).", rich_help_panel=OVERHEADS)]
ExpandableSegments = Annotated[bool, typer.Option("--expandable-segments", help="PyTorch's allocator with "
                                                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (default off, "
                                                  "as PyTorch's): segments grow in pages, little fragmentation.",
                                                  rich_help_panel=OVERHEADS)]
CudaContext = Annotated[str | None, typer.Option("--cuda-context", help="Memory outside PyTorch's allocator: CUDA "
                                                 "context and library handles (default 500MiB, assumed).",
                                                 rich_help_panel=OVERHEADS)]


def load_model(model: str, *, revision: str | None = None, as_json: bool = False) -> Any:
    """The model's spec (models.load_spec), with a spinner on a terminal once reading it takes over a second (a
    multimodal model's towers are built on the meta device; a Hub read)."""
    from ..models import load_spec
    from .render import progress_after

    with progress_after(f"reading {model}", enabled=not as_json):
        return load_spec(model, revision=revision)


def overheads(fragmentation: str | None, cuda_context: str | None) -> dict[str, Any]:
    """estimate_memory's overrides from --fragmentation / --cuda-context (only those given): fragmentation and
    context_bytes, keywords of every memory call."""
    from ..memory.parsing import parse_share
    from ..units import parse_size

    options: dict[str, Any] = {}
    if fragmentation is not None:
        options["fragmentation"] = parse_share(fragmentation)
    if cuda_context is not None:
        options["context_bytes"] = parse_size(cuda_context, what="cuda-context")
    return options


def workload_from(spec: Any, *, train: bool | None, batch: int | None = None, seq_len: int | None = None,
                  context: int | None = None, sequences: int | None = None, dtype: str | None = None,
                  group_size: int | None = None, optimizer: str | None = None, lora_targets: str | None = None,
                  **fields: Any) -> Any:
    """The validated Workload from a command's workload options, each passed by name (cli/workload.py's dict).
    Only what the command line reads its own way is handled here: the mode (--train/--infer); the length and count
    (inference reads --context/--sequences first, training --seq-len/--batch, the other pair as a fallback; an
    inference context defaults to INFERENCE_CONTEXT); the weight format by memory.workload.weights_format's rule
    (spec: the model's ModelSpec, or None when nothing is known of its checkpoint); the optimizer (none for
    inference); --lora-targets (target_list). Every other Workload field passes as given, and one not
    given (or None) takes the Workload dataclass's own default (memory/workload.py), never restated here."""
    from dataclasses import fields as dataclass_fields

    from ..memory import make_workload
    from ..memory.workload import Workload, weights_format

    default: dict[str, Any] = {f.name: f.default for f in dataclass_fields(Workload)}
    inference = train is False

    def first(*values: int | None, default: int) -> int:
        """The first value given (0 counts as given, so that it is refused, not replaced)."""
        return next((v for v in values if v is not None), default)

    if inference:
        length = first(context, seq_len, default=INFERENCE_CONTEXT)
        count = first(sequences, batch, default=default["batch"])
    else:
        length = first(seq_len, context, default=default["seq_len"])
        count = first(batch, sequences, default=default["batch"])
    quant = getattr(spec, "checkpoint_quant", None) or {}
    if inference and dtype is None and fields.get("double_quant") is None and quant.get("load_in_4bit") is True:
        fields["double_quant"] = quant.get("bnb_4bit_use_double_quant", False) is True  # the checkpoint's own
    dtype, group_size = weights_format(spec, dtype, default["group_size"] if group_size is None else group_size,
                                       inference=inference)
    return make_workload(mode="infer" if inference else "train", dtype=dtype, group_size=group_size, batch=count,
                         seq_len=length, optimizer=optimizer or ("none" if inference else None),
                         lora_targets=None if lora_targets is None else target_list(lora_targets), **fields)


def target_list(value: str) -> tuple[str, ...]:
    """--lora-targets: comma-separated names, or one re:PATTERN whole (a regular expression may hold commas)."""
    from ..memory.workload import LORA_REGEX

    return (value,) if value.startswith(LORA_REGEX) else tuple(value.split(","))


# The context of an inference workload when neither --context nor --seq-len is given (training: Workload.seq_len).
INFERENCE_CONTEXT = 4096


def plot_file(path: str | None) -> str | None:
    """A --plot file checked before the command's work starts: .png, .svg or .pdf (InputError otherwise)."""
    if path is not None:
        from ..plots import check_path

        check_path(path)
    return path


def with_plot(result: Any, figure: Callable[[dict[str, Any]], Any], path: str | None) -> Any:
    """--plot: the figure of the result's to_dict() (a campaign.plots function) written to `path`, and the result
    with its `plot` field naming the file; the result as it is without --plot. The drawing is the command's, not
    a side effect of the library call (a notebook draws the same with campaign.plots)."""
    if path is None:
        return result
    from dataclasses import replace

    from ..plots import write

    return replace(result, plot=str(write(figure(result.to_dict()), path)))


# Set by `campaign --record` (or CAMPAIGN_RECORD=1): every emitted result is also saved in the record folder.
RECORDING: dict[str, Any] = {"on": False, "argv": []}


def emit(result: Any, render: Callable[[Any], None], as_json: bool) -> None:
    """A result object as JSON (its to_dict()) or rendered for a person; the exit code from its status (0 pass or
    warn, 1 fail or not verified; results.py), for every results.Result. Under `campaign --record`, the result is
    saved in the record folder first (track/records.py)."""
    if RECORDING["on"]:
        from ..track.records import save_record

        words = [a for a in RECORDING["argv"][:2] if not a.startswith("-")]
        command = " ".join(words[:2] if words[:1] in (["run"], ["runs"]) else words[:1])
        save_record(result, command=command, argv=RECORDING["argv"])
    if as_json:
        print_json(result.to_dict())
    else:
        render(result)
    from ..results import Result

    # a run manifest (run start/end/decide, runs show) is a file format, not a Result: exit 0
    if isinstance(result, Result) and exit_code(result.status) != 0:
        raise typer.Exit(1)


def renamed(old: T | None, new: T | None, *, old_name: str, new_name: str) -> T | None:
    """An option renamed for one vocabulary (CONTRIBUTING.md, "Option names"), its old spelling kept as a hidden alias
    for one release: the value given under either name (the new one when both are), and a one-line notice on stderr
    when the old spelling was used."""
    if old is None:
        return new
    say_renamed(old_name, new_name)
    return old if new is None else new


def say_renamed(old_name: str, new_name: str) -> None:
    """The one-line notice that an old spelling (an option or a command kept hidden for one release) was used."""
    sys.stderr.write(f"campaign: {old_name} is now {new_name}; the old spelling still works in this release\n")


def exit_code(status: str) -> int:
    """The CLI's exit code for a result's status: 0 pass or warn, 1 fail or not verified."""
    return 0 if status in ("pass", "warn") else 1


def print_json(data: Any) -> None:
    """Strict JSON to stdout, 2-space indent (a non-finite float prints as null)."""
    from ..strict_json import dumps_json

    sys.stdout.write(dumps_json(data))
