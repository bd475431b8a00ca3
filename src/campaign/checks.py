"""One Check for every command that checks: a stable id, a status, what was seen, why it matters and the fix, and
whether a "go" depends on it. A result's status is derived from its checks (status_of); a skipped check is never
counted as passed: one a "go" depends on makes the verdict "not verified"."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("pass", "fail", "warn", "skipped")
VERDICTS = ("pass", "warn", "fail", "not verified")


@dataclass(frozen=True)
class Check:
    """id: stable, dotted ('leak.group_overlap'); status: pass | fail | warn | skipped; seen: what was found (for a
    skipped check: what was not run and why); why: what it costs if ignored; fix: what to do (for a skipped check:
    how to run it); why and fix may be empty on a pass. gates: a "go" depends on this check, so that skipping it
    leaves the verdict "not verified" (set gates=False on a check that only informs, or one that does not apply
    to this setup)."""

    id: str
    status: str
    seen: str
    why: str = ""
    fix: str = ""
    gates: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id!r}: status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "status": self.status, "seen": self.seen, "why": self.why,
                               "fix": self.fix}
        if self.status == "skipped":  # only a skipped check's verdict depends on it: whether the go waits on it
            out["gates"] = self.gates
        return out


def check(id: str, ok: bool, seen: str, why: str = "", fix: str = "", *, warn: bool = False,
          gates: bool = True) -> Check:
    """A check from a yes/no answer: pass when ok, else fail (warn with warn=True); why and fix kept for a pass
    too, so that the JSON says what the check guards."""
    return Check(id, "pass" if ok else "warn" if warn else "fail", seen, why, fix, gates=gates)


def status_of(checks: Iterable[Check]) -> str:
    """A verdict from checks: fail if one failed; else not verified if one a "go" depends on was skipped; else warn
    if one warned; else pass (no checks: pass, a result that only informs)."""
    seen = list(checks)
    if any(c.status == "fail" for c in seen):
        return "fail"
    if any(c.status == "skipped" and c.gates for c in seen):
        return "not verified"
    if any(c.status == "warn" for c in seen):
        return "warn"
    return "pass"


def listed(names: Sequence[str], limit: int = 3) -> str:
    """The first `limit` names and how many more, for a check's one line ('a, b, c and 4 more')."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")

