"""One contract for every verdict, and one way a frozen result becomes JSON.

A result's verdict is its checks. Every Result carries `checks` (a tuple of checks.Check, a field or a property
derived from the result's figures) and its `status` is derived from them, never set by hand (checks.status_of):
  - "fail"          a check failed;
  - "not verified"  no check failed, but a check a "go" depends on (Check.gates) was skipped;
  - "warn"          a check warned (or a skipped check that no "go" depends on is shown as skipped);
  - "pass"          every check passed, or the result has no checks.
The top-level checks hold every check the status depends on, so that a reader recomputes the status from them
(tests/cli/test_json_contract.py does, for every command): a result whose verdict also rests on a nested one lifts
that one's checks to the top (split: the leak check of its written files, whose counts stay under `leaks`).
A command that only informs (cards, models, guide, runs, memory and kv without --card, errors, seeds, a report)
has no checks or informational ones, and its status is "pass"; a command that answers a yes/no question (does it
fit the card, is the candidate no worse, is the setup ready) says so in checks with stable dotted ids
('memory.fits', 'guard.accuracy>=0.9'). The CLI's exit code comes from `status`: 0 pass or warn, 1 fail or not
verified (2 bad input, before any result exists). One exception, on purpose: the run commands (run start, end,
decide, artifact; runs show) print a run's manifest as it is stored, a file format whose `status` is the run's
state (running, completed, failed...), not a verdict; they exit 0.

to_dict() writes `schema`, `campaign_version`, `status`, `checks` first, in that order, then each field in order (a
nested result or check by its own to_dict(), a dataclass field by field, tuples as lists). The `schema` field names
the result and its version ('campaign.seeds/1'); fields in OMIT stay out (bulky per-example data). A part nested in
a result (an example, a split, a card's fit) is a Record: its fields, without the header.

A result whose JSON must differ from its fields overrides `fields_dict()` (never to_dict, so the header stays the
same everywhere): figures rounded for reading, derived figures (a rate) that are not fields, a key order a reader
relies on; each says why."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, ClassVar

HEADER = ("schema", "campaign_version", "status", "checks")


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
    """Mixin for frozen result dataclasses with a `schema` field and `checks` (a field or a property): `status` is
    derived from the checks, to_dict() writes the header first (the module docstring says the rule)."""

    schema: str  # a dataclass field of each result: 'campaign.NAME/1'
    checks: Any  # tuple[Check, ...]: a dataclass field in most results, a property where derived from figures

    @property
    def status(self) -> str:
        """pass | warn | fail | not verified, from the checks (checks.status_of)."""
        from .checks import status_of

        return status_of(self.checks)

    @property
    def passed(self) -> bool:
        """The verdict is a go: status pass or warn (the CLI's exit 0)."""
        return self.status in ("pass", "warn")

    def fields_dict(self) -> dict[str, Any]:
        """The fields after the header, each as plain() writes it (override where the JSON must differ)."""
        return {k: v for k, v in Record.to_dict(self).items() if k not in HEADER}

    def to_dict(self) -> dict[str, Any]:
        from .version import __version__

        head = {"schema": self.schema, "campaign_version": __version__, "status": self.status,
                "checks": [c.to_dict() for c in self.checks]}
        return head | {k: v for k, v in self.fields_dict().items() if k not in HEADER}


class Information(Result):
    """A result that only informs (a list, a catalog, a map, a table of figures): no checks, status pass."""

    @property
    def checks(self) -> tuple[Any, ...]:
        return ()
