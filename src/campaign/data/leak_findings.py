"""What a leak search found between each pair of splits, and the report made from it: the same for every engine.
An engine finds, per pair of splits (an earlier one indexed, a later one queried), the exact copies, the confirmed
near copies, the label conflicts and the shared group values (PairFindings); findings() turns them into each
check's rows, links, examples and linked pairs (PairFound); build_report() names the example rows and gives the verdict.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .leak_report import (
    CHECK_IDS,
    EXACT,
    GROUP,
    LABEL,
    NEAR,
    LeakExample,
    LeakReport,
    LeakRow,
    PairLeak,
    SplitInfo,
    leak_checks,
    snippet,
    spread,
)
from .sketch import DedupConfig


@dataclass(frozen=True)
class PairFindings:
    """What an engine found between split `a` (indexed) and a later split `b` (queried); rows are each split's
    0-based record numbers.

    exact: (index row, query row) for each query row with an exact copy (its first copy), by query row;
    exact_links: (index, query) pairs of equal text, counted per content hash; near: confirmed (index row, query
    row, Jaccard), sorted; labels: (query row, the first index copy with another label, that label, the query's
    label, index copies with another label), by query row (None: not checked); groups: (group field, query row,
    the value's first index row, value), by field then query row (None: not checked); capped: crowded LSH buckets
    only partly searched."""

    a: int
    b: int
    exact: tuple[tuple[int, int], ...]
    exact_links: int
    near: Sequence[tuple[int, int, float]]
    labels: Sequence[tuple[int, int, str, str, int]] | None = None
    groups: Sequence[tuple[int, int, int, str]] | None = None
    capped: int = 0


@dataclass(frozen=True)
class PairFound:
    """What one check found between split `a` and a later split `b`: distinct leaking rows of b, links, example
    pairs (a row, b row, detail), every linked pair and, for near duplicates, each pair's Jaccard."""

    a: int
    b: int
    rows: int
    links: int
    examples: list[tuple[int, int, str]]
    linked: tuple[tuple[int, int], ...]
    scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class Findings:
    """Every check's PairFound per split pair, the distinct leaking rows of each later split per check (a row
    leaking from two earlier splits counts once), and the notes (crowded buckets)."""

    by_check: dict[str, list[PairFound]]
    leaking: dict[str, dict[int, set[int]]]
    capped: int
    notes: list[str]

    def wanted(self, *, linked: bool = False) -> set[tuple[int, int]]:
        """The (split, row) the examples show (and, with linked, every linked pair's rows)."""
        want: set[tuple[int, int]] = set()
        for pfs in self.by_check.values():
            for pf in pfs:
                want.update((pf.a, x) for x, _, _ in pf.examples)
                want.update((pf.b, y) for _, y, _ in pf.examples)
                if linked:
                    want.update((pf.a, x) for x, _ in pf.linked)
                    want.update((pf.b, y) for _, y in pf.linked)
        return want


def findings(pairs: Sequence[PairFindings], names: Sequence[str], group_fields: Sequence[str], *, examples: int,
             max_bucket: int) -> Findings:
    """Each check's rows, links, examples and linked pairs per split pair, from what the engine found."""
    by_check: dict[str, list[PairFound]] = {c: [] for c in CHECK_IDS}
    leaking: dict[str, dict[int, set[int]]] = {c: {b: set() for b in range(1, len(names))} for c in CHECK_IDS}
    notes: list[str] = []
    for p in pairs:
        a, b = p.a, p.b
        if p.capped:
            notes.append(f"{names[a]} -> {names[b]}: {p.capped} crowded LSH bucket(s) held more than "
                         f"{max_bucket} texts and were only partly searched for near duplicates")
        leaking[EXACT][b].update(q for _, q in p.exact)
        by_check[EXACT].append(PairFound(a, b, len(p.exact), p.exact_links, [
            (x, y, "same normalized text") for x, y in spread(p.exact, examples)], p.exact))
        near_rows = {y for _, y, _ in p.near}
        leaking[NEAR][b].update(near_rows)
        jac = {(x, y): j for x, y, j in p.near}
        by_query = [(x, y) for x, y, _ in sorted(p.near, key=lambda t: (t[1], -t[2]))]
        by_check[NEAR].append(PairFound(a, b, len(near_rows), len(p.near), [
            (x, y, f"Jaccard {jac[x, y]:.2f}") for x, y in spread(by_query, examples)],
            tuple((x, y) for x, y, _ in p.near), tuple(j for _, _, j in p.near)))
        if p.labels is not None:
            leaking[LABEL][b].update(r[0] for r in p.labels)
            by_check[LABEL].append(PairFound(a, b, len(p.labels), sum(r[4] for r in p.labels), [
                (f, q, f"label {lab!r} vs {lq!r}") for q, f, lab, lq, _ in p.labels[:examples]],
                tuple((f, q) for q, f, _, _, _ in p.labels)))
        if p.groups is not None:
            seen_q: set[int] = set()
            glinked: list[tuple[int, int]] = []
            gex: list[tuple[int, int, str]] = []
            links = 0
            for f in range(len(group_fields)):
                shared: dict[str, int] = {}
                for f2, q, fe, v in p.groups:
                    if f2 != f:
                        continue
                    if q not in seen_q:
                        glinked.append((fe, q))
                    seen_q.add(q)
                    if v not in shared:
                        shared[v] = q
                        if len(gex) < examples:
                            gex.append((fe, q, f"{group_fields[f]} = {v!r}"))
                links += len(shared)
            leaking[GROUP][b].update(seen_q)
            by_check[GROUP].append(PairFound(a, b, len(seen_q), links, gex, tuple(glinked)))
    return Findings(by_check, leaking, sum(p.capped for p in pairs), notes)


def build_report(found: Findings, splits: Sequence[SplitInfo], row: Callable[[int, int], LeakRow], *, labels: bool,
           groups: bool, threshold: float, config: DedupConfig, notes: Sequence[str] = ()) -> LeakReport:
    """The report: each check's split pairs with their example rows (row(split, row)), the verdicts, the notes
    (the findings' first, then `notes`)."""
    names = [s.name for s in splits]
    pair_leaks = {cid: [PairLeak(names[pf.a], names[pf.b], pf.rows, splits[pf.b].rows, pf.links, tuple(
        LeakExample(row(pf.a, x).ref, row(pf.b, y).ref, snippet(row(pf.a, x).text), snippet(row(pf.b, y).text), d)
        for x, y, d in pf.examples), linked=pf.linked, scores=pf.scores) for pf in found.by_check[cid]]
        for cid in CHECK_IDS}
    counts = {c: [(len(r), splits[b].rows) for b, r in found.leaking[c].items()] for c in CHECK_IDS}
    checks = leak_checks(pair_leaks, counts, labels=labels, groups=groups, threshold=threshold, capped=found.capped,
                         max_bucket=config.max_bucket)
    return LeakReport(splits=tuple(splits), checks=checks, threshold=threshold, config=config,
                      notes=(*found.notes, *notes))


__all__ = ["Findings", "PairFindings", "PairFound", "build_report", "findings"]
