"""The local engine: everything in this process, each split a file read whole into memory. Its leak search reads
the files and runs the search over Datasets (leaks.find_leaks, handed in by the pipeline); its drop job writes the
splits without their leaking rows as one set (io.file_set); its split job is local_split.LocalSplitJob.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_json, file_set, input_file, sha256_file
from ..rows import hf_sha256, record_format
from ..version import __version__
from .leak_files import CLEAN_MANIFEST, CLEAN_SCHEMA, leaking_name
from .leak_report import LeakReport, LeakRow
from .local_split import LocalSplitJob
from .read import Dataset, Fields, read_dataset
from .sketch import DedupConfig
from .split_result import SplitSpec
from .write import write_rows

#: find_leaks's signature: {name: Dataset} in order -> the report
SearchDatasets = Callable[..., LeakReport]


class LocalEngine:
    """engine="local": this process, files read whole. progress: the bars of rows sketched on stderr (None: when
    it is a terminal)."""

    name = "local"
    sharded = False

    def __init__(self, progress: bool | None = None) -> None:
        self.progress = progress

    def session(self, label: str, phase: str) -> AbstractContextManager[Any]:
        return nullcontext()

    def accept_split_input(self, path: str | os.PathLike[str], fields: Fields) -> None:
        if Path(path).is_dir():            # a Hugging Face dataset's folder is one input; any other is refused
            record_format(path)
        else:
            input_file(path, "data")

    def split_job(self, path: str | os.PathLike[str], out: Path, spec: SplitSpec, fields: Fields, *, force: bool,
                  skip_bad: bool) -> LocalSplitJob:
        return LocalSplitJob(str(path), out, spec, fields, force=force, skip_bad=skip_bad, progress=self.progress)

    def leak_search(self, paths: Sequence[str | os.PathLike[str]], fields: Fields, *, names: Sequence[str] | None,
                    threshold: float, config: DedupConfig | None, examples: int, skip_bad: bool, allow_empty: bool,
                    search_datasets: SearchDatasets, timings: dict[str, float] | None = None) -> LocalLeakSearch:
        return LocalLeakSearch(self, paths, fields, names=names, threshold=threshold, config=config,
                               examples=examples, skip_bad=skip_bad, allow_empty=allow_empty,
                               search_datasets=search_datasets)


class LocalLeakSearch:
    """The splits read (made with them read, and refused when one holds no record), searched by run()."""

    def __init__(self, engine: LocalEngine, paths: Sequence[str | os.PathLike[str]], fields: Fields, *,
                 names: Sequence[str] | None, threshold: float, config: DedupConfig | None, examples: int,
                 skip_bad: bool, allow_empty: bool, search_datasets: SearchDatasets) -> None:
        self.engine, self.threshold, self.config, self.examples = engine, threshold, config, examples
        self.search_datasets = search_datasets
        self.datasets = [read_dataset(p, fields, skip_bad=skip_bad) for p in paths]
        empty = next((d for d in self.datasets if len(d) == 0), None)
        if empty is not None and not allow_empty:
            bad = f" ({empty.n_bad} bad record(s) skipped)" if empty.n_bad else ""
            raise InputError(f"{empty.path}: no records to check{bad}; give the file that holds the split's rows")
        self.named: dict[str, Dataset] = {}
        for i, d in enumerate(self.datasets):
            key = names[i] if names else (d.name if d.name not in self.named else d.path)
            self.named[key] = d

    def prepare_outputs(self, *, pairs: Path | None, drop_to: Path | None, force: bool) -> None:
        """Nothing to prepare here: the outputs are checked when they are written."""

    def run(self, *, want_pairs: bool) -> LocalFound:
        report = self.search_datasets(self.named, threshold=self.threshold, config=self.config,
                                      examples=self.examples, progress=self.engine.progress)
        notes = tuple(f"{d.path}: {d.n_bad} bad record(s) skipped" for d in self.datasets if d.n_bad)
        return LocalFound(report, notes, self)


@dataclass(frozen=True)
class LocalFound:
    """A local search's report, the notes it adds (bad records skipped), and its rows (from the Datasets)."""

    report: LeakReport
    notes: tuple[str, ...]
    search: LocalLeakSearch

    def row(self, split: str, row: int) -> LeakRow:
        return LeakRow.of(self.search.named[split], row)

    def drop_job(self, out: Path, *, force: bool) -> LocalDropJob:
        return LocalDropJob(self, out, force=force)


