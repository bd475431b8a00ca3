"""`campaign memory MODEL`: will it fit, on which card, with what margin."""
from __future__ import annotations


import typer

from . import common as o

FEATURED_CARDS = ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB", "A100-40GB", "L40S-48GB", "RTX-A6000-48GB",
                  "RTX-5090-32GB", "RTX-4090-24GB", "L4-24GB", "T4-16GB", "MI300X-192GB")


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
    kv_cache: o.KvCache = "static", new_tokens: o.NewTokens = None,
    all_cards: bool = typer.Option(False, "--all-cards", help="Fit table over every catalog card."),
    no_solve: bool = typer.Option(False, "--no-solve", help="Skip the largest-batch / longest-context solve."),
    as_json: o.Json = False,
) -> None:
    """GPU memory per card for a training step or inference: breakdown, phases, card fit.

    Exit 0 when it fits the --card (or without --card), 1 when it does not fit, 2 on bad input.
    """
    from ..hardware.cards import all_cards as catalog_cards
    from ..hardware.cards import find_card
    from ..memory import estimate_memory, fit_cards
    from ..models import load_spec

    spec = load_spec(model)
    w = o.workload_from(locals(), spec)
    overheads = o.overheads(fragmentation, cuda_context)
    est = estimate_memory(spec, w, reserve=reserve, **overheads)
    if card:
        cards = [find_card(card)]
    elif all_cards:
        cards = list(catalog_cards())
    else:
        cards = [find_card(n) for n in FEATURED_CARDS]
    fits = fit_cards(spec, w, cards, solve=not no_solve, estimate=est, reserve=reserve, **overheads)
    o.emit_estimate(est, fits, card, as_json)
    if card and fits[0].verdict != "fits":
        raise typer.Exit(1)
