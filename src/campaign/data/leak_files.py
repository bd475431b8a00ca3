"""What to do about leaks, as files: every leaking pair (to review or to filter with your own tools), and the later
splits written again without their leaking rows, as one set with a manifest and a re-check of what was written.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_json, atomic_write_text, dumps_json, file_set, sha256_file
from ..version import __version__
from .leaks import EXACT, GROUP, LABEL, NEAR, LeakReport, find_leaks
from .read import Dataset, read_dataset
from .write import write_rows

CLEAN_SCHEMA = "campaign.leak_fix/1"
CLEAN_MANIFEST = "leak_fix_manifest.json"
PAIR_COLUMNS = ("check", "index_split", "index_ref", "query_split", "query_ref", "query_line", "query_id", "detail")


def leak_pairs(report: LeakReport, datasets: Mapping[str, Dataset]) -> list[dict[str, Any]]:
    """Every leaking link of every check that ran, one row each: the check, where each side is (file:line and id),
    and what links them (Jaccard, the shared group value, the two labels)."""
    rows = []
    for check in report.checks:
        if check.status == "skipped" and not check.pairs:
            continue
        for pair in check.pairs:
            a, b = datasets[pair.index], datasets[pair.query]
            for k, (i, q) in enumerate(pair.linked):
                rows.append({"check": check.id, "index_split": pair.index, "index_ref": a.ref(i),
                             "query_split": pair.query, "query_ref": b.ref(q), "query_line": b.lines[q],
                             "query_id": b.ids[q] if b.ids is not None else None,
                             "detail": _detail(check.id, pair, k, a, b, i, q)})
    return rows


def _detail(check: str, pair: Any, k: int, a: Dataset, b: Dataset, i: int, q: int) -> str:
    shared = [f"{f} = {b.groups[n][q]!r}" for n, f in enumerate(b.fields.group)
              if check == GROUP and f in a.fields.group and b.groups[n][q] is not None
              and a.groups[a.fields.group.index(f)][i] == b.groups[n][q]]
    return pair_detail(check, pair.scores[k] if pair.scores else None,
                       a.labels[i] if check == LABEL else None, b.labels[q] if check == LABEL else None, shared)


def pair_detail(check: str, score: float | None, label_a: str | None, label_b: str | None,
                shared_groups: list[str]) -> str:
    """What links a leaking pair, as --pairs writes it (the single-machine and the Ray outputs alike)."""
    if check == NEAR and score is not None:
        return f"Jaccard {score:.3f}"
    if check == LABEL:
        return f"label {label_a!r} vs {label_b!r}"
    if check == GROUP:
        return "; ".join(shared_groups) or "shared group"
    return "same normalized text" if check == EXACT else ""


def write_pairs(pairs: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """The pairs as CSV (.csv), TSV (.tsv) or JSONL (.jsonl), written atomically."""
    path = Path(path)
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


def drop_leaking(report: LeakReport, datasets: Mapping[str, Dataset], out_dir: str | os.PathLike[str], *,
                 force: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """Write the splits again into out_dir without the rows of later splits that leak (by any check that ran),
    the removed rows beside them (NAME.leaking.EXT) for review, and a manifest with the hashes and a re-check of
    the written files; all as one set (io.file_set). The first split is copied unchanged.

    Returns the manifest. Raises InputError when out_dir holds an input, or (without force) an earlier set.
    """
    out = Path(out_dir)
    names = list(datasets)
    inputs = {Path(d.path).resolve() for d in datasets.values()}
    targets = [out / Path(datasets[n].path).name for n in names]
    if len({t.name for t in targets}) != len(targets):
        raise InputError("two split files share a file name; rename one before writing them to one folder")
    for t in (*targets, out / CLEAN_MANIFEST):
        if t.resolve() in inputs:
            raise InputError(f"{t}: writing there would overwrite an input; choose another --drop-to folder")
    if (out / CLEAN_MANIFEST).exists() and not force:
        raise InputError(f"{out / CLEAN_MANIFEST} already exists; pass --force to replace it, or choose another folder")
    drop: dict[str, set[int]] = {n: set() for n in names}
    for check in report.checks:
        for pair in check.pairs:
            drop[pair.query].update(q for _, q in pair.linked)
    written = []
    replaces = [t.name for t in targets] + [CLEAN_MANIFEST] + [_leaking_name(t) for t in targets]
    with file_set(out, replaces=replaces) as stage:
        import numpy as np

        clean: dict[str, Dataset] = {}
        for n, target in zip(names, targets):
            ds = datasets[n]
            if n == names[0]:
                shutil.copyfile(ds.path, stage / target.name)
                kept = len(ds)
            else:
                assign = np.zeros(len(ds), dtype=np.int64)
                assign[sorted(drop[n])] = 1
                write_rows(ds, assign, [stage / target.name, stage / _leaking_name(target)])
                kept = len(ds) - len(drop[n])
            written.append({"name": n, "input": ds.path, "input_sha256": ds.sha256, "path": str(target),
                            "rows": kept, "dropped": len(drop[n]),
                            "dropped_path": str(out / _leaking_name(target)) if n != names[0] else None})
        fields = datasets[names[0]].fields
        for n, target in zip(names, targets):
            clean[n] = read_dataset(stage / target.name, fields)
        for w, target in zip(written, targets):
            w["sha256"] = sha256_file(stage / target.name)
        recheck = find_leaks(clean, threshold=0.0, config=report.config, progress=progress)
        recheck = replace(recheck, splits=tuple(replace(s, path=str(t)) for s, t in zip(recheck.splits, targets)))
        if not recheck.passed:
            failing = [c.id for c in recheck.checks if c.status == "fail"]
            raise InputError(f"the rewritten splits still fail {', '.join(failing)}; report this with the files")
        manifest = {"schema": CLEAN_SCHEMA, "campaign_version": __version__,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "dropped_by": [c.id for c in report.checks if c.pairs and c.status != "skipped"],
                    "splits": written, "recheck": recheck.to_dict()}
        atomic_write_json(stage / CLEAN_MANIFEST, manifest)
    return manifest


def _leaking_name(target: Path) -> str:
    return f"{target.stem}.leaking{target.suffix}"
