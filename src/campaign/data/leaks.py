"""Leaks between existing splits: exact duplicates, near duplicates, shared groups, the same text with different
labels. Each earlier split is indexed and every later split queried (train -> eval, train -> test, eval -> test).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..checks import Check, passed
from ..errors import InputError
from ..results import Record
from .dedup import cross_duplicates
from .sketch import DedupConfig, Sketches, sketch
from .read import Dataset, Fields, read_dataset

SCHEMA = "campaign.leaks/1"
EXACT, NEAR, GROUP, LABEL = "leak.exact_duplicate", "leak.near_duplicate", "leak.group_overlap", "leak.label_conflict"
CHECK_IDS = (EXACT, NEAR, GROUP, LABEL)
SNIPPET = 100  # characters of text shown in an example

_WHY = {
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
class LeakReport:
    """Leak checks between splits; `passed` when no check fails."""

    splits: tuple[SplitInfo, ...]
    checks: tuple[LeakCheck, ...]
    threshold: float
    config: DedupConfig
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    @property
    def passed(self) -> bool:
        return passed(self.checks)

    @property
    def status(self) -> str:
        return "pass" if self.passed else "fail"

    def check(self, check_id: str) -> LeakCheck:
        return next(c for c in self.checks if c.id == check_id)

    def to_dict(self) -> dict[str, Any]:
        # by hand: the derived status leads, with the schema and version, before the splits and checks
        from ..version import __version__

        return {"schema": self.schema, "campaign_version": __version__, "status": self.status,
                "threshold": self.threshold, "splits": [s.to_dict() for s in self.splits],
                "checks": [c.to_dict() for c in self.checks], "config": self.config.to_dict(),
                "notes": list(self.notes)}


def _spread(pairs: Sequence[tuple[int, int]], k: int) -> list[tuple[int, int]]:
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


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"


def _example(ia: Dataset, i: int, qb: Dataset, q: int, detail: str) -> LeakExample:
    return LeakExample(ia.ref(i), qb.ref(q), _snippet(ia.texts[i]), _snippet(qb.texts[q]), detail)


def find_leaks(splits: Mapping[str, Dataset] | Sequence[Dataset], *, threshold: float = 0.0,
               config: DedupConfig | None = None, examples: int = 3, progress: bool | None = None) -> LeakReport:
    """Check every earlier split against every later one (the first is indexed, the others queried).

    Args:
        splits: {name: Dataset} in order (train first), or Datasets named by their file name.
        threshold: the largest tolerated rate of a later split: its distinct leaking rows (from any earlier
            split) / its rows; 0 fails on any leak.
        config: near-duplicate settings (threshold, shingles, seed).
        examples: example pairs kept per split pair and check (>= 1).
    Returns:
        LeakReport with the checks leak.exact_duplicate, leak.near_duplicate, leak.group_overlap,
        leak.label_conflict. A check's rows count each row of a later split once, however many earlier splits
        it leaks from; its rate is the largest such share of a later split. The near-duplicate check is
        `skipped` (never `pass`) when crowded LSH buckets were only partly searched and nothing was found.
    """
    if not 0.0 <= threshold <= 1.0:
        raise InputError(f"leak threshold {threshold!r} is a rate of rows and must be in [0, 1]; use e.g. 0 or 0.01")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise InputError(f"examples {examples!r} must be a positive number of example pairs per check; use e.g. 3")
    named = dict(splits) if isinstance(splits, Mapping) else {d.name: d for d in splits}
    if len(named) < 2:
        raise InputError(f"need at least two splits to compare, got {len(named)}; give e.g. TRAIN EVAL [TEST]")
    config = config or DedupConfig()
    names = list(named)
    sketches: dict[str, Sketches] = {n: sketch(named[n].texts, config, progress=progress, description=f"MinHash {n}")
                                     for n in names}
    by_check: dict[str, list[PairLeak]] = {c: [] for c in CHECK_IDS}
    # distinct leaking rows of each later split, per check (a row leaking from train and val counts once)
    leaking: dict[str, dict[str, set[int]]] = {c: {n: set() for n in names[1:]} for c in CHECK_IDS}
    notes: list[str] = []
    capped = 0
    has_labels = all(named[n].labels is not None for n in names)
    group_fields = [g for g in named[names[0]].fields.group if all(g in named[n].fields.group for n in names)]
    first_rows: dict[str, dict[bytes, int]] = {}
    for n in names[:-1]:
        first_rows[n] = {}
        for i, d in enumerate(sketches[n].digests):
            first_rows[n].setdefault(d, i)
    for ai, a in enumerate(names):
        labels_by_digest = _labels_by_digest(named[a], sketches[a]) if has_labels else {}
        for b in names[ai + 1:]:
            da, db = named[a], named[b]
            m = cross_duplicates(sketches[a], sketches[b])
            if m.capped_buckets:
                capped += m.capped_buckets
                notes.append(f"{a} -> {b}: {m.capped_buckets} crowded LSH bucket(s) held more than "
                             f"{config.max_bucket} texts and were only partly searched for near duplicates")
            # exact: counted per content hash
            leaking[EXACT][b].update(m.exact_rows)
            first_copy = first_rows[a]
            exact_linked = tuple((first_copy[sketches[b].digests[q]], q) for q in m.exact_rows)
            by_check[EXACT].append(PairLeak(a, b, len(m.exact_rows), len(db), m.exact_links, tuple(
                _example(da, i, db, q, "same normalized text") for i, q in _spread(exact_linked, examples)),
                linked=exact_linked))
            # near
            near_rows = {q for _, q, _ in m.near}
            leaking[NEAR][b].update(near_rows)
            near_sorted = sorted(m.near, key=lambda t: (t[1], -t[2]))
            jac = {(i, q): j for i, q, j in m.near}
            by_check[NEAR].append(PairLeak(a, b, len(near_rows), len(db), len(m.near), tuple(
                _example(da, i, db, q, f"Jaccard {jac[i, q]:.2f}")
                for i, q in _spread([(i, q) for i, q, _ in near_sorted], examples)),
                linked=tuple((i, q) for i, q, _ in m.near), scores=tuple(j for _, _, j in m.near)))
            # label conflicts among exact copies, counted from the labels per content hash
            if has_labels:
                by_check[LABEL].append(_label_conflicts(labels_by_digest, sketches[b], m.exact_rows, da, db, a, b,
                                                        examples, leaking[LABEL][b]))
            # shared groups
            if group_fields:
                by_check[GROUP].append(_group_overlap(da, db, a, b, group_fields, examples, leaking[GROUP][b]))
    checks = []
    for cid in CHECK_IDS:
        pairs = tuple(by_check[cid])
        seen, why, fix = _WHY[cid]
        if cid == LABEL and not has_labels:
            checks.append(LeakCheck(cid, "skipped", "no label field given", why, "pass --label FIELD"))
            continue
        if cid == GROUP and not group_fields:
            checks.append(LeakCheck(cid, "skipped", "no group field given", why, "pass --group FIELD"))
            continue
        counts = [(len(rows), len(named[n])) for n, rows in leaking[cid].items()]
        checks.append(leak_check(cid, counts, threshold, capped if cid == NEAR else 0, config.max_bucket, pairs))
    infos = tuple(SplitInfo(n, named[n].path, len(named[n]), named[n].sha256) for n in names)
    return LeakReport(splits=infos, checks=tuple(checks), threshold=threshold, config=config, notes=tuple(notes))


def leak_check(cid: str, counts: Sequence[tuple[int, int]], threshold: float, capped: int, max_bucket: int,
               pairs: tuple[PairLeak, ...]) -> LeakCheck:
    """The verdict of one kind of leak from (distinct leaking rows, rows) of each later split: fail when a split's
    rate exceeds the threshold; a near-duplicate search that left crowded buckets partly searched (capped) is
    never shown as passed."""
    seen, why, fix = _WHY[cid]
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


def _labels_by_digest(da: Dataset, sk: Sketches) -> dict[bytes, dict[str, tuple[int, int]]]:
    """{content hash: {label: (first row, rows)}} over the labelled, non-empty rows of a split."""
    out: dict[bytes, dict[str, tuple[int, int]]] = {}
    for i, (d, t, lab) in enumerate(zip(sk.digests, sk.texts, da.labels or ())):
        if t and lab is not None:
            per = out.setdefault(d, {})
            first, count = per.get(lab, (i, 0))
            per[lab] = (first, count + 1)
    return out


def _label_conflicts(labels_by_digest: dict[bytes, dict[str, tuple[int, int]]], query: Sketches,
                     exact_rows: Sequence[int], da: Dataset, db: Dataset, a: str, b: str, examples: int,
                     leaking: set[int]) -> PairLeak:
    """Rows of db whose exact copies in da carry another label; links = such (da row, db row) pairs, counted."""
    rows = links = 0
    ex: list[LeakExample] = []
    linked: list[tuple[int, int]] = []
    for q in exact_rows:
        lq = db.labels[q] if db.labels is not None else None
        per = labels_by_digest.get(query.digests[q])
        if lq is None or not per:
            continue
        other = [(lab, first, count) for lab, (first, count) in per.items() if lab != lq]
        if not other:
            continue
        rows += 1
        links += sum(count for _, _, count in other)
        leaking.add(q)
        lab, first, _ = min(other, key=lambda o: o[1])
        linked.append((first, q))
        if len(ex) < examples:
            ex.append(_example(da, first, db, q, f"label {lab!r} vs {lq!r}"))
    return PairLeak(a, b, rows, len(db), links, tuple(ex), linked=tuple(linked))


def _group_overlap(da: Dataset, db: Dataset, a: str, b: str, group_fields: list[str], examples: int,
                   leaking_rows: set[int] | None = None) -> PairLeak:
    """Group values (per field) with rows on both sides; rows of db in such a group leak (and are added to
    leaking_rows, the later split's distinct leaking rows)."""
    leaking: set[int] = set()
    linked: list[tuple[int, int]] = []
    links = 0
    ex: list[LeakExample] = []
    for f in group_fields:
        col_a = da.groups[da.fields.group.index(f)]
        col_b = db.groups[db.fields.group.index(f)]
        first_a: dict[str, int] = {}
        for i, v in enumerate(col_a):
            if v is not None:
                first_a.setdefault(v, i)
        shared: dict[str, int] = {}
        for q, v in enumerate(col_b):
            if v is not None and v in first_a:
                if q not in leaking:
                    linked.append((first_a[v], q))
                leaking.add(q)
                if v not in shared:
                    shared[v] = q
                    if len(ex) < examples:
                        ex.append(_example(da, first_a[v], db, q, f"{f} = {v!r}"))
        links += len(shared)
    if leaking_rows is not None:
        leaking_rows.update(leaking)
    return PairLeak(a, b, len(leaking), len(db), links, tuple(ex), linked=tuple(linked))


def check_files(paths: Sequence[str | os.PathLike[str]], fields: Fields | None = None, *, skip_bad: bool = False,
                threshold: float = 0.0, config: DedupConfig | None = None, examples: int = 3,
                names: Sequence[str] | None = None, progress: bool | None = None,
                allow_empty: bool = False, pairs: str | os.PathLike[str] | None = None,
                drop_to: str | os.PathLike[str] | None = None, force: bool = False) -> LeakReport:
    """Read the split files (train first) and check them for leaks; splits are named by `names` or their file
    names.

    Args:
        pairs: write every leaking pair there (.csv, .tsv or .jsonl): check, both rows' file:line and id, detail.
        drop_to: write the splits into this folder without the later splits' leaking rows (data.leak_files).
        force: replace an earlier drop_to set.
    Raises:
        InputError: a file has no record (unless allow_empty): nothing in it can be checked, so "no leaks" would
            be a claim about data that is not there.
    """
    datasets = [read_dataset(p, fields, skip_bad=skip_bad) for p in paths]
    empty = next((d for d in datasets if len(d) == 0), None)
    if empty is not None and not allow_empty:
        bad = f" ({empty.n_bad} bad record(s) skipped)" if empty.n_bad else ""
        raise InputError(f"{empty.path}: no records to check{bad}; give the file that holds the split's rows")
    named: dict[str, Dataset] = {}
    for i, d in enumerate(datasets):
        key = names[i] if names else (d.name if d.name not in named else d.path)
        named[key] = d
    report = find_leaks(named, threshold=threshold, config=config, examples=examples, progress=progress)
    notes = [f"{d.path}: {d.n_bad} bad record(s) skipped" for d in datasets if d.n_bad]
    if pairs is not None or drop_to is not None:
        from .leak_files import drop_leaking, leak_pairs, write_pairs

        if pairs is not None:
            listed = leak_pairs(report, named)
            notes.append(f"wrote {len(listed):,} leaking pair(s) to {write_pairs(listed, pairs)}")
        if drop_to is not None:
            done = drop_leaking(report, named, drop_to, force=force, progress=progress)
            dropped = sum(s["dropped"] for s in done["splits"])
            notes.append(f"wrote the splits to {drop_to} without their {dropped:,} leaking row(s) (kept beside them "
                         "as NAME.leaking.EXT); the check of the written files passes")
    if notes:
        report = replace(report, notes=report.notes + tuple(notes))
    return report


__all__ = ["CHECK_IDS", "LeakCheck", "LeakExample", "LeakReport", "PairLeak", "SplitInfo", "check_files",
           "find_leaks"]