class LocalDropJob:
    """The splits written again into `out` without their leaking rows (NAME.EXT), the dropped rows beside them
    (NAME.leaking.EXT) and leak_fix_manifest.json, as one set (io.file_set)."""

    kept_as = "kept beside them as NAME.leaking.EXT"
    written_kind = "files"

    def __init__(self, found: LocalFound, out: Path, *, force: bool) -> None:
        self.found, self.out, self.force = found, Path(out), force
        self.datasets = found.search.named
        self.names = list(self.datasets)
        self.targets = [self.out / Path(self.datasets[n].path).name for n in self.names]

    @contextmanager
    def staged(self) -> Iterator[None]:
        """Raises InputError when out holds an input, or (without force) an earlier set."""
        inputs = {Path(d.path).resolve() for d in self.datasets.values()}
        if len({t.name for t in self.targets}) != len(self.targets):
            raise InputError("two split files share a file name; rename one before writing them to one folder")
        for t in (*self.targets, self.out / CLEAN_MANIFEST):
            if t.resolve() in inputs:
                raise InputError(f"{t}: writing there would overwrite an input; choose another --drop-to folder")
        if (self.out / CLEAN_MANIFEST).exists() and not self.force:
            raise InputError(f"{self.out / CLEAN_MANIFEST} already exists; pass --force to replace it, or choose "
                             "another folder")
        replaces = [t.name for t in self.targets] + [CLEAN_MANIFEST] + [leaking_name(t) for t in self.targets]
        with file_set(self.out, replaces=replaces) as stage:
            self.stage = stage
            yield

    def write(self, drop: Mapping[str, set[int]]) -> list[dict[str, Any]]:
        """Each split without its dropped rows (the first copied unchanged), the dropped rows beside it."""
        import numpy as np

        written = []
        for n, target in zip(self.names, self.targets, strict=True):
            ds = self.datasets[n]
            if n == self.names[0] and not drop[n]:
                copy = shutil.copytree if Path(ds.path).is_dir() else shutil.copyfile   # a dataset's folder
                copy(ds.path, self.stage / target.name)
                kept = len(ds)
            else:
                assign = np.zeros(len(ds), dtype=np.int64)
                assign[sorted(drop[n])] = 1
                write_rows(ds, assign, [self.stage / target.name, self.stage / leaking_name(target)])
                kept = len(ds) - len(drop[n])
            written.append({"name": n, "input": ds.path, "input_sha256": ds.sha256, "path": str(target),
                            "rows": kept, "dropped": len(drop[n]),
                            "dropped_path": str(self.out / leaking_name(target))
                            if n != self.names[0] or drop[n] else None})
        return written

    def whole_clusters(self, drop: Mapping[str, set[int]]) -> dict[str, set[int]]:
        """The rows to drop grown to whole duplicate clusters within each split: a dropped row's exact and near
        copies in its own split go with it (found with the report's settings)."""
        from .dedup import find_duplicates

        out: dict[str, set[int]] = {}
        config = self.found.report.config
        for n in self.names:
            rows = set(drop[n])
            if rows:
                cluster_of = find_duplicates(self.datasets[n].texts, config, progress=False).cluster_of
                hit = {cluster_of[r] for r in rows}
                rows |= {i for i, c in enumerate(cluster_of) if c in hit}
            out[n] = rows
        return out

    def recheck(self) -> LeakReport:
        """The written splits read back and searched again (any leak fails), named by their final paths."""
        fields = self.datasets[self.names[0]].fields
        clean = {n: read_dataset(self.stage / t.name, fields) for n, t in zip(self.names, self.targets, strict=True)}
        recheck = self.found.search.search_datasets(clean, threshold=0.0, config=self.found.report.config,
                                                    progress=self.found.search.engine.progress)
        return replace(recheck, splits=tuple(replace(s, path=str(t))
                                             for s, t in zip(recheck.splits, self.targets, strict=True)))

    def finish(self, written: list[dict[str, Any]], recheck: LeakReport, dropped_by: list[str]) -> int:
        for w, target in zip(written, self.targets, strict=True):
            staged = self.stage / target.name
            w["sha256"] = hf_sha256(staged) if staged.is_dir() else sha256_file(staged)
        manifest = {"schema": CLEAN_SCHEMA, "campaign_version": __version__,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "dropped_by": dropped_by, "splits": written, "recheck": recheck.to_dict()}
        atomic_write_json(self.stage / CLEAN_MANIFEST, manifest)
        return sum(s["dropped"] for s in written)


__all__ = ["LocalDropJob", "LocalEngine", "LocalFound", "LocalLeakSearch"]
