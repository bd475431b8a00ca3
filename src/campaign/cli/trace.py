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
    as_json: o.Json = False, fragmentation: o.Fragmentation = None, revision: o.Revision = None,
) -> None:
    """Run one real step (two, so optimizer state exists) on fake tensors; peak per phase by category.

    Builds the model from its config on the meta device (no weights), runs transformers' and peft's own code
    under PyTorch's FakeTensorMode, and tracks every storage's lifetime. Same JSON shape as `campaign memory`.
    --gpus N --shard fsdp traces FSDP2 full sharding over a fake process group (per-card figures).
    --grads-kept runs the optimizer's zero_grad(set_to_none=False), so the gradients stay between the steps.
    --grad-accumulation K runs K forward and backward passes per optimizer step: the phases shown are the last
    micro-batch's, with the gradients summed so far alive.
    Your own model: FILE.py:FACTORY, where the factory returns the setup campaign check takes (the model, its
    micro-batches, optionally loss(model, batch) and the optimizer): two steps of your code on fake tensors
    (the first micro-batch, your loss and your optimizer's class); an op that needs the data is named with the
    module that called it. Only --expandable-segments and --grads-kept of the workload options apply there.
    Needs the torch extra. Exit 1 when it does not fit the --card.
    """
    if is_setup(model):
        if revision is not None:
            from ..errors import InputError

            raise InputError(f"--revision {revision}: {model} is your own setup file, not a Hub repo id; drop "
                             "--revision")
        return trace_setup(model, workload, card=card, reserve=reserve, as_json=as_json,
                           fragmentation=fragmentation)
    from ..memory.plan import plan_memory
    from .render import progress_reporter
    from .render.memory import plan as render_plan

    spec = o.load_model(model, revision=revision, as_json=as_json)
    w = o.workload_from(spec, **workload)
    # the verdict per card, as memory gives it (no largest batch or context: each would need more traces)
    with progress_reporter("tracing", enabled=not as_json) as tell:
        result = plan_memory(spec, w, card=card, trace=True, reserve=reserve, progress=tell,
                             **o.overheads(fragmentation, None))
    o.emit(result, render_plan, as_json)


# the workload options a traced setup takes: the rest describe a model campaign builds (the setup's model, batch and
# optimizer set the step)
SETUP_OPTIONS = ("expandable_segments", "grads_kept")


def is_setup(model: str) -> bool:
    """FILE.py:FACTORY (or a FILE.py without its factory, refused by the setup loader), not a model name."""
    path, sep, _name = model.rpartition(":")
    return (bool(sep) and path.endswith(".py")) or model.endswith(".py")


def trace_setup(ref: str, workload: WorkloadOptions, *, card: str | None, reserve: str, as_json: bool,
                fragmentation: str | None) -> None:
    """campaign trace FILE.py:FACTORY: the user's own model, traced (memory/trace_module.py)."""
    from ..errors import InputError
    from ..memory.trace_module import plan_module
    from .render import progress_reporter
    from .render.memory import module_plan
    from .workload import option_parameters

    defaults = {p.name: p.default for p in option_parameters(TRACE)}
    for name, value in workload.items():
        if name == "train" and value is False:
            raise InputError(f"--infer: campaign trace {ref} traces a training step of your setup (forward, loss, "
                             "backward, optimizer); drop --infer")
        if name not in SETUP_OPTIONS and name != "train" and value is not None and value != defaults.get(name):
            raise InputError(f"{_flag(name)} does not apply to your own model ({ref}): the setup's model, "
                             "micro-batch and optimizer set the step; change them in the setup and drop the option")
    with progress_reporter("tracing", enabled=not as_json) as tell:
        result = plan_module(ref, card=card, reserve=reserve, progress=tell,
                             expandable_segments=bool(workload.get("expandable_segments")),
                             grads_kept=bool(workload.get("grads_kept")), **o.overheads(fragmentation, None))
    o.emit(result, module_plan, as_json)


def _flag(name: str) -> str:
    """The command-line flag of a workload option ('seq_len' -> '--seq-len', 'train' -> '--train/--infer')."""
    import dataclasses

    from ..memory.workload import Workload

    for f in dataclasses.fields(Workload):
        if f.metadata.get("param", f.name) == name and "flag" in f.metadata:
            return str(f.metadata["flag"])
        for alias, flag, _help in f.metadata.get("aliases", ()):
            if alias == name:
                return str(flag)
    return "--" + name.replace("_", "-")
