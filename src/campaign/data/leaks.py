"""Leaks between existing splits: exact duplicates, near duplicates, shared groups, the same text with different
labels. Each earlier split is indexed and every later split queried (train -> eval, train -> test, eval -> test).
find_leaks searches Datasets in memory; check_files is the pipeline over files on either engine: read and search
the splits, then the outputs (every leaking pair, the splits without their leaking rows). The report's types are
in leak_report.py.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import InputError
from .dedup import cross_duplicates
from .engine import Engine, engine_for
from .leak_files import drop_leaking, leak_pairs, write_pairs
from .leak_report import (CHECK_IDS, EXACT, GROUP, LABEL, NEAR, LeakCheck, LeakExample, LeakReport, PairLeak,
                          SplitInfo, leak_check, leak_checks, snippet, spread)
from .read import Dataset, Fields
from .sketch import DedupConfig, Sketches, sketch


def _example(ia: Dataset, i: int, qb: Dataset, q: int, detail: str) -> LeakExample:
    return LeakExample(ia.ref(i), qb.ref(q), snippet(ia.texts[i]), snippet(qb.texts[q]), detail)


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
                _example(da, i, db, q, "same normalized text") for i, q in spread(exact_linked, examples)),
                linked=exact_linked))
            # near
            near_rows = {q for _, q, _ in m.near}
            leaking[NEAR][b].update(near_rows)
            near_sorted = sorted(m.near, key=lambda t: (t[1], -t[2]))
            jac = {(i, q): j for i, q, j in m.near}
            by_check[NEAR].append(PairLeak(a, b, len(near_rows), len(db), len(m.near), tuple(
                _example(da, i, db, q, f"Jaccard {jac[i, q]:.2f}")
                for i, q in spread([(i, q) for i, q, _ in near_sorted], examples)),
                linked=tuple((i, q) for i, q, _ in m.near), scores=tuple(j for _, _, j in m.near)))
            # label conflicts among exact copies, counted from the labels per content hash
            if has_labels:
                by_check[LABEL].append(_label_conflicts(labels_by_digest, sketches[b], m.exact_rows, da, db, a, b,
                                                        examples, leaking[LABEL][b]))
            # shared groups
            if group_fields:
                by_check[GROUP].append(_group_overlap(da, db, a, b, group_fields, examples, leaking[GROUP][b]))
    checks = leak_checks(by_check, {c: [(len(rows), len(named[n])) for n, rows in leaking[c].items()]
                                    for c in CHECK_IDS},
                         labels=has_labels, groups=bool(group_fields), threshold=threshold, capped=capped,
                         max_bucket=config.max_bucket)
    infos = tuple(SplitInfo(n, named[n].path, len(named[n]), named[n].sha256) for n in names)
    return LeakReport(splits=infos, checks=checks, threshold=threshold, config=config, notes=tuple(notes))


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
                drop_to: str | os.PathLike[str] | None = None, force: bool = False, engine: str | Engine = "local",
                address: str | None = None, workers: int | None = None, parts: int | None = None,
                timings: dict[str, float] | None = None) -> LeakReport:
    """Read the splits (train first) and check them for leaks; splits are named by `names` or their file names.

    Args:
        pairs: write every leaking pair there (.csv, .tsv or .jsonl): check, both rows' file:line and id, detail;
            on the ray engine, a folder of JSONL shards and manifest.json.
        drop_to: write the splits into this folder without the later splits' leaking rows (leak_files).
        force: replace an earlier drop_to set.
        engine: "local" (this process, each split a file) or "ray" (Ray Data: each split a file, a folder, a glob
            or an object-store path of shards; refs name the shard's file:line).
        address, workers, parts: the ray engine's cluster (default: RAY_ADDRESS, else a local Ray on `workers`
            CPUs) and the partitions of its shuffles.
        timings: filled with the seconds of each stage of the ray engine, when given.
    Raises:
        InputError: a file has no record (unless allow_empty): nothing in it can be checked, so "no leaks" would
            be a claim about data that is not there.
        EngineError: the Ray cluster lost a worker or node mid-run.
    """
    eng = engine_for(engine, address=address, workers=workers, parts=parts, progress=progress)
    fields = fields or Fields()
    search = eng.leak_search(paths, fields, names=names, threshold=threshold, config=config, examples=examples,
                             skip_bad=skip_bad, allow_empty=allow_empty, search_datasets=find_leaks, timings=timings)
    search.prepare_outputs(pairs=None if pairs is None else Path(pairs),
                           drop_to=None if drop_to is None else Path(drop_to), force=force)
    with eng.session("leaks", f"{len(paths)} splits on Ray: sketches, candidate pairs, verification"):
        found = search.run(want_pairs=pairs is not None)
        report = found.report
        notes = list(found.notes)
        if pairs is not None:
            listed = leak_pairs(report, found)
            where = write_pairs(listed, pairs, shards_of=report if eng.sharded else None)
            notes.append(f"wrote {len(listed):,} leaking pair(s) to {where}"
                         + (f" as JSONL shards with {pairs}/manifest.json" if eng.sharded else ""))
        if drop_to is not None:
            job = found.drop_job(Path(drop_to), force=force)
            dropped = drop_leaking(report, job)
            notes.append(f"wrote the splits to {drop_to} without their {dropped:,} leaking row(s) ({job.kept_as}); "
                         f"the check of the written {job.written_kind} passes")
    return replace(report, notes=report.notes + tuple(notes)) if notes else report


__all__ = ["CHECK_IDS", "EXACT", "GROUP", "LABEL", "NEAR", "LeakCheck", "LeakExample", "LeakReport", "PairLeak",
           "SplitInfo", "check_files", "find_leaks", "leak_check"]
