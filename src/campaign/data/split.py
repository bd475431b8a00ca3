"""Leak-free splits of a data file, on either engine: validate, read, form units (groups and duplicate clusters),
assign them (splitter.py), write the splits, check the written splits for leaks with other hash functions, and
merge what that check finds, then write the manifest. The algorithm is splitter.py; the results split_result.py;
reading a split back split_manifest.py.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .engine import Engine, engine_for
from .leak_report import NEAR, LeakReport
from .leaks import check_files
from .read import Fields
from .sketch import DedupConfig
from .split_manifest import (
    MANIFEST_NAME,
    SplitContent,
    SplitSet,
    load_manifest,
    read_split_set,
    split_file_path,
    split_manifest_path,
)
from .split_result import ShardSplit, SplitPart, SplitResult, SplitSpec
from .splitter import LeakFreeSplitter, assign_rows, assign_temporal, assign_units, parse_ratios, split_names
from .units import atomic_units

if TYPE_CHECKING:
    import numpy as np

MERGE_ROUNDS = 5  # re-splits after the check of the written files finds a pair the split's own search missed


def split_file(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], fields: Fields | None = None, *,
               ratios: str | Sequence[float] = (0.8, 0.1, 0.1), names: str | Sequence[str] | None = None,
               stratify: bool | None = None, seed: int = 0, dedup: DedupConfig | None = None,
               tolerance: float = 0.01, skip_bad: bool = False, force: bool = False,
               progress: bool | None = None, engine: str | Engine = "local", address: str | None = None,
               workers: int | None = None, parts: int | None = None,
               output: str | None = None) -> SplitResult | ShardSplit:
    """Split a data file into leak-free splits, write them and the manifest (out_dir/split_manifest.json); on the
    ray engine, a corpus in shards into a folder of shards per split (out_dir/NAME/) and out_dir/manifest.json.

    Args:
        fields: text/label/group/id/date fields; a date field makes the split temporal (oldest data first).
        ratios: fractions of rows per split ('80/10/10').
        stratify: keep each label's ratios (default: when a label field is given and the split is not temporal).
        dedup: near-duplicate settings; its seed is replaced by `seed`.
        tolerance: largest |achieved - target| row fraction for the split.ratio check (0.01 = 1 point).
        force: replace an earlier split in out_dir: the files it would write, and the split files the earlier
            manifest lists (removed, so a split with other --names leaves no stale file behind).
        engine: "local" (this process, one file in) or "ray" (Ray Data: a file, folder, glob or object-store path
            of shards; the split is the one the local engine gives on the shards concatenated in path order, each
            split written as one shard per input shard; a temporal split is not offered there).
        address, workers, parts: the ray engine's cluster and the partitions of its shuffles.
        output: None (each split in the input's format: a Hugging Face dataset folder in, a DatasetDict out) or
            "hf" (a Hugging Face DatasetDict: out/NAME/ per split, out/dataset_dict.json; local engine).
    Returns:
        SplitResult (local) or ShardSplit (ray): the manifest written.
    Raises:
        InputError: bad input (file, line, what, fix), or out_dir would overwrite the input, or (without force)
            a file it would write (a split file or the manifest) already exists.

    The leak check of the written files uses MinHash seed `seed + 1` (other hash functions than the split's):
    a near-duplicate pair the split's LSH missed is searched for again with independent odds; a pair it finds
    across splits is kept together and the data split again, so the files written never hold such a leak.
    The files and the manifest are written as one set: an interrupted run leaves the earlier set or nothing.
    """
    eng = engine_for(engine, address=address, workers=workers, parts=parts, progress=progress)
    fields = fields or Fields()
    eng.accept_split_input(path, fields)
    spec = SplitSpec.checked(fields, ratios=ratios, names=names, stratify=stratify, seed=seed, dedup=dedup,
                             tolerance=tolerance, output=output)
    if output is not None and eng.name != "local":
        raise InputError(f"--format {output} is written by the local engine; leave out --engine {eng.name}")
    job = eng.split_job(path, Path(out_dir), spec, fields, force=force, skip_bad=skip_bad)
    with eng.session("split", f"{path} on Ray: sketch, units, assignment, shards written and checked"):
        n = job.read()
        if n < len(spec.names):
            raise InputError(f"{path}: {n} usable record(s) cannot fill {len(spec.names)} splits; add data")
        found = job.unit_inputs()
        links: list[tuple[int, int]] = []
        with job.staged():
            for attempt in range(1, MERGE_ROUNDS + 2):
                units = atomic_units(n, groups=found.groups, cluster_of=found.cluster_of, links=[*found.links, *links])
                assign = assign_rows(units, spec.ratios, labels=job.labels, dates=job.dates, stratify=spec.stratify,
                                     temporal=spec.temporal, seed=spec.seed)
                job.write(assign)
                leaks = check_files(job.written, fields, config=spec.check_config, names=spec.names,
                                    progress=progress, allow_empty=True, engine=eng)
                missed = crossing_pairs(leaks, assign)
                if not missed:
                    break
                if attempt > MERGE_ROUNDS:
                    raise InputError(f"{path}: the check of the split still finds near duplicates across splits "
                                     f"after {MERGE_ROUNDS} merges; raise --near-threshold or use a text field with "
                                     "less boilerplate")
                links.extend(missed)
            return job.finish(assign, units, leaks, links)


def crossing_pairs(leaks: LeakReport, assign: np.ndarray) -> list[tuple[int, int]]:
    """Near-duplicate pairs the check found across written splits, as pairs of input rows: row k of split s's
    file is the k-th input row assigned to s (files keep the input's order)."""
    import numpy as np

    rows_of = {s: np.flatnonzero(assign == s) for s in range(len(leaks.splits))}
    index = {name: s for s, name in enumerate(x.name for x in leaks.splits)}
    out: list[tuple[int, int]] = []
    for pair in leaks.check(NEAR).pairs:
        a, b = rows_of[index[pair.index]], rows_of[index[pair.query]]
        out.extend((int(a[i]), int(b[q])) for i, q in pair.linked)
    return out


__all__ = ["MANIFEST_NAME", "MERGE_ROUNDS", "LeakFreeSplitter", "ShardSplit", "SplitContent", "SplitPart",
           "SplitResult", "SplitSet", "SplitSpec", "assign_temporal", "assign_units", "crossing_pairs",
           "load_manifest", "parse_ratios", "read_split_set", "split_file", "split_file_path", "split_manifest_path",
           "split_names"]
