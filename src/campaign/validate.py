"""Typed reading of parsed JSON: one check per input kind at the reader, so a wrong type is a one-line refusal that
names the file and the field, never an exception deep inside a computation.

    doc = JsonObject(load_json(path, "a measurement"), str(path), fix="write it with campaign measure --out")
    phases = [JsonObject(p, f"{doc.where}: phases[{i}]", fix=doc.fix) for i, p in enumerate(doc.list("phases"))]
    peak = phases[0].count("peak_allocated_bytes")
"""
from __future__ import annotations

import builtins
import math
from typing import Any, NoReturn

from .errors import InputError

_MISSING = object()
# A byte or element count larger than this is no real tensor or card (2**62 bytes is 4 EiB); it also keeps every
# product of counts far from float overflow and from Python's 4,300-digit integer printing limit.
MAX_COUNT = 2**62


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kind_of(value: Any) -> str:
    """The JSON name of a parsed value's type: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


class JsonObject:
    """A parsed JSON object with typed getters; every error names where the object came from and the field.

    Args:
        data: the parsed value (refused unless it is an object).
        where: the file (and position) it was read from, e.g. 'm.json: phases[2]'.
        fix: what to do about a bad value, appended to every message.
        error: the exception class raised (InputError; ConfigError for model files).

    The getters `str` and `list` are named after the JSON kinds they read; inside the class body those names are the
    methods, so the annotations spell the builtins as `builtins.str` / `builtins.list`.
    """

    def __init__(
        self, data: Any, where: builtins.str, *, fix: builtins.str = "", error: type[Exception] = InputError
    ) -> None:
        self.where, self.fix, self.error = where, fix, error
        if not isinstance(data, dict):
            self.fail(f"is a JSON {kind_of(data)}, not an object")
        self.data: dict[str, Any] = data

    def fail(self, what: builtins.str) -> NoReturn:
        raise self.error(f"{self.where}: {what}" + (f"; {self.fix}" if self.fix else ""))

    def __contains__(self, key: builtins.str) -> bool:
        return key in self.data

    def raw(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """The value as parsed; a missing field (or null) is an error unless a default is given."""
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                self.fail(f"missing field {key!r}")
            return default
        return value

    def _typed(self, key: builtins.str, types: tuple[type, ...], name: str, default: Any) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            self.fail(f"field {key!r} must be {name}, got {_shown(value)} (a JSON {kind_of(value)})")
        return value

    def str(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A string field."""
        return self._typed(key, (str,), "a string", default)

    def list(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """An array field."""
        return self._typed(key, (list,), "an array", default)

    def obj(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """An object field, as a JsonObject (or the default)."""
        value = self._typed(key, (dict,), "an object", default)
        return value if value is default and default is not _MISSING else \
            JsonObject(value, f"{self.where}: {key}", fix=self.fix, error=self.error)

    def count(
        self, key: builtins.str, default: Any = _MISSING, *, minimum: int = 0, maximum: int = MAX_COUNT
    ) -> Any:
        """A whole number in [minimum, maximum] (bytes, tensors, rows): not a boolean, a float or a string."""
        value = self._typed(key, (int,), "a whole number", default)
        if value is default and default is not _MISSING:
            return value
        if not minimum <= value <= maximum:
            shown = f"{value:.3g}" if abs(value) > 10**12 else f"{value}"
            self.fail(f"field {key!r} must be between {minimum:,} and {maximum:,}, got {shown}")
        return value

    def number(self, key: builtins.str, default: Any = _MISSING, *, minimum: float = -math.inf) -> Any:
        """A finite number >= minimum (int or float, not a boolean)."""
        value = self._typed(key, (int, float), "a number", default)
        if value is default and default is not _MISSING:
            return value
        if not math.isfinite(value) or value < minimum:
            self.fail(f"field {key!r} must be a finite number >= {minimum:g}, got {_shown(value)}")
        return value

    def items(self, key: builtins.str) -> builtins.list[JsonObject]:
        """An array of objects, each a JsonObject named by its position."""
        return [JsonObject(v, f"{self.where}: {key}[{i}]", fix=self.fix, error=self.error)
                for i, v in enumerate(self.list(key))]


def check_seed(seed: object) -> int:
    """A random seed: a whole number >= 0 (what numpy's generators accept), else one InputError."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"seed {seed!r} must be a whole number from 0 to 2**63 - 1; use e.g. --seed 0")
    return seed
