"""The leak search of leaks.find_leaks on Ray Data, for splits held as many shards (`campaign leaks --engine ray`).

Stages (Ray Data operators; the driver holds per-shard metadata, the candidate pairs and the leaks, never the
corpus):
1. map_batches, one task per shard (stages.py): read it with read.read_dataset (the same parsing and file:line),
   sketch it with sketch.Sketches (the one implementation of shingles, signatures and band keys), and emit its
   band keys, content hashes and group values hash-partitioned into parts.
2. groupby(part).map_groups: in each part, the index split's rows sharing a band key with a query row (the first
   max_bucket in row order, as dedup.cross_candidate_pairs), equal content hashes (exact copies, label conflicts)
   and equal group values.
3. candidate pairs (made unique on the driver) travel with both texts to parts again, are sketched there and
   confirmed with dedup.prefilter and dedup.exact_jaccard.
4. the rows the report shows or the outputs write are fetched from their shards.
Row numbers: a split's shards are ordered by path and row k of shard s is row offset[s] + k of the split, so the
report's linked rows are find_leaks's on the shards concatenated in that order; refs name the shard's file:line.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import InputError
from ..leak_findings import PairFindings, build_report, findings
from ..leak_report import LeakReport, LeakRow, SplitInfo
from ..payload import loads as load_payload
from ..read import Fields
from ..shards import list_shards, split_name
from ..sketch import DedupConfig
from .session import collect, kind, ray_session, run, source
from .stages import META, PART, ROW_BITS, SHARD, confirm_part, fetch_rows, match_part, send_texts, sketch_shards

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True)
class ShardedSplit:
    """A split held as shards: its name, where it was given, each shard's metadata (path, rows, sha256, n_bad,
    format) and the row number of each shard's first row, by which its rows are numbered as one file."""

    name: str
    spec: str
    shards: tuple[dict[str, Any], ...]
    offsets: np.ndarray     # row number of each shard's first row

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.shards)

    def gid(self, enc: npt.ArrayLike) -> np.ndarray:
        import numpy as np

        enc = np.asarray(enc, dtype=np.int64)
        return self.offsets[enc >> ROW_BITS] + (enc & ((1 << ROW_BITS) - 1))

    def locate(self, gid: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row in shard) of the split's rows `gid`."""
        import numpy as np

        gid = np.asarray(gid, dtype=np.int64)
        shard = np.searchsorted(self.offsets, gid, side="right") - 1
        return shard, gid - self.offsets[shard]

    def info(self) -> SplitInfo:
        if len(self.shards) == 1:
            sha = self.shards[0]["sha256"]
        else:  # the set's hash: each shard's sha256 and path, in order
            sha = hashlib.sha256("".join(f"{s['sha256']}  {s['path']}\n" for s in self.shards).encode()).hexdigest()
        return SplitInfo(self.name, self.spec, self.rows, sha)


def find_leaks_ray(splits: Sequence[str | os.PathLike[str]], fields: Fields | None = None, *,
                   names: Sequence[str] | None = None, threshold: float = 0.0, config: DedupConfig | None = None,
                   examples: int = 3, skip_bad: bool = False, parts: int | None = None, address: str | None = None,
                   workers: int | None = None, timings: dict[str, float] | None = None,
                   allow_empty: bool = False) -> LeakReport:
    """leaks.find_leaks on Ray: each split a file, a directory or a glob of shards (or an object-store path), the
    first indexed, the others queried. The report has the rows, links, linked rows and examples that find_leaks
    gives on the same rows (each split's shards concatenated in path order); refs are shard:line. (The outputs,
    --pairs and --drop-to, are leaks.check_files's, on either engine.)

    Args:
        parts: hash partitions of the shuffles (default: 4 per CPU of the cluster, at most 512).
        address: a Ray cluster (default: RAY_ADDRESS, else a local Ray on `workers` CPUs).
        timings: filled with the seconds of each stage (read+sketch, match, confirm, fetch), when given.
        allow_empty: check a split without records (the re-check of written splits) instead of refusing it.
    Raises:
        InputError: bad input (a missing shard, a shard without the text field...), in one line.
        EngineError: the cluster lost a worker or node mid-run.
    """
    specs, listed, names = shard_splits(splits, names, threshold=threshold, examples=examples)
    with ray_session(address, workers) as ray:
        parts = parts or max(1, min(512, 4 * int(ray.cluster_resources().get("CPU", 1))))
        return search(ray, specs, listed, names, fields or Fields(), config or DedupConfig(), threshold, examples,
                      skip_bad, parts, want_pairs=False, timings=timings if timings is not None else {},
                      allow_empty=allow_empty).report


