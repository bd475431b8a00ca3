"""Compare quantization variants on the same evaluation data: `compare_quant(setup, formats=...)`.

Each variant (the reference precision, then each weight format) is built from the reference model, measured with
the project's protocol (memory.measure.MemoryMeter: a 'load' phase, then an 'evaluate' phase) and evaluated on the
setup's batches, which are hashed before and after each variant so every variant provably saw the same data. Its
weight bytes are estimated with `campaign memory`'s formats (estimate_memory with the variant's dtype), counted from
the tensors the format left (data, scales, zero points) and measured (allocated at the end of the load phase). The
quality difference against the reference is tested on per-example outcomes: for perplexity a paired t-test on each
example's mean token NLL, for classification and extraction `campaign regress` (McNemar, per-class deltas) on the
predictions; guards use regress's syntax, and a variant that breaks one is flagged. The KV cache by precision is an
estimate (estimate_kv), not measured.
"""
from __future__ import annotations

import copy
import csv
import gc
import hashlib
import io
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import Check
from ..errors import InputError, MissingDependencyError
from ..evaluate.regress import Guard, evaluate_guards
from ..results import Record, Result
from .formats import Format, apply, available, machine, parse_format, refusal, stored_bytes, torch_dtype
from .inputs import check_inputs, guard_metric, kv_name
from ..train.setup import first_line
from .setup import QuantSetup, load_quant_setup

SCHEMA = "campaign.quant/1"
LATENCY_REPEATS = 5


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


def compare_quant(setup: str | Callable[[], Any] | Mapping[str, Any] | QuantSetup, *,
                  formats: Sequence[str] | None = None, reference: str | None = None, guards: Sequence[str] = (),
                  group_size: int = 128, context: int | None = None, sequences: int = 1,
                  kv_dtypes: Sequence[str] | None = None, confidence: float = 0.95,
                  prices: str | Path | None = None,
                  progress: Callable[[str], None] | None = None) -> QuantReport:
    """Build, measure and evaluate the reference and each format on the setup's evaluation batches.

    Args:
        setup: 'FILE.py:FUNCTION', a function, a dict or a QuantSetup (see compress/setup.py).
        formats: the variants after the reference (default: every format this machine can apply: int8, int4 on a
            CPU; fp8, nf4, bnb-int8 too on a GPU that runs them; awq-int8 when the setup gives calibration
            batches); a reference precision listed is a variant too.
        reference: fp32 | bf16 | fp16 (default: the model's own precision).
        guards: what must not get worse, as `campaign regress --guard` takes them ('perplexity<=0.05',
            'f1[refund]>=-0.01'), applied to each variant against the reference.
        group_size: input columns per scale of int4.
        context, sequences: the KV cache estimate's tokens per sequence (default: the longest evaluation row) and
            concurrent sequences.
        kv_dtypes: KV cache precisions estimated (default: the reference's, fp8, int8).
        prices: campaign budget's price file (default: the bundled example prices): each variant's cheapest
            card by the hour among those it fits.
    Raises:
        InputError: a format this machine cannot run, calibration missing for a calibrated format, evaluation data
            that changed between variants, a prediction count that differs from the examples, a bad guard.
    """
    from .formats import quiet_torchao

    with quiet_torchao():   # transformers imports torchao when it is installed, as the setup builds its model
        return _compare(setup, formats=formats, reference=reference, guards=guards, group_size=group_size,
                        context=context, sequences=sequences, kv_dtypes=kv_dtypes, confidence=confidence, prices=prices,
                        progress=progress)


