"""The workload options of the memory commands, generated once from the `Workload` fields' metadata (flag, help,
group: memory/workload.py), and the groups each command takes.

A command declares `workload: WorkloadOptions` in its signature and is registered through `workload_command(fn,
*groups)`: typer then sees, in that parameter's place, one option per field of those groups (in the fields'
order), and the function receives them as one dict, ready for `common.workload_from(spec, **workload)`.

The options are built when typer builds the command (campaign builds only the command named on the command line),
not when the CLI is imported.

Which command takes which group, and why the gaps are meant:
  step        every memory command: what one step or pass runs (mode, method, dtype, batch and length, optimizer,
              precision policy, checkpointing, attention, LoRA, prefill chunk).
  formats     memory, trace: storage details of quantized weights and the KV cache (--kv-dtype, --group-size,
              --double-quant). measure builds the model with the installed libraries' own formats, and explain
              compares against such a measurement: neither can set them.
  parallel    memory, trace: --gpus, --shard (trace runs FSDP2 over a fake process group). measure runs on one
              device, explain compares with one measured device.
  allocator   memory, trace: --expandable-segments, --grads-kept, choices of the caching allocator and the
              training loop that both model. A measurement is made under the machine's own settings.
  ddp         memory: --grad-as-bucket-view (DDP's gradient buckets); trace does not trace DDP.
  generation  memory: --kv-cache, --new-tokens (HF generate's growing cache); trace and measure run one prefill
              and decode, not a generation loop.
  legacy      memory: --softmax-saves-input, --bnb-saves-input, old library versions an estimate can model; trace
              and measure run the versions installed.
  deepspeed   memory: the zero_optimization sizes of a DeepSpeed run (--zero-reduce-bucket, ...; or --deepspeed
              ds_config.json); trace runs FSDP2, not DeepSpeed.
  loop        memory: what the training loop does beyond the model (--loss chunked/fused, --optimizer-in-backward,
              --activation-offloading: torchtune's and Liger's; --offload-params cpu: ZeRO-3's or FSDP's parameter
              offload); trace and measure run a plain step of the model.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cached_property
from typing import Annotated, Any, Optional

GROUPS = ("step", "formats", "parallel", "allocator", "ddp", "generation", "legacy", "deepspeed", "loop")
MEMORY = GROUPS
TRACE = ("step", "formats", "parallel", "allocator")
MEASURE = ("step",)
EXPLAIN = ("step",)

# Each group's help panel (`campaign memory --help` shows the options grouped under these titles).
PANELS = {"step": "Workload", "formats": "Workload: formats", "parallel": "Workload: parallelism",
          "allocator": "Workload: allocator and loop", "ddp": "Workload: DDP", "generation": "Workload: generation",
          "legacy": "Workload: older library versions", "deepspeed": "Workload: DeepSpeed",
          "loop": "Workload: loss and offloading"}

WorkloadOptions = dict  # the type a command's `workload` parameter declares: {option name: value}

_TYPES: dict[str, type] = {"int": int, "str": str, "bool": bool, "float": float}


def _base_type(annotation: str) -> str:
    """'int | None' -> 'int'; the fields' annotations are strings (from __future__ import annotations)."""
    return annotation.replace("| None", "").replace("None |", "").strip()


def option_parameters(groups: tuple[str, ...]) -> list[inspect.Parameter]:
    """The typer parameters of the workload fields in `groups`, in the fields' order (an alias right after its
    field), each with its flag, help and command-line default from the field's metadata."""
    import dataclasses

    import typer

    from ..memory.workload import Workload

    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown workload option group(s) {sorted(unknown)}; the groups are {GROUPS}")
    out = []
    for f in dataclasses.fields(Workload):
        meta = f.metadata
        if meta.get("group") not in groups:
            continue
        default = meta.get("cli_default", f.default)
        kind = _TYPES[meta.get("cli_type") or _base_type(str(f.type))]
        annotation: Any = Optional[kind] if default is None else kind  # noqa: UP045 - typer reads the Optional
        panel = PANELS[meta["group"]]
        out.append(inspect.Parameter(meta.get("param", f.name), inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=Annotated[annotation, typer.Option(
                                         meta["flag"], help=meta["help"], rich_help_panel=panel)]))
        for name, flag, text in meta.get("aliases", ()):
            out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                         annotation=Annotated[Optional[int], typer.Option(  # noqa: UP045
                                             flag, help=text, rich_help_panel=panel)]))
    return out


class WorkloadCommand:
    """A command function whose `workload` parameter stands for the generated options (see the module's doc):
    typer reads the signature below, and calls this with every option; the function gets the workload options
    as one dict."""

    def __init__(self, fn: Callable[..., None], groups: tuple[str, ...]) -> None:
        self.fn, self.groups = fn, groups
        self.__name__, self.__qualname__ = fn.__name__, fn.__qualname__
        self.__doc__, self.__module__ = fn.__doc__, fn.__module__

    @cached_property
    def __signature__(self) -> inspect.Signature:  # type: ignore[override]
        own = inspect.signature(self.fn, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in own.parameters.values():
            if p.name == "workload":
                params += option_parameters(self.groups)
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        return own.replace(parameters=params)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    @cached_property
    def _names(self) -> frozenset[str]:
        return frozenset(p.name for p in option_parameters(self.groups))

    def __call__(self, **kwargs: Any) -> None:
        workload = {k: kwargs.pop(k) for k in list(kwargs) if k in self._names}
        return self.fn(**kwargs, workload=workload)


def workload_command(fn: Callable[..., None], *groups: str) -> WorkloadCommand:
    """`fn` as a typer command that takes the workload options of `groups` in place of its `workload` parameter."""
    return WorkloadCommand(fn, tuple(groups))
