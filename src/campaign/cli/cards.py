"""`campaign cards`: the GPU catalog with memory as the driver reports it."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("cards", epilog="Example: campaign cards --vendor amd")(cards)


def cards(
    vendor: Annotated[Optional[str], typer.Option(help="nvidia or amd.")] = None,
    as_json: o.Json = False,
) -> None:
    """GPUs with usable memory (bytes, GiB and as marketed), vendor/stack, bandwidth and dense bf16 FLOP/s."""
    from ..hardware.cards import card_list

    o.emit(card_list(vendor), render_cards, as_json)


def render_cards(listing) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from .render import console, g

    table = Table(title="GPU cards: memory as the driver reports it (an '80 GB' card is not 80 GiB)",
                  title_justify="left")
    for col, just in (("card", "left"), ("marketed", "right"), ("usable GiB", "right"), ("bytes", "right"),
                      ("stack", "left"), ("TB/s", "right"), ("bf16 TFLOP/s", "right")):
        table.add_column(col, justify=just)
    for c in listing.cards:
        table.add_row(c.name, c.marketed_memory, g(c.memory_bytes), f"{c.memory_bytes:,}", c.stack.upper(),
                      f"{c.bandwidth_bytes_per_s / 1e12:.2f}" if c.bandwidth_bytes_per_s else "-",
                      f"{c.bf16_dense_flops / 1e12:,.0f}" if c.bf16_dense_flops else "no bf16")
    console.print(table)
    console.print("[dim]Dense (no sparsity) bf16 tensor throughput. Sources per card: campaign cards --json.[/dim]")
