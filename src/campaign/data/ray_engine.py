"""`campaign leaks --engine ray`: the leak search of leaks.find_leaks on Ray Data, for splits held as many shards.

Stages (Ray Data operators; the driver holds per-shard metadata, the candidate pairs and the leaks, never the
corpus):
1. map_batches, one task per shard: read it with read.read_dataset (the same parsing and file:line), sketch it with
   sketch.Sketches (the one implementation of shingles, signatures and band keys), and emit its band keys, content
   hashes and group values hash-partitioned into parts.
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

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CampaignError, ConfigError, InputError, MissingDependencyError
from .leaks import _WHY, CHECK_IDS, EXACT, GROUP, LABEL, NEAR, LeakCheck, LeakExample, LeakReport, PairLeak, \
    SplitInfo, _snippet, _spread, leak_check
from .read import Fields
from .ray_stages import _META, _PART, _ROW_BITS, _SHARD, _confirm_part, _fetch_rows, _match_part, _send_texts, \
    _sketch_shards
from .shards import is_uri, list_shards, split_name, start_shard_set
from .sketch import DedupConfig
from .payload import loads as load_payload

if TYPE_CHECKING:
    import numpy as np



class EngineError(CampaignError):
    """The cluster failed under the run (a worker or node lost): nothing was written as complete."""


def ray_module() -> Any:
    """ray, or the one-line error saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError("ray", "ray") from e
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """Ray, connected: the running session; else the cluster at `address` (or RAY_ADDRESS); else a local Ray on
    `workers` CPUs (default: all), shut down on exit."""
    import logging

    ray = ray_module()
    started = not ray.is_initialized()
    if started:
        address = address or os.environ.get("RAY_ADDRESS")
        options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address:
            _reachable(address)
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # not a warning a second while it retries
            # the driver's campaign package travels to the cluster's workers (no install there; the same code)
            options.update(address=address, runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])],
                                                         "excludes": ["__pycache__"]})
        else:  # "local": a new Ray on this machine, even where `ray start` left a cluster's address behind
            options.update(address="local", num_cpus=workers, include_dashboard=False)
        try:
            ray.init(**options)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise InputError(f"cannot connect to the Ray cluster {address!r} ({str(e).splitlines()[0]}); check "
                             "--address (host:6379) or RAY_ADDRESS, and for a cluster with token authentication "
                             "set RAY_AUTH_MODE=token with its token in ~/.ray/auth_token or RAY_AUTH_TOKEN") from None
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.shuffle_strategy, ctx.enable_progress_bars, ctx.print_on_execution_start)
    try:
        _quiet(ray)
        # groupby as a sort-based pull shuffle of tasks: 3-7x faster here than the hash shuffle's aggregator
        # actors on few large payload rows per part (benchmarks/dedup_scale.py's stages)
        from ray.data.context import ShuffleStrategy

        ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
        yield ray
    finally:
        ctx.shuffle_strategy, ctx.enable_progress_bars, ctx.print_on_execution_start = saved
        if started:
            ray.shutdown()


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A one-line InputError when host:port (or ray://host:port) does not answer within timeout_s: ray.init
    itself retries for minutes. 'auto' and 'local' are Ray's own words and are passed as they are."""
    import socket

    target = address.split("://", 1)[-1].rstrip("/")
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as e:
        raise InputError(f"cannot reach the Ray cluster at {address!r} ({e}); check --address (host:6379 or "
                         "ray://host:10001) or RAY_ADDRESS, and that the cluster is up (`ray status` on its head)") \
            from None


def _quiet(ray: Any) -> None:
    """No progress bars or execution banners; Ray Data's console log kept off stderr (errors come as one line)."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    import logging

    for h in logging.getLogger("ray.data").handlers:    # Ray Data's console handler: our errors are one line
        if not isinstance(h, logging.FileHandler) and "File" not in type(h).__name__:
            h.setLevel(logging.CRITICAL + 1)


def _kind(kind: int) -> Any:
    from ray.data.expressions import col

    return col("kind") == kind


def _run(thunk: Any) -> Any:
    """thunk(), with what went wrong on the workers turned into one line: a CampaignError raised there (a missing
    shard, a shard without the text field) as itself, a lost worker or node as EngineError."""
    import ray.exceptions as rex

    try:
        return thunk()
    except Exception as e:
        # Ray hands back a worker's exception as text: the last line of its traceback names our error
        found = re.findall(r"^campaign\.errors\.(InputError|ConfigError|CampaignError): (.+)$", str(e), re.M)
        if found:
            kind, message = found[-1]
            raise {"InputError": InputError, "ConfigError": ConfigError}.get(kind, CampaignError)(message) from None
        missing = re.search(r"No module named '([\w.]+)'", str(e))
        if missing:
            raise InputError(f"the Ray cluster's workers cannot import {missing.group(1)!r}; install it in the "
                             "cluster's image (pip install 'campaign[ray]' brings numpy and pyarrow)") from None
        lost = tuple(getattr(rex, n) for n in ("WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                                               "OwnerDiedError", "ActorDiedError", "RayActorError",
                                               "LocalRayletDiedError", "OutOfMemoryError") if hasattr(rex, n))
        seen: set[int] = set()
        x: BaseException | None = e
        while x is not None and id(x) not in seen:
            seen.add(id(x))
            if isinstance(x, lost) or "worker died" in str(x).lower():
                raise EngineError(f"the Ray cluster lost a worker mid-run ({type(x).__name__}: "
                                  f"{str(x).splitlines()[0][:200]}); no output was marked complete; run again, "
                                  "with more memory per worker or smaller shards") from None
            x = x.__cause__ or getattr(x, "cause", None)
        raise


# --------------------------------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class _Split:
    name: str
    spec: str
    shards: tuple[dict[str, Any], ...]
    offsets: "np.ndarray"     # row number of each shard's first row

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.shards)

    def gid(self, enc: "np.ndarray") -> "np.ndarray":
        import numpy as np

        enc = np.asarray(enc, dtype=np.int64)
        return self.offsets[enc >> _ROW_BITS] + (enc & ((1 << _ROW_BITS) - 1))

    def locate(self, gid: Any) -> tuple["np.ndarray", "np.ndarray"]:
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


def source(path: str) -> str:
    """Where a worker reads a shard: its absolute path (a cluster's workers run in other folders), or its URI."""
    return path if is_uri(path) else os.path.abspath(path)


def _collect(ds: Any) -> list[Any]:
    return [load_payload(p) for p in _run(lambda: [r["payload"] for r in ds.take_all()])]


def find_leaks_ray(splits: Sequence[str | os.PathLike[str]], fields: Fields | None = None, *,
                   names: Sequence[str] | None = None, threshold: float = 0.0, config: DedupConfig | None = None,
                   examples: int = 3, skip_bad: bool = False, parts: int | None = None,
                   pairs: str | os.PathLike[str] | None = None, drop_to: str | os.PathLike[str] | None = None,
                   force: bool = False, address: str | None = None, workers: int | None = None,
                   timings: dict[str, float] | None = None, allow_empty: bool = False) -> LeakReport:
    """leaks.check_files on Ray: each split a file, a directory or a glob of shards (or an object-store path),
    the first indexed, the others queried. The report has the rows, links, linked rows and examples that
    find_leaks gives on the same rows (each split's shards concatenated in path order); refs are shard:line.

    Args:
        parts: hash partitions of the shuffles (default: 4 per CPU of the cluster, at most 512).
        pairs: a folder for every leaking pair as JSONL shards (pairs-00000.jsonl ...) and manifest.json.
        drop_to: a folder for the splits without the later splits' leaking rows, one folder per split holding
            its shards, NAME.leaking/ beside it, and manifest.json (written last, after a re-check).
        address: a Ray cluster (default: RAY_ADDRESS, else a local Ray on `workers` CPUs).
        timings: filled with the seconds of each stage (read+sketch, match, confirm, fetch), when given.
        allow_empty: check a split without records (the re-check of written splits) instead of refusing it.
    Raises:
        InputError: bad input (a missing shard, a shard without the text field...), in one line.
        EngineError: the cluster lost a worker or node mid-run.
    """
    if not 0.0 <= threshold <= 1.0:
        raise InputError(f"leak threshold {threshold!r} is a rate of rows and must be in [0, 1]; use e.g. 0 or 0.01")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise InputError(f"examples {examples!r} must be a positive number of example pairs per check; use e.g. 3")
    if len(splits) < 2:
        raise InputError(f"need at least two splits to compare, got {len(splits)}; give e.g. TRAIN EVAL [TEST]")
    fields = fields or Fields()
    config = config or DedupConfig()
    specs = [str(s) for s in splits]
    listed = [list_shards(s) for s in specs]
    if names is None:
        names = []
        for s in specs:
            base = split_name(s)
            names.append(base if base not in names else s)
    if len(set(names)) != len(names):
        raise InputError(f"split names {list(names)!r} repeat; give distinct names")
    from .ray_outputs import drop_leaking, drop_targets, write_pairs

    if drop_to is not None:
        start_shard_set(Path(drop_to), force=force, what="--drop-to", inputs=[f for fs in listed for f in fs])
        targets = drop_targets(Path(drop_to), listed, names)
    if pairs is not None:
        start_shard_set(Path(pairs), force=True, what="--pairs", inputs=[f for fs in listed for f in fs])
    with ray_session(address, workers) as ray:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        parts = parts or max(1, min(512, 4 * cpus))
        report, state = _search(ray, specs, listed, list(names), fields, config, threshold, examples, skip_bad,
                                parts, want_pairs=pairs is not None, timings=timings if timings is not None else {},
                                allow_empty=allow_empty)
        notes = list(report.notes)
        if pairs is not None:
            n = write_pairs(Path(pairs), report, state)
            notes.append(f"wrote {n:,} leaking pair(s) to {pairs} as JSONL shards with {pairs}/manifest.json")
        if drop_to is not None:
            dropped = drop_leaking(Path(drop_to), targets, report, state, fields, config, parts)
            notes.append(f"wrote the splits to {drop_to} without their {dropped:,} leaking row(s) (kept in "
                         "NAME.leaking/ beside them); the check of the written shards passes")
    return replace(report, notes=tuple(notes))


@dataclass
class _State:
    mat: Any                  # the materialized stage-1 dataset
    splits: list[_Split]
    rows: dict[tuple[int, int], tuple[Any, ...]]   # (split, row) -> fetched row (ref, text, line, id, label, groups)
    fields: Fields


def _search(ray: Any, specs: list[str], listed: list[list[str]], names: list[str], fields: Fields,
            config: DedupConfig, threshold: float, examples: int, skip_bad: bool, parts: int, *,
            want_pairs: bool, timings: dict[str, float], allow_empty: bool = False) -> tuple[LeakReport, _State]:
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
        _sketch_shards, batch_size=1, batch_format="numpy",
        fn_kwargs={"config": config, "fields": fields, "skip_bad": skip_bad, "parts": parts})
    mat = _run(stage1.materialize)
    lap("read_sketch")
    metas = sorted(((r["split"], r["shard"], load_payload(r["payload"]))
                    for r in _run(lambda: mat.filter(expr=_kind(_META)).take_all())), key=lambda t: t[:2])
    splits = []
    for s, name in enumerate(names):
        shards = tuple(m for sp, _, m in metas if sp == s)
        offsets = np.cumsum([0] + [m["rows"] for m in shards])[:-1].astype(np.int64)
        splits.append(_Split(name, specs[s], shards, offsets))
    empty = next((sp for sp in splits if sp.rows == 0), None)
    if empty is not None and not allow_empty:
        raise InputError(f"{empty.spec}: no records to check; give the files that hold the split's rows")
    n = len(splits)
    matched = _collect(mat.filter(expr=_kind(_PART)).groupby("part", num_partitions=parts).map_groups(
        _match_part, batch_format="numpy", fn_kwargs={"n_splits": n, "cap": config.max_bucket}))
    pair_keys = [(a, b) for a in range(n) for b in range(a + 1, n)]

    def gather(kind: str) -> dict[tuple[int, int], list[Any]]:
        return {k: [m[kind][k] for m in matched if k in m[kind]] for k in pair_keys}

    cands, exact, label, group = gather("cand"), gather("exact"), gather("label"), gather("group")
    capped = {k: sum(m["capped"].get(k, 0) for m in matched) for k in pair_keys}
    lap("match")
    near = _confirm(ray, mat, splits, cands, config, parts)
    lap("confirm")
    # the checks, assembled as find_leaks assembles them
    by_check: dict[str, list[tuple[Any, ...]]] = {c: [] for c in CHECK_IDS}
    leaking: dict[str, dict[int, set[int]]] = {c: {b: set() for b in range(1, n)} for c in CHECK_IDS}
    notes: list[str] = []
    for (a, b) in pair_keys:
        A, B = splits[a], splits[b]
        if capped[a, b]:
            notes.append(f"{A.name} -> {B.name}: {capped[a, b]} crowded LSH bucket(s) held more than "
                         f"{config.max_bucket} texts and were only partly searched for near duplicates")
        parts_ab = exact[a, b] or [(np.zeros(0, np.int64),) * 3]
        q, i, c = (np.concatenate([p_[k] for p_ in parts_ab]) for k in range(3))
        q, i = B.gid(q), A.gid(i)
        o = np.argsort(q, kind="stable")
        linked = tuple(zip(i[o].tolist(), q[o].tolist()))
        leaking[EXACT][b].update(q.tolist())
        by_check[EXACT].append((a, b, len(q), int(c.sum()), [(x, y, "same normalized text")
                                                              for x, y in _spread(linked, examples)], linked, ()))
        found = near[a, b]
        near_rows = {y for _, y, _ in found}
        leaking[NEAR][b].update(near_rows)
        jac = {(x, y): j for x, y, j in found}
        by_query = [(x, y) for x, y, _ in sorted(found, key=lambda t: (t[1], -t[2]))]
        ex = [(x, y, f"Jaccard {jac[x, y]:.2f}") for x, y in _spread(by_query, examples)]
        by_check[NEAR].append((a, b, len(near_rows), len(found), ex, tuple((x, y) for x, y, _ in found),
                               tuple(j for _, _, j in found)))
        if fields.label is not None:
            rows = sorted((int(B.gid([qe])[0]), int(A.gid([fe])[0]), lab, lq, k)
                          for part in label[a, b] for qe, fe, lab, lq, k in part)
            leaking[LABEL][b].update(r[0] for r in rows)
            by_check[LABEL].append((a, b, len(rows), sum(r[4] for r in rows),
                                    [(f, q_, f"label {lab!r} vs {lq!r}") for q_, f, lab, lq, _ in rows[:examples]],
                                    tuple((f, q_) for q_, f, _, _, _ in rows), ()))
        if fields.group:
            shared_rows = sorted((f, int(B.gid([e])[0]), int(A.gid([fe])[0]), v)
                                 for part in group[a, b] for f, e, fe, v in part)
            seen_q: set[int] = set()
            glinked, gex, links = [], [], 0
            for f in range(len(fields.group)):
                shared: dict[str, int] = {}
                for f2, q_, fe, v in shared_rows:
                    if f2 != f:
                        continue
                    if q_ not in seen_q:
                        glinked.append((fe, q_))
                    seen_q.add(q_)
                    if v not in shared:
                        shared[v] = q_
                        if len(gex) < examples:
                            gex.append((fe, q_, f"{fields.group[f]} = {v!r}"))
                links += len(shared)
            leaking[GROUP][b].update(seen_q)
            by_check[GROUP].append((a, b, len(seen_q), links, gex, tuple(glinked), ()))
    # fetch the rows the examples (and the pairs file) show
    want: set[tuple[int, int]] = set()
    for cid in CHECK_IDS:
        for a, b, _, _, ex, linked, _ in by_check[cid]:
            want.update((a, x) for x, _, _ in ex)
            want.update((b, y) for _, y, _ in ex)
            if want_pairs:
                want.update((a, x) for x, _ in linked)
                want.update((b, y) for _, y in linked)
    rows = _fetch(mat, splits, want)
    lap("fetch")
    checks = []
    for cid in CHECK_IDS:
        seen, why, fix = _WHY[cid]
        if cid == LABEL and fields.label is None:
            checks.append(LeakCheck(cid, "skipped", "no label field given", why, "pass --label FIELD"))
            continue
        if cid == GROUP and not fields.group:
            checks.append(LeakCheck(cid, "skipped", "no group field given", why, "pass --group FIELD"))
            continue
        pair_leaks = tuple(PairLeak(names[a], names[b], k, splits[b].rows, links, tuple(
            LeakExample(rows[a, x][0], rows[b, y][0], _snippet(rows[a, x][1]), _snippet(rows[b, y][1]), d)
            for x, y, d in ex), linked=linked, scores=scores)
            for a, b, k, links, ex, linked, scores in by_check[cid])
        counts = [(len(r), splits[b].rows) for b, r in leaking[cid].items()]
        checks.append(leak_check(cid, counts, threshold, sum(capped.values()) if cid == NEAR else 0,
                                 config.max_bucket, pair_leaks))
    for sp in splits:
        notes.extend(f"{m['path']}: {m['n_bad']} bad record(s) skipped" for m in sp.shards if m["n_bad"])
    report = LeakReport(splits=tuple(sp.info() for sp in splits), checks=tuple(checks), threshold=threshold,
                        config=config, notes=tuple(notes))
    return report, _State(mat, splits, rows, fields)


def _confirm(ray: Any, mat: Any, splits: list[_Split], cands: dict[tuple[int, int], list[Any]], config: DedupConfig,
             parts: int) -> dict[tuple[int, int], list[tuple[int, int, float]]]:
    """Stage 3: the unique candidate pairs of each split pair, confirmed on the workers; (index row, query row,
    Jaccard) sorted by rows, as dedup.cross_duplicates lists them."""
    import numpy as np

    cols: list[list[Any]] = [[], [], [], [], [], []]     # split a, split b, shard and row of each side
    for (a, b), found in cands.items():
        if not found:
            continue
        nb = max(splits[b].rows, 1)
        packed = np.unique(splits[a].gid(np.concatenate([f[0] for f in found])) * nb
                           + splits[b].gid(np.concatenate([f[1] for f in found])))
        for col, v in zip(cols, (np.full(len(packed), a), np.full(len(packed), b),
                                 *splits[a].locate(packed // nb), *splits[b].locate(packed % nb))):
            col.append(v)
    out: dict[tuple[int, int], list[tuple[int, int, float]]] = {k: [] for k in cands}
    if not cols[0]:
        return out
    a, b, ish, irow, qsh, qrow = (np.concatenate(c).astype(np.int64) for c in cols)
    ie_enc, qe_enc = (ish << _ROW_BITS) | irow, (qsh << _ROW_BITS) | qrow
    to = np.arange(len(a)) % parts
    pairs = {p: (a[to == p], b[to == p], ie_enc[to == p], qe_enc[to == p]) for p in np.unique(to).tolist()}
    wanted: dict[tuple[int, int], list[Any]] = {}
    for split, sh, row, p in ((a, ish, irow, to), (b, qsh, qrow, to)):
        for s_, h_, r_, p_ in zip(split.tolist(), sh.tolist(), row.tolist(), p.tolist()):
            got = wanted.setdefault((s_, h_), [[], []])
            got[0].append(r_)
            got[1].append(p_)
    wanted_np = {k: (np.asarray(v[0], dtype=np.int64), np.asarray(v[1], dtype=np.int64)) for k, v in wanted.items()}
    texts = mat.filter(expr=_kind(_SHARD)).map_batches(
        _send_texts, batch_size=1, batch_format="numpy", fn_kwargs={"wanted": wanted_np, "parts": parts})
    confirmed = _collect(texts.groupby("part", num_partitions=parts).map_groups(
        _confirm_part, batch_format="numpy", fn_kwargs={"pairs": pairs, "config": config}))
    for fa, fb, fie, fqe, fj in confirmed:
        for x, y, i_, q_, j in zip(fa.tolist(), fb.tolist(), fie.tolist(), fqe.tolist(), fj.tolist()):
            out[x, y].append((int(splits[x].gid([i_])[0]), int(splits[y].gid([q_])[0]), float(j)))
    return {k: sorted(v) for k, v in out.items()}


def _fetch(mat: Any, splits: list[_Split], want: set[tuple[int, int]]) -> dict[tuple[int, int], tuple[Any, ...]]:
    """Stage 4: {(split, row): (ref, text, line, id, label, group values)} for the wanted rows."""
    if not want:
        return {}
    wanted: dict[tuple[int, int], list[int]] = {}
    for s, g in want:
        shard, row = splits[s].locate([g])
        wanted.setdefault((s, int(shard[0])), []).append(int(row[0]))
    got = _collect(mat.filter(expr=_kind(_SHARD)).map_batches(
        _fetch_rows, batch_size=1, batch_format="numpy", fn_kwargs={"wanted": wanted}))
    out: dict[tuple[int, int], tuple[Any, ...]] = {}
    for s, rows in got:
        for enc, row in rows.items():
            out[s, int(splits[s].gid([enc])[0])] = row
    return out


__all__ = ["EngineError", "find_leaks_ray", "ray_module", "ray_session"]
