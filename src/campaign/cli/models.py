"""`campaign models [MODEL]`: the catalog, or one model's architecture facts and parameter count."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("models", epilog="Example: campaign models qwen3-30b-a3b")(models)


def models(
    model: Annotated[Optional[str], typer.Argument(help="A model to describe; omit to list the catalog.")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="Also count with transformers on the meta device.")] = False,
    as_json: o.Json = False,
) -> None:
    """List the bundled models, or show one model's spec: layers, heads, KV heads, MoE, MLA, windows, params."""
    from ..models.describe import catalog, describe_model

    if model is None:
        o.emit(catalog(), render_catalog, as_json)
    else:
        o.emit(describe_model(model, exact=exact), render_facts, as_json)


def render_catalog(listing) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from ..units import fmt_count
    from .render import console

    specs = listing.specs
    table = Table(title="Bundled models (real config.json files; sources in the catalog's SOURCES.md)",
                  title_justify="left")
    short = [s.name.split("/", 1)[-1] for s in specs]     # every command takes the name without its org
    # the name is what a user copies: never cut it; a narrow terminal drops the type and vocab columns
    wide = console.width >= 100
    cols = ("model", "type", "params", "active", "layers", "heads/kv", "vocab", "attention") if wide else \
        ("model", "params", "active", "layers", "heads/kv", "attention")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "type", "attention") else "right",
                         min_width=max(map(len, short)) if col == "model" else None,
                         no_wrap=col != "attention", overflow="fold")
    for name, s in zip(short, specs):
        cells = {"model": name, "type": s.model_type, "params": fmt_count(s.params),
                 "active": fmt_count(s.active_params) if s.moe else "", "layers": str(s.num_layers),
                 "heads/kv": f"{s.num_heads}/{s.num_kv_heads}", "vocab": f"{s.vocab_size:,}",
                 "attention": _attention(s)}
        table.add_row(*(cells[c] for c in cols))
    console.print(table)


def render_facts(facts) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from ..units import fmt_count
    from .render import console

    spec, published = facts.spec, facts.published or {}
    console.print(f"[bold]{spec.name}[/bold] ({spec.architecture}, {spec.model_type}) from {spec.source}")
    console.print(f"[bold]{spec.params:,}[/bold] parameters ({fmt_count(spec.params)}; {spec.params_method})"
                  + (f", {spec.active_params:,} active per token" if spec.moe else "")
                  + (f"; published: {published.get('params_text')}" if published else ""))
    facts_rows = [("layers", spec.num_layers), ("hidden", spec.hidden_size), ("heads", spec.num_heads),
                  ("KV heads", spec.num_kv_heads), ("head dim", spec.head_dim),
                  ("intermediate", spec.intermediate_size), ("vocab", f"{spec.vocab_size:,}"),
                  ("tied embeddings", spec.tie_embeddings), ("max positions", f"{spec.max_position:,}"),
                  ("attention", _attention(spec)), ("checkpoint dtype", spec.torch_dtype)]
    if spec.moe:
        facts_rows.append(("MoE", f"{spec.moe.num_experts} experts, {spec.moe.experts_per_token} per token, "
                                  f"{spec.moe.moe_layers} MoE layers, expert size {spec.moe.expert_intermediate_size}"))
    if spec.mla:
        facts_rows.append(("MLA", f"kv_lora_rank {spec.mla.kv_lora_rank}, rope {spec.mla.qk_rope_head_dim}"))
    table = Table(show_header=False)
    for k, v in facts_rows:
        table.add_row(k, str(v))
    console.print(table)
    for note in spec.notes:
        console.print(f"[dim]- {note}[/dim]")


def _attention(spec) -> str:  # type: ignore[no-untyped-def]
    if spec.mla:
        return "MLA"
    sliding = [a for a in spec.attention if a.kind == "sliding"]
    kind = "MQA" if spec.num_kv_heads == 1 else "GQA" if spec.num_kv_heads < spec.num_heads else "MHA"
    if sliding:
        return f"{kind}, {len(sliding)}/{spec.num_layers} sliding ({sliding[0].window})"
    return kind
