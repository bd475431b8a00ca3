"""One way a result becomes JSON: every field in order, nested results by their own to_dict, tuples as lists, the
package version last, OMIT fields left out."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from campaign.checks import Check
from campaign.results import Result
from campaign.version import __version__


@dataclass(frozen=True)
class _Inner:
    a: int

    def to_dict(self) -> dict:
        return {"a_as_text": str(self.a)}


@dataclass(frozen=True)
class _Report(Result):
    OMIT = ("rows",)

    inner: _Inner
    checks: tuple[Check, ...]
    rows: tuple[int, ...] = field(default=(1, 2, 3))
    pairs: tuple[tuple[int, int], ...] = ((1, 2),)
    schema: str = "campaign.test/1"


def test_fields_in_order_nested_to_dict_version_last_and_omit():
    d = _Report(_Inner(7), (Check("x.y", "pass", "fine"),)).to_dict()
    assert list(d) == ["inner", "checks", "pairs", "schema", "campaign_version"]
    assert d["inner"] == {"a_as_text": "7"} and d["checks"][0]["id"] == "x.y" and d["pairs"] == [[1, 2]]
    assert d["campaign_version"] == __version__ and json.loads(json.dumps(d)) == d