def shard_splits(splits: Sequence[str | os.PathLike[str]], names: Sequence[str] | None, *, threshold: float,
                 examples: int) -> tuple[list[str], list[list[str]], list[str]]:
    """The splits of a search on the engine, checked before Ray starts: (specs, the shards of each, names).

    Raises:
        InputError: a threshold or examples out of range, fewer than two splits, a split without shards, names
            that repeat.
    """
    if not 0.0 <= threshold <= 1.0:
        raise InputError(f"leak threshold {threshold!r} is a rate of rows and must be in [0, 1]; use e.g. 0 or 0.01")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise InputError(f"examples {examples!r} must be a positive number of example pairs per check; use e.g. 3")
    if len(splits) < 2:
        raise InputError(f"need at least two splits to compare, got {len(splits)}; give e.g. TRAIN EVAL [TEST]")
    specs = [str(s) for s in splits]
    listed = [list_shards(s) for s in specs]
    if names is None:
        names = []
        for s in specs:
            base = split_name(s)
            names.append(base if base not in names else s)
    if len(set(names)) != len(names):
        raise InputError(f"split names {list(names)!r} repeat; give distinct names")
    return specs, listed, list(names)


@dataclass
class ShardSearch:
    """A leak search on the engine: its report, and what the outputs need: the materialized stage-1 dataset (the
    shards' Datasets), the splits and the rows fetched for the report and the pairs file."""

    report: LeakReport
    mat: Any
    splits: list[ShardedSplit]
    rows: dict[tuple[int, int], LeakRow]        # (split, row) -> the row
    fields: Fields

    def row(self, split: str, row: int) -> LeakRow:
        return self.rows[next(k for k, sp in enumerate(self.splits) if sp.name == split), row]


def search(ray: Any, specs: list[str], listed: list[list[str]], names: list[str], fields: Fields,
           config: DedupConfig, threshold: float, examples: int, skip_bad: bool, parts: int, *,
           want_pairs: bool, timings: dict[str, float], allow_empty: bool = False) -> ShardSearch:
    """Stages 1-4 on `ray` (the module docstring), then the checks assembled as find_leaks assembles them."""
    import time

    import numpy as np

    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = timings.get(stage, 0.0) + now - clock
        clock = now

    items = [{"split": s, "shard": k, "path": p, "source": source(p)} for s, fs in enumerate(listed)
             for k, p in enumerate(fs)]
    stage1 = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        sketch_shards, batch_size=1, batch_format="numpy",
        fn_kwargs={"config": config, "fields": fields, "skip_bad": skip_bad, "parts": parts})
    mat = run(stage1.materialize)
    lap("read_sketch")
    metas = sorted(((r["split"], r["shard"], load_payload(r["payload"]))
                    for r in run(lambda: mat.filter(expr=kind(META)).take_all())), key=lambda t: t[:2])
    splits = []
    for s, name in enumerate(names):
        shards = tuple(m for sp, _, m in metas if sp == s)
        offsets = np.cumsum([0] + [m["rows"] for m in shards])[:-1].astype(np.int64)
        splits.append(ShardedSplit(name, specs[s], shards, offsets))
    empty = next((sp for sp in splits if sp.rows == 0), None)
    if empty is not None and not allow_empty:
        raise InputError(f"{empty.spec}: no records to check; give the files that hold the split's rows")
    n = len(splits)
    matched = collect(mat.filter(expr=kind(PART)).groupby("part", num_partitions=parts).map_groups(
        match_part, batch_format="numpy", fn_kwargs={"n_splits": n, "cap": config.max_bucket}))
    pair_keys = [(a, b) for a in range(n) for b in range(a + 1, n)]

    def gather(what: str) -> dict[tuple[int, int], list[Any]]:
        return {k: [m[what][k] for m in matched if k in m[what]] for k in pair_keys}

    cands, exact, label, group = gather("cand"), gather("exact"), gather("label"), gather("group")
    capped = {k: sum(m["capped"].get(k, 0) for m in matched) for k in pair_keys}
    lap("match")
    near = confirm(ray, mat, splits, cands, config, parts)
    lap("confirm")
    # the checks, assembled as find_leaks assembles them (leak_findings)
    pairs = []
    for (a, b) in pair_keys:
        A, B = splits[a], splits[b]
        parts_ab = exact[a, b] or [(np.zeros(0, np.int64),) * 3]
        q, i, c = (np.concatenate([p_[k] for p_ in parts_ab]) for k in range(3))
        q, i = B.gid(q), A.gid(i)
        o = np.argsort(q, kind="stable")
        labels = sorted((int(B.gid([qe])[0]), int(A.gid([fe])[0]), lab, lq, k)
                        for part in label[a, b] for qe, fe, lab, lq, k in part) if fields.label is not None else None
        groups = sorted((f, int(B.gid([e])[0]), int(A.gid([fe])[0]), v)
                        for part in group[a, b] for f, e, fe, v in part) if fields.group else None
        pairs.append(PairFindings(a, b, tuple(zip(i[o].tolist(), q[o].tolist(), strict=True)), int(c.sum()),
                                  near[a, b], labels, groups, capped[a, b]))
    found = findings(pairs, names, fields.group, examples=examples, max_bucket=config.max_bucket)
    # fetch the rows the examples (and the pairs file) show
    rows = fetch(mat, splits, found.wanted(linked=want_pairs))
    lap("fetch")
    bad = [f"{m['path']}: {m['n_bad']} bad record(s) skipped" for sp in splits for m in sp.shards if m["n_bad"]]
    report = build_report(found, [sp.info() for sp in splits], lambda s, r: rows[s, r],
                          labels=fields.label is not None, groups=bool(fields.group), threshold=threshold,
                          config=config, notes=bad)
    return ShardSearch(report, mat, splits, rows, fields)


