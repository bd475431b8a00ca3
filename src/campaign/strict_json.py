"""Strict JSON text: what campaign writes (a non-finite float as null, never NaN or Infinity, which are not JSON)
and what it reads (every way a text can fail as one error naming where: malformed, not UTF-8, a lone surrogate,
an integer past Python's limit, nesting past the stack)."""
from __future__ import annotations

import json
from typing import Any

from .errors import InputError


def dumps_json(data: Any, indent: int | None = 2) -> str:
    """Strict JSON text with a trailing newline: a non-finite float (NaN, infinity) becomes null, since JSON has no
    spelling for it (Python's NaN/Infinity are not JSON and other parsers refuse them)."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def check_text(value: Any, where: str, error: type[Exception] = InputError) -> Any:
    """`value` when every text in it (in lists and dicts, keys included) is valid Unicode; a lone surrogate (what
    Python makes of bytes that are not UTF-8 on a command line, or a JSON \\udcff escape) is one `error` naming
    `where`: such text cannot be written as UTF-8, nor stored in the run index."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise error(f"{where}: {v[:e.start]!r}... is not valid UTF-8 text (character {e.start + 1}); "
                                "give it as UTF-8") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return value


def parse_json(text: str | bytes, where: str, error: type[Exception] = InputError) -> Any:
    """json.loads with every way a text can fail as one `error` naming `where`: malformed JSON, not UTF-8, an
    integer of more than 4,300 digits (Python's conversion limit), nesting deep enough to exhaust the stack."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text)
        if "\\ud" in text or "\\uD" in text:  # an escaped surrogate: a pair is one character, a lone one no text
            check_text(value, where, error)
        return value
    except UnicodeDecodeError as e:
        raise error(f"{where}: not valid UTF-8 (byte {e.start + 1}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply to read; this is not a file campaign writes") from None
    except ValueError as e:  # int conversion limit
        raise error(f"{where}: not readable JSON ({str(e).split(';')[0]})") from None
