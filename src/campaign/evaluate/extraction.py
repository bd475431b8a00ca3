"""Error analysis of structured extraction: parse and schema validity, required fields, per-field matches.

A prediction is a JSON object, or a string holding one (raw model output, parsed strictly: no repair, no
stripping of Markdown fences; fenced outputs are counted in a note). Fields are the gold's top-level keys.
Exact and normalized matches are defined in values.py; schemas are the subset json_schema.py checks.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..results import Information
from .difference import RateEstimate
from .json_schema import load_schema, schema_errors
from .predictions import PredictionSet
from .review import ReviewCandidate, TaxonomySummary, as_text, sample_for_review, summarize_taxonomy, write_review_sheet
from .values import canonical, parse_object, same_normalized

SCHEMA = "campaign.errors/1"


def _present(obj: dict[str, Any], key: str) -> bool:
    return key in obj and obj[key] is not None and obj[key] != ""


@dataclass(frozen=True)
class ExampleResult:
    id: str
    parsed: bool
    schema_ok: bool | None
    mismatched: tuple[str, ...]       # gold fields whose normalized value differs (all when unparsed)
    correct: bool                     # parsed, and every gold field matches after normalization


@dataclass(frozen=True)
class FieldMatch:
    field: str
    gold_examples: int                # examples whose gold has the field
    produced: int                     # of those, predictions that have the field
    exact: int
    normalized: int
    exact_rate: float
    normalized_rate: float


@dataclass(frozen=True)
class RequiredField:
    field: str
    present: int
    rate: float


@dataclass(frozen=True)
class ExtraField:
    """A field the prediction produced although the gold of that example does not have it."""

    field: str
    count: int
    example_ids: tuple[str, ...]


@dataclass(frozen=True)
class ExtractionSlice:
    value: str
    examples: int
    valid_json: float
    accuracy: float


@dataclass(frozen=True)
class ExtractionReport(Information):
    """Everything `campaign errors --task extraction` shows; rates are over all examples unless named."""

    OMIT = ("per_example",)

    source: dict[str, Any]
    examples: int
    parsed: int
    valid_json: float
    schema_checked: bool
    schema_valid_count: int | None
    schema_valid: float | None
    schema_violations: tuple[tuple[str, int], ...]
    required: tuple[RequiredField, ...]
    required_all: float | None
    fields: tuple[FieldMatch, ...]
    extra_fields: tuple[ExtraField, ...]
    correct: int
    accuracy: float
    invalid_ids: tuple[str, ...]
    slice_field: str | None = None
    slices: tuple[ExtractionSlice, ...] = ()
    taxonomy: TaxonomySummary | None = None
    review_sheet: str | None = None
    review_rows: int = 0
    notes: tuple[str, ...] = ()
    per_example: tuple[ExampleResult, ...] = field(default=(), repr=False)
    task: str = "extraction"
    schema: str = SCHEMA
    plot: str | None = None         # the per-field bars written, when asked for
    estimates: tuple[RateEstimate, ...] = ()   # valid_json and accuracy with standard errors and 95% intervals
    cluster_field: str | None = None


    def metrics(self) -> dict[str, float]:
        """Flat metric names for guards: valid_json, schema_valid, required_all, required[f], exact[f], match[f]."""
        out = {"valid_json": self.valid_json, "accuracy": self.accuracy}
        if self.schema_valid is not None:
            out["schema_valid"] = self.schema_valid
        if self.required_all is not None:
            out["required_all"] = self.required_all
        out.update({f"required[{r.field}]": r.rate for r in self.required})
        for f in self.fields:
            out[f"exact[{f.field}]"] = f.exact_rate
            out[f"match[{f.field}]"] = f.normalized_rate
        return out


def analyze_extraction(preds: PredictionSet, *, schema: str | os.PathLike[str] | dict[str, Any] | None = None,
                       required: Sequence[str] | None = None, slice_by: str | None = None,
                       review_sheet: str | os.PathLike[str] | None = None, per_cell: int = 5,
                       correct_per_cell: int = 0, taxonomy: str | os.PathLike[str] | None = None,
                       seed: int = 0, examples_per_field: int = 5) -> ExtractionReport:
    """Parse validity, schema validity, required-field presence, per-field exact and normalized match and
    fields produced beyond the gold. `required` defaults to the schema's top-level `required` list."""
    sch = load_schema(schema) if schema is not None else None
    req = list(required) if required is not None else list(sch.get("required", [])) if sch else []
    golds: list[dict[str, Any]] = []
    for p in preds.predictions:
        g = parse_object(p.gold)
        if g is None:
            raise InputError(f"gold at {preds.where(p)} is not a JSON object; extraction needs the gold fields as an "
                             f"object (or a string holding one)")
        golds.append(g)
    field_names = list(dict.fromkeys(k for g in golds for k in g))
    stats = {f: [0, 0, 0, 0] for f in field_names}           # gold_examples, produced, exact, normalized
    extra: dict[str, list[str]] = {}
    present: Counter[str] = Counter()
    violations: Counter[str] = Counter()
    results: list[ExampleResult] = []
    fenced = schema_ok_count = all_req = 0
    for p, g in zip(preds.predictions, golds, strict=True):
        obj = parse_object(p.pred)
        if obj is None and isinstance(p.pred, str) and p.pred.lstrip().startswith("```"):
            fenced += 1
        ok = None
        if sch is not None:
            errs = schema_errors(obj, sch) if obj is not None else ["$: not a JSON object"]
            ok = not errs
            schema_ok_count += ok
            violations.update(set(errs))
        mismatched = []
        for k in g:
            s = stats[k]
            s[0] += 1
            if obj is not None and k in obj:
                s[1] += 1
                s[2] += canonical(obj[k]) == canonical(g[k])
            same = obj is not None and same_normalized(obj.get(k), g[k])
            s[3] += same
            if not same:
                mismatched.append(k)
        if obj is not None:
            for k in obj:
                if k not in g:
                    extra.setdefault(k, []).append(p.id)
            have = [r for r in req if _present(obj, r)]
            present.update(have)
            all_req += len(have) == len(req)
        results.append(ExampleResult(p.id, obj is not None, ok, tuple(mismatched), obj is not None and not mismatched))
    n = len(results)
    parsed = sum(r.parsed for r in results)
    correct = sum(r.correct for r in results)
    notes = []
    if fenced:
        notes.append(f"{fenced} prediction(s) are wrapped in a Markdown code fence and count as invalid JSON; "
                     f"strip fences before scoring if your pipeline does")
    if sch is None:
        notes.append("no --schema: schema validity not checked")
    slices: tuple[ExtractionSlice, ...] = ()
    if slice_by:
        if not any(slice_by in pr.meta for pr in preds.predictions):
            fields = sorted({k for pr in preds.predictions for k in pr.meta})
            raise InputError(f"no field {slice_by!r} in {preds.path} (metadata fields: "
                             f"{', '.join(map(repr, fields)) or 'none'}); pass --slice with one of them")
        groups: dict[str, list[ExampleResult]] = {}
        for pr, r in zip(preds.predictions, results, strict=True):
            v = pr.meta.get(slice_by)
            groups.setdefault("(missing)" if v is None or v == "" else as_text(v), []).append(r)
        slices = tuple(sorted((ExtractionSlice(v, len(rs), sum(r.parsed for r in rs) / len(rs),
                                               sum(r.correct for r in rs) / len(rs)) for v, rs in groups.items()),
                              key=lambda s: (s.accuracy, s.value)))
    sheet, sheet_rows = None, 0
    if review_sheet is not None:
        cands = [ReviewCandidate(r.id, as_text(p.gold), as_text(p.pred), _cell(r), _is_error(r), p.meta)
                 for p, r in zip(preds.predictions, results, strict=True)]
        chosen = sample_for_review(cands, per_cell=per_cell, correct_per_cell=correct_per_cell, seed=seed)
        sheet = str(write_review_sheet(review_sheet, chosen, inputs=[preds.path] + ([taxonomy] if taxonomy else [])))
        sheet_rows = len(chosen)
    tax = None
    if taxonomy:
        tax = summarize_taxonomy(taxonomy, ids=preds.ids, error_ids=[r.id for r in results if _is_error(r)])
    return ExtractionReport(
        source=preds.to_dict(), examples=n, parsed=parsed, valid_json=parsed / n, schema_checked=sch is not None,
        schema_valid_count=schema_ok_count if sch is not None else None,
        schema_valid=schema_ok_count / n if sch is not None else None,
        schema_violations=tuple(violations.most_common(10)),
        required=tuple(RequiredField(r, present[r], present[r] / n) for r in req),
        required_all=all_req / n if req else None,
        fields=tuple(FieldMatch(f, s[0], s[1], s[2], s[3], s[2] / s[0], s[3] / s[0]) for f, s in stats.items()),
        extra_fields=tuple(ExtraField(k, len(v), tuple(v[:examples_per_field]))
                           for k, v in sorted(extra.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
        correct=correct, accuracy=correct / n, invalid_ids=tuple(r.id for r in results if not r.parsed)[:10],
        slice_field=slice_by, slices=slices, taxonomy=tax, review_sheet=sheet, review_rows=sheet_rows,
        notes=tuple(notes), per_example=tuple(results))


def _is_error(r: ExampleResult) -> bool:
    """For review and tags: a wrong field or a schema violation (a consumer would reject the output)."""
    return not r.correct or r.schema_ok is False


def _cell(r: ExampleResult) -> str:
    if not r.parsed:
        return "invalid JSON"
    if r.schema_ok is False:
        return "schema invalid"
    if r.mismatched:
        shown = ", ".join(sorted(r.mismatched)[:3]) + (", ..." if len(r.mismatched) > 3 else "")
        return f"wrong: {shown}"
    return "correct"
