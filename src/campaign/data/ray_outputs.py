"""The Ray engine's outputs (ray_engine.find_leaks_ray): every leaking pair as JSONL shards, and the splits without
their leaking rows as folders of shards, each shard written atomically and the manifest (shards.finish_shard_set)
written last, after a re-check of what was written, so an interrupted run never leaves a set that looks complete.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .leak_files import pair_detail
from .leaks import GROUP, LeakReport
from .read import Fields
from .shards import finish_shard_set, is_uri
from .sketch import DedupConfig

if TYPE_CHECKING:
    from .ray_engine import _State

PAIRS_SCHEMA = "campaign.leak_pairs_shards/1"
FIX_SCHEMA = "campaign.leak_fix_shards/1"
PAIRS_PER_SHARD = 100_000


def write_pairs(out: Path, report: LeakReport, state: "_State") -> int:
    """--pairs: every leaking link as JSONL shards (the columns of leak_files.PAIR_COLUMNS), then the manifest."""
    from ..io import atomic_write_text, dumps_json, sha256_file

    idx = {sp.name: k for k, sp in enumerate(state.splits)}
    lines: list[str] = []
    for check in report.checks:
        if check.status == "skipped" and not check.pairs:
            continue
        for pair in check.pairs:
            a, b = idx[pair.index], idx[pair.query]
            for k, (i, q) in enumerate(pair.linked):
                ra, rb = state.rows[a, i], state.rows[b, q]
                shared = [f"{f} = {rb[5][n]!r}" for n, f in enumerate(state.fields.group)
                          if check.id == GROUP and rb[5][n] is not None and ra[5][n] == rb[5][n]]
                detail = pair_detail(check.id, pair.scores[k] if pair.scores else None, ra[4], rb[4], shared)
                lines.append(dumps_json({"check": check.id, "index_split": pair.index, "index_ref": ra[0],
                                         "query_split": pair.query, "query_ref": rb[0], "query_line": rb[2],
                                         "query_id": rb[3], "detail": detail}, indent=None))
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
    return len(lines)


def folder(name: str) -> str:
    """The folder of split `name` in an output set (a name that is a path keeps one level)."""
    return name.strip("/").replace("/", "_").replace(os.sep, "_") or "split"


def drop_targets(out: Path, listed: list[list[str]], names: Sequence[str]) -> dict[tuple[int, int], tuple[str, str | None]]:
    """--drop-to's file for each (split, shard): out/NAME/SHARD, and out/NAME.leaking/SHARD for its dropped rows
    (None for the first split, copied whole). Shard files of an earlier set that this one does not write are removed.

    Raises:
        InputError: two shards of a split share a file name, or a target is an input.
    """
    from ..io import RECORD_FORMATS

    inputs = {os.path.realpath(f) for fs in listed for f in fs if not is_uri(f)}
    out = Path(os.path.abspath(out))       # the workers write there, from their own folders
    targets: dict[tuple[int, int], tuple[str, str | None]] = {}
    for s, (files, name) in enumerate(zip(listed, names)):
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


def drop_leaking(out: Path, targets: dict[tuple[int, int], tuple[str, str | None]], report: LeakReport,
                  state: "_State", fields: Fields, config: DedupConfig, parts: int) -> int:
    """--drop-to: each split's shards in out/NAME/ without the later splits' leaking rows (those in
    out/NAME.leaking/), re-checked on the engine, then the manifest."""
    import numpy as np

    idx = {sp.name: k for k, sp in enumerate(state.splits)}
    per_shard: dict[tuple[int, int], set[int]] = {}
    for check in report.checks:
        for pair in check.pairs:
            b = idx[pair.query]
            shard, row = state.splits[b].locate(np.asarray([q for _, q in pair.linked], dtype=np.int64))
            for h, r in zip(shard.tolist(), row.tolist()):
                per_shard.setdefault((b, h), set()).add(r)
    from .ray_engine import _collect, _kind, find_leaks_ray
    from .ray_stages import _SHARD, _write_clean

    written = _collect(state.mat.filter(expr=_kind(_SHARD)).map_batches(
        _write_clean, batch_size=1, batch_format="numpy",
        fn_kwargs={"drop": {k: sorted(v) for k, v in per_shard.items()}, "targets": targets}))
    recheck = find_leaks_ray([str(out / folder(sp.name)) for sp in state.splits], fields,
                             names=[sp.name for sp in state.splits],
                             config=config, parts=parts, allow_empty=True)
    if not recheck.passed:
        failing = [c.id for c in recheck.checks if c.status == "fail"]
        raise InputError(f"the rewritten splits still fail {', '.join(failing)}; report this with the files")
    shards = []
    for s, k, kept, dropped, sha in sorted(written):
        keep_path, leak_path = targets[s, k]
        shards.append({"split": state.splits[s].name, "input": state.splits[s].shards[k]["path"],
                       "input_sha256": state.splits[s].shards[k]["sha256"],
                       "path": os.path.relpath(keep_path, out), "rows": kept, "dropped": dropped, "sha256": sha,
                       "dropped_path": os.path.relpath(leak_path, out) if leak_path else None})
    finish_shard_set(out, FIX_SCHEMA, shards, config=config.to_dict(),
                     dropped_by=[c.id for c in report.checks if c.pairs and c.status != "skipped"],
                     recheck=recheck.to_dict())
    return sum(s["dropped"] for s in shards)


__all__ = ["FIX_SCHEMA", "PAIRS_SCHEMA", "drop_leaking", "drop_targets", "folder", "write_pairs"]
