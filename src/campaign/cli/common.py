"""Shared CLI pieces: option types reused across commands, JSON output, and the error boundary."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

# The workload options of the memory commands are generated from the Workload fields (cli/workload.py); kv's
# --expandable-segments and quant's --group-size are written here as long as reading those fields imports the
# memory package (campaign kv --help and quant --help stay light).
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON (the library object's to_dict()).")]
Model = Annotated[str, typer.Argument(
    help="Catalog name (see `campaign models`), model dir, config.json, or cached HF repo id.")]
GroupSize = Annotated[int, typer.Option("--group-size", help="Group size of int4/gptq/awq scales.")]
CardOpt = Annotated[str | None, typer.Option("--card", help="Check one card (name, alias or a size like 24GiB).")]
Reserve = Annotated[str, typer.Option(
    help="Explicit safety margin: a share of device bytes ('10%') or a size ('4GiB').")]
Fragmentation = Annotated[str | None, typer.Option("--fragmentation", help="Allocator overhead as a flat share "
                                                   "of the transient tensors (default: the step's tensors replayed "
                                                   "through the caching allocator's rules; campaign explain "
                                                   "measures yours).")]
ExpandableSegments = Annotated[bool, typer.Option("--expandable-segments", help="PyTorch's allocator with "
                                                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (default off, "
                                                  "as PyTorch's): segments grow in pages, little fragmentation.")]
CudaContext = Annotated[str | None, typer.Option("--cuda-context", help="Memory outside PyTorch's allocator: CUDA "
                                                 "context and library handles (default 500MiB, assumed).")]


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


def workload_from(spec: Any, *, train: bool | None, method: str = "full", dtype: str | None = None,
                  kv_dtype: str | None = None, group_size: int = 128, double_quant: bool = True,
                  batch: int | None = None, seq_len: int | None = None, context: int | None = None,
                  sequences: int | None = None, optimizer: str | None = None, optimizer_impl: str = "foreach",
                  mixed_precision: bool = False, grad_checkpointing: bool = False, attention: str = "sdpa",
                  lora_rank: int = 16, lora_targets: str = "all-linear", gpus: int = 1, shard: str = "none",
                  prefill_chunk: int = 8192, expandable_segments: bool = False, grad_as_bucket_view: bool = False,
                  kv_cache: str = "static", new_tokens: int | None = None, grads_kept: bool = False,
                  grad_accumulation: int = 1, softmax_saves_input: bool = False, bnb_saves_input: bool = False,
                  **deepspeed: Any) -> Any:
    """The validated Workload from a command's workload options, each passed by name (the defaults are those of
    the commands without the option). Inference reads --context/--sequences first and training --seq-len/--batch,
    the other pair as a fallback; the weight format by memory.workload.weights_format's rule (spec: the model's
    ModelSpec, or None when nothing is known of its checkpoint). `deepspeed`: the Workload fields named by no
    parameter here (the zero_* options of memory/deepspeed.py, --hf-loss, --peft-autocast), passed as they are."""
    from ..memory import make_workload
    from ..memory.workload import weights_format

    inference = train is False

    def first(*values: int | None, default: int) -> int:
        """The first value given (0 counts as given, so that it is refused, not replaced)."""
        return next((v for v in values if v is not None), default)

    if inference:
        length, count = first(context, seq_len, default=4096), first(sequences, batch, default=1)
    else:
        length, count = first(seq_len, context, default=2048), first(batch, sequences, default=1)
    dtype, group_size = weights_format(spec, dtype, group_size, inference=inference)
    return make_workload(mode="infer" if inference else "train", method=method, dtype=dtype, kv_dtype=kv_dtype,
                         group_size=group_size, double_quant=double_quant, batch=count, seq_len=length,
                         optimizer=optimizer or ("none" if inference else "adamw"), mixed_precision=mixed_precision,
                         grad_checkpointing=grad_checkpointing, attention=attention, lora_rank=lora_rank,
                         lora_targets=tuple(lora_targets.split(",")), gpus=gpus, shard=shard,
                         prefill_chunk=prefill_chunk, optimizer_impl=optimizer_impl,
                         expandable_segments=expandable_segments, grad_as_bucket_view=grad_as_bucket_view,
                         kv_cache=kv_cache, new_tokens=new_tokens, grads_kept=grads_kept,
                         grad_accumulation=grad_accumulation,
                         softmax_saves_input=softmax_saves_input, bnb_saves_input=bnb_saves_input, **deepspeed)


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


def emit(result: Any, render: Callable[[Any], None], as_json: bool, *, failed: bool | None = None) -> None:
    """A result object as JSON (its to_dict()) or rendered for a person; the exit code from its status (0 pass or
    warn, 1 fail or not verified; results.py). `failed` is only for the results that do not carry a status yet
    (the data commands'). Under `campaign --record`, the result is saved in the record folder first
    (track/records.py)."""
    if RECORDING["on"]:
        from ..track.records import save_record

        words = [a for a in RECORDING["argv"][:2] if not a.startswith("-")]
        command = " ".join(words[:2] if words[:1] in (["run"], ["runs"]) else words[:1])
        save_record(result, command=command, argv=RECORDING["argv"])
    if as_json:
        print_json(result.to_dict())
    else:
        render(result)
    if failed is None:  # a run manifest (run start/end/decide, runs show) is a file format, not a verdict: exit 0
        from ..results import Result

        failed = isinstance(result, Result) and exit_code(result.status) != 0
    if failed:
        raise typer.Exit(1)


def exit_code(status: str) -> int:
    """The CLI's exit code for a result's status: 0 pass or warn, 1 fail or not verified."""
    return 0 if status in ("pass", "warn") else 1


def print_json(data: Any) -> None:
    """Strict JSON to stdout, 2-space indent (a non-finite float prints as null)."""
    from ..strict_json import dumps_json

    sys.stdout.write(dumps_json(data))
