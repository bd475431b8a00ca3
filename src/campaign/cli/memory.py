"""`campaign memory MODEL`: will it fit, on which card, with what margin."""
from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import InputError
from . import common as o
from .workload import MEMORY, WorkloadOptions, workload_command


def _given(ctx: Any) -> set[str]:
    """The options given on the command line (not left at their defaults)."""
    out = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            out.add(name)
    return out


def from_config(workload: dict[str, Any], paths: list[Path], *, given: set[str], quiet: bool,
                deepspeed: Path | None = None, model_type: str | None = None,
                causal: bool | None = None) -> tuple[dict[str, Any], tuple]:
    """The workload options with the values the config files give (`deepspeed`: the --deepspeed file, which must be
    a DeepSpeed config), where the command line gave none (`given`), and every key of the files with its use
    (recipe_keys.ConfigKey); each value read is said on stderr with its file and key (and what the command line
    overrode). Each file is read once: a pipe (<(cat ds.json)) has one read. `model_type`: the model's (peft's
    default LoRA targets); `causal`: whether it is a decoder."""
    from ..memory.training_config import workload_from_configs

    gpus = workload.get("gpus") if "gpus" in given else None
    reference = workload.get("reference") if "reference" in given else None
    cfg = workload_from_configs(paths, deepspeed=deepspeed, gpus=gpus, model_type=model_type, reference=reference,
                                causal=causal)
    merged = dict(workload)
    said = []
    for option, value, where in cfg.sources:
        shown = ",".join(value) if option == "lora_targets" else value
        if option not in merged:
            raise InputError(f"{where}: sets {option}, which campaign memory takes no option for; remove it from a "
                             "copy of the file")
        if option in given:
            said.append(f"  {option} = {merged[option]} (the command line; {where} says {shown})")
            continue
        merged[option] = shown
        said.append(f"  {option} = {shown} ({where})")
    if not quiet:
        lines = ["from your config:", *said, *(f"  note: {n}" for n in cfg.notes)]
        if cfg.model:
            lines.append(f"  the base model the files name: {cfg.model}")
        print("\n".join(lines), file=sys.stderr)
    return merged, cfg.keys


CONFIGS = "Your config files"


def register(app: typer.Typer) -> None:
    app.command("memory", epilog="Example: campaign memory llama-3.1-8b --method qlora --batch 4 --seq-len 2048")(
        workload_command(memory, *MEMORY))


def memory(
    ctx: typer.Context, model: o.Model, workload: WorkloadOptions, card: o.CardOpt = None, reserve: o.Reserve = "10%",
    fragmentation: o.Fragmentation = None, cuda_context: o.CudaContext = None,
    all_cards: bool = typer.Option(False, "--all-cards", help="Fit table over every catalog card.",
                                   rich_help_panel=o.CARD),
    no_solve: bool = typer.Option(False, "--no-solve", help="Skip the largest-batch / longest-context solve.",
                                  rich_help_panel=o.CARD),
    edge: bool = typer.Option(False, "--frontier", help="With --card: the largest batch at each context length, "
                              "and what 8-bit AdamW, checkpointing or a smaller LoRA rank would save.",
                              rich_help_panel=o.CARD),
    config: Annotated[list[Path] | None, typer.Option(
        "--config", help="Your training config, read for the workload (repeat for several): HF TrainingArguments "
        "and TRL configs (JSON/YAML), adapter_config.json, axolotl, torchtune or LLaMA-Factory YAML, torchtitan "
        "TOML, DeepSpeed JSON, accelerate config. An option "
        "given here wins; each value read is printed with its file and key.", rich_help_panel=CONFIGS)] = None,
    deepspeed: Annotated[Path | None, typer.Option(
        "--deepspeed", help="Your DeepSpeed ds_config.json: the ZeRO stage, precision, micro-batch and the sizes of "
        "DeepSpeed's own buffers (reduce bucket, ZeRO-3 prefetch, live and persistent parameters) read from it, as "
        "--config does.", rich_help_panel=CONFIGS)] = None,
    sources: bool = typer.Option(False, "--sources", help="Show where each breakdown item's formula comes from "
                                 "(DeepSpeed's, PyTorch's, peft's source; the --json always has it).",
                                 rich_help_panel=o.OUTPUT),
    host_memory: str | None = typer.Option(
        None, "--host-memory", help="Host RAM per training process (e.g. 256GiB, or the node's RAM / its cards): "
        "checks what --offload-optimizer cpu or --offload-params cpu puts in host RAM (check memory.host).",
        rich_help_panel=o.CARD),
    revision: o.Revision = None,
    as_json: o.Json = False,
) -> None:
    """GPU memory per card for a training step or inference: breakdown, phases, card fit.

    Exit 0 when it fits the --card (or without --card), 1 when it does not fit or a check is not verified (a recipe
    key not modelled or unknown: the estimate is then a bound), 2 on bad input.
    """
    from ..memory.plan import plan_memory
    from .render.memory import plan as render_plan

    if edge and not card:
        from ..errors import InputError

        raise InputError("--frontier needs --card: the edge of what fits is one card's; give --card NAME")
    spec = o.load_model(model, revision=revision, as_json=as_json)
    recipe: tuple = ()
    if config or deepspeed is not None:
        workload, recipe = from_config(workload, config or [], given=_given(ctx), quiet=as_json, deepspeed=deepspeed,
                                       model_type=spec.model_type,
                                       causal=not (spec.encoder or spec.encdec is not None))
    w = o.workload_from(spec, **workload)
    host = None
    if host_memory is not None:
        from ..units import parse_size

        host = parse_size(host_memory, what="--host-memory")
    result = plan_memory(spec, w, card=card, all_cards=all_cards, solve=not no_solve, reserve=reserve,
                         edge=edge, host_memory_bytes=host, **o.overheads(fragmentation, cuda_context))
    from dataclasses import replace

    # the model as typed: for the trace command memory.family names
    result = replace(result, recipe=recipe, ref=model + (f" --revision {revision}" if revision else ""))
    o.emit(result, partial(render_plan, sources=sources), as_json)
