"""A JSON Schema subset for extraction outputs: the keywords in SUPPORTED are checked; any other keyword is refused
rather than silently ignored (a schema that says more than is checked would pass invalid outputs)."""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from ..errors import InputError
from ..io import input_file, load_json
from .values import canonical

SUPPORTED = frozenset({"type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
                       "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
                       "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf"})
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "format"})


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
            raise InputError(f"{where} has an invalid pattern {s['pattern']!r} at {path} ({e}); "
                             "fix the regex") from None
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
                errs += (schema_errors(sub, extra, f"{path}.{k}") if extra is not False
                         else [f"{path}.{k}: unexpected field"])
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
            if ((key == "allOf" and not all(ok)) or (key == "anyOf" and not any(ok))
                    or (key == "oneOf" and sum(ok) != 1)):
                errs.append(f"{path}: fails {key}")
    return errs
