"""`campaign cards`: the GPU catalog with memory as CUDA reports it to torch."""
from __future__ import annotations

from typing import Annotated

import typer

from . import common as o


def register(app: typer.Typer) -> None:
    app.command("cards", epilog="Example: campaign cards --vendor amd")(cards)


def cards(
    vendor: Annotated[str | None, typer.Option(help="nvidia or amd.")] = None,
    as_json: o.Json = False,
) -> None:
    """GPUs with usable memory (bytes, GiB and as marketed), vendor/stack, bandwidth and dense bf16 FLOP/s."""
    from ..hardware.cards import card_list
    from .render.models import cards as render_cards

    o.emit(card_list(vendor), render_cards, as_json)
