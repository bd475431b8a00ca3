"""How a frozen result becomes JSON, one way for every result: each field in order (a nested result or check by its
own to_dict(), a dataclass field by field, tuples as lists), then the package version. The `schema` field names the
result and its version ('campaign.seeds/1'); fields in OMIT stay out (bulky per-example data)."""
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


class Result:
    """Mixin for frozen result dataclasses that carry a `schema` field: to_dict() as the module docstring says."""

    OMIT: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        from .version import __version__

        out = {f.name: plain(getattr(self, f.name)) for f in fields(self) if f.name not in self.OMIT}  # type: ignore[arg-type]
        out["campaign_version"] = __version__
        return out
