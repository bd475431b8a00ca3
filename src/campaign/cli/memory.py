"""`campaign memory MODEL`: will it fit, on which card, with what margin."""
from __future__ import annotations


import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("memory", epilog="Example: campaign memory llama-3.1-8b --method qlora --batch 4 --seq-len 2048")(memory)


def memory(
    model: o.Model, train: o.Train = None, method: o.Method = "full", dtype: o.Dtype = None,
    kv_dtype: o.KvDtype = None, group_size: o.GroupSize = 128, double_quant: o.DoubleQuant = True, batch: o.Batch = None, seq_len: o.SeqLen = None,
    context: o.Context = None, sequences: o.Sequences = None, optimizer: o.Optimizer = None, optimizer_impl: o.OptimizerImpl = "foreach",
    mixed_precision: o.Mixed = False, grad_checkpointing: o.Ckpt = False, attention: o.Attention = "sdpa",
    lora_rank: o.LoraRank = 16, lora_targets: o.LoraTargets = "all-linear", gpus: o.Gpus = 1,
    shard: o.Shard = "none", prefill_chunk: o.PrefillChunk = 8192, card: o.CardOpt = None, reserve: o.Reserve = "10%",
    fragmentation: o.Fragmentation = None, cuda_context: o.CudaContext = None,
    expandable_segments: o.ExpandableSegments = False, grad_as_bucket_view: o.GradBucketView = False,
    kv_cache: o.KvCache = "static", new_tokens: o.NewTokens = None, grads_kept: o.GradsKept = False,
    softmax_saves_input: o.SoftmaxInput = False, bnb_saves_input: o.BnbInput = False,
    all_cards: bool = typer.Option(False, "--all-cards", help="Fit table over every catalog card."),
    no_solve: bool = typer.Option(False, "--no-solve", help="Skip the largest-batch / longest-context solve."),
    as_json: o.Json = False,
) -> None:
    """GPU memory per card for a training step or inference: breakdown, phases, card fit.

    Exit 0 when it fits the --card (or without --card), 1 when it does not fit, 2 on bad input.
    """
    from ..memory.plan import plan_memory
    from ..models import load_spec
    from .render.memory import plan as render_plan

    spec = load_spec(model)
    w = o.workload_from(spec, train=train, method=method, dtype=dtype, kv_dtype=kv_dtype, group_size=group_size,
                        double_quant=double_quant, batch=batch, seq_len=seq_len, context=context, sequences=sequences,
                        optimizer=optimizer, optimizer_impl=optimizer_impl, mixed_precision=mixed_precision,
                        grad_checkpointing=grad_checkpointing, attention=attention, lora_rank=lora_rank,
                        lora_targets=lora_targets, gpus=gpus, shard=shard, prefill_chunk=prefill_chunk,
                        expandable_segments=expandable_segments, grad_as_bucket_view=grad_as_bucket_view,
                        kv_cache=kv_cache, new_tokens=new_tokens, grads_kept=grads_kept,
                        softmax_saves_input=softmax_saves_input, bnb_saves_input=bnb_saves_input)
    result = plan_memory(spec, w, card=card, all_cards=all_cards, solve=not no_solve, reserve=reserve,
                         **o.overheads(fragmentation, cuda_context))
    o.emit(result, render_plan, as_json)
