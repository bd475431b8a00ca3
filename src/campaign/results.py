"""How a frozen result becomes JSON, one way for every result: each field in order (a nested result or check by its
own to_dict(), a dataclass field by field, tuples as lists), then the package version. The `schema` field names the
result and its version ('campaign.seeds/1'); fields in OMIT stay out (bulky per-example data). A part nested in a
result (an example, a split, a card's fit) is a Record: the same, without the version.

A to_dict written by hand stays only where the JSON must differ from the fields: figures rounded for reading,
derived figures (a status, a rate) that are not fields, or a file format whose key order is fixed; each says why."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, ClassVar


def plain(value: Any) -> Any:
    """A value as JSON holds it: to_dict() where an object has one, dataclasses field by field, tuples as lists."""
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


class Record:
    """Mixin for frozen dataclasses nested in a result: to_dict() is each field in order, as plain() writes it."""

    OMIT: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in fields(self) if f.name not in self.OMIT}  # type: ignore[arg-type]


class Result(Record):
    """Mixin for frozen result dataclasses that carry a `schema` field: to_dict() as the module docstring says."""

    def to_dict(self) -> dict[str, Any]:
        from .version import __version__

        out = super().to_dict()
        out["campaign_version"] = __version__
        return out
