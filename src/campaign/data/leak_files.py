"""What to do about leaks, as files, on either engine: every leaking pair (to review or to filter with your own
tools), and the splits written again without their leaking rows, as one set with a manifest and a re-check of what
was written (an engine's DropJob writes, re-checks and describes the set; drop_leaking decides what to drop).
"""
from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError
from ..io import atomic_write_text, sha256_file
from ..strict_json import dumps_json
from .leak_report import EXACT, GROUP, LABEL, NEAR, LeakReport, LeakRow
from .read import Dataset
from .shards import finish_shard_set

CLEAN_SCHEMA = "campaign.leak_fix/1"
CLEAN_MANIFEST = "leak_fix_manifest.json"
PAIRS_SCHEMA = "campaign.leak_pairs_shards/1"
PAIRS_PER_SHARD = 100_000
PAIR_COLUMNS = ("check", "index_split", "index_ref", "query_split", "query_ref", "query_line", "query_id", "detail",
                "index_line", "index_id", "similarity")


class Rows(Protocol):
    """Where a search's rows are shown from: row `row` of split `split` (engine-neutral)."""

    def row(self, split: str, row: int) -> LeakRow: ...


class DropJob(Protocol):
    """An engine's writing of the splits without their leaking rows, as one set: staged() holds the set while it is
    written (the manifest last), write(drop) writes each split without the rows `drop` names ({split: rows}),
    recheck() searches what was written, finish() writes the manifest and gives the rows dropped."""

    kept_as: str            # where the dropped rows are kept, as the note says it
    written_kind: str       # "files" or "shards"

    def staged(self) -> AbstractContextManager[Any]: ...

    def write(self, drop: Mapping[str, set[int]]) -> Any: ...

    def recheck(self) -> LeakReport: ...

    def finish(self, written: Any, recheck: LeakReport, dropped_by: list[str]) -> int: ...


def leak_pairs(report: LeakReport, rows: Mapping[str, Dataset] | Rows) -> list[dict[str, Any]]:
    """Every leaking link of every check that ran, one row each: the check, where each side is (file:line and id;
    the evaluation row's line and id and the training row's, as columns of their own), and what links them
    (Jaccard, the shared group value, the two labels; `similarity`: the Jaccard of a near pair, 1.0 for an exact
    copy, empty otherwise). rows: the splits' Datasets by name, or an engine's search (its row())."""
    row: Callable[[str, int], LeakRow] = rows.row if not isinstance(rows, Mapping) else \
        (lambda split, i: LeakRow.of(rows[split], i))
    out = []
    for check in report.checks:
        if check.status == "skipped" and not check.pairs:
            continue
        for pair in check.pairs:
            for k, (i, q) in enumerate(pair.linked):
                a, b = row(pair.index, i), row(pair.query, q)
                shared = [f"{f} = {v!r}" for f, v in b.groups.items()
                          if check.id == GROUP and v is not None and f in a.groups and a.groups[f] == v]
                score = pair.scores[k] if pair.scores else None
                similarity = round(score, 6) if check.id == NEAR and score is not None else \
                    1.0 if check.id == EXACT else None
                out.append({"check": check.id, "index_split": pair.index, "index_ref": a.ref,
                            "query_split": pair.query, "query_ref": b.ref, "query_line": b.line, "query_id": b.id,
                            "detail": pair_detail(check.id, score, a.label, b.label, shared),
                            "index_line": a.line, "index_id": a.id, "similarity": similarity})
    return out


def pair_detail(check: str, score: float | None, label_a: str | None, label_b: str | None,
                shared_groups: list[str]) -> str:
    """What links a leaking pair, as --pairs writes it."""
    if check == NEAR and score is not None:
        return f"Jaccard {score:.3f}"
    if check == LABEL:
        return f"label {label_a!r} vs {label_b!r}"
    if check == GROUP:
        return "; ".join(shared_groups) or "shared group"
    return "same normalized text" if check == EXACT else ""