def _compare(setup: Any, *, formats: Sequence[str] | None, reference: str | None, guards: Sequence[str],
             group_size: int, context: int | None, sequences: int, kv_dtypes: Sequence[str] | None,
             confidence: float, prices: str | Path | None, progress: Callable[[str], None] | None) -> QuantReport:
    tell = progress or (lambda _msg: None)
    inputs = check_inputs(formats=formats, reference=reference, guards=guards, group_size=group_size,
                          context=context, sequences=sequences, kv_dtypes=kv_dtypes, confidence=confidence,
                          prices=prices)
    guards = inputs.guards
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    tell(f"building the setup{f' ({setup})' if isinstance(setup, str) else ''}")
    s = load_quant_setup(setup)
    for g in guards:                                       # the setup's metric is known now
        guard_metric(g, s.metric)
    here = inputs.machine or machine()
    device = here["device"]
    default = [*available(here), *(["awq-int8"] if s.calibration else [])]   # calibrated: with calibration only
    chosen = list(inputs.formats) if inputs.formats is not None else [parse_format(f) for f in default]
    for f in chosen:              # every refusal before any model is loaded (a reference precision has none)
        why = refusal(f, here, calibration=s.calibration is not None)
        if why:
            raise InputError(why)
    examples = _examples(s)
    tell("the reference model")
    model = _reference_model(s, inputs.reference)
    ref_fmt = inputs.reference or parse_format(_precision_of(model))
    variants = [ref_fmt] + [f for f in dict.fromkeys(chosen) if f != ref_fmt]
    model = model.to(torch_dtype(ref_fmt.name)).eval()
    evaluation = digest(s.batches, "evaluation")
    calibration = digest(s.calibration, s.calibration_name or "calibration (unnamed)") if s.calibration else None
    spec = _spec(model, s)
    lengths = [int(b["input_ids"].shape[-1]) for b in s.batches if "input_ids" in b]
    ctx = context if context is not None else max(lengths, default=0)
    if context is None and ctx <= 0:
        raise InputError("give --context: the evaluation batches carry no input_ids to take it from")
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx <= 0:
        raise InputError(f"context must be a positive integer (tokens per sequence), got {ctx!r}")
    compute = "fp32" if ref_fmt.name == "fp32" else ref_fmt.name
    kv_names = list(inputs.kv_dtypes) if inputs.kv_dtypes else list(dict.fromkeys([compute, "fp8", "int8"]))
    kv = _kv_rows(spec, kv_names, ctx, sequences)

    outcomes: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for n, f in enumerate(variants, 1):
        tell(f"variant {n}/{len(variants)}: {f.name}{' (reference)' if f is ref_fmt else ''}, load and evaluate on "
             f"{device}")
        row = _run_variant(f, model, s, examples, device=device, group_size=group_size)
        after = digest(s.batches, "evaluation")
        if after.sha256 != evaluation.sha256:
            raise InputError(f"the evaluation batches changed while variant {f.name} was evaluated (sha256 "
                             f"{evaluation.sha256[:12]} -> {after.sha256[:12]}); every variant must see the same "
                             "data: do not modify the batches in predict")
        outcomes[f.name] = row.pop("outcomes")
        rows.append(row)

    reference_out = outcomes[ref_fmt.name]
    # each variant's KV cache at the reference's compute precision (weight formats leave the cache as it is)
    kv_here = next((k.bytes for k in kv if k.dtype == compute), None)
    if kv_here is None and spec is not None:
        kv_here = _kv_rows(spec, [compute], ctx, sequences)[0].bytes
    tell("paired tests against the reference, memory estimates")
    price_file = inputs.prices
    built = []
    for f, row in zip(variants, rows):
        est, required, card, fitting = _estimate_weights(spec, f, ref_fmt, group_size, ctx, sequences)
        cheapest, hourly = cheapest_card(price_file, fitting)
        if f is ref_fmt:
            quality, metrics = _quality(s, reference_out)
            test = {"delta": None, "p": None, "test": "reference", "interval": None, "flips": None, "guards": ()}
        else:
            quality, metrics = _quality(s, outcomes[f.name])
            test = _paired(s, reference_out, outcomes[f.name], examples, guards, ref_fmt.name, f.name, confidence)
        status = "reference" if f is ref_fmt else ("flagged" if any(not g.passed for g in test["guards"]) else "pass")
        built.append(QuantVariant(
            name=f.name, format=f.description, library=f.library, memory_format=f.memory_dtype,
            weight_bytes_estimated=est, weight_bytes_stored=row["stored"], quantized_bytes_stored=row["quantized"],
            weight_bytes_measured=row["measured"], peak_bytes_measured=row["peak"], kv_bytes_estimated=kv_here,
            required_bytes_estimated=required, smallest_card=card,
            cheapest_card=cheapest, hourly_cents=hourly,
            quality=quality, metrics=metrics, delta=test["delta"], p_value=test["p"], test=test["test"],
            interval=test["interval"], flips=test["flips"], ms_per_token=row["ms_per_token"],
            calibration=calibration.sha256 if (calibration and f.calibrated) else None, guards=test["guards"],
            status=status))
    notes = _notes(built, guards, device, spec, ref_fmt, calibration, evaluation.sha256)
    if any(v.cheapest_card for v in built):
        notes.append(f"prices per card-hour from {'the bundled EXAMPLE price file (' + price_file.date + ')' if price_file.example else price_file.path}"
                     "; --prices FILE gives yours (campaign budget's format)")
    return QuantReport(
        model=s.name or (spec.name if spec else type(model).__name__), setup=s.source, device=device,
        device_name=here["name"], metric=s.metric, reference=ref_fmt.name, evaluation=evaluation,
        calibration=calibration, context=ctx, sequences=sequences, kv=kv, variants=tuple(built),
        guards=tuple(guards), notes=tuple(notes))


