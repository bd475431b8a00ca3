"""What compare_quant returns: every variant on the same evaluation data (memory estimated, stored and measured;
quality and its paired test against the reference; guards), the data's digests and the KV cache by precision."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import Check
from ..evaluate.regress import Guard
from ..results import Record, Result

SCHEMA = "campaign.quant/1"


@dataclass(frozen=True)
class DataDigest(Record):
    """A set of batches, named and hashed: sha256 over every tensor's name, dtype, shape and bytes, in order."""

    name: str
    batches: int
    examples: int
    tokens: int
    sha256: str


@dataclass(frozen=True)
class KVRow(Record):
    """The KV cache at one precision, estimated (estimate_kv) for `context` tokens x `sequences`."""

    dtype: str
    bytes_per_token: float
    bytes: int


@dataclass(frozen=True)
class QuantVariant(Record):
    """One variant on the evaluation data. Bytes: estimated (campaign memory's format), stored (counted from the
    tensors the format left), measured (MemoryMeter: allocated at the end of loading; the evaluation's peak).
    delta: quality minus the reference's; p_value: the paired test's (t-test on per-example NLL for perplexity,
    McNemar for classification and extraction); status: reference | pass | flagged (a guard broke).
    required_bytes_estimated: `campaign memory`'s inference estimate for the format at context x sequences (weights,
    KV, activations, CUDA context, reserve); smallest_card: the catalog card with the least memory it fits;
    cheapest_card / hourly_cents: the cheapest card by the hour, among the price file's cards the variant fits
    (campaign budget's price file: --prices, or the bundled example prices)."""

    name: str
    format: str
    library: str
    memory_format: str
    weight_bytes_estimated: int | None
    weight_bytes_stored: int
    quantized_bytes_stored: int
    weight_bytes_measured: int
    peak_bytes_measured: int
    kv_bytes_estimated: int | None
    required_bytes_estimated: int | None
    smallest_card: str | None
    cheapest_card: str | None          # of the price file's cards the variant fits, the cheapest by the hour
    hourly_cents: int | None           # its on-demand price per card-hour (exact cents)
    quality: float
    metrics: dict[str, float]
    delta: float | None
    p_value: float | None
    test: str
    interval: tuple[float, float] | None
    flips: tuple[int, int] | None
    ms_per_token: float | None
    calibration: str | None
    guards: tuple[Guard, ...]
    status: str

    @property
    def flagged(self) -> bool:
        return self.status == "flagged"


@dataclass(frozen=True)
class QuantReport(Result):
    """Every variant on the same evaluation data; one check per guard (guard.<expr>), failed when a variant broke
    it (no guards: no checks, status pass)."""

    model: str
    setup: str
    device: str
    device_name: str
    metric: str
    reference: str
    evaluation: DataDigest
    calibration: DataDigest | None
    context: int
    sequences: int
    kv: tuple[KVRow, ...]
    variants: tuple[QuantVariant, ...]
    guards: tuple[str, ...]
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    @property
    def checks(self) -> tuple[Check, ...]:
        out = []
        expressions = dict.fromkeys([*self.guards, *(g.expression for v in self.variants for g in v.guards)])
        for expression in expressions:
            held = [(v, g) for v in self.variants for g in v.guards if g.expression == expression]
            broken = [(v, g) for v, g in held if not g.passed]
            if broken:
                out.append(Check(f"guard.{expression}", "fail", "; ".join(f"{v.name}: {g.describe()}"
                                                                          for v, g in broken),
                                 "a variant that breaks a guard loses what the reference model is kept for",
                                 "take a variant whose guards hold, or change the guard if the trade is meant"))
            else:
                out.append(Check(f"guard.{expression}", "pass",
                                 f"holds for {', '.join(v.name for v, _ in held) or 'no variant'}"))
        return tuple(out)

    @property
    def flagged(self) -> tuple[QuantVariant, ...]:
        return tuple(v for v in self.variants if v.flagged)
