"""Leak-free splits: groups and duplicate clusters are atomic units; ratios are met as fractions of rows (per label
when stratified); a temporal split orders units by date. Writes the split files in the input's format and a
manifest that records parameters, counts, hashes and the leak check of the written files.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks import Check, passed
from ..errors import InputError
from .dedup import DedupResult, find_duplicates
from .sketch import DedupConfig, mix64, mix_int
from .leaks import NEAR, LeakReport, check_files
from .normalize import normalizer_id
from ..io import atomic_write_json, file_set, input_file, load_json
from ..validate import JsonObject
from .read import Dataset, Fields, _scalar, read_dataset
from .units import atomic_units, describe_largest_unit, label_conflicts
from .write import write_rows

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "campaign.split/1"
MANIFEST_NAME = "split_manifest.json"
DEFAULT_NAMES = {1: ("all",), 2: ("train", "test"), 3: ("train", "val", "test")}
_NO_LABEL = "(none)"


def parse_ratios(ratios: str | Sequence[float]) -> tuple[float, ...]:
    """'80/10/10', '0.8,0.1,0.1', '8:1:1' or numbers -> fractions summing to 1."""
    if isinstance(ratios, str):
        parts = [p for p in re.split(r"[/,:\s]+", ratios.strip()) if p]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise InputError(f"ratios {ratios!r} are not numbers; write e.g. 80/10/10 or 0.8,0.1,0.1") from None
    else:
        values = [float(v) for v in ratios]
    if len(values) < 2 or any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError(f"ratios {ratios!r} need two or more positive parts; write e.g. 80/10/10")
    total = sum(values)
    return tuple(v / total for v in values)


def split_names(names: str | Sequence[str] | None, k: int) -> tuple[str, ...]:
    """Names of the k splits: given ('train,val,test'), or train/test, train/val/test, split1..k."""
    if names is None:
        return DEFAULT_NAMES.get(k, tuple(f"split{i + 1}" for i in range(k)))
    out = tuple(n.strip() for n in (names.split(",") if isinstance(names, str) else names))
    if len(out) != k or len(set(out)) != k or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) and n.strip(".")
                                                       for n in out):
        raise InputError(f"split names {names!r} must be {k} distinct names of letters, digits, '_', '-' or '.' "
                         f"(not only dots; one per ratio); write e.g. train,val,test")
    return out


def _seeded_keys(n: int, seed: int, salt: int) -> "np.ndarray":
    """n pseudo-random uint64 keys, the same on every machine for (seed, salt): the tie-break order."""
    import numpy as np

    return mix64(np.arange(n, dtype=np.uint64) ^ np.uint64(mix_int(seed * 0x9E3779B97F4A7C15 + salt)))


def assign_units(unit_of: "np.ndarray", ratios: Sequence[float], *, labels: Sequence[Any] | None = None,
                 seed: int = 0) -> "np.ndarray":
    """Split index per row, moving whole units: largest units first (ties in a seeded order), each to the split
    where it most reduces the squared shortfall against the targets, in rows and, with labels, in rows per label.

    Targets are ratio x rows (and ratio x rows of each label); each label's term is weighted by its share of rows,
    so every row counts the same. Small units placed last fill the remainders, which is what meets the ratios.
    """
    import numpy as np

    n = len(unit_of)
    k = len(ratios)
    _, unit = np.unique(unit_of, return_inverse=True)
    n_units = int(unit.max()) + 1 if n else 0
    size = np.bincount(unit, minlength=n_units)
    if labels is not None:
        lab_names, lab = np.unique(np.asarray([_NO_LABEL if v is None else str(v) for v in labels], dtype=object),
                                   return_inverse=True)
    else:
        lab_names, lab = np.array([_NO_LABEL], dtype=object), np.zeros(n, dtype=np.int64)
    n_lab = len(lab_names)
    # per-unit (label, count) lists
    pair = unit.astype(np.int64) * n_lab + lab
    upair, ucount = np.unique(pair, return_counts=True)
    pu, pl = upair // n_lab, upair % n_lab
    starts = np.searchsorted(pu, np.arange(n_units))
    ends = np.searchsorted(pu, np.arange(n_units), side="right")
    label_total = np.bincount(lab, minlength=n_lab).astype(float)
    order = np.lexsort((_seeded_keys(n_units, seed, 1), -size))
    target = [r * n for r in ratios]
    ltarget = [[r * t for t in label_total] for r in ratios]
    count = [0.0] * k
    lcount = [[0.0] * n_lab for _ in range(k)]
    w_total = 1.0 / max(n, 1) ** 2
    w_label = [1.0 / (max(n, 1) * t) if t else 0.0 for t in label_total]
    stratified = labels is not None
    out_unit = np.empty(n_units, dtype=np.int64)
    pl_list, pc_list = pl.tolist(), ucount.tolist()
    starts_l, ends_l, size_l = starts.tolist(), ends.tolist(), size.tolist()
    for u in order.tolist():
        z = size_l[u]
        best, best_key = 0, None
        for s in range(k):
            cost = w_total * z * (2 * (count[s] - target[s]) + z)
            if stratified:
                for p in range(starts_l[u], ends_l[u]):
                    lbl, c = pl_list[p], pc_list[p]
                    cost += w_label[lbl] * c * (2 * (lcount[s][lbl] - ltarget[s][lbl]) + c)
            key = (cost, -(target[s] - count[s]) / target[s])
            if best_key is None or key < best_key:
                best, best_key = s, key
        out_unit[u] = best
        count[best] += z
        for p in range(starts_l[u], ends_l[u]):
            lcount[best][pl_list[p]] += pc_list[p]
    return out_unit[unit]


def assign_temporal(unit_of: "np.ndarray", dates: Sequence[float], ratios: Sequence[float], *,
                    seed: int = 0) -> "np.ndarray":
    """Split index per row for a temporal split: units ordered by their latest date (ties in a seeded order) fill
    the splits in order; a unit goes to the next split once its middle row would pass the current split's
    cumulative target. Every earlier split's units end no later than any later split's units end."""
    import numpy as np

    n = len(unit_of)
    _, unit = np.unique(unit_of, return_inverse=True)
    n_units = int(unit.max()) + 1 if n else 0
    size = np.bincount(unit, minlength=n_units)
    latest = np.full(n_units, -np.inf)
    np.maximum.at(latest, unit, np.asarray(dates, dtype=float))
    order = np.lexsort((_seeded_keys(n_units, seed, 2), latest))
    bounds = np.cumsum(ratios) * n
    out_unit = np.empty(n_units, dtype=np.int64)
    done, s = 0.0, 0
    for u in order.tolist():
        z = size[u]
        while s < len(ratios) - 1 and done + z / 2 > bounds[s]:
            s += 1
        out_unit[u] = s
        done += z
    return out_unit[unit]


class LeakFreeSplitter:
    """scikit-learn style splitter: `split(X, y=None, groups=None)` yields one tuple of row-index arrays, one per
    ratio (train, val, test). Rows sharing a group or a duplicate cluster (exact or near, found in X) never
    straddle splits; with `stratify`, ratios hold per label of y; with `temporal`, pass `dates=` to split().

    Attributes after split(): `units_` (unit id per row), `dedup_` (the DedupResult).
    """

    def __init__(self, ratios: str | Sequence[float] = (0.8, 0.1, 0.1), *, stratify: bool = True,
                 temporal: bool = False, seed: int = 0, dedup: DedupConfig | None = None,
                 progress: bool | None = None) -> None:
        self.ratios = parse_ratios(ratios)
        self.stratify, self.temporal, self.seed = stratify, temporal, seed
        self.dedup = dedup or DedupConfig(seed=seed)
        self.progress = progress
        self.units_: np.ndarray | None = None
        self.dedup_: DedupResult | None = None
        self._dedup_of: Any = None   # the texts dedup_ was found in (a second assign() over them reuses it)

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return 1

    def split(self, X: Sequence[str], y: Sequence[Any] | None = None,
              groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, *,
              dates: Sequence[Any] | None = None) -> Iterator[tuple["np.ndarray", ...]]:
        """X: texts; y: labels (stratification); groups: one column or {field: column}; dates: temporal split."""
        import numpy as np

        assign = self.assign(X, y, groups, dates=dates)
        yield tuple(np.flatnonzero(assign == s) for s in range(len(self.ratios)))

    def assign(self, X: Sequence[str], y: Sequence[Any] | None = None,
               groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, *,
               dates: Sequence[Any] | None = None, links: Sequence[tuple[int, int]] = ()) -> "np.ndarray":
        """Split index per row (the same partition split() yields); `links` are pairs of rows (indices) that must
        stay together beyond the groups and the duplicates found in X."""
        from .read import _parse_date

        n = len(X)
        cols: list[Sequence[Any]] = []
        if groups is not None:
            cols = list(groups.values()) if isinstance(groups, Mapping) else [groups]
        for what, col in (("y", y), ("dates", dates), *(("groups", c) for c in cols)):
            if col is not None and len(col) != n:
                raise InputError(f"{what} has {len(col)} values for {n} texts; give one per text")
        if self.temporal and dates is None:
            raise InputError("a temporal split needs dates; pass dates= (the CLI: --date FIELD)")
        if self._dedup_of is not X:
            self.dedup_ = find_duplicates(X, self.dedup, progress=self.progress)
            self._dedup_of = X
        # None, "" and NaN are missing group values: they link nothing
        self.units_ = atomic_units(n, groups=[[_scalar(v) for v in c] for c in cols],
                                   cluster_of=self.dedup_.cluster_of, links=links)
        if self.temporal:
            stamps = [d if isinstance(d, float) else _parse_date(d) for d in dates]  # type: ignore[union-attr]
            return assign_temporal(self.units_, stamps, self.ratios, seed=self.seed)
        return assign_units(self.units_, self.ratios, labels=y if self.stratify else None, seed=self.seed)


# --------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SplitPart:
    """One written split: rows against the target, rows per label, distinct groups per field, date range."""

    name: str
    path: str
    sha256: str
    rows: int
    target_fraction: float
    fraction: float
    labels: dict[str, int] = field(default_factory=dict)
    label_fractions: dict[str, float] = field(default_factory=dict)  # share of each label's rows in this split
    groups: dict[str, int] = field(default_factory=dict)
    first_date: str | None = None
    last_date: str | None = None

    def to_dict(self) -> dict[str, Any]:  # by hand: the fractions rounded for reading
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "rows": self.rows,
                "target_fraction": round(self.target_fraction, 6), "fraction": round(self.fraction, 6),
                "labels": dict(self.labels),
                "label_fractions": {k: round(v, 6) for k, v in self.label_fractions.items()},
                "groups": dict(self.groups), "first_date": self.first_date, "last_date": self.last_date}


@dataclass(frozen=True)
class SplitResult:
    """What `campaign split` did; to_dict() is the split manifest."""

    input: dict[str, Any]
    parameters: dict[str, Any]
    normalizer: str
    seed: int
    parts: tuple[SplitPart, ...]
    units: int
    largest_unit: int
    duplicates: dict[str, int]
    checks: tuple[Check, ...]
    leaks: LeakReport
    manifest: str
    created: str = ""
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA

    @property
    def passed(self) -> bool:
        return self.leaks.passed and passed(self.checks)

    def to_dict(self) -> dict[str, Any]:
        # by hand: this is the split manifest's file format: schema, version, time and the derived status lead,
        # the parts are its "splits"
        from ..version import __version__

        return {"schema": self.schema, "campaign_version": __version__,
                "created": self.created,
                "status": "pass" if self.passed else "fail", "input": self.input, "parameters": self.parameters,
                "normalizer": self.normalizer, "seed": self.seed, "splits": [p.to_dict() for p in self.parts],
                "units": self.units, "largest_unit": self.largest_unit, "duplicates": self.duplicates,
                "checks": [c.to_dict() for c in self.checks], "leaks": self.leaks.to_dict(),
                "manifest": self.manifest, "notes": list(self.notes)}


# --------------------------------------------------------------------------------------------------- files


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def split_file(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], fields: Fields | None = None, *,
               ratios: str | Sequence[float] = (0.8, 0.1, 0.1), names: str | Sequence[str] | None = None,
               stratify: bool | None = None, seed: int = 0, dedup: DedupConfig | None = None,
               tolerance: float = 0.01, skip_bad: bool = False, force: bool = False,
               progress: bool | None = None) -> SplitResult:
    """Split a data file into leak-free splits, write them and the manifest (out_dir/split_manifest.json).

    Args:
        fields: text/label/group/id/date fields; a date field makes the split temporal (oldest data first).
        ratios: fractions of rows per split ('80/10/10').
        stratify: keep each label's ratios (default: when a label field is given and the split is not temporal).
        dedup: near-duplicate settings; its seed is replaced by `seed`.
        tolerance: largest |achieved - target| row fraction for the split.ratio check (0.01 = 1 point).
        force: replace an earlier split in out_dir: the files it would write, and the split files the earlier
            manifest lists (removed, so a split with other --names leaves no stale file behind).
    Raises:
        InputError: bad input (file, line, what, fix), or out_dir would overwrite the input, or (without force)
            a file it would write (a split file or the manifest) already exists.

    The leak check of the written files uses MinHash seed `seed + 1` (other hash functions than the split's):
    a near-duplicate pair the split's LSH missed is searched for again with independent odds; a pair it finds
    across splits is kept together and the data split again, so the files written never hold such a leak.
    The files and the manifest are written as one set: an interrupted run leaves the earlier set or nothing.
    """
    input_file(path, "data")
    fields = fields or Fields()
    ratio_t = parse_ratios(ratios)
    name_t = split_names(names, len(ratio_t))
    temporal = fields.date is not None
    if stratify and temporal:
        raise InputError("a temporal split (--date) cannot also be stratified; drop --stratify or --date")
    if stratify and not fields.label:
        raise InputError("stratifying needs a label field; pass --label FIELD or --no-stratify")
    stratify = bool(fields.label) and not temporal if stratify is None else stratify
    if not 0 < tolerance < 1:
        raise InputError(f"tolerance {tolerance!r} must be a fraction in (0, 1); use e.g. 0.01 for one point")
    config = replace(dedup or DedupConfig(), seed=seed)
    out = Path(out_dir)
    ext = Path(path).suffix.lower()
    paths = [out / f"{n}{ext}" for n in name_t]
    manifest = out / MANIFEST_NAME
    own = {MANIFEST_NAME: "the manifest", f"{Path(MANIFEST_NAME).stem}.usage.jsonl": "the usage ledger"}
    for p in paths:
        if p.name in own:
            raise InputError(f"split name {p.stem!r} would write {p.name}, {own[p.name]}'s own file; choose other "
                             "--names")
    src = Path(path).resolve()
    for p in (*paths, manifest):
        if p.resolve() == src:
            raise InputError(f"{p}: writing the split there would overwrite the input; choose another --out")
    if manifest.is_dir():
        raise InputError(f"{manifest}: is a directory where the split writes its manifest; move it or choose "
                         "another --out")
    existing = [p for p in (manifest, *paths) if p.exists()]
    if existing and not force:
        what = "an earlier split" if manifest.exists() else "it would be overwritten"
        raise InputError(f"{existing[0]} already exists ({what}); pass --force to replace it, or choose "
                         "another --out")
    stale, stale_note = _earlier_split_files(manifest, paths, src) if force else ([], None)
    ds = read_dataset(path, fields, skip_bad=skip_bad)
    if len(ds) < len(name_t):
        raise InputError(f"{path}: {len(ds)} usable record(s) cannot fill {len(name_t)} splits; add data")
    splitter = LeakFreeSplitter(ratio_t, stratify=stratify, temporal=temporal, seed=seed, dedup=config,
                                progress=progress)
    group_cols = {f: ds.groups[i] for i, f in enumerate(fields.group)}
    check_config = replace(config, seed=seed + 1)
    notes: list[str] = []
    links: list[tuple[int, int]] = []
    replaces = [p.name for p in (*paths, manifest, *stale)]
    with file_set(out, replaces=replaces) as stage:
        staged = [stage / p.name for p in paths]
        for attempt in range(1, MERGE_ROUNDS + 2):
            assign = splitter.assign(ds.texts, ds.labels, group_cols or None, dates=ds.dates, links=links)
            write_rows(ds, assign, staged)
            leaks = check_files(staged, fields, config=check_config, names=name_t, progress=progress,
                                allow_empty=True)
            missed = _crossing_pairs(leaks, assign)
            if not missed:
                break
            if attempt > MERGE_ROUNDS:
                raise InputError(f"{path}: the check of the split still finds near duplicates across splits after "
                                 f"{MERGE_ROUNDS} merges; raise --near-threshold or use a text field with less "
                                 "boilerplate")
            links.extend(missed)
        if links:
            notes.append(f"the check of the written files (MinHash seed {seed + 1}) found {len(links)} near-duplicate "
                         f"pair(s) across splits that the split's own search (seed {seed}) missed; they were kept "
                         "together and the data split again, so the files written have no such leak")
        leaks = _at(leaks, paths)
        result = _result(ds, fields, assign, splitter, leaks, name_t, ratio_t, paths, staged, manifest,
                         config=config, check_config=check_config, stratify=stratify, temporal=temporal,
                         tolerance=tolerance, skip_bad=skip_bad, seed=seed,
                         notes=_notes(notes, stale, stale_note, ds), links=links)
        atomic_write_json(stage / MANIFEST_NAME, result.to_dict())
    return result


MERGE_ROUNDS = 5  # re-splits after the check of the written files finds a pair the split's own search missed


def _crossing_pairs(leaks: LeakReport, assign: "np.ndarray") -> list[tuple[int, int]]:
    """Near-duplicate pairs the check found across written splits, as pairs of input rows: row k of split s's
    file is the k-th input row assigned to s (files keep the input's order)."""
    import numpy as np

    rows_of = {s: np.flatnonzero(assign == s) for s in range(len(leaks.splits))}
    index = {name: s for s, name in enumerate(x.name for x in leaks.splits)}
    out = []
    for pair in leaks.check(NEAR).pairs:
        a, b = rows_of[index[pair.index]], rows_of[index[pair.query]]
        out.extend((int(a[i]), int(b[q])) for i, q in pair.linked)
    return out


def _at(leaks: LeakReport, paths: Sequence[Path]) -> LeakReport:
    """The leak report with the files' final paths (it was made on the staged copies)."""
    splits = tuple(replace(info, path=str(p)) for info, p in zip(leaks.splits, paths))
    stage = {info.path: str(p) for info, p in zip(leaks.splits, paths)}

    def moved(ref: str) -> str:
        return next((final + ref[len(tmp):] for tmp, final in stage.items() if ref.startswith(tmp)), ref)

    checks = tuple(replace(c, pairs=tuple(replace(pl, examples=tuple(
        replace(e, index_ref=moved(e.index_ref), query_ref=moved(e.query_ref)) for e in pl.examples))
        for pl in c.pairs)) for c in leaks.checks)
    return replace(leaks, splits=splits, checks=checks)


def _notes(notes: list[str], stale: Sequence[Path], stale_note: str | None, ds: Dataset) -> list[str]:
    if stale:
        notes.append(f"removed {len(stale)} split file(s) of the earlier split: "
                     f"{', '.join(p.name for p in stale)}")
    if stale_note:
        notes.append(stale_note)
    if ds.n_bad:
        notes.append(f"{ds.n_bad} bad record(s) skipped (first: line {ds.bad[0].line}: {ds.bad[0].reason})")
    return notes


def _result(ds: Dataset, fields: Fields, assign: "np.ndarray", splitter: LeakFreeSplitter, leaks: LeakReport,
            name_t: Sequence[str], ratio_t: Sequence[float], paths: Sequence[Path], staged: Sequence[Path],
            manifest: Path, *, config: DedupConfig, check_config: DedupConfig, stratify: bool, temporal: bool,
            tolerance: float, skip_bad: bool, seed: int, notes: list[str],
            links: Sequence[tuple[int, int]] = ()) -> SplitResult:
    """The manifest of a written split: per part its rows, labels, groups, dates and the hash of its file."""
    import numpy as np

    from ..io import sha256_file

    n = len(ds)
    labels = np.asarray([_NO_LABEL if v is None else v for v in ds.labels], dtype=object) if ds.labels else None
    label_names = sorted(set(labels.tolist())) if labels is not None else []
    label_total = {lbl: int((labels == lbl).sum()) for lbl in label_names} if labels is not None else {}
    parts = []
    for s, (name, p) in enumerate(zip(name_t, paths)):
        rows = np.flatnonzero(assign == s)
        lab = {lbl: int((labels[rows] == lbl).sum()) for lbl in label_names} if labels is not None else {}
        groups = {f: len({ds.groups[i][r] for r in rows.tolist()} - {None}) for i, f in enumerate(fields.group)}
        dates = [ds.dates[r] for r in rows.tolist()] if ds.dates else []
        parts.append(SplitPart(name=name, path=str(p), sha256=sha256_file(staged[s]), rows=len(rows),
                               target_fraction=ratio_t[s], fraction=len(rows) / n, labels=lab,
                               label_fractions={k: v / label_total[k] for k, v in lab.items() if label_total[k]},
                               groups=groups, first_date=_iso(min(dates)) if dates else None,
                               last_date=_iso(max(dates)) if dates else None))
    checks, check_notes = _checks(parts, label_total, tolerance, stratify)
    d = splitter.dedup_
    if ds.labels is not None:
        checks.append(_label_conflict_check(d, ds))
    unit_sizes = np.bincount(np.unique(splitter.units_, return_inverse=True)[1])
    notes = [*check_notes, f"the leak check of the written files used MinHash seed {seed + 1}, not the split's "
             f"{seed}: a near-duplicate pair the split's hashes missed gets a second, independent search", *notes]
    notes.extend(d.notes)
    chain = describe_largest_unit(splitter.units_, {f: [_scalar(v) for v in ds.groups[i]]
                                                    for i, f in enumerate(fields.group)},
                                  d, links=links, smallest_share=min(ratio_t))
    if chain:
        notes.append(chain)
    elif unit_sizes.max() > tolerance * n:
        notes.append(f"the largest unit (group or duplicate cluster) has {int(unit_sizes.max())} rows "
                     f"({unit_sizes.max() / n:.1%} of the data); it moves as one piece")
    return SplitResult(
        input=ds.to_dict(),
        parameters={"ratios": list(ratio_t), "names": list(name_t), "stratify": stratify, "temporal": temporal,
                    "fields": fields.to_dict(), "dedup": config.to_dict(), "tolerance": tolerance,
                    "skip_bad": skip_bad, "leak_check_seed": check_config.seed},
        normalizer=normalizer_id(strip_punctuation=config.strip_punctuation), seed=seed, parts=tuple(parts),
        units=len(unit_sizes), largest_unit=int(unit_sizes.max()),
        duplicates={"exact_duplicates": d.exact_duplicates, "near_pairs": len(d.near_pairs),
                    "clusters": len(d.clusters), "rows_in_clusters": sum(len(c) for c in d.clusters),
                    "empty_texts": d.n_empty},
        checks=tuple(checks), leaks=leaks, manifest=str(manifest),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=tuple(notes))


def _earlier_split_files(manifest: Path, paths: Sequence[Path], src: Path) -> tuple[list[Path], str | None]:
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


def _label_conflict_check(d: DedupResult, ds: Dataset) -> Check:
    """split.label_conflict: the same (or nearly the same) text with different labels inside the input. The split
    keeps such rows together, so they leak nothing, but one of the labels is wrong or the task is ambiguous."""
    clusters, rows, shown = label_conflicts(d, ds.labels, [ds.ref(i) for i in range(len(ds))])
    if not clusters:
        return Check("split.label_conflict", "pass", "no duplicate carries two labels")
    return Check("split.label_conflict", "warn",
                      f"{clusters:,} duplicate cluster(s) ({rows:,} rows) carry different labels, e.g. "
                      + "; ".join(shown),
                      "label noise or an ambiguous task: whichever label the model learns, the other rows count as "
                      "errors, in training and in evaluation",
                      "fix the labels (or drop the conflicting rows) before training; the split keeps each cluster "
                      "on one side")


def _checks(parts: Sequence[SplitPart], label_total: Mapping[str, int], tolerance: float,
            stratify: bool) -> tuple[list[Check], list[str]]:
    notes: list[str] = []
    worst = max(parts, key=lambda p: abs(p.fraction - p.target_fraction))
    dev = abs(worst.fraction - worst.target_fraction)
    checks = [Check("split.ratio", "pass" if dev <= tolerance else "fail",
                         f"largest gap {dev * 100:.2f} points ({worst.name}: {worst.fraction:.2%} of rows for "
                         f"{worst.target_fraction:.2%}); tolerance {tolerance * 100:.2f} points")]
    if not stratify:
        checks.append(Check("split.label_ratio", "skipped", "not stratified"))
        return checks, notes
    # one row moves a label's fraction by 1/rows: labels with fewer than 2/tolerance rows cannot be held to it
    checkable = [lbl for lbl, t in label_total.items() if t >= 2 / tolerance]
    small = [lbl for lbl in label_total if lbl not in checkable]
    if small:
        notes.append(f"{len(small)} label(s) have fewer than {math.ceil(2 / tolerance)} rows and are not held to the "
                     f"tolerance: {', '.join(map(str, small[:5]))}{' ...' if len(small) > 5 else ''}")
    gaps = [(abs(p.label_fractions.get(lbl, 0.0) - p.target_fraction), lbl, p) for lbl in checkable for p in parts]
    if not gaps:
        checks.append(Check("split.label_ratio", "skipped", "no label has enough rows to check"))
        return checks, notes
    gap, lbl, p = max(gaps, key=lambda g: g[0])
    checks.append(Check("split.label_ratio", "pass" if gap <= tolerance else "fail",
                             f"largest gap {gap * 100:.2f} points (label {lbl!r} in {p.name}: "
                             f"{p.label_fractions.get(lbl, 0.0):.2%} for {p.target_fraction:.2%})"))
    return checks, notes


def load_manifest(path: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Any]:
    """A split manifest as written by split_file, checked: its schema, one unique name, a path and a sha256 per
    split, and (verify) that every split file it names is there with those bytes, so a reader never works on a
    set that changed after it was written.

    Raises:
        InputError: not a manifest, a malformed one, or (verify) a split file that is missing or changed.
    """
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_NAME
    fix = "give the split_manifest.json written by `campaign split`"
    doc = JsonObject(load_json(p, "the split_manifest.json written by `campaign split`"), str(p), fix=fix)
    schema = doc.raw("schema", None)
    if not str(schema or "").startswith("campaign.split/"):
        doc.fail(f"not a campaign split manifest (schema {schema!r})")
    splits = doc.items("splits")
    if not splits:
        doc.fail("'splits' is empty")
    names: set[str] = set()
    for s in splits:
        name = s.str("name")
        s.str("path")
        if not name or name in names:
            s.fail(f"split name {name!r} is empty or repeated")
        names.add(name)
    for s in splits if verify else ():
        _verify_part(p, s)
    return doc.data


SHARDS_MANIFEST_NAME = "manifest.json"      # what `campaign split --engine ray` writes (ray_split.py)
SHARDS_SCHEMA_PREFIX = "campaign.split_shards/"
_EITHER = "the split_manifest.json written by `campaign split` or the manifest.json of `campaign split --engine ray`"


@dataclass(frozen=True)
class SplitContent:
    """One split as its manifest describes it: its name, where it is (its file, or its folder of shards) and the
    sha256 its content is known by: the file's, or for shards a sha256 over their file names and sha256s (as a run
    record hashes a folder), so any edited, added or removed shard gives another hash."""

    name: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class SplitSet:
    """What a split manifest (either kind) describes, checked against the files on disk."""

    manifest: Path
    splits: tuple[SplitContent, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.splits)

    def get(self, name: str) -> SplitContent | None:
        return next((s for s in self.splits if s.name == name), None)


def split_manifest_path(path: str | os.PathLike[str]) -> Path:
    """The manifest a path names: the file itself, or in a folder its split_manifest.json (`campaign split`) or
    its manifest.json (`campaign split --engine ray`).

    Raises:
        InputError: a folder that holds both (which one is meant is unclear).
    """
    p = Path(path)
    if not p.is_dir():
        return p
    local, shards = p / MANIFEST_NAME, p / SHARDS_MANIFEST_NAME
    if local.is_file() and shards.is_file():
        raise InputError(f"{p}: holds both {MANIFEST_NAME} and {SHARDS_MANIFEST_NAME}; give the manifest file to use")
    return shards if shards.is_file() else local


def read_split_set(path: str | os.PathLike[str]) -> SplitSet:
    """The splits a manifest of either kind describes (a split_manifest.json of `campaign split`: one file per
    split; a manifest.json of `campaign split --engine ray`: a folder of shards per split), after checking that the
    files are the ones it lists: each there with its sha256, and (shards) no other shard in a split's folder.

    Raises:
        InputError (one line): not a split manifest, a malformed one, or a file missing, changed or added since.
    """
    p = split_manifest_path(path)
    doc = JsonObject(load_json(p, _EITHER), str(p), fix=f"give {_EITHER}")
    schema = str(doc.raw("schema", None) or "")
    if schema.startswith(SHARDS_SCHEMA_PREFIX):
        return SplitSet(p, _shard_splits(p, doc))
    if not schema.startswith("campaign.split/"):
        doc.fail(f"not a campaign split manifest (schema {schema or None!r})")
    data = load_manifest(p)                     # checked: every file there with the sha256 it lists
    return SplitSet(p, tuple(SplitContent(s["name"], split_file_path(p, s["path"]), s["sha256"])
                             for s in data["splits"]))


def _shard_splits(manifest: Path, doc: JsonObject) -> tuple[SplitContent, ...]:
    from ..io import RECORD_FORMATS, sha256_bytes, sha256_file

    again = "re-split with `campaign split --engine ray --force`"
    splits = doc.items("splits")
    if not splits:
        doc.fail("'splits' is empty")
    listed: dict[str, dict[str, str]] = {}
    for s in splits:
        name = s.str("name")
        if name in listed or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
            s.fail(f"split name {name!r} is empty, repeated or not a folder name")
        listed[name] = {}
    for s in doc.items("shards"):
        name, rel, sha = s.str("split"), s.str("path"), s.str("sha256")
        if name not in listed:
            s.fail(f"split {name!r} is not one of the manifest's splits ({', '.join(listed)})")
        folder, _, file = rel.partition("/")
        if folder != name or not file or "/" in file or file in (".", ".."):
            s.fail(f"path {rel!r} is not {name}/FILE")
        if file in listed[name]:
            s.fail(f"shard {rel!r} is listed twice")
        listed[name][file] = sha
    where = manifest.name
    out = []
    for name, shards in listed.items():
        folder = manifest.parent / name
        for file, expected in shards.items():
            f = folder / file
            if not f.is_file():
                raise InputError(f"{f}: missing (removed since the split; {where} lists it); restore it or {again}")
            actual = sha256_file(f)
            if actual != expected:
                raise InputError(f"{f}: changed since the split (sha256 {actual[:12]}... on disk, {expected[:12]}... "
                                 f"in {where}); restore the file, or {again} so the manifest and its checks describe "
                                 "what is there")
        extra = sorted(e.name for e in os.scandir(folder) if e.is_file() and not e.name.startswith(".")
                       and e.name not in shards and Path(e.name).suffix.lower() in RECORD_FORMATS) \
            if folder.is_dir() else []
        if extra:
            raise InputError(f"{folder / extra[0]}: added since the split (not in {where}"
                             f"{f', nor {len(extra) - 1} more' if len(extra) > 1 else ''}); a reader of the folder "
                             f"would take it as part of split {name!r}; remove it, or {again}")
        listing = "".join(f"{file}\0{shards[file]}\n" for file in sorted(shards))
        out.append(SplitContent(name, folder, sha256_bytes(listing.encode())))
    return tuple(out)


def split_file_path(manifest: Path, recorded: str) -> Path:
    """Where a split file the manifest lists is now: beside the manifest, under its recorded file name (the set
    moves as a folder, so the folder it was written in may have been renamed)."""
    return manifest.parent / Path(recorded).name


def _verify_part(manifest: Path, s: JsonObject) -> None:
    from ..io import sha256_file

    f = split_file_path(manifest, s.str("path"))
    expected = s.str("sha256")
    if not f.is_file():
        s.fail(f"its file {f} is missing; restore it or re-split with `campaign split --force`")
    actual = sha256_file(f)
    if actual != expected:
        raise InputError(f"{f}: changed since the split (sha256 {actual[:12]}... on disk, {expected[:12]}... in "
                         f"{manifest.name}); restore the file, or re-split with `campaign split --force` so the "
                         "manifest and its checks describe what is there")
