"""One Check for every command that checks (split, leaks, usage, and the coming `check`): a stable id, a status,
what was seen, why it matters and the fix. A skipped check is never counted as passed."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

STATUSES = ("pass", "fail", "warn", "skipped")


@dataclass(frozen=True)
class Check:
    """id: stable, dotted ('leak.group_overlap'); status: pass | fail | warn | skipped; seen: what was found;
    why: what it costs if ignored; fix: what to do (why and fix may be empty on a pass)."""

    id: str
    status: str
    seen: str
    why: str = ""
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id!r}: status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "seen": self.seen, "why": self.why, "fix": self.fix}


def listed(names: Sequence[str], limit: int = 3) -> str:
    """The first `limit` names and how many more, for a check's one line ('a, b, c and 4 more')."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def passed(checks: Iterable[Check]) -> bool:
    """No check failed (warnings and skipped checks do not fail a result; they are shown as what they are)."""
    return all(c.status != "fail" for c in checks)
