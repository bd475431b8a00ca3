"""What a split is asked and what it gives: the validated parameters (SplitSpec), the written splits and the checks
of their ratios and labels (SplitResult, the split manifest; ShardSplit, the manifest of a split in shards). Both
are results.Result: their top-level checks hold the split's checks and the leak check of the written files
(written_leak_checks), so that the status is status_of over the checks a reader sees.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..checks import Check
from ..errors import InputError
from ..results import HEADER, Result
from .dedup import DedupResult
from .leak_report import LeakReport
from .read import Dataset, Fields
from .sketch import DedupConfig
from .split_manifest import SHARDS_SCHEMA
from .splitter import NO_LABEL, parse_ratios, split_names
from .units import label_conflicts

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "campaign.split/1"


@dataclass(frozen=True)
class SplitSpec:
    """A split's parameters, checked: ratios (fractions summing to 1), split names, whether it is stratified or
    temporal, the ratio tolerance, the duplicate search of the split (seed) and of its leak check (seed + 1)."""

    ratios: tuple[float, ...]
    names: tuple[str, ...]
    stratify: bool
    temporal: bool
    tolerance: float
    seed: int
    config: DedupConfig
    output: str | None = None     # "hf": the splits written as a Hugging Face DatasetDict (save_to_disk)

    @property
    def check_config(self) -> DedupConfig:
        """The leak check of the written splits: other hash functions (seed + 1) than the split's own search."""
        return replace(self.config, seed=self.seed + 1)

    @classmethod
    def checked(cls, fields: Fields, *, ratios: str | Sequence[float], names: str | Sequence[str] | None,
                stratify: bool | None, seed: int, dedup: DedupConfig | None, tolerance: float,
                output: str | None = None) -> SplitSpec:
        """The parameters of split_file, checked (the same messages on every engine).

        Raises:
            InputError: ratios, names, stratification or tolerance that cannot be met.
        """
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
        if output not in (None, "hf"):
            raise InputError(f"output format {output!r} is not known; leave it out (the input's own format) or give "
                             "hf (a Hugging Face DatasetDict folder)")
        return cls(ratio_t, name_t, stratify, temporal, tolerance, seed, replace(dedup or DedupConfig(), seed=seed),
                   output)


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
class SplitResult(Result):
    """What `campaign split` did; to_dict() is the split manifest. Its checks are the split's own (ratios, labels)
    and the leak check of the written files (written_leak_checks; their counts and pairs stay under `leaks`): fail
    when one fails, not verified when the leak check's search was incomplete, warn on a warning (the same text
    with two labels), else pass."""

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
    clusters: dict[str, Any] | None = None   # the per-row units file (data/split_clusters.py): path, sha256, ...
    schema: str = SCHEMA

    def fields_dict(self) -> dict[str, Any]:
        # by hand: this is the split manifest's file format: the time after the header, the parts as its "splits"
        return {"created": self.created, "input": self.input, "parameters": self.parameters,
                "normalizer": self.normalizer, "seed": self.seed, "splits": [p.to_dict() for p in self.parts],
                "units": self.units, "largest_unit": self.largest_unit, "duplicates": self.duplicates,
                "leaks": self.leaks.to_dict(), "manifest": self.manifest, "notes": list(self.notes)} \
            | ({"clusters": self.clusters} if self.clusters is not None else {})


@dataclass(frozen=True)
class ShardSplit(Result):
    """What a split in shards (split_file on the ray engine) wrote: its checks (as SplitResult's), its manifest
    (out_dir/manifest.json, whose header was written from these checks) and where it is."""

    checks: tuple[Check, ...]
    manifest: dict[str, Any]
    path: str
    schema: str = SHARDS_SCHEMA

    def fields_dict(self) -> dict[str, Any]:  # by hand: the manifest as written, after the header, with its path
        return {k: v for k, v in self.manifest.items() if k not in HEADER} | {"manifest": self.path}


def written_leak_checks(leaks: LeakReport) -> tuple[Check, ...]:
    """The leak check of the written splits as checks of the split itself (id, status, what was seen, why, fix,
    gates): the split's verdict depends on them, so its top-level checks hold them; counts and pairs stay in the
    leak report."""
    return tuple(Check(c.id, c.status, c.seen, c.why, c.fix, gates=c.gates) for c in leaks.checks)


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def label_conflict_check(d: DedupResult, ds: Dataset) -> Check:
    """split.label_conflict: the same (or nearly the same) text with different labels inside the input. The split
    keeps such rows together, so they leak nothing, but one of the labels is wrong or the task is ambiguous."""
    assert ds.labels is not None        # checked for a labelled input only
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


RATIO_FIX = ("the units move whole: give a finer --group (or drop the --group that joins these rows; for a "
             "duplicate cluster raise --near-threshold), choose other --ratios, or allow a larger --tolerance")