def write_pairs(pairs: list[dict[str, Any]], path: str | os.PathLike[str], *,
                shards_of: LeakReport | None = None) -> Path:
    """The pairs as CSV (.csv), TSV (.tsv) or JSONL (.jsonl), written atomically; with shards_of (the report of a
    search on shards), as a folder of JSONL shards (pairs-00000.jsonl ...) and its manifest.json, written last."""
    path = Path(path)
    if shards_of is not None:
        return _pair_shards(pairs, path, shards_of)
    ext = path.suffix.lower()
    if ext in (".csv", ".tsv"):
        buf = io.StringIO()
        w = csv.DictWriter(buf, PAIR_COLUMNS, delimiter="," if ext == ".csv" else "\t", lineterminator="\n")
        w.writeheader()
        w.writerows(pairs)
        return atomic_write_text(path, buf.getvalue())
    if ext in (".jsonl", ".ndjson"):
        return atomic_write_text(path, "".join(dumps_json(p, indent=None) for p in pairs))
    raise InputError(f"{path}: write the pairs as .csv, .tsv or .jsonl")


def _pair_shards(pairs: list[dict[str, Any]], out: Path, report: LeakReport) -> Path:
    lines = [dumps_json(p, indent=None) for p in pairs]
    shards = []
    for k, start in enumerate(range(0, max(len(lines), 1), PAIRS_PER_SHARD)):
        name = f"pairs-{k:05d}.jsonl"
        chunk = lines[start:start + PAIRS_PER_SHARD]
        atomic_write_text(out / name, "".join(chunk))
        shards.append({"path": name, "rows": len(chunk), "sha256": sha256_file(out / name)})
    names = {s["path"] for s in shards}
    for e in os.scandir(out):                                 # an earlier set's shards beyond this one's
        if e.is_file() and e.name.startswith("pairs-") and e.name.endswith(".jsonl") and e.name not in names:
            os.unlink(e.path)
    finish_shard_set(out, PAIRS_SCHEMA, shards, config=report.config.to_dict(),
                     splits=[s.to_dict() for s in report.splits])
    return out


def rows_to_drop(report: LeakReport, *, both_sides: bool = False) -> dict[str, set[int]]:
    """{split: its rows that leak from an earlier split, by any check that ran} (the first split: none); with
    both_sides, the earlier split's rows of each exact or near-duplicate link too (a duplicate cluster goes from
    every split, training included)."""
    drop: dict[str, set[int]] = {s.name: set() for s in report.splits}
    for check in report.checks:
        for pair in check.pairs:
            drop[pair.query].update(q for _, q in pair.linked)
            if both_sides and check.id in (EXACT, NEAR):
                drop[pair.index].update(i for i, _ in pair.linked)
    return drop


def drop_leaking(report: LeakReport, job: DropJob, *, clusters: bool = False) -> int:
    """Write the splits again without the rows of later splits that leak (by any check that ran), the removed rows
    beside them for review, and a manifest with the hashes and a re-check of the written splits, all as one set
    (the first split is copied unchanged). With clusters, every row of each exact or near-duplicate cluster that
    crosses splits goes, in every split (the training split's copies too, and their copies within the split: the
    job's whole_clusters). Returns the rows dropped.

    Raises:
        InputError: the target holds an input, or (without force) an earlier set; or the re-check still fails.
    """
    with job.staged():
        drop = rows_to_drop(report, both_sides=clusters)
        if clusters:
            drop = job.whole_clusters(drop)     # type: ignore[attr-defined]  # the local engine's
        written = job.write(drop)
        recheck = job.recheck()
        if recheck.status == "fail":
            failing = [c.id for c in recheck.checks if c.status == "fail"]
            raise InputError(f"the rewritten splits still fail {', '.join(failing)}; report this with the files")
        return job.finish(written, recheck, [c.id for c in report.checks if c.pairs and c.status != "skipped"])


def leaking_name(target: Path) -> str:
    """The file of a split's dropped rows beside it: NAME.leaking.EXT."""
    return f"{target.stem}.leaking{target.suffix}"


__all__ = ["CLEAN_MANIFEST", "CLEAN_SCHEMA", "PAIRS_SCHEMA", "PAIR_COLUMNS", "DropJob", "Rows", "drop_leaking",
           "leak_pairs", "leaking_name", "pair_detail", "rows_to_drop", "write_pairs"]
