"""The renderers of the catalogs: models (the list, one model's facts), cards, and the guide."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ...units import fmt_count
from . import console, gib

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from ...guide import GuideMap
    from ...hardware.cards import CardList
    from ...models.describe import Catalog, ModelFacts
    from ...models.spec import ModelSpec


def catalog(listing: Catalog) -> None:
    specs = listing.specs
    table = Table(title="Bundled models (real config.json files; sources in the catalog's SOURCES.md)",
                  title_justify="left")
    short = [s.name.split("/", 1)[-1] for s in specs]     # every command takes the name without its org
    names = short + [m.name.split("/", 1)[-1] for m in listing.meta_device]
    # the name is what a user copies: never cut it; a narrow terminal drops the type and vocab columns
    wide = console.width >= 100
    cols = ("model", "type", "params", "active", "layers", "heads/kv", "vocab", "attention") if wide else \
        ("model", "params", "active", "layers", "heads/kv", "attention")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "type", "attention") else "right",
                         min_width=max(map(len, names)) if col == "model" else None,
                         no_wrap=col != "attention", overflow="fold")
    rows = {}
    for name, s in zip(short, specs, strict=True):
        rows[s.name] = {"model": name, "type": s.model_type, "params": fmt_count(s.params),
                        "active": fmt_count(s.active_params) if s.moe else "", "layers": str(s.num_layers),
                        "heads/kv": f"{s.num_heads}/{s.num_kv_heads}", "vocab": f"{s.vocab_size:,}",
                        "attention": _attention(s)}
    for m in listing.meta_device:  # counted on the meta device only when named: `campaign models NAME`
        rows[m.name] = dict.fromkeys(cols, "") | {"model": m.name.split("/", 1)[-1], "type": m.model_type,
                                                  "params": "*"}
    for full in sorted(rows, key=str.lower):
        table.add_row(*(rows[full][c] for c in cols))
    console.print(table)
    if listing.meta_device:
        console.print("* counted by transformers on the meta device: campaign models NAME (vision-language, "
                      "encoder-decoder and state-space models; memory refuses those its formulas do not model)")


def facts(described: ModelFacts) -> None:
    spec, published = described.spec, described.published or {}
    console.print(f"[bold]{spec.name}[/bold] ({spec.architecture}, {spec.model_type}) from {spec.source}")
    console.print(f"[bold]{spec.params:,}[/bold] parameters ({fmt_count(spec.params)}; {spec.params_method})"
                  + (f", {spec.active_params:,} active per token" if spec.moe else "")
                  + (f"; published: {published.get('params_text')}" if published else ""))
    facts_rows = [("layers", spec.num_layers), ("hidden", spec.hidden_size), ("heads", spec.num_heads),
                  ("KV heads", spec.num_kv_heads), ("head dim", spec.head_dim),
                  ("intermediate", spec.intermediate_size), ("vocab", f"{spec.vocab_size:,}"),
                  ("tied embeddings", spec.tie_embeddings), ("max positions", f"{spec.max_position:,}"),
                  ("attention", _attention(spec)), ("checkpoint dtype", spec.torch_dtype)]
    if not spec.num_kv_heads:  # no attention heads in the config (Mamba): no head rows to show
        facts_rows = [(k, v) for k, v in facts_rows if k not in ("heads", "KV heads", "head dim")]
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


def _attention(spec: ModelSpec) -> str:
    if not spec.num_kv_heads:
        return "none in the config"
    if spec.mla:
        return "MLA"
    sliding = [a for a in spec.attention if a.kind == "sliding"]
    kind = "MQA" if spec.num_kv_heads == 1 else "GQA" if spec.num_kv_heads < spec.num_heads else "MHA"
    if sliding:
        return f"{kind}, {len(sliding)}/{spec.num_layers} sliding ({sliding[0].window})"
    return kind


def cards(listing: CardList) -> None:
    table = Table(title="GPU cards: memory as CUDA reports it to torch (an '80 GB' card is not 80 GiB)",
                  title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("card", "left"), ("marketed", "right"), ("usable GiB", "right"), ("bytes", "right"), ("stack", "left"),
        ("TB/s", "right"), ("bf16 TFLOP/s", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for c in listing.cards:
        table.add_row(c.name, c.marketed_memory, gib(c.memory_bytes), f"{c.memory_bytes:,}", c.stack.upper(),
                      f"{c.bandwidth_bytes_per_s / 1e12:.2f}" if c.bandwidth_bytes_per_s else "-",
                      f"{c.bf16_dense_flops / 1e12:,.0f}" if c.bf16_dense_flops else "no bf16")
    console.print(table)
    console.print("[dim]Dense (no sparsity) bf16 tensor throughput. Sources per card: campaign cards --json.[/dim]")


def guide(g: GuideMap) -> None:
    console.print("[bold]What question is blocking you today?[/bold] From the first load to the checkpoints: "
                  "estimate, measure, and keep results you can use.\n")
    for q in g.questions:
        console.print(f"[bold]{q.number}. {q.question}[/bold] [dim]({q.outcome})[/dim]")
        for s in q.steps:
            built = s.command in g.built
            mark = "" if built else " [dim](planned)[/dim]"
            style = "cyan" if built else "dim"
            console.print(f"   [{style}]campaign {s.command:<8}[/{style}] {s.does}{mark}")
        console.print()
