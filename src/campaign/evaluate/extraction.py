"""Error analysis of structured extraction: parse and schema validity, required fields, per-field matches.

A prediction is a JSON object, or a string holding one (raw model output, parsed strictly: no repair, no
stripping of Markdown fences; fenced outputs are counted in a note). Fields are the gold's top-level keys.
Exact match compares canonical JSON (1 != 1.0 != true); normalized match compares after `normalize`:
Unicode NFKC, case folded, whitespace collapsed, surrounding punctuation stripped, numbers (also numeric
strings, with thousands separators) as numbers, lists as multisets, null == "" == absent.
Schemas: a JSON Schema subset (SUPPORTED below); other keywords are refused rather than silently ignored.
"""
from __future__ import annotations

import json
import math
import os
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InputError
from ..io import input_file, load_json
from .predictions import PredictionSet
from .review import ReviewCandidate, TaxonomySummary, as_text, sample_for_review, summarize_taxonomy, write_review_sheet

SCHEMA = "campaign.errors/1"
SUPPORTED = frozenset({"type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
                       "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
                       "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf"})
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "format"})
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_STRIP = string.punctuation + string.whitespace


def load_schema(schema: str | os.PathLike[str] | dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema from a file or a dict, checked for keywords outside the supported subset."""
    if isinstance(schema, dict):
        doc = schema
        where = "schema"
    else:
        p = input_file(schema, "schema")
        doc = load_json(p, "a JSON Schema file")
        where = str(p)
    if not isinstance(doc, dict):
        raise InputError(f"{where} is not a JSON Schema object; write {{\"type\": \"object\", ...}}")
    _check_keywords(doc, "$", where)
    return doc


def _check_keywords(s: Any, path: str, where: str) -> None:
    if not isinstance(s, dict):
        if isinstance(s, bool):
            return
        raise InputError(f"{where} at {path} is not a schema object; fix the schema")
    unknown = sorted(set(s) - SUPPORTED - ANNOTATIONS)
    if unknown:
        raise InputError(f"{where} uses {unknown[0]!r} at {path}, which campaign does not check; supported: "
                         f"{', '.join(sorted(SUPPORTED))}; rewrite the schema with those")
    for key, value in s.items():
        _check_value(key, value, path, where)
    types = s.get("type", [])
    for t in types if isinstance(types, list) else [types]:
        if t not in TYPES:
            raise InputError(f"{where} has type {t!r} at {path}; use one of {', '.join(TYPES)}")
    if "pattern" in s:
        try:
            re.compile(s["pattern"])
        except re.error as e:
            raise InputError(f"{where} has an invalid pattern {s['pattern']!r} at {path} ({e}); fix the regex") from None
    for k, sub in s.get("properties", {}).items():
        _check_keywords(sub, f"{path}.{k}", where)
    for key in ("additionalProperties", "items"):
        if isinstance(s.get(key), dict):
            _check_keywords(s[key], f"{path}.{key}", where)
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(s.get(key, [])):
            _check_keywords(sub, f"{path}.{key}[{i}]", where)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


# What each keyword's value must be (JSON Schema draft 2020-12), as (test, what to write).
_VALUE_RULES: dict[str, tuple[Any, str]] = {
    "type": (lambda v: isinstance(v, str) or isinstance(v, list) and bool(v) and all(isinstance(t, str) for t in v),
             'a type name or a list of them, e.g. "string" or ["string", "null"]'),
    "enum": (lambda v: isinstance(v, list), 'a list of the allowed values, e.g. ["a", "b"]'),
    "properties": (lambda v: isinstance(v, dict), 'an object of field schemas, e.g. {"name": {"type": "string"}}'),
    "required": (lambda v: isinstance(v, list) and all(isinstance(r, str) for r in v),
                 'a list of field names, e.g. ["name"]'),
    "additionalProperties": (lambda v: isinstance(v, (dict, bool)), "true, false or a schema object"),
    "items": (lambda v: isinstance(v, (dict, bool)), "true, false or one schema object for every item"),
    "minItems": (_is_count, "an integer >= 0"),
    "maxItems": (_is_count, "an integer >= 0"),
    "minLength": (_is_count, "an integer >= 0"),
    "maxLength": (_is_count, "an integer >= 0"),
    "uniqueItems": (lambda v: isinstance(v, bool), "true or false"),
    "pattern": (lambda v: isinstance(v, str), 'a regular expression as a string, e.g. "^[A-Z]"'),
    "minimum": (_is_number, "a number, e.g. 0"),
    "maximum": (_is_number, "a number, e.g. 100"),
    "exclusiveMinimum": (_is_number, "a number, e.g. 0"),
    "exclusiveMaximum": (_is_number, "a number, e.g. 100"),
    "anyOf": (lambda v: isinstance(v, list) and bool(v), "a non-empty list of schemas"),
    "oneOf": (lambda v: isinstance(v, list) and bool(v), "a non-empty list of schemas"),
    "allOf": (lambda v: isinstance(v, list) and bool(v), "a non-empty list of schemas"),
}


def _check_value(key: str, value: Any, path: str, where: str) -> None:
    """One line naming the schema, the keyword and what to write when a keyword's value has the wrong type."""
    rule = _VALUE_RULES.get(key)
    if rule is not None and not rule[0](value):
        shown = json.dumps(value, ensure_ascii=False)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        raise InputError(f"{where}: {key!r} at {path} is {shown}; it must be {rule[1]}; fix the schema")


def _is_type(v: Any, t: str) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    if t == "integer":   # JSON Schema: 1.0 is an integer
        return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
    return t == "number" and isinstance(v, (int, float)) and not isinstance(v, bool)


def canonical(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def schema_errors(v: Any, s: dict[str, Any] | bool, path: str = "$") -> list[str]:
    """Violations of schema s by value v, each as '<path>: <what>' (empty list: valid)."""
    if s is True:
        return []
    if s is False:
        return [f"{path}: not allowed"]
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_is_type(v, t) for t in types):
            return [f"{path}: expected {' or '.join(types)}"]
    errs: list[str] = []
    if "enum" in s and canonical(v) not in {canonical(e) for e in s["enum"]}:
        errs.append(f"{path}: not one of the enum values")
    if "const" in s and canonical(v) != canonical(s["const"]):
        errs.append(f"{path}: not the const value")
    if isinstance(v, dict):
        errs += [f"{path}.{r}: missing required field" for r in s.get("required", []) if r not in v]
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        for k, sub in v.items():
            if k in props:
                errs += schema_errors(sub, props[k], f"{path}.{k}")
            elif extra is not True:
                errs += schema_errors(sub, extra, f"{path}.{k}") if extra is not False else [f"{path}.{k}: unexpected field"]
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            errs.append(f"{path}: fewer than {s['minItems']} items")
        if "maxItems" in s and len(v) > s["maxItems"]:
            errs.append(f"{path}: more than {s['maxItems']} items")
        if s.get("uniqueItems") and len({canonical(x) for x in v}) < len(v):
            errs.append(f"{path}: items not unique")
        if isinstance(s.get("items"), (dict, bool)):
            for i, x in enumerate(v):
                errs += schema_errors(x, s["items"], f"{path}[{i}]")
    if isinstance(v, str):
        if "minLength" in s and len(v) < s["minLength"]:
            errs.append(f"{path}: shorter than {s['minLength']}")
        if "maxLength" in s and len(v) > s["maxLength"]:
            errs.append(f"{path}: longer than {s['maxLength']}")
        if "pattern" in s and not re.search(s["pattern"], v):
            errs.append(f"{path}: does not match the pattern")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        for key, bad in (("minimum", lambda b: v < b), ("maximum", lambda b: v > b),
                         ("exclusiveMinimum", lambda b: v <= b), ("exclusiveMaximum", lambda b: v >= b)):
            if key in s and bad(s[key]):
                errs.append(f"{path}: violates {key} {s[key]}")
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            ok = [not schema_errors(v, sub, path) for sub in s[key]]
            if (key == "allOf" and not all(ok)) or (key == "anyOf" and not any(ok)) or (key == "oneOf" and sum(ok) != 1):
                errs.append(f"{path}: fails {key}")
    return errs


def normalize(v: Any) -> Any:
    """The value compared by normalized match (see the module docstring); returns a JSON-able value."""
    if isinstance(v, str):
        s = " ".join(unicodedata.normalize("NFKC", v).casefold().split()).strip(_STRIP)
        num = _THOUSANDS.sub("", s)
        if _NUMBER.fullmatch(num):
            return float(num)
        return s or None
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return sorted((normalize(x) for x in v), key=canonical)
    if isinstance(v, dict):
        return {" ".join(unicodedata.normalize("NFKC", str(k)).casefold().split()): normalize(x) for k, x in v.items()}
    return v


def same_normalized(a: Any, b: Any) -> bool:
    """Normalized match; compared as canonical JSON, so true != 1 (Python would say True == 1.0)."""
    return canonical(normalize(a)) == canonical(normalize(b))


def parse_object(value: Any) -> dict[str, Any] | None:
    """A JSON object from a dict or a string holding one; None when it does not parse to an object."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except json.JSONDecodeError:
            return None
        return obj if isinstance(obj, dict) else None
    return None


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
class ExtractionReport:
    """Everything `campaign errors --task extraction` shows; rates are over all examples unless named."""

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

    def to_dict(self) -> dict[str, Any]:
        from .. import __version__

        d = asdict(self)
        del d["per_example"]
        d["campaign_version"] = __version__
        return d

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
    present = Counter()
    violations: Counter[str] = Counter()
    results: list[ExampleResult] = []
    fenced = schema_ok_count = all_req = 0
    for p, g in zip(preds.predictions, golds):
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
        for pr, r in zip(preds.predictions, results):
            v = pr.meta.get(slice_by)
            groups.setdefault("(missing)" if v is None or v == "" else as_text(v), []).append(r)
        slices = tuple(sorted((ExtractionSlice(v, len(rs), sum(r.parsed for r in rs) / len(rs),
                                               sum(r.correct for r in rs) / len(rs)) for v, rs in groups.items()),
                              key=lambda s: (s.accuracy, s.value)))
    sheet, sheet_rows = None, 0
    if review_sheet is not None:
        cands = [ReviewCandidate(r.id, as_text(p.gold), as_text(p.pred), _cell(r), _is_error(r), p.meta)
                 for p, r in zip(preds.predictions, results)]
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
