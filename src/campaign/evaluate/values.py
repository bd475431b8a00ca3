"""How extracted values are compared: canonical JSON for exact match (1 != 1.0 != true), and a normalized form
for the lenient match (Unicode NFKC, case folded, whitespace collapsed, surrounding punctuation stripped, numbers
and numeric strings as numbers, lists as multisets, null == "" == absent)."""
from __future__ import annotations

import json
import re
import string
import unicodedata
from typing import Any

_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_STRIP = string.punctuation + string.whitespace


def canonical(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def normalize_value(v: Any) -> Any:
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
        return sorted((normalize_value(x) for x in v), key=canonical)
    if isinstance(v, dict):
        return {" ".join(unicodedata.normalize("NFKC", str(k)).casefold().split()): normalize_value(x)
                for k, x in v.items()}
    return v


def same_normalized(a: Any, b: Any) -> bool:
    """Normalized match; compared as canonical JSON, so true != 1 (Python would say True == 1.0)."""
    return canonical(normalize_value(a)) == canonical(normalize_value(b))


def parse_object(value: Any) -> dict[str, Any] | None:
    """A JSON object from a dict or a string holding one; None when it does not parse to an object."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except (ValueError, RecursionError):   # malformed, a 4,300-digit integer, nesting past the stack
            return None
        return obj if isinstance(obj, dict) else None
    return None