LABEL_FIX = ("--no-stratify (ratios of rows only), a finer --group for the units that hold this label, or a larger "
             "--tolerance")


def ratio_checks(parts: Sequence[SplitPart], label_total: Mapping[str, int], tolerance: float,
                 stratify: bool, blockers: Callable[[str | None], str] | None = None) -> tuple[list[Check], list[str]]:
    """split.ratio (rows per split) and split.label_ratio (each label's rows per split) against the targets within
    `tolerance`; a failing check says which units block it (`blockers(label)`: the largest units, of all rows for
    None, of one label's rows otherwise) and what to change."""
    notes: list[str] = []
    worst = max(parts, key=lambda p: abs(p.fraction - p.target_fraction))
    dev = abs(worst.fraction - worst.target_fraction)
    seen = (f"largest gap {dev * 100:.2f} points ({worst.name}: {worst.fraction:.2%} of rows for "
            f"{worst.target_fraction:.2%}); tolerance {tolerance * 100:.2f} points")
    if dev <= tolerance:
        checks = [Check("split.ratio", "pass", seen)]
    else:
        checks = [Check("split.ratio", "fail", seen,
                        "no placement of whole units (groups and duplicate clusters) that the split found comes "
                        f"closer; {blockers(None) if blockers else 'see the largest unit in the notes'}",
                        RATIO_FIX)]
    if not stratify:
        checks.append(Check("split.label_ratio", "skipped", "not stratified", gates=False))
        return checks, notes
    # one row moves a label's fraction by 1/rows: labels with fewer than 2/tolerance rows cannot be held to it
    checkable = [lbl for lbl, t in label_total.items() if t >= 2 / tolerance]
    small = [lbl for lbl in label_total if lbl not in checkable]
    if small:
        notes.append(f"{len(small)} label(s) have fewer than {math.ceil(2 / tolerance)} rows and are not held to the "
                     f"tolerance: {', '.join(map(str, small[:5]))}{' ...' if len(small) > 5 else ''}")
    gaps = [(abs(p.label_fractions.get(lbl, 0.0) - p.target_fraction), lbl, p) for lbl in checkable for p in parts]
    if not gaps:
        checks.append(Check("split.label_ratio", "skipped", "no label has enough rows to check", gates=False))
        return checks, notes
    gap, lbl, p = max(gaps, key=lambda g: g[0])
    seen = (f"largest gap {gap * 100:.2f} points (label {lbl!r} in {p.name}: {p.label_fractions.get(lbl, 0.0):.2%} "
            f"for {p.target_fraction:.2%})")
    if gap <= tolerance:
        checks.append(Check("split.label_ratio", "pass", seen))
    else:
        checks.append(Check("split.label_ratio", "fail", seen,
                            f"label {lbl!r} ({label_total[lbl]:,} rows) comes in units that move whole, and no "
                            "placement the split found brings its share closer while the rows meet their ratios; "
                            f"{blockers(lbl) if blockers else 'see the largest unit in the notes'}",
                            LABEL_FIX))
    return checks, notes


def unit_blockers(units: np.ndarray, labels: Sequence[Any] | None, groups: Mapping[str, Sequence[Any]],
                  ref: Callable[[int], str], top: int = 3) -> Callable[[str | None], str]:
    """For ratio_checks: the `top` largest units among all rows (label None) or among one label's rows, each with its
    rows and what it is (its group values, else a duplicate cluster or a row, named by its first row's ref)."""
    import numpy as np

    lab = None if labels is None else np.asarray([NO_LABEL if v is None else str(v) for v in labels], dtype=object)

    def describe(label: str | None) -> str:
        rows = np.arange(len(units)) if label is None or lab is None else np.flatnonzero(lab == label)
        uid, first, cnt = np.unique(units[rows], return_index=True, return_counts=True)
        size = np.bincount(np.unique(units, return_inverse=True)[1])
        shown = []
        for i in np.lexsort((first, -cnt))[:top].tolist():
            r = int(rows[first[i]])
            vals = [f"{f}={v[r]!r}" for f, v in groups.items() if v[r] is not None]
            what = ", ".join(vals) or (f"a duplicate cluster with {ref(r)}" if cnt[i] > 1 else ref(r))
            shown.append(f"{int(cnt[i]):,} rows ({what})")
        whose = "rows" if label is None else f"rows of label {label!r}"
        return (f"the largest of its {len(uid):,} units hold {'; '.join(shown)} of the {len(rows):,} {whose} "
                f"(largest unit overall: {int(size.max()):,} rows)")

    return describe


__all__ = ["SCHEMA", "ShardSplit", "SplitPart", "SplitResult", "SplitSpec", "iso", "label_conflict_check",
           "ratio_checks", "unit_blockers", "written_leak_checks"]
