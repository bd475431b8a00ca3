"""`campaign trace MODEL`: the peak per phase, traced on fake tensors with the real transformers code."""
from __future__ import annotations

import typer

from . import common as o
from .workload import TRACE, WorkloadOptions, workload_command


def register(app: typer.Typer) -> None:
    app.command("trace", epilog="Example: campaign trace llama-3.1-8b --seq-len 2048 --json")(
        workload_command(trace, *TRACE))


def trace(
    model: o.Model, workload: WorkloadOptions, card: o.CardOpt = None, reserve: o.Reserve = "10%",
    as_json: o.Json = False, fragmentation: o.Fragmentation = None,
) -> None:
    """Run one real step (two, so optimizer state exists) on fake tensors; peak per phase by category.

    Builds the model from its config on the meta device (no weights), runs transformers' and peft's own code
    under PyTorch's FakeTensorMode, and tracks every storage's lifetime. Same JSON shape as `campaign memory`.
    --gpus N --shard fsdp traces FSDP2 full sharding over a fake process group (per-card figures).
    --grads-kept runs the optimizer's zero_grad(set_to_none=False), so the gradients stay between the steps.
    --grad-accumulation K runs K forward and backward passes per optimizer step: the phases shown are the last
    micro-batch's, with the gradients summed so far alive.
    Needs the torch extra. Exit 1 when it does not fit the --card.
    """
    from ..memory.plan import plan_memory
    from ..models import load_spec
    from .render import progress_reporter
    from .render.memory import plan as render_plan

    spec = load_spec(model)
    w = o.workload_from(spec, **workload)
    # the verdict per card, as memory gives it (no largest batch or context: each would need more traces)
    with progress_reporter("tracing", enabled=not as_json) as tell:
        result = plan_memory(spec, w, card=card, trace=True, reserve=reserve, progress=tell,
                             **o.overheads(fragmentation, None))
    o.emit(result, render_plan, as_json)
