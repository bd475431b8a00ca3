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
    expandable_segments: o.ExpandableSegments = False, fragmentation: o.Fragmentation = None,
    grads_kept: o.GradsKept = False,
) -> None:
    """Run one real step (two, so optimizer state exists) on fake tensors; peak per phase by category.

    Builds the model from its config on the meta device (no weights), runs transformers' and peft's own code
    under PyTorch's FakeTensorMode, and tracks every storage's lifetime. Same JSON shape as `campaign memory`.
    --gpus N --shard fsdp traces FSDP2 full sharding over a fake process group (per-card figures).
    --grads-kept runs the optimizer's zero_grad(set_to_none=False), so the gradients stay between the steps.
    Needs the torch extra. Exit 1 when it does not fit the --card.
    """
    from ..memory.plan import plan_memory
    from ..models import load_spec
    from .render import progress_reporter
    from .render.memory import plan as render_plan

    spec = load_spec(model)
    w = o.workload_from(spec, train=train, method=method, dtype=dtype, kv_dtype=kv_dtype, group_size=group_size,
                        double_quant=double_quant, batch=batch, seq_len=seq_len, context=context, sequences=sequences,
                        optimizer=optimizer, optimizer_impl=optimizer_impl, mixed_precision=mixed_precision,
                        grad_checkpointing=grad_checkpointing, attention=attention, lora_rank=lora_rank,
                        lora_targets=lora_targets, gpus=gpus, shard=shard, prefill_chunk=prefill_chunk,
                        expandable_segments=expandable_segments, grads_kept=grads_kept)
    # the verdict per card, as memory gives it (no largest batch or context: each would need more traces)
    with progress_reporter("tracing", enabled=not as_json) as tell:
        result = plan_memory(spec, w, card=card, trace=True, reserve=reserve, progress=tell,
                             **o.overheads(fragmentation, None))
    o.emit(result, render_plan, as_json)
