"""Compare quantization variants on the same evaluation data: `compare_quant(setup, formats=...)`.

Each variant (the reference precision, then each weight format) is built from the reference model, measured with
the project's protocol (memory.measure.MemoryMeter: a 'load' phase, then an 'evaluate' phase) and evaluated on the
setup's batches, which are hashed before and after each variant so every variant provably saw the same data. Its
weight bytes are estimated with `campaign memory`'s formats (estimate_memory with the variant's dtype), counted from
the tensors the format left (data, scales, zero points) and measured (allocated at the end of the load phase). The
quality difference against the reference is tested on per-example outcomes: for perplexity a paired t-test on each
example's mean token NLL, for classification and extraction `campaign regress` (McNemar, per-class deltas) on the
predictions; guards use regress's syntax, and a variant that breaks one is flagged. The KV cache's bytes by precision
are estimated (estimate_kv); its effect on quality is measured on the same evaluation data where the model has
k_proj/v_proj layers (the reference with its keys and values rounded to each precision where they are made).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import CampaignError, InputError, MissingDependencyError, user_frame
from .estimates import cheapest_card, estimate_weights, kv_rows, spec_of
from .formats import Format, available, machine, parse_format, quiet_torchao, refusal, torch_dtype
from .inputs import check_inputs, guard_metric
from .quality import finite_outcomes, paired_test, quality_of
from .result import CalibrationComparison, DataDigest, KVRow, QuantReport, QuantVariant
from .setup import QuantSetup, load_quant_setup
from .usercode import user_code_error
from .variant import digest, example_ids, kv_outcomes, precision_of, reference_model, run_variant


def compare_quant(setup: str | Callable[[], Any] | Mapping[str, Any] | QuantSetup, *,
                  formats: Sequence[str] | None = None, reference: str | None = None, guards: Sequence[str] = (),
                  group_size: int = 128, context: int | None = None, sequences: int = 1,
                  kv_dtypes: Sequence[str] | None = None, confidence: float = 0.95,
                  prices: str | Path | None = None, margin: float | None = None,
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
        margin: also test that each variant is equivalent to the reference within +/- margin (TOST at the 5%
            level, beside the difference test): for perplexity on the per-example mean NLL (nats; 0.01 is about
            1% of perplexity), for classification and extraction on the paired correctness (0.01 = one point).
    Raises:
        InputError: a format this machine cannot run, calibration missing for a calibrated format, evaluation data
            that changed between variants, a prediction count that differs from the examples, a bad guard, an
            exception raised in the user's code (the model, its factory, predict), named by its frame.
    """
    with quiet_torchao():   # transformers imports torchao when it is installed, as the setup builds its model
        return _compare(setup, formats=formats, reference=reference, guards=guards, group_size=group_size,
                        context=context, sequences=sequences, kv_dtypes=kv_dtypes, confidence=confidence, prices=prices,
                        margin=margin, progress=progress)


