"""`campaign kv MODEL`: the KV cache by context, KV heads, sequences and precision, and what fits a card."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("kv", epilog="Example: campaign kv qwen2.5-7b --context 32768 --sequences 8 --kv-dtype fp8 --card l40s")(kv)


def kv(
    model: o.Model,
    context: Annotated[int, typer.Option(help="Tokens per sequence (prompt + output).")] = 4096,
    sequences: Annotated[int, typer.Option(help="Concurrent sequences.")] = 1,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="fp32 | bf16 | fp16 | fp8 | int8.")] = "bf16",
    static: Annotated[bool, typer.Option("--static", help="Preallocate max context x max sequences.")] = False,
    max_context: Annotated[Optional[int], typer.Option("--max-context", help="Static cache length.")] = None,
    max_sequences: Annotated[Optional[int], typer.Option("--max-sequences", help="Static cache batch.")] = None,
    block_size: Annotated[int, typer.Option("--block-size", help="Paged blocks in tokens (vLLM: 16); 1 = none.")] = 1,
    tp: Annotated[int, typer.Option(help="Tensor-parallel cards the KV heads split over.")] = 1,
    card: o.CardOpt = None,
    weights_dtype: Annotated[Optional[str], typer.Option("--dtype", help="Weight storage, for what is left on --card "
                                                          "(default: the checkpoint's own format, as memory --infer; "
                                                          "bf16 for a dense one).")] = None,
    reserve: o.Reserve = "10%",
    fragmentation: o.Fragmentation = None,
    cuda_context: o.CudaContext = None,
    expandable_segments: o.ExpandableSegments = False,
    as_json: o.Json = False,
) -> None:
    """KV cache size; with --card, the longest context and the most sequences that fit after the weights."""
    from ..hardware.cards import find_card
    from ..memory import estimate_kv, estimate_memory, make_workload, max_value
    from ..units import fmt_gib
    from .render.memory import kv as render_kv

    from ..models import load_spec

    spec = load_spec(model)
    est = estimate_kv(spec, context=context, sequences=sequences, dtype=kv_dtype, static=static,
                      max_context=max_context, max_sequences=max_sequences, block_size=block_size, tp=tp)
    data = est.to_dict()
    line = None
    if card:
        # the same full inference estimate as campaign memory --infer, so both commands agree on what fits
        c = find_card(card)
        dtype, group_size = o.weights_format(spec, weights_dtype, inference=True)
        w = make_workload(mode="infer", dtype=dtype, group_size=group_size, kv_dtype=kv_dtype, batch=sequences,
                          seq_len=context, gpus=tp, shard="tp" if tp > 1 else "none",
                          expandable_segments=expandable_segments)
        overheads = o.overheads(fragmentation, cuda_context)
        full = estimate_memory(spec, w, reserve=reserve, **overheads)
        verdict = full.verdict(c.memory_bytes)
        longest = max_value(spec, w, c.memory_bytes, "seq_len", limit=spec.max_position, reserve=reserve, **overheads)
        most = max_value(spec, w, c.memory_bytes, "batch", limit=1 << 20, reserve=reserve, **overheads)
        data["card"] = {"name": c.name, "memory_bytes": c.memory_bytes, "weights_dtype": w.dtype,
                        "required_bytes": full.required_bytes,
                        "verdict": verdict, "fits": verdict == "fits", "max_context": longest,
                        "max_sequences": most}
        line = (f"{c.name}: {verdict} — {fmt_gib(full.required_bytes)} required with {w.dtype} weights, temporaries, context "
                f"and reserve, of {fmt_gib(c.memory_bytes)}; longest context at {sequences} sequence(s): {longest:,}"
                f"{' (the model maximum)' if longest == spec.max_position else ''}; most sequences at {context:,} "
                f"tokens: {most:,}")
    if as_json:
        o.print_json(data)
    else:
        render_kv(est, line)
    if card and not data["card"]["fits"]:
        raise typer.Exit(1)
