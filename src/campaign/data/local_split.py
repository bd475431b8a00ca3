"""The local engine's split job (split.split_file on engine="local"): the input read whole into memory, its
duplicates found by dedup.find_duplicates, each split written as one file in the input's format, and the files
with split_manifest.json written as one set (io.file_set): an interrupted run leaves the earlier set or nothing.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..io import atomic_write_json, export_folder, file_set, sha256_file
from ..rows import HF_DICT, hf_kind, hf_sha256
from .dedup import DedupResult, find_duplicates
from .leak_report import LeakReport
from .normalize import normalizer_id
from .read import Dataset, Fields, read_dataset, scalar
from .split_clusters import CLUSTERS_NAME, write_clusters
from .split_manifest import MANIFEST_NAME, load_manifest
from .split_result import (
    SplitPart,
    SplitResult,
    SplitSpec,
    iso,
    label_conflict_check,
    ratio_checks,
    unit_blockers,
    written_leak_checks,
)
from .splitter import NO_LABEL
from .units import UnitInputs, describe_largest_unit
from .write import write_rows

if TYPE_CHECKING:
    import numpy as np


class LocalSplitJob:
    """One split of a file on this machine. Made with the output checked (split files and manifest in out, what
    an earlier split there left); read(), unit_inputs(), then inside staged(): write() and check per merge round,
    finish() last."""

    def __init__(self, path: str, out: Path, spec: SplitSpec, fields: Fields, *, force: bool, skip_bad: bool,
                 progress: bool | None) -> None:
        self.path, self.out, self.spec, self.fields = path, out, spec, fields
        self.skip_bad, self.progress = skip_bad, progress
        # a saved Dataset or DatasetDict in (or output "hf"): a DatasetDict out, one save_to_disk folder per split
        self.as_hf = spec.output == "hf" or hf_kind(path) in ("dataset", "dict")
        ext = "" if self.as_hf else Path(path).suffix.lower()
        self.paths = [out / f"{n}{ext}" for n in spec.names]
        self.manifest = out / MANIFEST_NAME
        own = {MANIFEST_NAME: "the manifest", f"{Path(MANIFEST_NAME).stem}.usage.jsonl": "the usage ledger",
               HF_DICT: "the DatasetDict's", CLUSTERS_NAME: "the per-row clusters'"}
        for p in self.paths:
            if p.name in own:
                raise InputError(f"split name {p.stem!r} would write {p.name}, {own[p.name]}'s own file; choose "
                                 "other --names")
        src = Path(path).resolve()
        for p in (*self.paths, self.manifest):
            if p.resolve() == src:
                raise InputError(f"{p}: writing the split there would overwrite the input; choose another --out")
        if self.manifest.is_dir():
            raise InputError(f"{self.manifest}: is a directory where the split writes its manifest; move it or "
                             "choose another --out")
        existing = [p for p in (self.manifest, *self.paths) if p.exists()]
        if existing and not force:
            what = "an earlier split" if self.manifest.exists() else "it would be overwritten"
            raise InputError(f"{existing[0]} already exists ({what}); pass --force to replace it, or choose "
                             "another --out")
        self.stale, self.stale_note = earlier_split_files(self.manifest, self.paths, src) if force else ([], None)
        self.staged_paths: list[Path] = []
        self.dedup: DedupResult | None = None

    def read(self) -> int:
        """Read the input; its usable rows."""
        self.ds = read_dataset(self.path, self.fields, skip_bad=self.skip_bad)
        self.labels, self.dates = self.ds.labels, self.ds.dates
        return len(self.ds)

    def unit_inputs(self) -> UnitInputs:
        """The duplicate clusters (the split's seed) and the group columns the units are formed from."""
        self.dedup = find_duplicates(self.ds.texts, self.spec.config, progress=self.progress)
        # None, "" and NaN are missing group values: they link nothing
        return UnitInputs(self.dedup.cluster_of, groups=[[scalar(v) for v in c] for c in self.ds.groups])

    @contextmanager
    def staged(self) -> Iterator[None]:
        """The set being written (files in a sibling folder), moved into place when the block ends."""
        replaces = [p.name for p in (*self.paths, self.manifest, *self.stale)] + [CLUSTERS_NAME]
        # a DatasetDict holds folders, which a file set does not: the whole folder is staged and swapped in, and
        # only an earlier split's folder (its manifest there) is replaced, never one that holds the input
        stage_set = (export_folder(self.out, force=True, is_export=lambda p: (p / MANIFEST_NAME).is_file(),
                                   protect=[self.path], what="split") if self.as_hf
                     else file_set(self.out, replaces=replaces))
        if self.as_hf:
            self._refuse_other_folders()
        with stage_set as stage:
            self.stage = stage
            self.staged_paths = [stage / p.name for p in self.paths]
            yield
            if self.as_hf and self.out.is_dir():   # the folder's other files (a usage ledger, notes) are kept, as
                for e in os.scandir(self.out):     # a file set keeps them: the same files, hard-linked
                    if e.is_file(follow_symlinks=False) and e.name not in replaces and not (stage / e.name).exists():
                        os.link(e.path, stage / e.name, follow_symlinks=False)

    def _refuse_other_folders(self) -> None:
        """Refuse a folder in out that the earlier split there did not write (its split folders are replaced with
        it): the swap would take it away."""
        if not self.out.is_dir():
            return
        listed: set[str] = set()
        if self.manifest.is_file():
            try:
                listed = {Path(x.get("path", "")).name for x in load_manifest(self.manifest, verify=False)["splits"]}
            except InputError:
                listed = set()
        other = sorted(e.name for e in os.scandir(self.out) if e.is_dir(follow_symlinks=False)
                       and e.name not in listed)
        if other:
            raise InputError(f"{self.out}: holds the folder {other[0]!r}, which no earlier split there wrote; the "
                             "DatasetDict replaces the folder whole, so move it or choose another --out")

    @property
    def written(self) -> list[Path]:
        """The split files as written (to check them)."""
        return self.staged_paths

    def write(self, assign: np.ndarray) -> None:
        write_rows(self.ds, assign, self.staged_paths, as_hf=self.as_hf)
        if self.as_hf:     # what DatasetDict.save_to_disk writes beside the splits' folders
            atomic_write_json(self.stage / HF_DICT, {"splits": list(self.spec.names)})

    def finish(self, assign: np.ndarray, units: np.ndarray, leaks: LeakReport,
               links: Sequence[tuple[int, int]]) -> SplitResult:
        """The split's result, its manifest written into the set."""
        notes: list[str] = []
        seed = self.spec.seed
        if links:
            notes.append(f"the check of the written files (MinHash seed {seed + 1}) found {len(links)} near-duplicate "
                         f"pair(s) across splits that the split's own search (seed {seed}) missed; they were kept "
                         "together and the data split again, so the files written have no such leak")
        assert self.dedup is not None
        result = _result(self.ds, self.fields, assign, units, self.dedup, at_final_paths(leaks, self.paths),
                         self.spec, self.paths, self.staged_paths, self.manifest, skip_bad=self.skip_bad,
                         notes=_stale_notes(notes, self.stale, self.stale_note, self.ds), links=links)
        result = replace(result, clusters=write_clusters(self.stage, self.ds, assign, units, self.spec.names))
        atomic_write_json(self.stage / MANIFEST_NAME, result.to_dict())
        return result


def earlier_split_files(manifest: Path, paths: Sequence[Path], src: Path) -> tuple[list[Path], str | None]:
    """The split files an earlier manifest in the output folder lists that this split will not rewrite (looked up
    by file name inside the folder; never the input), and a note when that manifest cannot be read."""
    if not manifest.exists():
        return [], None
    try:
        old = load_manifest(manifest, verify=False)
    except InputError:
        return [], f"the earlier {manifest.name} could not be read; split files it listed were left in place"
    keep = {p.name for p in paths} | {manifest.name}
    out = []
    for s in old["splits"]:
        name = Path(s.get("path", "")).name
        p = manifest.parent / name
        if name and name not in keep and p.is_file() and p.resolve() != src:
            out.append(p)
    return out, None


def at_final_paths(leaks: LeakReport, paths: Sequence[Path]) -> LeakReport:
    """The leak report with the files' final paths (it was made on the staged copies)."""
    splits = tuple(replace(info, path=str(p)) for info, p in zip(leaks.splits, paths, strict=True))
    stage = {info.path: str(p) for info, p in zip(leaks.splits, paths, strict=True)}

    def moved(ref: str) -> str:
        return next((final + ref[len(tmp):] for tmp, final in stage.items() if ref.startswith(tmp)), ref)

    checks = tuple(replace(c, pairs=tuple(replace(pl, examples=tuple(
        replace(e, index_ref=moved(e.index_ref), query_ref=moved(e.query_ref)) for e in pl.examples))
        for pl in c.pairs)) for c in leaks.checks)
    return replace(leaks, splits=splits, checks=checks)


def _stale_notes(notes: list[str], stale: Sequence[Path], stale_note: str | None, ds: Dataset) -> list[str]:
    if stale:
        notes.append(f"removed {len(stale)} split file(s) of the earlier split: "
                     f"{', '.join(p.name for p in stale)}")
    if stale_note:
        notes.append(stale_note)
    if ds.n_bad:
        notes.append(f"{ds.n_bad} bad record(s) skipped (first: line {ds.bad[0].line}: {ds.bad[0].reason})")
    return notes


def _result(ds: Dataset, fields: Fields, assign: np.ndarray, units: np.ndarray, d: DedupResult,
            leaks: LeakReport, spec: SplitSpec, paths: Sequence[Path], staged: Sequence[Path], manifest: Path, *,
            skip_bad: bool, notes: list[str], links: Sequence[tuple[int, int]] = ()) -> SplitResult:
    """The manifest of a written split: per part its rows, labels, groups, dates and the hash of its file."""
    import numpy as np

    name_t, ratio_t, seed, tolerance = spec.names, spec.ratios, spec.seed, spec.tolerance
    n = len(ds)
    labels = np.asarray([NO_LABEL if v is None else v for v in ds.labels], dtype=object) if ds.labels else None
    label_names = sorted(set(labels.tolist())) if labels is not None else []
    label_total = {lbl: int((labels == lbl).sum()) for lbl in label_names} if labels is not None else {}
    parts = []
    for s, (name, p) in enumerate(zip(name_t, paths, strict=True)):
        rows = np.flatnonzero(assign == s)
        lab = {lbl: int((labels[rows] == lbl).sum()) for lbl in label_names} if labels is not None else {}
        groups = {f: len({ds.groups[i][r] for r in rows.tolist()} - {None}) for i, f in enumerate(fields.group)}
        dates = [ds.dates[r] for r in rows.tolist()] if ds.dates else []
        sha = hf_sha256(staged[s]) if staged[s].is_dir() else sha256_file(staged[s])
        parts.append(SplitPart(name=name, path=str(p), sha256=sha, rows=len(rows),
                               target_fraction=ratio_t[s], fraction=len(rows) / n, labels=lab,
                               label_fractions={k: v / label_total[k] for k, v in lab.items() if label_total[k]},
                               groups=groups, first_date=iso(min(dates)) if dates else None,
                               last_date=iso(max(dates)) if dates else None))
    blockers = unit_blockers(units, labels.tolist() if labels is not None else None,
                             {f: ds.groups[i] for i, f in enumerate(fields.group)}, ds.ref)
    checks, check_notes = ratio_checks(parts, label_total, tolerance, spec.stratify, blockers)
    if ds.labels is not None:
        checks.append(label_conflict_check(d, ds))
    unit_sizes = np.bincount(np.unique(units, return_inverse=True)[1])
    notes = [*check_notes, f"the leak check of the written files used MinHash seed {seed + 1}, not the split's "
             f"{seed}: a near-duplicate pair the split's hashes missed gets a second, independent search", *notes]
    notes.extend(d.notes)
    chain = describe_largest_unit(units, {f: [scalar(v) for v in ds.groups[i]]
                                                    for i, f in enumerate(fields.group)},
                                  d, links=links, smallest_share=min(ratio_t))
    if chain:
        notes.append(chain)
    elif unit_sizes.max() > tolerance * n:
        notes.append(f"the largest unit (group or duplicate cluster) has {int(unit_sizes.max())} rows "
                     f"({unit_sizes.max() / n:.1%} of the data); it moves as one piece")
    return SplitResult(
        input=ds.to_dict(),
        parameters={"ratios": list(ratio_t), "names": list(name_t), "stratify": spec.stratify,
                    "temporal": spec.temporal, "fields": fields.to_dict(), "dedup": spec.config.to_dict(),
                    "tolerance": tolerance, "skip_bad": skip_bad, "leak_check_seed": spec.check_config.seed}
        | ({"output": "hf"} if staged and staged[0].is_dir() else {}),
        normalizer=normalizer_id(strip_punctuation=spec.config.strip_punctuation), seed=seed, parts=tuple(parts),
        units=len(unit_sizes), largest_unit=int(unit_sizes.max()),
        duplicates={"exact_duplicates": d.exact_duplicates, "near_pairs": len(d.near_pairs),
                    "clusters": len(d.clusters), "rows_in_clusters": sum(len(c) for c in d.clusters),
                    "empty_texts": d.n_empty},
        checks=(*checks, *written_leak_checks(leaks)), leaks=leaks, manifest=str(manifest),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=tuple(notes))


__all__ = ["LocalSplitJob", "at_final_paths", "earlier_split_files"]