# ---------------------------------------------------------------------------------------------- the variants

def _reference_model(s: QuantSetup, reference: Format | None) -> Any:
    import torch

    model = s.model
    if isinstance(model, (str, Path)):
        from transformers import AutoModelForCausalLM

        dtype = torch_dtype(reference.name) if reference else "auto"
        model = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype)
    elif callable(model) and not isinstance(model, torch.nn.Module):
        model = model()
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{s.source}: model is a {type(model).__name__}, not a torch.nn.Module")
    return model


def _precision_of(model: Any) -> str:
    import torch

    for p in model.parameters():
        if p.is_floating_point():
            return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(p.dtype, "fp32")
    return "fp32"


def _run_variant(f: Format, reference: Any, s: QuantSetup, examples: list[str], *, device: str,
                 group_size: int) -> dict[str, Any]:
    """Load (copy, cast, move, quantize) and evaluate one variant under its own MemoryMeter; then time it."""
    import torch

    from ..memory.measure import MemoryMeter

    meter = MemoryMeter(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0   # a fresh CPU meter starts at zero
    with meter.around(f.name):
        with meter.phase("load"):
            variant = copy.deepcopy(reference).to(device)
            apply(f, variant, keep=s.keep, group_size=group_size, device=device,
                  calibration=s.calibration if f.calibrated else None)
        with meter.phase("evaluate"), torch.no_grad():
            outcomes = _outcomes(variant, s, examples, device)
    measured = meter.result()
    load, evaluate = measured.phases[0], measured.phases[1]
    counted = stored_bytes(variant)
    with torch.no_grad():
        ms = _latency(variant, s, device)
    del variant
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"outcomes": outcomes, "stored": counted["quantized"] + counted["dense"], "quantized": counted["quantized"],
            "measured": load.allocated_bytes - before, "peak": max(load.peak_allocated_bytes, evaluate.peak_allocated_bytes),
            "ms_per_token": ms}


def _to(batch: Mapping[str, Any], device: str) -> dict[str, Any]:
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items()}


def _rows(batch: Mapping[str, Any]) -> int:
    for v in batch.values():
        if hasattr(v, "shape") and len(v.shape):
            return int(v.shape[0])
    raise InputError("an evaluation batch holds no tensor to count its rows from; give tensors (input_ids, ...)")


def _tokens(batch: Mapping[str, Any]) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    if "input_ids" in batch:
        return int(batch["input_ids"].numel())
    return _rows(batch)


def _examples(s: QuantSetup) -> list[str]:
    n = sum(_rows(b) for b in s.batches)
    if s.ids is None:
        return [str(i) for i in range(n)]
    ids = [str(i) for i in s.ids]
    if len(ids) != n or len(set(ids)) != n:
        raise InputError(f"{s.source}: ids must be {n} unique values, one per example in batch order; got "
                         f"{len(ids)} ({len(set(ids))} distinct)")
    return ids


