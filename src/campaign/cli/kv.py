"""`campaign kv MODEL`: the KV cache by context, KV heads, sequences and precision, and what fits a card."""
from __future__ import annotations

from typing import Annotated

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("kv", epilog="Example: campaign kv qwen2.5-7b --context 32768 --sequences 8 --kv-dtype fp8 "
                "--card l40s")(kv)


KV = "KV cache"  # the help panel of the cache's options (beside common's CARD, OVERHEADS, OUTPUT)


def kv(
    model: o.Model,
    context: Annotated[int, typer.Option(help="Tokens per sequence (prompt + output).", rich_help_panel=KV)] = 4096,
    sequences: Annotated[int, typer.Option(help="Concurrent sequences.", rich_help_panel=KV)] = 1,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="fp32 | bf16 | fp16 | fp8 | int8.",
                                          rich_help_panel=KV)] = "bf16",
    static: Annotated[bool, typer.Option("--static", help="Preallocate max context x max sequences.",
                                         rich_help_panel=KV)] = False,
    max_context: Annotated[int | None, typer.Option("--max-context", help="Static cache length.",
                                                    rich_help_panel=KV)] = None,
    max_sequences: Annotated[int | None, typer.Option("--max-sequences", help="Static cache batch.",
                                                      rich_help_panel=KV)] = None,
    block_size: Annotated[int, typer.Option("--block-size", help="Paged blocks in tokens (vLLM: 16); 1 = none.",
                                            rich_help_panel=KV)] = 1,
    tp: Annotated[int, typer.Option(help="Tensor-parallel cards the KV heads split over.", rich_help_panel=KV)] = 1,
    card: o.CardOpt = None,
    weights_dtype: Annotated[str | None, typer.Option("--dtype", help="Weight storage, for what is left on --card "
                                                       "(default: the checkpoint's own format, as memory --infer; "
                                                       "bf16 for a dense one).", rich_help_panel=o.CARD)] = None,
    reserve: o.Reserve = "10%",
    fragmentation: o.Fragmentation = None,
    cuda_context: o.CudaContext = None,
    expandable_segments: o.ExpandableSegments = False,
    revision: o.Revision = None,
    as_json: o.Json = False,
) -> None:
    """KV cache size; with --card, the longest context and the most sequences that fit after the weights."""
    from ..memory.plan import plan_kv
    from .render.memory import kv as render_kv

    # with --card, the same full inference estimate as campaign memory --infer, so both commands agree on what fits
    spec = o.load_model(model, revision=revision, as_json=as_json)
    est = plan_kv(spec, seq_len=context, batch=sequences, dtype=kv_dtype,
                  static=static, max_seq_len=max_context, max_batch=max_sequences, block_size=block_size, tp=tp,
                  card=card, weights_dtype=weights_dtype, reserve=reserve, expandable_segments=expandable_segments,
                  **o.overheads(fragmentation, cuda_context))
    o.emit(est, render_kv, as_json)
