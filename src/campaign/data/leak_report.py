"""What a leak search reports, whichever engine ran it: the checks (exact and near duplicates, shared groups,
label conflicts) per split pair, with counts, rates, example pairs and the verdict of each check.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import Check
from ..results import Record, Result
from .read import Dataset
from .sketch import DedupConfig

SCHEMA = "campaign.leaks/1"
EXACT, NEAR, GROUP, LABEL = "leak.exact_duplicate", "leak.near_duplicate", "leak.group_overlap", "leak.label_conflict"
CHECK_IDS = (EXACT, NEAR, GROUP, LABEL)
SNIPPET = 100  # characters of text shown in an example

WHY = {  # per check: what was seen, why it matters, how to fix it
    EXACT: ("the same text (after normalization) is in both splits",
            "the model has seen the answer; the score measures memory, not generalization",
            "drop the copies from the later split, or re-split with `campaign split`"),
    NEAR: ("near-duplicate texts (Jaccard of shingles >= the threshold) are in both splits",
           "a few edited words still give the answer away; scores come out optimistic",
           "drop them from the later split, or re-split with `campaign split` (clusters stay on one side)"),
    GROUP: ("a group value (user, document, source, patient...) has rows in both splits",
            "the model learns the group's quirks and is scored on the same group: an optimistic score",
            "split by group with `campaign split --group FIELD`"),
    LABEL: ("the same text carries different labels in the two splits",
            "label noise or a task ambiguity: one of the two is counted wrong whatever the model does",
            "fix the labels, or drop the conflicting rows"),
}


@dataclass(frozen=True)
class LeakRow:
    """One row of a split as the report's examples and the leak outputs show it: where it is (file:line), its
    text, line number, id, label and group values."""

    ref: str
    text: str
    line: int
    id: str | None
    label: str | None
    groups: dict[str, str | None]     # group field -> value (None where missing)

    @classmethod
    def of(cls, ds: Dataset, i: int) -> LeakRow:
        return cls(ds.ref(i), ds.texts[i], ds.lines[i], None if ds.ids is None else ds.ids[i],
                   None if ds.labels is None else ds.labels[i],
                   {f: ds.groups[n][i] for n, f in enumerate(ds.fields.group)})


@dataclass(frozen=True)
class LeakExample(Record):
    """One leaking pair: where each side came from, a snippet of each, and what links them."""

    index_ref: str
    query_ref: str
    index_text: str
    query_text: str
    detail: str


@dataclass(frozen=True)
class PairLeak:
    """A check between an indexed split and a queried later split.

    rows: rows of the queried split that leak; rate = rows / query_rows; links: pairs of rows (duplicates,
    conflicts) or shared group values (group overlap).
    """

    index: str
    query: str
    rows: int
    query_rows: int
    links: int
    examples: tuple[LeakExample, ...] = ()
    # every linked (index row, query row), 0-based record indices: each leaking query row with a row it leaks
    # from (exact: the first copy; near: every confirmed pair; group: the first row of the group; label: the
    # first copy with another label)
    linked: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    scores: tuple[float, ...] = field(default=(), repr=False, compare=False)   # near: each linked pair's Jaccard

    @property
    def rate(self) -> float:
        return self.rows / self.query_rows if self.query_rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        # by hand: the rate is derived and rounded for reading, and the linked rows and scores stay out (bulky;
        # --pairs writes them)
        return {"index": self.index, "query": self.query, "rows": self.rows, "query_rows": self.query_rows,
                "rate": round(self.rate, 6), "links": self.links, "examples": [e.to_dict() for e in self.examples]}


@dataclass(frozen=True)
class LeakCheck(Check):
    """One kind of leak over every split pair (a Check with counts). rows: distinct leaking rows summed over the
    later splits (a row leaking from two earlier splits counts once); rate: the largest share of leaking rows in a
    later split. status: pass, fail (a later split's rate exceeds the threshold) or skipped (no label or group
    field to check, or a search that could not be completed)."""

    rows: int = 0
    rate: float = 0.0
    pairs: tuple[PairLeak, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        # by hand: Check's fields first, then the counts, the rate rounded for reading
        return {**super().to_dict(), "rows": self.rows, "rate": round(self.rate, 6),
                "pairs": [p.to_dict() for p in self.pairs]}


@dataclass(frozen=True)
class SplitInfo(Record):
    """One split file checked: its name, path, rows and content hash."""

    name: str
    path: str
    rows: int
    sha256: str | None


@dataclass(frozen=True)
class LeakReport(Result):
    """Leak checks between splits. status (results.Result): fail when a check fails; not verified when the
    near-duplicate search could only partly search crowded buckets (a skipped check the verdict waits on); else
    pass. The label and group checks skipped for want of their fields do not hold the verdict."""

    splits: tuple[SplitInfo, ...]
    checks: tuple[LeakCheck, ...]
    threshold: float
    config: DedupConfig
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    def check(self, check_id: str) -> LeakCheck:
        return next(c for c in self.checks if c.id == check_id)

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the threshold before the splits (as the report reads), the config by its own to_dict
        return {"threshold": self.threshold, "splits": [s.to_dict() for s in self.splits],
                "config": self.config.to_dict(), "notes": list(self.notes)}


def spread(pairs: Sequence[tuple[int, int]], k: int) -> list[tuple[int, int]]:
    """Up to k pairs, first those whose rows no earlier pick uses on either side (a row with many copies does not
    fill every example), then the rest in order."""
    picked: list[tuple[int, int]] = []
    seen_i: set[int] = set()
    seen_q: set[int] = set()
    for i, q in pairs:
        if len(picked) == k:
            return picked
        if i not in seen_i and q not in seen_q:
            picked.append((i, q))
            seen_i.add(i)
            seen_q.add(q)
    rest = [p for p in pairs if p not in set(picked)]
    return picked + rest[:k - len(picked)]


def snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"


def leak_checks(pairs: Mapping[str, Sequence[PairLeak]], counts: Mapping[str, Sequence[tuple[int, int]]], *,
                labels: bool, groups: bool, threshold: float, capped: int, max_bucket: int) -> tuple[LeakCheck, ...]:
    """The four checks of a search (either engine), in CHECK_IDS order, from each check's split pairs and its
    (distinct leaking rows, rows) per later split: the label and group checks skipped without their fields, the
    near-duplicate check told of the crowded buckets (capped) it could only partly search."""
    checks = []
    for cid in CHECK_IDS:
        why = WHY[cid][1]
        # without a label (group) field the check does not apply: the verdict does not wait on it
        if cid == LABEL and not labels:
            checks.append(LeakCheck(cid, "skipped", "no label field given", why, "pass --label FIELD", gates=False))
        elif cid == GROUP and not groups:
            checks.append(LeakCheck(cid, "skipped", "no group field given", why, "pass --group FIELD", gates=False))
        else:
            checks.append(leak_check(cid, counts[cid], threshold, capped if cid == NEAR else 0, max_bucket,
                                     tuple(pairs[cid])))
    return tuple(checks)


def leak_check(cid: str, counts: Sequence[tuple[int, int]], threshold: float, capped: int, max_bucket: int,
               pairs: tuple[PairLeak, ...]) -> LeakCheck:
    """The verdict of one kind of leak from (distinct leaking rows, rows) of each later split: fail when a split's
    rate exceeds the threshold; a near-duplicate search that left crowded buckets partly searched (capped) is
    never shown as passed."""
    seen, why, fix = WHY[cid]
    rows = sum(k for k, _ in counts)
    rate = max((k / n for k, n in counts if n), default=0.0)
    status = "fail" if any(k and k / n > threshold for k, n in counts) else "pass"
    seen = f"{rows} row(s) in later splits: {seen}" if rows else "none found"
    if capped and status == "pass":
        status = "skipped"
        seen = (f"incomplete: {capped} crowded LSH bucket(s) were only partly searched; "
                f"{'none found' if not rows else seen} in the part searched")
        fix = (f"raise the bucket cap above {max_bucket} (--max-bucket, DedupConfig.max_bucket), or "
               "drop the mass-repeated boilerplate texts that crowd the buckets")
    return LeakCheck(cid, status, seen, why, fix, rows=rows, rate=rate, pairs=pairs)


__all__ = ["CHECK_IDS", "EXACT", "GROUP", "LABEL", "NEAR", "SCHEMA", "WHY", "LeakCheck", "LeakExample",
           "LeakReport", "LeakRow", "PairLeak", "SplitInfo", "leak_check", "leak_checks", "snippet", "spread"]