def _outcomes(model: Any, s: QuantSetup, examples: list[str], device: str) -> list[Any]:
    """Per example in order: (summed NLL, scored tokens) for perplexity, else the prediction."""
    out: list[Any] = []
    for b in s.batches:
        if s.metric == "perplexity":
            out.extend(_nll(model, b, device))
        else:
            rows = _rows(b)
            try:
                preds = list(s.predict(model, _to(b, device)))  # type: ignore[misc]
            except InputError:
                raise
            except Exception as e:
                raise InputError(f"{s.source}: predict raised {type(e).__name__}: {first_line(e)}") from None
            if len(preds) != rows:
                raise InputError(f"{s.source}: predict returned {len(preds)} predictions for a batch of {rows} rows; "
                                 "the evaluation sets would differ between variants: return one per row")
            out.extend(_scalar(p) for p in preds)
    if len(out) != len(examples):
        raise InputError(f"{len(out)} outcomes for {len(examples)} examples; the evaluation sets differ")
    return out


def _scalar(value: Any) -> Any:
    """A one-element tensor or a numpy scalar as the Python value it holds; anything else as it is."""
    if hasattr(value, "item") and (not hasattr(value, "numel") or value.numel() == 1) and \
            getattr(value, "ndim", 0) in (0, 1):
        return value.item()
    return value


def _nll(model: Any, batch: Mapping[str, Any], device: str) -> list[tuple[float, int]]:
    import torch

    b = _to(batch, device)
    labels = b.get("labels", b["input_ids"]).clone()
    if "labels" not in b and "attention_mask" in b:
        labels[b["attention_mask"] == 0] = -100
    inputs = {k: v for k, v in b.items() if k != "labels"}
    logits = model(**inputs).logits.float()
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(shift_logits.transpose(1, 2), shift_labels, ignore_index=-100,
                                            reduction="none")
    mask = shift_labels != -100
    sums, counts = (nll * mask).sum(1).tolist(), mask.sum(1).tolist()
    if min(counts) == 0:
        raise InputError("an evaluation row has no scored token (labels all -100 after the shift); drop it or "
                         "unmask its text")
    return [(float(x), int(c)) for x, c in zip(sums, counts)]


def _latency(model: Any, s: QuantSetup, device: str) -> float | None:
    """Milliseconds per input token of the first batch's forward (or predict): the fastest of 5 after a warm-up
    (the least disturbed by other work on the machine)."""
    import torch

    b = _to(s.batches[0], device)
    run = (lambda: model(**{k: v for k, v in b.items() if k != "labels"})) if s.metric == "perplexity" \
        else (lambda: s.predict(model, b))  # type: ignore[misc]
    run()
    times = []
    for _ in range(LATENCY_REPEATS):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * min(times) / max(1, _tokens(s.batches[0]))


# -------------------------------------------------------------------------------------------- quality, tests

def _quality(s: QuantSetup, out: list[Any]) -> tuple[float, dict[str, float]]:
    if s.metric == "perplexity":
        nll = sum(x for x, _ in out) / sum(c for _, c in out)
        return math.exp(nll), {"perplexity": math.exp(nll), "nll": nll}
    rep = _prediction_report(s, out)
    metrics = rep.metrics()
    return float(rep.accuracy), dict(metrics)


def _gold(s: QuantSetup) -> list[Any]:
    if s.gold is not None:
        return list(s.gold)
    out: list[Any] = []
    for b in s.batches:
        out.extend(_scalar(x) for x in b["labels"])
    return out


def _prediction_set(s: QuantSetup, out: list[Any], examples: list[str], label: str) -> Any:
    from ..evaluate.predictions import Prediction, PredictionSet

    gold = _gold(s)
    if len(gold) != len(examples):
        raise InputError(f"{s.source}: {len(gold)} gold values for {len(examples)} examples; give one per example")
    preds = tuple(Prediction(i, g, p, n + 1) for n, (i, g, p) in enumerate(zip(examples, gold, out)))
    return PredictionSet(f"<{label}>", "", preds)


def _prediction_report(s: QuantSetup, out: list[Any]) -> Any:
    from ..evaluate.analysis import analyze_classification
    from ..evaluate.extraction import analyze_extraction

    ps = _prediction_set(s, out, [str(i) for i in range(len(out))], "variant")
    if s.metric == "classification":
        return analyze_classification(ps)
    return analyze_extraction(ps, schema=s.schema, required=s.required)