def _compare(setup: Any, *, formats: Sequence[str] | None, reference: str | None, guards: Sequence[str],
             group_size: int, context: int | None, sequences: int, kv_dtypes: Sequence[str] | None,
             confidence: float, prices: str | Path | None, margin: float | None,
             progress: Callable[[str], None] | None) -> QuantReport:
    tell = progress or (lambda _msg: None)
    inputs = check_inputs(formats=formats, reference=reference, guards=guards, group_size=group_size,
                          context=context, sequences=sequences, kv_dtypes=kv_dtypes, confidence=confidence,
                          prices=prices, margin=margin)
    guards = inputs.guards
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    tell(f"building the setup{f' ({setup})' if isinstance(setup, str) else ''}")
    s = load_quant_setup(setup)
    for g in guards:                                       # the setup's metric is known now
        guard_metric(g, s.metric)
    if margin is not None and s.metric != "perplexity" and margin >= 1:
        raise InputError(f"margin {margin:g}: {s.metric} accuracy lies between 0 and 1, so a margin of 1 or more "
                         "holds for any variant; give it as a fraction (0.01 = one point)")
    here = inputs.machine or machine()
    device = here["device"]
    default = [*available(here), *(["awq-int8"] if s.calibration else [])]   # calibrated: with calibration only
    chosen = list(inputs.formats) if inputs.formats is not None else [parse_format(f) for f in default]
    for f in chosen:              # every refusal before any model is loaded (a reference precision has none)
        why = refusal(f, here, calibration=s.calibration is not None)
        if why:
            raise InputError(why)
    examples = example_ids(s)
    tell("the reference model")
    model = reference_model(s, inputs.reference)
    ref_fmt = inputs.reference or parse_format(precision_of(model))
    fmts = [ref_fmt] + [f for f in dict.fromkeys(chosen) if f != ref_fmt]
    model = model.to(torch_dtype(ref_fmt.name)).eval()
    evaluation = digest(s.batches, "evaluation")
    sets = s.calibration_sets()
    digests = {name: digest(batches, name) for name, batches in sets.items()}
    calibration = next(iter(digests.values()), None)
    # each variant: its format, its label and the calibration set it is fitted to (a calibrated format once per set
    # when the setup names several, to compare them)
    variants: list[tuple[Format, str, str | None]] = []
    for f in fmts:
        if f.calibrated and len(sets) > 1:
            variants += [(f, f"{f.name} ({name})", name) for name in sets]
        else:
            variants.append((f, f.name, next(iter(sets), None) if f.calibrated else None))
    spec = spec_of(model, s)
    lengths = [int(b["input_ids"].shape[-1]) for b in s.batches if "input_ids" in b]
    ctx = context if context is not None else max(lengths, default=0)
    if context is None and ctx <= 0:
        raise InputError("give --context: the evaluation batches carry no input_ids to take it from")
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx <= 0:
        raise InputError(f"context must be a positive integer (tokens per sequence), got {ctx!r}")
    compute = "fp32" if ref_fmt.name == "fp32" else ref_fmt.name
    kv_names = list(inputs.kv_dtypes) if inputs.kv_dtypes else list(dict.fromkeys([compute, "fp8", "int8"]))
    kv = kv_rows(spec, kv_names, ctx, sequences)

    outcomes: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for n, (f, label, cal) in enumerate(variants, 1):
        tell(f"variant {n}/{len(variants)}: {label}{' (reference)' if f is ref_fmt else ''}, load and evaluate on "
             f"{device}")
        try:
            row = run_variant(f, model, s, examples, device=device, group_size=group_size,
                              calibration=sets[cal] if cal is not None else None)
        except CampaignError:
            raise
        except (Exception, SystemExit) as e:
            # the user's model raised: one line naming their code. An error inside the libraries on a converted
            # variant, with no frame of the user's, is campaign's or the format's: it stays an internal error.
            if f is not ref_fmt and user_frame(e) is None:
                raise
            raise user_code_error(e, f"{s.source}: the model, evaluated as variant {label}",
                                  "fix the model's forward (it must run on the evaluation batches)") from None
        after = digest(s.batches, "evaluation")
        if after.sha256 != evaluation.sha256:
            raise InputError(f"the evaluation batches changed while variant {label} was evaluated (sha256 "
                             f"{evaluation.sha256[:12]} -> {after.sha256[:12]}); every variant must see the same "
                             "data: do not modify the batches in predict")
        outcomes[label] = row.pop("outcomes")
        rows.append(row)

    reference_out = outcomes[ref_fmt.name]
    kv = _kv_measured(kv, model, s, examples, compute, reference_out, device, confidence, tell)
    # each variant's KV cache at the reference's compute precision (weight formats leave the cache as it is)
    kv_here = next((k.bytes for k in kv if k.dtype == compute), None)
    if kv_here is None and spec is not None:
        kv_here = kv_rows(spec, [compute], ctx, sequences)[0].bytes
    tell("paired tests against the reference, memory estimates")
    price_file = inputs.prices
    built = []
    for (f, label, cal), row in zip(variants, rows, strict=False):
        est, required, card, fitting = estimate_weights(spec, f, ref_fmt, group_size, ctx, sequences)
        cheapest, hourly = cheapest_card(price_file, fitting)
        quality, metrics = quality_of(s, outcomes[label])
        finite = math.isfinite(quality) and finite_outcomes(s, outcomes[label])
        test: dict[str, Any]
        if f is ref_fmt:
            test = {"delta": None, "p": None, "test": "reference", "interval": None, "flips": None, "guards": (),
                    "equivalence": None}
        else:
            test = paired_test(s, reference_out, outcomes[label], examples, guards, ref_fmt.name, label, confidence,
                               margin)
        status = "reference" if f is ref_fmt else \
            ("flagged" if not finite or any(not g.passed for g in test["guards"]) else "pass")
        built.append(QuantVariant(
            name=label, format=f.description, library=f.library, memory_format=f.memory_dtype,
            weight_bytes_estimated=est, weight_bytes_stored=row["stored"], quantized_bytes_stored=row["quantized"],
            weight_bytes_measured=row["measured"], peak_bytes_measured=row["peak"], kv_bytes_estimated=kv_here,
            required_bytes_estimated=required, smallest_card=card,
            cheapest_card=cheapest, hourly_cents=hourly,
            quality=quality, metrics=metrics, delta=test["delta"], p_value=test["p"], test=test["test"],
            interval=test["interval"], flips=test["flips"], ms_per_token=row["ms_per_token"],
            calibration=digests[cal].sha256 if cal is not None else None, guards=test["guards"],
            status=status, equivalence=test["equivalence"], finite=finite))
    notes = _notes(built, guards, device, spec, ref_fmt, tuple(digests.values()), evaluation.sha256, kv)
    for (_f, label, _cal), row in zip(variants, rows, strict=False):
        ones, total = row.get("awq_scales") or (0, 0)
        if total and ones == total:
            same = " and its outcomes are int8's, example for example" if outcomes.get("int8") == outcomes[label] \
                else ""
            notes.append(f"{label}: every searched AWQ scale is 1 ({total} Linear layers){same}: the calibration "
                         "changed nothing, so this is int8 bit for bit; calibrate on data like the model's inputs "
                         "(AWQ finds no channel worth protecting in these)")
    if any(v.cheapest_card for v in built):
        source = f"the bundled EXAMPLE price file ({price_file.date})" if price_file.example else price_file.path
        notes.append(f"prices per card-hour from {source}; --prices FILE gives yours (campaign budget's format)")
    return QuantReport(
        model=s.name or (spec.name if spec else type(model).__name__), setup=s.source, device=device,
        device_name=here["name"], metric=s.metric, reference=ref_fmt.name, evaluation=evaluation,
        calibration=calibration, context=ctx, sequences=sequences, kv=kv, variants=tuple(built),
        guards=tuple(guards), notes=tuple(notes), margin=None if margin is None else float(margin),
        calibrations=tuple(digests.values()) if len(digests) > 1 else (),
        calibration_comparisons=_calibrations_compared(s, variants, outcomes, examples, confidence))


