"""The bundled card catalog (cards.json): usable memory in bytes as CUDA/HIP report it to torch."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import InputError, UnknownNameError
from ..results import Information
from ..units import parse_size


@dataclass(frozen=True)
class Card:
    """A GPU model. `memory_bytes` is what CUDA (HIP) reports to torch as the device's total memory
    (torch.cuda.get_device_properties().total_memory): the most the CUDA context and PyTorch's allocator together can
    get, a few hundred MiB below nvidia-smi's board total (`smi_bytes`) on NVIDIA cards (T4: 14,912 of 15,360 MiB),
    equal to rocm-smi's on AMD ones; not the marketed GB. Where no torch figure is published for the card, one derived
    below the board total, as `memory_source` says."""

    name: str
    vendor: str
    stack: str
    memory_bytes: int
    marketed_memory: str
    bandwidth_bytes_per_s: int | None
    bf16_dense_flops: int | None
    aliases: tuple[str, ...] = ()
    typical_rental: bool = False
    memory_source: str = ""
    smi_bytes: int | None = None
    smi_source: str = ""
    source: str = ""
    year: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=1)
def all_cards() -> tuple[Card, ...]:
    """Every card in the catalog, in file order."""
    data = json.loads((Path(__file__).with_name("cards.json")).read_text(encoding="utf-8"))
    fields = Card.__dataclass_fields__
    cards = []
    for c in data["cards"]:
        given: dict[str, Any] = {k: (tuple(v) if k == "aliases" else v) for k, v in c.items() if k in fields}
        cards.append(Card(**given))
    return tuple(cards)


def find_card(name: str) -> Card:
    """A card by name or alias (case-insensitive), or a custom size: 'custom:24GiB' / a bare size like '80GB'.

    Raises:
        UnknownNameError: with close matches.
    """
    key = name.strip().lower()
    for card in all_cards():
        if key == card.name.lower() or key in (a.lower() for a in card.aliases):
            return card
    size_text = key.split(":", 1)[1] if key.startswith("custom:") else key
    if size_text[:1].isdigit():
        size = parse_size(size_text, what="card memory")
        if size <= 0:
            raise InputError(f"card memory {size_text!r} must be more than 0; give e.g. custom:24GiB")
        return Card(f"custom-{size_text}", "unknown", "cuda", size, size_text, None, None)
    known = [c.name for c in all_cards()] + [a for c in all_cards() for a in c.aliases]
    raise UnknownNameError("card", name, known, "See campaign cards, or give a size such as custom:24GiB.")


@dataclass(frozen=True)
class CardList(Information):
    """What `campaign cards` shows: the cards of one vendor (or all), as the driver reports their memory."""

    cards: tuple[Card, ...]
    vendor: str | None = None
    schema: str = "campaign.cards/1"


def card_list(vendor: str | None = None) -> CardList:
    """The catalog's cards, of one vendor ('nvidia' or 'amd') when given.

    Raises:
        InputError: an unknown vendor.
    """
    if vendor is not None and vendor.lower() not in ("nvidia", "amd"):
        raise InputError(f"vendor {vendor!r} is unknown; choose nvidia or amd")
    cards = all_cards()
    return CardList(tuple(c for c in cards if vendor is None or c.vendor == vendor.lower()), vendor)
