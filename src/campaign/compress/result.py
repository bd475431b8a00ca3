"""What compare_quant returns: every variant on the same evaluation data (memory estimated, stored and measured;
quality and its paired test against the reference; guards), the data's digests and the KV cache by precision."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import Check
from ..evaluate.equivalence import Equivalence
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
    """The KV cache at one precision: its bytes estimated (estimate_kv) for `context` tokens x `sequences`, and
    where the model's key and value projections could be found, its effect on quality measured on the same
    evaluation data: the reference model with K and V rounded to this precision (`measured` says how; empty when
    not measured), its quality, the change against the reference and the paired test's p-value."""

    dtype: str
    bytes_per_token: float
    bytes: int
    measured: str = ""
    quality: float | None = None
    delta: float | None = None
    p_value: float | None = None


@dataclass(frozen=True)
class CalibrationComparison(Record):
    """A calibrated format fitted to two calibration sets, compared on the evaluation examples: its quality after
    each, the difference (second - first) and the paired test's p-value (as against the reference)."""

    format: str
    first: str
    second: str
    quality_first: float
    quality_second: float
    delta: float
    p_value: float | None
    test: str


@dataclass(frozen=True)
class QuantVariant(Record):
    """One variant on the evaluation data. Bytes: estimated (campaign memory's format), stored (counted from the
    tensors the format left), measured (MemoryMeter: allocated at the end of loading; the evaluation's peak).
    delta: quality minus the reference's; p_value: the paired test's (t-test on per-example NLL for perplexity,
    McNemar for classification and extraction; None when the quality is not finite); status: reference | pass |
    flagged (a guard broke, or its quality is NaN or inf); equivalence: with a stated margin, TOST that the
    variant is within +/- margin of the reference (per-example mean NLL for perplexity, paired correctness for
    classification and extraction; evaluate/equivalence.py).
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
    equivalence: Equivalence | None = None
    finite: bool = True                # its quality and every per-example outcome are finite (not NaN or inf)

    @property
    def flagged(self) -> bool:
        return self.status == "flagged"


@dataclass(frozen=True)
class QuantReport(Result):
    """Every variant on the same evaluation data. Checks: quant.finite (every variant's quality, the reference's
    included, is a finite number: a NaN or inf model fails, with or without guards), one per guard (guard.<expr>),
    failed when a variant broke it, and with a margin equivalence.within_margin (failed when a variant is not shown
    within +/- margin of the reference)."""

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
    margin: float | None = None
    calibrations: tuple[DataDigest, ...] = ()          # every calibration set, when the setup names several
    calibration_comparisons: tuple[CalibrationComparison, ...] = ()
    schema: str = SCHEMA

    @property
    def checks(self) -> tuple[Check, ...]:
        out = [self._finite()]
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
        if self.margin is not None:
            out.append(self._equivalence())
        return tuple(out)

    def _finite(self) -> Check:
        bad = [v for v in self.variants if not v.finite]
        if not bad:
            return Check("quant.finite", "pass", f"every variant's {self.metric} is a finite number")
        seen = "; ".join(f"{v.name}{' (the reference)' if v.status == 'reference' else ''}: {self.metric} "
                         f"{v.quality}" for v in bad)
        return Check("quant.finite", "fail", seen,
                     "a model whose outputs are NaN or inf has no quality: its change and p-value mean nothing, and "
                     "a comparison against a NaN reference compares nothing",
                     "find the NaN or inf (a weight, an overflow: fp16 overflows where bf16 and fp32 do not) and "
                     "compare again")

    def _equivalence(self) -> Check:
        tested = [v for v in self.variants if v.status != "reference"]
        missing = [v.name for v in tested if v.equivalence is None]
        if missing:
            return Check("equivalence.within_margin", "skipped", f"not tested for {', '.join(missing)}: its "
                         f"{self.metric} is not finite", "equivalence needs finite per-example scores",
                         "fix the NaN or inf first (quant.finite)")
        out = [v for v in tested if v.equivalence is not None and not v.equivalence.equivalent]
        seen = "; ".join(f"{v.name}: {v.equivalence.checks[0].seen}" for v in tested if v.equivalence is not None)
        if out:
            return Check("equivalence.within_margin", "fail", seen,
                         f"{', '.join(v.name for v in out)} not shown within +/-{self.margin:g} of the reference: the "
                         "data cannot rule out a larger difference, so 'the same quality' is not established",
                         "more evaluation examples narrow the interval; or state a margin the decision can live with")
        return Check("equivalence.within_margin", "pass", seen or "no variant besides the reference")

    @property
    def flagged(self) -> tuple[QuantVariant, ...]:
        return tuple(v for v in self.variants if v.flagged)
