"""The engines the data pipelines run on. split.split_file (validate, form units, assign, write, check, merge) and
leaks.check_files (search, then the outputs) are written once over what an engine offers:

- session(label, phase): the context its stages run in (Ray connected; nothing on this machine);
- a leak search: the splits read and sketched, candidate pairs found and confirmed, the report assembled, and the
  rows it shows (row(split, row) -> LeakRow), with the drop job that writes the splits without their leaking rows
  (leak_files.DropJob);
- a split job: the input read and sketched, what its units are formed from (units.UnitInputs: duplicate clusters,
  group columns or links), each split written, and the result that describes what was written.

"local" runs in this process on files read whole (local.py); "ray" on Ray Data for data held as shards (ray/).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError
from .leak_files import DropJob
from .leak_report import LeakReport, LeakRow
from .local import LocalEngine
from .ray import RayEngine
from .read import Fields
from .sketch import DedupConfig
from .split_result import ShardSplit, SplitResult, SplitSpec
from .units import UnitInputs

ENGINES = ("local", "ray")


class Found(Protocol):
    """A leak search's outcome: the report, notes the pipeline adds to it, the rows it shows, its drop job."""

    @property
    def report(self) -> LeakReport: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    def row(self, split: str, row: int) -> LeakRow: ...

    def drop_job(self, out: Path, *, force: bool) -> DropJob: ...


class LeakSearch(Protocol):
    """The splits of a search, read or listed and checked; prepare_outputs() before the session, run() in it."""

    def prepare_outputs(self, *, pairs: Path | None, drop_to: Path | None, force: bool) -> None: ...

    def run(self, *, want_pairs: bool) -> Found: ...


class SplitJob(Protocol):
    """One split: read() gives the rows; unit_inputs() what units are formed from; inside staged(), write() each
    round's assignment (to the files or folders `written` names) and finish() describes what was written."""

    @property
    def labels(self) -> Sequence[Any] | None: ...

    @property
    def dates(self) -> Sequence[Any] | None: ...

    @property
    def written(self) -> Sequence[str | os.PathLike[str]]: ...

    def read(self) -> int: ...

    def unit_inputs(self) -> UnitInputs: ...

    def staged(self) -> AbstractContextManager[Any]: ...

    def write(self, assign: Any) -> None: ...

    def finish(self, assign: Any, units: Any, leaks: LeakReport,
               links: Sequence[tuple[int, int]]) -> SplitResult | ShardSplit: ...


class Engine(Protocol):
    """What the pipelines need of an engine (the module docstring)."""

    name: str
    sharded: bool          # outputs are folders of shards with a manifest.json

    def session(self, label: str, phase: str) -> AbstractContextManager[Any]: ...

    def accept_split_input(self, path: str | os.PathLike[str], fields: Fields) -> None: ...

    def split_job(self, path: str | os.PathLike[str], out: Path, spec: SplitSpec, fields: Fields, *, force: bool,
                  skip_bad: bool) -> SplitJob: ...

    def leak_search(self, paths: Sequence[str | os.PathLike[str]], fields: Fields, *, names: Sequence[str] | None,
                    threshold: float, config: DedupConfig | None, examples: int, skip_bad: bool, allow_empty: bool,
                    search_datasets: Callable[..., LeakReport], timings: dict[str, float] | None = None,
                    ) -> LeakSearch: ...


def engine_for(engine: str | Engine, *, address: str | None = None, workers: int | None = None,
               parts: int | None = None, progress: bool | None = None) -> Engine:
    """The engine named `engine` (or that engine itself), with its options.

    Raises:
        InputError: an unknown engine, or Ray's options (address, workers) for the local engine.
    """
    if not isinstance(engine, str):
        return engine
    if engine not in ENGINES:
        raise InputError(f"engine {engine!r} is unknown; use local or ray")
    if engine == "local":
        if address is not None or workers is not None:
            raise InputError("--address and --workers go with --engine ray")
        return LocalEngine(progress)
    return RayEngine(address, workers, parts, progress)


__all__ = ["ENGINES", "Engine", "Found", "LeakSearch", "SplitJob", "engine_for"]