def _calibrations_compared(s: QuantSetup, variants: list[tuple[Format, str, str | None]], outcomes: dict[str, Any],
                           examples: list[str], confidence: float) -> tuple[CalibrationComparison, ...]:
    """Each calibrated format fitted to several calibration sets: every set after the first against the first, on
    the evaluation examples (the same paired test as against the reference)."""
    out = []
    by_format: dict[str, list[tuple[str, str]]] = {}
    for f, label, cal in variants:
        if cal is not None:
            by_format.setdefault(f.name, []).append((label, cal))
    for name, runs in by_format.items():
        (first, first_set), rest = runs[0], runs[1:]
        for label, cal in rest:
            if not (finite_outcomes(s, outcomes[first]) and finite_outcomes(s, outcomes[label])):
                continue
            t = paired_test(s, outcomes[first], outcomes[label], examples, (), first, label, confidence)
            out.append(CalibrationComparison(name, first_set, cal, quality_of(s, outcomes[first])[0],
                                             quality_of(s, outcomes[label])[0], t["delta"], t["p"], t["test"]))
    return tuple(out)


def _kv_measured(kv: tuple[KVRow, ...], model: Any, s: QuantSetup, examples: list[str], compute: str,
                 reference_out: list[Any], device: str, confidence: float,
                 tell: Callable[[str], None]) -> tuple[KVRow, ...]:
    """Each KV precision's effect on quality, measured on the evaluation batches: the reference model with its keys
    and values rounded to that precision, paired-tested against the reference (variant.kv_outcomes). Rows stay
    estimated only where the model has no k_proj/v_proj layers, or the reference's quality is not finite."""
    if not kv or not finite_outcomes(s, reference_out):
        return kv
    out = []
    for row in kv:
        if row.dtype == compute:
            quality = quality_of(s, reference_out)[0]
            out.append(replace(row, measured="the reference itself (its cache is in its own precision)",
                               quality=quality, delta=0.0))
            continue
        tell(f"KV cache in {row.dtype}: the reference with K and V rounded, on {device}")
        got = kv_outcomes(model, s, examples, row.dtype, device=device)
        if got is None:
            return kv
        outcome, how = got
        test = paired_test(s, reference_out, outcome, examples, (), compute, f"kv-{row.dtype}", confidence)
        out.append(replace(row, measured=how, quality=quality_of(s, outcome)[0], delta=test["delta"],
                           p_value=test["p"]))
    return tuple(out)


