"""The Ray engine's drop job (--drop-to on engine="ray"): each split's shards without the later splits' leaking
rows in out/NAME/, the dropped rows in out/NAME.leaking/, each shard written atomically on the workers, re-checked
on the engine, and manifest.json (shards.finish_shard_set) written last, so an interrupted run never leaves a set
that looks complete.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...rows import RECORD_FORMATS
from ..leak_report import LeakReport
from ..shards import finish_shard_set, is_uri, start_shard_set
from .search import ShardSearch, find_leaks_ray
from .session import collect, kind
from .stages import SHARD
from .writes import write_clean

FIX_SCHEMA = "campaign.leak_fix_shards/1"


def prepare_drop(out: Path, listed: list[list[str]], names: Sequence[str], *,
                 force: bool) -> dict[tuple[int, int], tuple[str, str | None]]:
    """--drop-to, before the search: an earlier complete set refused without force, the targets checked."""
    start_shard_set(out, force=force, what="--drop-to", inputs=[f for fs in listed for f in fs])
    return drop_targets(out, listed, names)


def folder(name: str) -> str:
    """The folder of split `name` in an output set (a name that is a path keeps one level)."""
    return name.strip("/").replace("/", "_").replace(os.sep, "_") or "split"


def drop_targets(out: Path, listed: list[list[str]],
                 names: Sequence[str]) -> dict[tuple[int, int], tuple[str, str | None]]:
    """--drop-to's file for each (split, shard): out/NAME/SHARD, and out/NAME.leaking/SHARD for its dropped rows
    (None for the first split, copied whole). Shard files of an earlier set that this one does not write are removed.

    Raises:
        InputError: two shards of a split share a file name, or a target is an input.
    """
    inputs = {os.path.realpath(f) for fs in listed for f in fs if not is_uri(f)}
    out = Path(os.path.abspath(out))       # the workers write there, from their own folders
    targets: dict[tuple[int, int], tuple[str, str | None]] = {}
    for s, (files, name) in enumerate(zip(listed, names, strict=True)):
        base = [Path(f).name for f in files]
        if len(set(base)) != len(base):
            raise InputError(f"split {name!r}: two shards share the file name; rename one before writing them to "
                             "one folder")
        for k, b in enumerate(base):
            targets[s, k] = (str(out / folder(name) / b), str(out / f"{folder(name)}.leaking" / b) if s else None)
    for t in (p for pair in targets.values() for p in pair if p):
        if os.path.realpath(t) in inputs:
            raise InputError(f"{t}: writing there would overwrite an input shard; choose another --drop-to folder")
    for s, name in enumerate(names):
        for d in (out / folder(name), out / f"{folder(name)}.leaking"):
            if d.is_dir():
                keep = {Path(p).name for (sp, _), pair in targets.items() if sp == s for p in pair if p}
                for e in os.scandir(d):
                    if e.is_file() and e.name not in keep and Path(e.name).suffix.lower() in RECORD_FORMATS:
                        os.unlink(e.path)
            if d.name == folder(name) or s:
                d.mkdir(parents=True, exist_ok=True)
    return targets


class ShardDropJob:
    """The splits of a search on the engine written again into `out` without their leaking rows."""

    kept_as = "kept in NAME.leaking/ beside them"
    written_kind = "shards"

    def __init__(self, found: ShardSearch, out: Path, targets: dict[tuple[int, int], tuple[str, str | None]], *,
                 parts: int) -> None:
        self.found, self.out, self.targets, self.parts = found, out, targets, parts

    def staged(self) -> AbstractContextManager[Any]:
        """Each shard is written atomically and the manifest last: nothing to stage."""
        return nullcontext()

    def write(self, drop: Mapping[str, set[int]]) -> list[Any]:
        """Each shard without its dropped rows (the first split's copied unchanged), on the workers."""
        import numpy as np

        per_shard: dict[tuple[int, int], set[int]] = {}
        for b, sp in enumerate(self.found.splits):
            shard, row = sp.locate(np.asarray(sorted(drop.get(sp.name, ())), dtype=np.int64))
            for h, r in zip(shard.tolist(), row.tolist(), strict=True):
                per_shard.setdefault((b, h), set()).add(r)
        return collect(self.found.mat.filter(expr=kind(SHARD)).map_batches(
            write_clean, batch_size=1, batch_format="numpy",
            fn_kwargs={"drop": {k: sorted(v) for k, v in per_shard.items()}, "targets": self.targets}))

    def recheck(self) -> LeakReport:
        splits = self.found.splits
        return find_leaks_ray([str(self.out / folder(sp.name)) for sp in splits], self.found.fields,
                              names=[sp.name for sp in splits], config=self.found.report.config, parts=self.parts,
                              allow_empty=True)

    def finish(self, written: list[Any], recheck: LeakReport, dropped_by: list[str]) -> int:
        splits, out = self.found.splits, self.out
        shards = []
        for w in sorted(written, key=lambda w: (w.split, w.shard)):
            keep_path, leak_path = self.targets[w.split, w.shard]
            shard = splits[w.split].shards[w.shard]
            shards.append({"split": splits[w.split].name, "input": shard["path"], "input_sha256": shard["sha256"],
                           "path": os.path.relpath(keep_path, out), "rows": w.kept, "dropped": w.dropped,
                           "sha256": w.sha256, "dropped_path": os.path.relpath(leak_path, out) if leak_path else None})
        finish_shard_set(out, FIX_SCHEMA, shards, config=self.found.report.config.to_dict(), dropped_by=dropped_by,
                         recheck=recheck.to_dict())
        return sum(s["dropped"] for s in shards)


__all__ = ["FIX_SCHEMA", "ShardDropJob", "drop_targets", "folder", "prepare_drop"]