def _paired(s: QuantSetup, ref: list[Any], var: list[Any], examples: list[str], guards: Sequence[str],
            ref_name: str, var_name: str, confidence: float) -> dict[str, Any]:
    if s.metric == "perplexity":
        from ..evaluate.stats import paired_t

        d = [x / c - y / k for (x, c), (y, k) in zip(var, ref)]          # per-example mean NLL, variant - ref
        t = paired_t(d, confidence=confidence)
        base, cand = _quality(s, ref)[1], _quality(s, var)[1]
        checked = evaluate_guards(guards, base, cand)
        interval = (t.ci_low, t.ci_high) if t.ci_low is not None and t.ci_high is not None else None
        return {"delta": cand["perplexity"] - base["perplexity"], "p": t.p_value,
                "test": f"paired t on per-example NLL ({len(d)} examples)", "interval": interval, "flips": None,
                "guards": checked}
    from ..evaluate.regress import regress

    rep = regress(_prediction_set(s, ref, examples, ref_name), _prediction_set(s, var, examples, var_name),
                  task=s.metric, guards=guards, schema=s.schema, required=s.required)
    return {"delta": rep.accuracy_candidate - rep.accuracy_baseline, "p": rep.mcnemar.p_value,
            "test": f"McNemar ({rep.mcnemar.method})", "interval": None,
            "flips": (len(rep.right_to_wrong), len(rep.wrong_to_right)), "guards": rep.guards}


# ------------------------------------------------------------------------------------------ memory estimates

def _spec(model: Any, s: QuantSetup) -> Any:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None
    from ..models.architectures import spec_from_config

    try:
        return spec_from_config(config.to_dict(), name=s.name or getattr(config, "_name_or_path", "") or
                                type(model).__name__, source=s.source)
    except Exception:   # an architecture campaign memory does not model: the estimate is unknown, not guessed
        return None


def _estimate_weights(spec: Any, f: Format, ref: Format, group_size: int, ctx: int,
                      sequences: int) -> tuple[int | None, int | None, str | None, set[str]]:
    """(weight bytes, required bytes, smallest card that fits, every card that fits) by `campaign memory`'s
    inference estimate with the
    variant's format. What a quantizer leaves unconverted is counted in the reference precision (the estimate keeps
    it in bf16)."""
    if spec is None:
        return None, None, None, set()
    from ..hardware import all_cards
    from ..memory import estimate_memory, fit_cards, make_workload
    from ..memory.dtypes import ELEMENT_BYTES

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


def _kv_rows(spec: Any, names: Sequence[str], ctx: int, sequences: int) -> tuple[KVRow, ...]:
    if spec is None:
        return ()
    from ..memory.kv import estimate_kv

    rows = []
    for name in names:
        dtype = kv_name(name)
        e = estimate_kv(spec, seq_len=ctx, batch=sequences, dtype=dtype)
        rows.append(KVRow(dtype, e.bytes_per_token, e.bytes))
    return tuple(rows)


def digest(batches: Sequence[Mapping[str, Any]] | None, name: str) -> DataDigest:
    """Name, counts and sha256 of a list of batches (tensor names, dtypes, shapes and bytes, in order)."""
    import torch

    h = hashlib.sha256()
    examples = tokens = 0
    for b in batches or ():
        examples += _rows(b)
        tokens += _tokens(b)
        for key in sorted(b):
            v = b[key]
            h.update(key.encode())
            if hasattr(v, "detach"):
                t = v.detach().cpu().contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            else:
                h.update(repr(v).encode())
    return DataDigest(name, len(batches or ()), examples, tokens, h.hexdigest())