def confirm(ray: Any, mat: Any, splits: list[ShardedSplit], cands: dict[tuple[int, int], list[Any]],
            config: DedupConfig, parts: int) -> dict[tuple[int, int], list[tuple[int, int, float]]]:
    """Stage 3: the unique candidate pairs of each split pair, confirmed on the workers; (index row, query row,
    Jaccard) sorted by rows, as dedup.cross_duplicates lists them."""
    import numpy as np

    cols: list[list[Any]] = [[], [], [], [], [], []]     # split a, split b, shard and row of each side
    for (sa, sb), found in cands.items():
        if not found:
            continue
        nb = max(splits[sb].rows, 1)
        packed = np.unique(splits[sa].gid(np.concatenate([f[0] for f in found])) * nb
                           + splits[sb].gid(np.concatenate([f[1] for f in found])))
        for col, v in zip(cols, (np.full(len(packed), sa), np.full(len(packed), sb),
                                 *splits[sa].locate(packed // nb), *splits[sb].locate(packed % nb)), strict=True):
            col.append(v)
    out: dict[tuple[int, int], list[tuple[int, int, float]]] = {k: [] for k in cands}
    if not cols[0]:
        return out
    a, b, ish, irow, qsh, qrow = (np.concatenate(c).astype(np.int64) for c in cols)
    ie_enc, qe_enc = (ish << ROW_BITS) | irow, (qsh << ROW_BITS) | qrow
    to = np.arange(len(a)) % parts
    pairs = {p: (a[to == p], b[to == p], ie_enc[to == p], qe_enc[to == p]) for p in np.unique(to).tolist()}
    wanted: dict[tuple[int, int], list[Any]] = {}
    for split, sh, row, p in ((a, ish, irow, to), (b, qsh, qrow, to)):
        for s_, h_, r_, p_ in zip(split.tolist(), sh.tolist(), row.tolist(), p.tolist(), strict=True):
            got = wanted.setdefault((s_, h_), [[], []])
            got[0].append(r_)
            got[1].append(p_)
    wanted_np = {k: (np.asarray(v[0], dtype=np.int64), np.asarray(v[1], dtype=np.int64)) for k, v in wanted.items()}
    texts = mat.filter(expr=kind(SHARD)).map_batches(
        send_texts, batch_size=1, batch_format="numpy", fn_kwargs={"wanted": wanted_np, "parts": parts})
    confirmed = collect(texts.groupby("part", num_partitions=parts).map_groups(
        confirm_part, batch_format="numpy", fn_kwargs={"pairs": pairs, "config": config}))
    for c in confirmed:
        for x, y, i_, q_, j in zip(c.a.tolist(), c.b.tolist(), c.index_rows.tolist(), c.query_rows.tolist(),
                                   c.jaccard.tolist(), strict=True):
            out[x, y].append((int(splits[x].gid([i_])[0]), int(splits[y].gid([q_])[0]), float(j)))
    return {k: sorted(v) for k, v in out.items()}


def fetch(mat: Any, splits: list[ShardedSplit], want: set[tuple[int, int]]) -> dict[tuple[int, int], LeakRow]:
    """Stage 4: {(split, row): LeakRow} for the wanted rows."""
    if not want:
        return {}
    wanted: dict[tuple[int, int], list[int]] = {}
    for s, g in want:
        shard, row = splits[s].locate([g])
        wanted.setdefault((s, int(shard[0])), []).append(int(row[0]))
    got = collect(mat.filter(expr=kind(SHARD)).map_batches(
        fetch_rows, batch_size=1, batch_format="numpy", fn_kwargs={"wanted": wanted}))
    out: dict[tuple[int, int], LeakRow] = {}
    for f in got:
        for enc, row in f.rows.items():
            out[f.split, int(splits[f.split].gid([enc])[0])] = row
    return out


__all__ = ["ShardSearch", "ShardedSplit", "find_leaks_ray", "search", "shard_splits"]