def _notes(variants: list[QuantVariant], guards: Sequence[str], device: str, spec: Any, ref: Format,
           calibrations: tuple[DataDigest, ...], evaluation_sha: str, kv: tuple[KVRow, ...]) -> list[str]:
    notes = []
    names = {v.name.split(" (", 1)[0] for v in variants}          # the formats ('awq-int8 (c4)': awq-int8)
    if device == "cpu" and "int4" in names:
        notes.append("int4 on the CPU: torchao stores the 4-bit values one per int8 byte (its CPU layout without "
                     "C++ kernels), so int4 stores about as much as int8 here; the packed GPU layout (and the "
                     "estimate) holds two per byte")
    if names & {"int8", "awq-int8"}:
        notes.append("int8 estimate: campaign memory's int8 layout (1 B per element + an fp32 scale per row); "
                     "torchao adds an int8 zero point per row")
    if device == "cpu":
        notes.append("ms/token on the CPU compares variants with each other only: weight-only formats dequantize "
                     "in software here, slower than the reference; measure latency on the card you rent")
    ref_row = variants[0]
    if ref_row.weight_bytes_estimated and abs(ref_row.weight_bytes_estimated - ref_row.weight_bytes_stored) > \
            0.05 * ref_row.weight_bytes_stored:
        off = ref_row.weight_bytes_estimated / ref_row.weight_bytes_stored - 1
        notes.append(f"the reference's weight estimate is {off:+.0%} "
                     "off what it stores: campaign memory counts the architecture's causal-LM inventory (its LM head); "
                     "a model with another head (a classifier) stores a different one")
    if spec is None:
        notes.append("the model has no transformers config campaign memory reads: weights and KV are not estimated")
    if kv and kv[0].measured:
        notes.append("KV cache: bytes estimated per precision (campaign kv); quality measured on the same evaluation "
                     "data with the reference's keys and values rounded to each precision where they are made "
                     "(k_proj/v_proj outputs, before RoPE), as a cache in that precision would hold them")
    else:
        notes.append("KV cache: estimated per precision (campaign kv); its effect on quality is not measured here "
                     "(no k_proj/v_proj layers to round, or no finite reference quality)")
    if not guards:
        notes.append("no --guard: state what must not get worse (e.g. --guard \"perplexity<=0.5\" or "
                     "\"f1[refund]>=-0.01\")")
    used = {v.calibration for v in variants if v.calibration}
    same = [c.name for c in calibrations if c.sha256 == evaluation_sha and c.sha256 in used]
    if same:
        named = f" ({', '.join(repr(n) for n in same)})" if len(calibrations) > 1 else ""
        notes.append(f"the calibration batches{named} are the evaluation batches: a calibrated format is judged on "
                     "the data it was fitted to, so its quality here is optimistic; calibrate on separate data")
    if calibrations and not used:
        notes.append(f"calibration data {', '.join(repr(c.name) for c in calibrations)} given; no compared format "
                     "calibrates on it")
    return notes