def _notes(variants: list[QuantVariant], guards: Sequence[str], device: str, spec: Any, ref: Format,
           calibration: DataDigest | None, evaluation_sha: str) -> list[str]:
    notes = []
    names = {v.name for v in variants}
    if device == "cpu" and "int4" in names:
        notes.append("int4 on the CPU: torchao stores the 4-bit values one per int8 byte (its CPU layout without "
                     "C++ kernels), so int4 stores about as much as int8 here; the packed GPU layout (and the estimate) "
                     "holds two per byte")
    if names & {"int8", "awq-int8"}:
        notes.append("int8 estimate: campaign memory's int8 layout (1 B per element + an fp32 scale per row); "
                     "torchao adds an int8 zero point per row")
    if device == "cpu":
        notes.append("ms/token on the CPU compares variants with each other only: weight-only formats dequantize "
                     "in software here, slower than the reference; measure latency on the card you rent")
    ref_row = variants[0]
    if ref_row.weight_bytes_estimated and abs(ref_row.weight_bytes_estimated - ref_row.weight_bytes_stored) > \
            0.05 * ref_row.weight_bytes_stored:
        notes.append(f"the reference's weight estimate is {ref_row.weight_bytes_estimated / ref_row.weight_bytes_stored - 1:+.0%} "
                     "off what it stores: campaign memory counts the architecture's causal-LM inventory (its LM head); "
                     "a model with another head (a classifier) stores a different one")
    if spec is None:
        notes.append("the model has no transformers config campaign memory reads: weights and KV are not estimated")
    notes.append("KV cache: estimated per precision (campaign kv); its effect on quality is not measured here")
    if not guards:
        notes.append("no --guard: state what must not get worse (e.g. --guard \"perplexity<=0.5\" or "
                     "\"f1[refund]>=-0.01\")")
    if calibration is not None and any(v.calibration for v in variants) and calibration.sha256 == evaluation_sha:
        notes.append("the calibration batches are the evaluation batches: a calibrated format is judged on the data "
                     "it was fitted to, so its quality here is optimistic; calibrate on separate data")
    if calibration is not None and not any(v.calibration for v in variants):
        notes.append(f"calibration data {calibration.name!r} given; no compared format calibrates on it")
    return notes


# --------------------------------------------------------------------------------------------- files written

CSV_COLUMNS = ("variant", "library", "memory_format", "weight_bytes_estimated", "weight_bytes_stored",
               "weight_bytes_measured", "peak_bytes_measured", "kv_bytes_estimated", "required_bytes_estimated",
               "smallest_card", "cheapest_card", "hourly_cents", "metric", "quality", "delta",
               "p_value", "ms_per_token", "status", "guards_failed")


def write_csv(report: QuantReport, path: str | os.PathLike[str]) -> Path:
    """The table, one row per variant, written atomically."""
    from ..io import atomic_write_text

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for v in report.variants:
        w.writerow([v.name, v.library, v.memory_format, _cell(v.weight_bytes_estimated), v.weight_bytes_stored,
                    v.weight_bytes_measured, v.peak_bytes_measured, _cell(v.kv_bytes_estimated),
                    _cell(v.required_bytes_estimated), v.smallest_card or "", v.cheapest_card or "",
                    _cell(v.hourly_cents), report.metric,
                    f"{v.quality:.6g}", _cell(v.delta, ".6g"), _cell(v.p_value, ".4g"),
                    _cell(v.ms_per_token, ".4g"), v.status, ";".join(g.expression for g in v.guards if not g.passed)])
    return atomic_write_text(path, buf.getvalue())


def _cell(x: Any, fmt: str = "") -> str:
    return "" if x is None else format(x, fmt)


def plot_quant(report: QuantReport, path: str | os.PathLike[str]) -> Path:
    """Memory (stored weight bytes) against quality, one point per variant, flagged ones in red."""
    from ..evaluate.plots import _check_path, _figure, _save

    p = _check_path(path)
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    unit, div = ("GiB", 2 ** 30) if max(v.weight_bytes_stored for v in report.variants) >= 2 ** 30 else ("MiB", 2 ** 20)
    for v in report.variants:
        colour = "tab:red" if v.flagged else ("tab:gray" if v.status == "reference" else "tab:blue")
        x = v.weight_bytes_stored / div
        ax.scatter([x], [v.quality], color=colour, zorder=3)
        ax.annotate(v.name + (" (flagged)" if v.flagged else ""), (x, v.quality), textcoords="offset points",
                    xytext=(5, 4), fontsize=9)
    ax.margins(x=0.2, y=0.2)
    ax.set_xlabel(f"weights stored ({unit})")
    ax.set_ylabel("perplexity (lower is better)" if report.metric == "perplexity" else f"{report.metric} accuracy")
    ax.set_title(f"{report.model}: memory against quality\n{report.evaluation.examples} examples, reference "
                 f"{report.reference}, on {report.device}", fontsize=10)
    ax.grid(True, alpha=0.3)
    return _save(fig, p)
