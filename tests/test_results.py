"""One contract for every verdict: the header (schema, campaign_version, status, checks) first, then every field in
order, nested results by their own to_dict, tuples as lists, OMIT fields left out; the status derived from the
checks, a skipped check a go depends on never a pass."""
from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field

import pytest

import campaign
from campaign.checks import Check, status_of
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


def test_header_first_then_fields_in_order_nested_to_dict_and_omit():
    d = _Report(_Inner(7), (Check("x.y", "pass", "fine"),)).to_dict()
    assert list(d) == ["schema", "campaign_version", "status", "checks", "inner", "pairs"]
    assert d["inner"] == {"a_as_text": "7"} and d["checks"][0]["id"] == "x.y" and d["pairs"] == [[1, 2]]
    assert d["campaign_version"] == __version__ and d["status"] == "pass" and json.loads(json.dumps(d)) == d


@pytest.mark.parametrize("statuses, expected", [
    ((), "pass"),
    (("pass", "pass"), "pass"),
    (("pass", "warn"), "warn"),
    (("pass", "skipped-informs"), "pass"),
    (("warn", "skipped"), "not verified"),
    (("fail", "skipped"), "fail"),
    (("pass", "fail", "warn"), "fail"),
])
def test_status_is_derived_fail_then_not_verified_then_warn_then_pass(statuses, expected):
    checks = tuple(Check(f"c.{i}", s.split("-")[0], "seen", gates=not s.endswith("informs"))
                   for i, s in enumerate(statuses))
    assert status_of(checks) == expected
    r = _Report(_Inner(1), checks)
    assert r.status == expected and r.to_dict()["status"] == expected
    assert r.passed == (expected in ("pass", "warn"))


def test_a_skipped_check_says_whether_the_verdict_waits_on_it():
    d = Check("resume.next_step_equal", "skipped", "not run", "", "give setup.py:make_setup").to_dict()
    assert d["gates"] is True and d["fix"] == "give setup.py:make_setup"
    assert "gates" not in Check("a.b", "pass", "fine").to_dict()


def _result_classes() -> list[type]:
    for info in pkgutil.walk_packages(campaign.__path__, "campaign."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:     # an optional extra that is not installed
            continue
    found, todo = [], list(Result.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.startswith("campaign.") and c.__module__ != "campaign.results"]


def test_every_result_has_checks_a_schema_and_the_one_to_dict():
    classes = _result_classes()
    assert len(classes) >= 20
    for cls in classes:
        names = set(getattr(cls, "__dataclass_fields__", {}))
        assert "schema" in names or isinstance(getattr(cls, "schema", None), property), cls
        assert "checks" in names or isinstance(getattr(cls, "checks", None), property), cls
        assert "status" not in names and "passed" not in names, cls          # derived, never set by hand
        assert cls.to_dict is Result.to_dict, f"{cls.__name__} overrides to_dict: override fields_dict instead"
