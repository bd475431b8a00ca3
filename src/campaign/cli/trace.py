"""`campaign trace MODEL`: the peak per phase, traced on fake tensors with the real transformers code."""
from __future__ import annotations

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("trace", epilog="Example: campaign trace llama-3.1-8b --seq-len 2048 --json")(trace)


def trace(
    model: o.Model, train: o.Train = None, method: o.Method = "full", dtype: o.Dtype = None,
    kv_dtype: o.KvDtype = None, group_size: o.GroupSize = 128, double_quant: o.DoubleQuant = True, batch: o.Batch = None, seq_len: o.SeqLen = None,
    context: o.Context = None, sequences: o.Sequences = None, optimizer: o.Optimizer = None,
    optimizer_impl: o.OptimizerImpl = "foreach", mixed_precision: o.Mixed = False, grad_checkpointing: o.Ckpt = False,
    attention: o.Attention = "sdpa", lora_rank: o.LoraRank = 16, lora_targets: o.LoraTargets = "all-linear",
    prefill_chunk: o.PrefillChunk = 8192, gpus: o.Gpus = 1, shard: o.Shard = "none", card: o.CardOpt = None, reserve: o.Reserve = "10%", as_json: o.Json = False,
    expandable_segments: o.ExpandableSegments = False,
) -> None:
    """Run one real step (two, so optimizer state exists) on fake tensors; peak per phase by category.

    Builds the model from its config on the meta device (no weights), runs transformers' and peft's own code
    under PyTorch's FakeTensorMode, and tracks every storage's lifetime. Same JSON shape as `campaign memory`.
    --gpus N --shard fsdp traces FSDP2 full sharding over a fake process group (per-card figures).
    Needs the torch extra. Exit 1 when it does not fit the --card.
    """
    from ..hardware.cards import find_card
    from ..memory.trace import trace_memory
    from .render import progress_reporter

    from ..models import load_spec

    w = o.workload_from(locals(), load_spec(model))
    with progress_reporter("tracing") as tell:
        est = trace_memory(model, w, reserve=reserve, progress=tell)
    from ..memory.estimate import Fit
    from .memory import FEATURED_CARDS

    # the verdict per card, as memory gives it (no largest batch or context: each would need more traces)
    cards = [find_card(card)] if card else [find_card(n) for n in FEATURED_CARDS]
    fits = [Fit(c.name, c.memory_bytes, est.verdict(c.memory_bytes), c.memory_bytes - est.required_bytes)
            for c in cards]
    o.emit_estimate(est, fits, card, as_json)
    if card and fits[0].verdict != "fits":
        raise typer.Exit(1)
