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
from .leak_findings import PairFindings, build_report, findings
from .leak_report import (
    CHECK_IDS,
    EXACT,
    GROUP,
    LABEL,
    NEAR,
    LeakCheck,
    LeakExample,
    LeakReport,
    LeakRow,
    PairLeak,
    SplitInfo,
    leak_check,
)
from .read import Dataset, Fields
from .sketch import DedupConfig, Sketches, sketch


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
    has_labels = all(named[n].labels is not None for n in names)
    group_fields = [g for g in named[names[0]].fields.group if all(g in named[n].fields.group for n in names)]
    first_rows: dict[str, dict[bytes, int]] = {}
    for n in names[:-1]:
        first_rows[n] = {}
        for i, d in enumerate(sketches[n].digests):
            first_rows[n].setdefault(d, i)
    pairs = []
    for ai, a in enumerate(names):
        labels_by_digest = _labels_by_digest(named[a], sketches[a]) if has_labels else {}
        for bi, b in enumerate(names[ai + 1:], ai + 1):
            m = cross_duplicates(sketches[a], sketches[b])
            first_copy = first_rows[a]
            pairs.append(PairFindings(
                ai, bi, tuple((first_copy[sketches[b].digests[q]], q) for q in m.exact_rows), m.exact_links, m.near,
                _label_rows(labels_by_digest, sketches[b], m.exact_rows, named[b]) if has_labels else None,
                _group_rows(named[a], named[b], group_fields) if group_fields else None, m.capped_buckets))
    infos = tuple(SplitInfo(n, named[n].path, len(named[n]), named[n].sha256) for n in names)
    return build_report(findings(pairs, names, group_fields, examples=examples, max_bucket=config.max_bucket), infos,
                  lambda s, i: LeakRow.of(named[names[s]], i), labels=has_labels, groups=bool(group_fields),
                  threshold=threshold, config=config)


def _labels_by_digest(da: Dataset, sk: Sketches) -> dict[bytes, dict[str, tuple[int, int]]]:
    """{content hash: {label: (first row, rows)}} over the labelled, non-empty rows of a split."""
    out: dict[bytes, dict[str, tuple[int, int]]] = {}
    if da.labels is None:
        return out
    for i, (d, t, lab) in enumerate(zip(sk.digests, sk.texts, da.labels, strict=True)):
        if t and lab is not None:
            per = out.setdefault(d, {})
            first, count = per.get(lab, (i, 0))
            per[lab] = (first, count + 1)
    return out


def _label_rows(labels_by_digest: dict[bytes, dict[str, tuple[int, int]]], query: Sketches,
                exact_rows: Sequence[int], db: Dataset) -> list[tuple[int, int, str, str, int]]:
    """Rows of db whose exact copies in the index split carry another label: (row, the first copy with another
    label, that label, the row's label, copies with another label)."""
    out = []
    for q in exact_rows:
        lq = db.labels[q] if db.labels is not None else None
        per = labels_by_digest.get(query.digests[q])
        if lq is None or not per:
            continue
        other = [(lab, first, count) for lab, (first, count) in per.items() if lab != lq]
        if other:
            lab, first, _ = min(other, key=lambda o: o[1])
            out.append((q, first, lab, lq, sum(count for _, _, count in other)))
    return out


def _group_rows(da: Dataset, db: Dataset, group_fields: list[str]) -> list[tuple[int, int, int, str]]:
    """Rows of db holding a group value that da holds too, per group field: (field, row, the value's first row
    in da, value)."""
    out: list[tuple[int, int, int, str]] = []
    for k, f in enumerate(group_fields):
        col_a = da.groups[da.fields.group.index(f)]
        col_b = db.groups[db.fields.group.index(f)]
        first_a: dict[str, int] = {}
        for i, v in enumerate(col_a):
            if v is not None:
                first_a.setdefault(v, i)
        out.extend((k, q, first_a[v], v) for q, v in enumerate(col_b) if v is not None and v in first_a)
    return out


def dataset_dict_splits(paths: Sequence[str | os.PathLike[str]], names: Sequence[str] | None
                        ) -> tuple[list[str | os.PathLike[str]], Sequence[str] | None]:
    """The paths with each Hugging Face DatasetDict folder in them replaced by its splits' folders, in the order
    its dataset_dict.json lists them (named by their split names when no names were given and the paths are one
    DatasetDict)."""
    from ..rows import hf_kind, hf_splits

    out: list[str | os.PathLike[str]] = []
    for p in paths:
        out += [Path(p) / s for s in hf_splits(p)] if hf_kind(p) == "dict" else [p]
    if names is None and len(paths) == 1 and len(out) > 1:
        names = [Path(p).name for p in out]
    return out, names


def check_files(paths: Sequence[str | os.PathLike[str]], fields: Fields | None = None, *, skip_bad: bool = False,
                threshold: float = 0.0, config: DedupConfig | None = None, examples: int = 3,
                names: Sequence[str] | None = None, progress: bool | None = None,
                allow_empty: bool = False, pairs: str | os.PathLike[str] | None = None,
                drop_to: str | os.PathLike[str] | None = None, force: bool = False, drop_clusters: bool = False,
                engine: str | Engine = "local",
                address: str | None = None, workers: int | None = None, parts: int | None = None,
                timings: dict[str, float] | None = None) -> LeakReport:
    """Read the splits (train first) and check them for leaks; splits are named by `names` or their file names.
    A split may be a Hugging Face dataset (a save_to_disk folder or an .arrow file); a DatasetDict folder stands
    for its splits, in its order.

    Args:
        pairs: write every leaking pair there (.csv, .tsv or .jsonl): check, both rows' file:line and id, detail;
            on the ray engine, a folder of JSONL shards and manifest.json.
        drop_to: write the splits into this folder without the later splits' leaking rows (leak_files).
        force: replace an earlier drop_to set.
        drop_clusters: drop_to drops every row of each exact or near-duplicate cluster that crosses splits, from
            every split (the training split's copies too), not only the later splits' leaking rows (local engine).
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
    paths, names = dataset_dict_splits(paths, names)
    if drop_clusters and (drop_to is None or eng.name != "local"):
        raise InputError("dropping whole duplicate clusters writes the splits with --drop-to, on the local engine; "
                         "add --drop-to FOLDER (and leave out --engine ray)")
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
            dropped = drop_leaking(report, job, clusters=drop_clusters)
            what = (f"the {dropped:,} row(s) of the duplicate clusters that crossed splits, from every split"
                    if drop_clusters else f"their {dropped:,} leaking row(s)")
            notes.append(f"wrote the splits to {drop_to} without {what} ({job.kept_as}); "
                         f"the check of the written {job.written_kind} passes")
    return replace(report, notes=report.notes + tuple(notes)) if notes else report


__all__ = ["CHECK_IDS", "EXACT", "GROUP", "LABEL", "NEAR", "LeakCheck", "LeakExample", "LeakReport", "PairLeak",
           "SplitInfo", "check_files", "find_leaks", "leak_check"]
