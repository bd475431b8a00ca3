"""engine="ray": the data pipelines on Ray Data, for splits and corpora held as shards (a file, a folder, a glob or
an object-store path each). One session (ray_session) holds the pipeline's stages; its leak search is
search.search, its split job split.RaySplitJob, its drop job drop.ShardDropJob.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InputError
from ..leak_report import LeakReport, LeakRow
from ..read import Fields
from ..shards import start_shard_set
from ..sketch import DedupConfig
from ..split_result import SplitSpec
from .drop import ShardDropJob, prepare_drop
from .search import ShardSearch, search, shard_splits
from .session import ray_session, spinner
from .split import RaySplitJob


class RayEngine:
    """engine="ray". address: a Ray cluster (default: RAY_ADDRESS, else a local Ray on `workers` CPUs); parts:
    hash partitions of the shuffles (default: 4 per CPU of the cluster, at most 512); progress: a spinner naming
    the phase on stderr (None: when it is a terminal)."""

    name = "ray"
    sharded = True

    def __init__(self, address: str | None = None, workers: int | None = None, parts: int | None = None,
                 progress: bool | None = None) -> None:
        self.address, self.workers, self.parts, self.progress = address, workers, parts, progress
        self.ray: Any = None

    @contextmanager
    def session(self, label: str, phase: str) -> Iterator[Any]:
        """Ray connected for the block (a session already running is kept), with the parts of its shuffles; a
        session inside the engine's own (the check of a split it writes) is that one."""
        if self.ray is not None:
            yield self.ray
            return
        with spinner(label, phase, self.progress), ray_session(self.address, self.workers) as ray:
            saved = self.ray, self.parts
            self.ray = ray
            self.parts = self.parts or max(1, min(512, 4 * int(ray.cluster_resources().get("CPU", 1))))
            try:
                yield ray
            finally:
                self.ray, self.parts = saved

    def accept_split_input(self, path: str | os.PathLike[str], fields: Fields) -> None:
        if fields.date:
            raise InputError("a temporal split (--date) runs on one machine only; drop --engine ray or --date")

    def split_job(self, path: str | os.PathLike[str], out: Path, spec: SplitSpec, fields: Fields, *, force: bool,
                  skip_bad: bool) -> RaySplitJob:
        return RaySplitJob(self, str(path), out, spec, fields, force=force, skip_bad=skip_bad)

    def leak_search(self, paths: Sequence[str | os.PathLike[str]], fields: Fields, *, names: Sequence[str] | None,
                    threshold: float, config: DedupConfig | None, examples: int, skip_bad: bool, allow_empty: bool,
                    search_datasets: Callable[..., LeakReport] | None = None,
                    timings: dict[str, float] | None = None) -> RayLeakSearch:
        return RayLeakSearch(self, paths, fields, names=names, threshold=threshold, config=config or DedupConfig(),
                             examples=examples, skip_bad=skip_bad, allow_empty=allow_empty, timings=timings)


class RayLeakSearch:
    """The splits' shards listed and checked (made before Ray starts), searched on the engine by run()."""

    def __init__(self, engine: RayEngine, paths: Sequence[str | os.PathLike[str]], fields: Fields, *,
                 names: Sequence[str] | None, threshold: float, config: DedupConfig, examples: int, skip_bad: bool,
                 allow_empty: bool, timings: dict[str, float] | None) -> None:
        self.engine, self.fields, self.threshold, self.config = engine, fields, threshold, config
        self.examples, self.skip_bad, self.allow_empty = examples, skip_bad, allow_empty
        self.timings = timings if timings is not None else {}
        self.specs, self.listed, self.names = shard_splits(paths, names, threshold=threshold, examples=examples)
        self.targets: dict[tuple[int, int], tuple[str, str | None]] = {}

    def prepare_outputs(self, *, pairs: Path | None, drop_to: Path | None, force: bool) -> None:
        """Before the search: an earlier complete --drop-to set refused without force, its targets checked; the
        --pairs folder made ready."""
        inputs = [f for fs in self.listed for f in fs]
        if drop_to is not None:
            self.targets = prepare_drop(Path(drop_to), self.listed, self.names, force=force)
        if pairs is not None:
            start_shard_set(Path(pairs), force=True, what="--pairs", inputs=inputs)

    def run(self, *, want_pairs: bool) -> RayFound:
        eng = self.engine
        assert eng.parts is not None        # session() sets the parts; run() is called inside it
        found = search(eng.ray, self.specs, self.listed, self.names, self.fields, self.config, self.threshold,
                       self.examples, self.skip_bad, eng.parts, want_pairs=want_pairs, timings=self.timings,
                       allow_empty=self.allow_empty)
        return RayFound(found.report, (), found, self)


@dataclass(frozen=True)
class RayFound:
    """A search on the engine: its report, no further notes (bad records are in the report), its rows."""

    report: LeakReport
    notes: tuple[str, ...]
    found: ShardSearch
    search: RayLeakSearch

    def row(self, split: str, row: int) -> LeakRow:
        return self.found.row(split, row)

    def drop_job(self, out: Path, *, force: bool) -> ShardDropJob:
        parts = self.search.engine.parts
        assert parts is not None            # made in the engine's session, which set the parts
        return ShardDropJob(self.found, Path(out), self.search.targets, parts=parts)


__all__ = ["RayEngine", "RayFound", "RayLeakSearch"]
