"""What `campaign memory` and `campaign kv` estimate of each variant: its weight and required bytes with its format,
the cards it fits and the cheapest of them by the hour, and the KV cache by precision (estimated, not measured)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..hardware import all_cards
from ..memory import estimate_memory, fit_cards, make_workload
from ..memory.dtypes import ELEMENT_BYTES
from ..memory.kv import estimate_kv
from ..models.architectures import spec_from_config
from .formats import Format
from .inputs import kv_name
from .result import KVRow
from .setup import QuantSetup


def spec_of(model: Any, s: QuantSetup) -> Any:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None
    try:
        return spec_from_config(config.to_dict(), name=s.name or getattr(config, "_name_or_path", "") or
                                type(model).__name__, source=s.source)
    except Exception:   # an architecture campaign memory does not model: the estimate is unknown, not guessed
        return None


def estimate_weights(spec: Any, f: Format, ref: Format, group_size: int, ctx: int,
                      sequences: int) -> tuple[int | None, int | None, str | None, set[str]]:
    """(weight bytes, required bytes, smallest card that fits, every card that fits) by `campaign memory`'s
    inference estimate with the variant's format. What a quantizer leaves unconverted is counted in the reference
    precision (the estimate keeps it in bf16)."""
    if spec is None:
        return None, None, None, set()
    w = make_workload(mode="infer", dtype=f.memory_dtype, group_size=group_size, seq_len=ctx, batch=sequences)
    est = estimate_memory(spec, w)
    total = 0
    for item in est.items:
        if item.category != "weights":
            continue
        if item.name == "weights kept 16-bit":
            total += int(item.bytes * ELEMENT_BYTES[ref.name] / 2)
        else:
            total += item.bytes
    cards = {c.name: c.memory_bytes for c in all_cards()}
    fits = [fit.card for fit in fit_cards(spec, w, all_cards(), solve=False, estimate=est) if fit.verdict == "fits"]
    return total, est.required_bytes, min(fits, key=lambda c: cards[c]) if fits else None, set(fits)


def cheapest_card(prices: Any, fitting: set[str]) -> tuple[str | None, int | None]:
    """The price file's card with the lowest on-demand price per hour among those the variant fits, and that price
    (cents); (None, None) when none of them is priced by the hour."""
    priced = sorted((c.hourly_cents, c.card) for c in prices.cards if c.card in fitting and c.hourly_cents is not None)
    return (priced[0][1], priced[0][0]) if priced else (None, None)


def kv_rows(spec: Any, names: Sequence[str], ctx: int, sequences: int) -> tuple[KVRow, ...]:
    if spec is None:
        return ()
    rows = []
    for name in names:
        dtype = kv_name(name)
        e = estimate_kv(spec, seq_len=ctx, batch=sequences, dtype=dtype)
        rows.append(KVRow(dtype, e.bytes_per_token, e.bytes))
    return tuple(rows)
