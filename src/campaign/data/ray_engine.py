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
import pickle
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CampaignError, ConfigError, InputError, MissingDependencyError
from .leaks import _WHY, CHECK_IDS, EXACT, GROUP, LABEL, NEAR, LeakCheck, LeakExample, LeakReport, PairLeak, \
    SplitInfo, _snippet, _spread
from .read import Fields
from .shards import finish_shard_set, is_uri, list_shards, local_copy, split_name, start_shard_set
from .sketch import DedupConfig

if TYPE_CHECKING:
    import numpy as np

_ROW_BITS = 40           # a row is (shard << 40) | row in shard: sorting it sorts by the split's row order
_SHARD, _PART, _META = 0, 1, 2
PAIRS_SCHEMA = "campaign.leak_pairs_shards/1"
FIX_SCHEMA = "campaign.leak_fix_shards/1"
PAIRS_PER_SHARD = 100_000


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


# --------------------------------------------------------------------------------------------------- workers


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _sketch_shards(batch: dict[str, Any], *, config: DedupConfig, fields: Fields, skip_bad: bool,
                   parts: int) -> dict[str, Any]:
    """Stage 1, per shard: the Dataset (kind _SHARD), its metadata (_META) and one payload per part (_PART) with
    its band keys, content hashes (with labels) and group values, rows numbered (shard << 40) | row."""
    import numpy as np

    from .read import read_dataset
    from .sketch import Sketches

    out: dict[str, list[Any]] = {"kind": [], "part": [], "split": [], "shard": [], "payload": []}

    def emit(kind: int, part: int, split: int, shard: int, payload: Any) -> None:
        for k, v in (("kind", kind), ("part", part), ("split", split), ("shard", shard),
                     ("payload", pickle.dumps(payload, protocol=5))):
            out[k].append(v)

    for split, shard, path, source in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["path"].tolist(),
                                          batch["source"].tolist()):
        with local_copy(source) as local:
            try:
                ds = read_dataset(local, fields, skip_bad=skip_bad)
            except InputError as e:       # an object-store shard is read from a local copy: name the shard
                raise InputError(str(e).replace(local, path)) from None
        ds = replace(ds, path=path)     # refs name the shard as the user gave it
        sk = Sketches(config).add(ds.texts, progress=False)
        n = len(ds)
        enc = (np.int64(shard) << np.int64(_ROW_BITS)) | np.arange(n, dtype=np.int64)
        full = np.flatnonzero(~sk.empty)
        keys = sk.band_keys[full]
        nb = keys.shape[1]
        lsh_part = (keys % np.uint64(parts)).astype(np.int64).reshape(-1)
        lsh_band = np.tile(np.arange(nb, dtype=np.int16), len(full))
        lsh_key, lsh_enc = keys.reshape(-1), np.repeat(enc[full], nb)
        dig = np.array([sk.digests[i] for i in full.tolist()], dtype="S32")
        dig_part = (dig.view(np.uint8).reshape(-1, 32)[:, :8].copy().view("<u8")[:, 0] % np.uint64(parts)
                    ).astype(np.int64) if len(full) else np.zeros(0, np.int64)
        labels = [ds.labels[i] for i in full.tolist()] if ds.labels is not None else None
        groups: list[list[tuple[int, str, int]]] = [[] for _ in range(parts)]
        for f, col in enumerate(ds.groups):
            for r, v in enumerate(col):
                if v is not None:
                    groups[_hash64(f"{f}\0{v}") % parts].append((f, v, int(enc[r])))
        o_lsh = np.argsort(lsh_part, kind="stable")
        b_lsh = np.searchsorted(lsh_part[o_lsh], np.arange(parts + 1))
        o_dig = np.argsort(dig_part, kind="stable")
        b_dig = np.searchsorted(dig_part[o_dig], np.arange(parts + 1))
        for p in range(parts):
            sl, sd = o_lsh[b_lsh[p]:b_lsh[p + 1]], o_dig[b_dig[p]:b_dig[p + 1]]
            if not len(sl) and not len(sd) and not groups[p]:
                continue
            emit(_PART, p, split, shard, {
                "band": lsh_band[sl], "key": lsh_key[sl], "enc": lsh_enc[sl],
                "dig": dig[sd], "dig_enc": enc[full][sd],
                "dig_label": None if labels is None else [labels[i] for i in sd.tolist()], "groups": groups[p]})
        emit(_META, -1, split, shard, {"path": path, "rows": n, "sha256": ds.sha256, "n_bad": ds.n_bad,
                                       "format": ds.format})
        emit(_SHARD, -1, split, shard, (ds, source))
    return {"kind": np.asarray(out["kind"], dtype=np.int8), "part": np.asarray(out["part"], dtype=np.int64),
            "split": np.asarray(out["split"], dtype=np.int64), "shard": np.asarray(out["shard"], dtype=np.int64),
            "payload": np.asarray(out["payload"], dtype=object)}


def _match_part(batch: dict[str, Any], *, n_splits: int, cap: int) -> dict[str, Any]:
    """Stage 2, one part: for every split pair (a earlier than b), the LSH candidates (index row in a, query row
    in b; a query key's first `cap` index rows in row order), the exact copies with their first index row and
    count, the label conflicts among them, and the shared group values."""
    import numpy as np

    loads = [pickle.loads(p) for p in batch["payload"]]
    splits = batch["split"].astype(np.int64)
    result: dict[str, Any] = {"cand": {}, "capped": {}, "exact": {}, "label": {}, "group": {}}

    def cat(name: str, dtype: Any) -> "np.ndarray":
        arrs = [d[name] for d in loads]
        return np.concatenate(arrs) if arrs else np.zeros(0, dtype)

    def spl(name: str) -> "np.ndarray":
        return np.repeat(splits, [len(d[name]) for d in loads])

    band, key, enc, split = cat("band", np.int16), cat("key", np.uint64), cat("enc", np.int64), spl("enc")
    order = np.lexsort((enc, key, band))
    band, key, enc, split = band[order], key[order], enc[order], split[order]
    bounds = np.searchsorted(band, np.arange(int(band.max()) + 2)) if len(band) else np.zeros(1, np.int64)
    for a in range(n_splits):
        for b in range(a + 1, n_splits):
            out_i, out_q, capped = [], [], 0
            for bd in range(len(bounds) - 1):
                sl = slice(bounds[bd], bounds[bd + 1])
                ia, qb = split[sl] == a, split[sl] == b
                ik, ie = key[sl][ia], enc[sl][ia]           # sorted by (key, row)
                qk, qe = key[sl][qb], enc[sl][qb]
                lo, hi = np.searchsorted(ik, qk, "left"), np.searchsorted(ik, qk, "right")
                cnt = hi - lo
                capped += int((cnt > cap).sum())
                cnt = np.minimum(cnt, cap)
                hit = np.flatnonzero(cnt)
                if not len(hit):
                    continue
                c = cnt[hit]
                first = np.cumsum(c) - c
                rel = np.arange(int(c.sum())) - np.repeat(first, c)
                out_i.append(ie[np.repeat(lo[hit], c) + rel])
                out_q.append(np.repeat(qe[hit], c))
            if out_i:
                pairs = np.unique(np.stack((np.concatenate(out_i), np.concatenate(out_q)), axis=1), axis=0)
                result["cand"][a, b] = (pairs[:, 0], pairs[:, 1])
            result["capped"][a, b] = capped
    # exact copies by content hash (non-empty texts only)
    dig, denc, dsplit = cat("dig", "S32"), cat("dig_enc", np.int64), spl("dig_enc")
    dlab = None if loads and loads[0]["dig_label"] is None else [x for d in loads for x in d["dig_label"]]
    for a in range(n_splits):
        ia = np.flatnonzero(dsplit == a)
        ia = ia[np.argsort(denc[ia], kind="stable")]
        ia = ia[np.argsort(dig[ia], kind="stable")]          # by (hash, row)
        if not len(ia):
            continue
        uniq, first, count = np.unique(dig[ia], return_index=True, return_counts=True)
        for b in range(a + 1, n_splits):
            qb = np.flatnonzero(dsplit == b)
            pos = np.minimum(np.searchsorted(uniq, dig[qb]), len(uniq) - 1)
            hit = uniq[pos] == dig[qb]
            qb, pos = qb[hit], pos[hit]
            result["exact"][a, b] = (denc[qb], denc[ia[first[pos]]], count[pos])
            if dlab is None or not len(qb):
                continue
            per: dict[bytes, dict[str, list[int]]] = {}
            wanted = set(uniq[pos].tolist())
            for i in ia.tolist():                            # in (hash, row) order: a label's first row first
                d, lab = dig[i], dlab[i]
                if lab is not None and d in wanted:
                    got = per.setdefault(d, {}).setdefault(lab, [int(denc[i]), 0])
                    got[1] += 1
            rows = []
            for q in qb.tolist():
                lq, labs = dlab[q], per.get(dig[q])
                if lq is None or not labs:
                    continue
                other = [(lab, f, c) for lab, (f, c) in labs.items() if lab != lq]
                if other:
                    lab, f, _ = min(other, key=lambda o: o[1])
                    rows.append((int(denc[q]), f, lab, lq, sum(c for _, _, c in other)))
            result["label"][a, b] = rows
    # shared group values
    first_of: dict[tuple[int, int, str], int] = {}
    entries = [(s, f, v, e) for s, d in zip(splits.tolist(), loads) for f, v, e in d["groups"]]
    for s, f, v, e in entries:
        k = (s, f, v)
        if k not in first_of or e < first_of[k]:
            first_of[k] = e
    for s, f, v, e in entries:
        for a in range(s):
            if (a, f, v) in first_of:
                result["group"].setdefault((a, s), []).append((f, e, first_of[a, f, v], v))
    return {"payload": np.asarray([pickle.dumps(result, protocol=5)], dtype=object)}


def _send_texts(batch: dict[str, Any], *, wanted: dict[tuple[int, int], Any], parts: int) -> dict[str, Any]:
    """Stage 3 map: the raw texts of the rows candidate pairs need, sent to each part that needs them."""
    import numpy as np

    out_part, out_payload = [], []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"]):
        got = wanted.get((split, shard))
        if got is None:
            continue
        ds, _ = pickle.loads(payload)
        rows, to = got
        for p in np.unique(to).tolist():
            sel = rows[to == p]
            out_part.append(p)
            out_payload.append(pickle.dumps((split, (np.int64(shard) << np.int64(_ROW_BITS)) | sel,
                                             [ds.texts[r] for r in sel.tolist()]), protocol=5))
    return {"part": np.asarray(out_part, dtype=np.int64), "payload": np.asarray(out_payload, dtype=object)}


def _confirm_part(batch: dict[str, Any], *, pairs: dict[int, Any], config: DedupConfig) -> dict[str, Any]:
    """Stage 3 reduce: the part's candidate pairs sketched again from both raw texts and confirmed as
    dedup.cross_duplicates does (prefilter, different content, exact Jaccard >= threshold)."""
    import numpy as np

    from .dedup import exact_jaccard, prefilter
    from .sketch import Sketches

    part = int(batch["part"][0])
    texts: dict[tuple[int, int], str] = {}
    for payload in batch["payload"]:
        split, encs, ts = pickle.loads(payload)
        texts.update(zip(((split, int(e)) for e in encs.tolist()), ts))
    a, b, ie, qe = pairs[part]
    sa = Sketches(config).add([texts[s, e] for s, e in zip(a.tolist(), ie.tolist())], progress=False)
    sb = Sketches(config).add([texts[s, e] for s, e in zip(b.tolist(), qe.tolist())], progress=False)
    ar = np.arange(len(a))
    keep = prefilter(sa, sb, ar, ar)
    keep &= np.fromiter((x != y for x, y in zip(sa.digests, sb.digests)), dtype=bool, count=len(a))
    sel = ar[keep]
    jac = exact_jaccard(sa.texts, sb.texts, sel, sel, config)
    hit = sel[jac >= config.threshold]
    found = (a[hit], b[hit], ie[hit], qe[hit], jac[jac >= config.threshold])
    return {"payload": np.asarray([pickle.dumps(found, protocol=5)], dtype=object)}


def _fetch_rows(batch: dict[str, Any], *, wanted: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """Stage 4: what the report and the outputs show of some rows: ref, text, line, id, label, group values."""
    import numpy as np

    out = []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"]):
        rows = wanted.get((split, shard))
        if rows is None:
            continue
        ds, _ = pickle.loads(payload)
        got = {(shard << _ROW_BITS) | r: (ds.ref(r), ds.texts[r], ds.lines[r], None if ds.ids is None else ds.ids[r],
                                          None if ds.labels is None else ds.labels[r], [g[r] for g in ds.groups])
               for r in rows}
        out.append(pickle.dumps((split, got), protocol=5))
    return {"payload": np.asarray(out, dtype=object)}


def _tmp(path: str) -> str:
    """A hidden temporary name beside path (listings of shards skip hidden files)."""
    p = Path(path)
    return str(p.with_name(f".{p.name}.tmp-{os.getpid()}"))


def _write_clean(batch: dict[str, Any], *, drop: dict[tuple[int, int], list[int]], targets: dict[tuple[int, int],
                 tuple[str, str | None]]) -> dict[str, Any]:
    """--drop-to, per shard: the shard without its leaking rows (the first split's shards copied unchanged) and
    the leaking rows beside it, each written to a temporary file and renamed into place."""
    import numpy as np

    from ..io import sha256_file
    from .write import write_rows

    out = []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"]):
        ds, source = pickle.loads(payload)
        keep_path, leak_path = targets[split, shard]
        rows = drop.get((split, shard), [])
        with local_copy(source) as local:
            if leak_path is None:
                tmp = _tmp(keep_path)
                with open(local, "rb") as src, open(tmp, "wb") as dst:
                    while block := src.read(1 << 20):
                        dst.write(block)
                    dst.flush()
                    os.fsync(dst.fileno())
                os.replace(tmp, keep_path)
            else:
                assign = np.zeros(len(ds), dtype=np.int64)
                assign[rows] = 1
                tmps = [_tmp(keep_path), _tmp(leak_path)]
                write_rows(replace(ds, path=local), assign, [Path(t) for t in tmps])
                os.replace(tmps[1], leak_path)
                os.replace(tmps[0], keep_path)
        out.append(pickle.dumps((split, shard, len(ds) - len(rows), len(rows), sha256_file(keep_path)), protocol=5))
    return {"payload": np.asarray(out, dtype=object)}


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
    return [pickle.loads(p) for p in _run(lambda: [r["payload"] for r in ds.take_all()])]


def find_leaks_ray(splits: Sequence[str | os.PathLike[str]], fields: Fields | None = None, *,
                   names: Sequence[str] | None = None, threshold: float = 0.0, config: DedupConfig | None = None,
                   examples: int = 3, skip_bad: bool = False, parts: int | None = None,
                   pairs: str | os.PathLike[str] | None = None, drop_to: str | os.PathLike[str] | None = None,
                   force: bool = False, address: str | None = None, workers: int | None = None,
                   timings: dict[str, float] | None = None) -> LeakReport:
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
    if drop_to is not None:
        start_shard_set(Path(drop_to), force=force, what="--drop-to", inputs=[f for fs in listed for f in fs])
        targets = _targets(Path(drop_to), listed, names)
    if pairs is not None:
        start_shard_set(Path(pairs), force=True, what="--pairs", inputs=[f for fs in listed for f in fs])
    with ray_session(address, workers) as ray:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        parts = parts or max(1, min(512, 4 * cpus))
        report, state = _search(ray, specs, listed, list(names), fields, config, threshold, examples, skip_bad,
                                parts, want_pairs=pairs is not None, timings=timings if timings is not None else {})
        notes = list(report.notes)
        if pairs is not None:
            n = _write_pairs(Path(pairs), report, state)
            notes.append(f"wrote {n:,} leaking pair(s) to {pairs} as JSONL shards with {pairs}/manifest.json")
        if drop_to is not None:
            dropped = _drop_leaking(Path(drop_to), targets, report, state, fields, config, parts)
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
            want_pairs: bool, timings: dict[str, float]) -> tuple[LeakReport, _State]:
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
    metas = sorted(((r["split"], r["shard"], pickle.loads(r["payload"]))
                    for r in _run(lambda: mat.filter(expr=_kind(_META)).take_all())), key=lambda t: t[:2])
    splits = []
    for s, name in enumerate(names):
        shards = tuple(m for sp, _, m in metas if sp == s)
        offsets = np.cumsum([0] + [m["rows"] for m in shards])[:-1].astype(np.int64)
        splits.append(_Split(name, specs[s], shards, offsets))
    empty = next((sp for sp in splits if sp.rows == 0), None)
    if empty is not None:
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
        per_split = {b: len(r) for b, r in leaking[cid].items()}
        total = sum(per_split.values())
        rate = max((k / splits[b].rows for b, k in per_split.items() if splits[b].rows), default=0.0)
        status = "fail" if any(k and k / splits[b].rows > threshold for b, k in per_split.items()) else "pass"
        seen = f"{total} row(s) in later splits: {seen}" if total else "none found"
        capped_total = sum(capped.values())
        if cid == NEAR and capped_total and status == "pass":
            status = "skipped"
            seen = (f"incomplete: {capped_total} crowded LSH bucket(s) were only partly searched; "
                    f"{'none found' if not total else seen} in the part searched")
            fix = (f"raise the bucket cap above {config.max_bucket} (--max-bucket, DedupConfig.max_bucket), or "
                   "drop the mass-repeated boilerplate texts that crowd the buckets")
        checks.append(LeakCheck(cid, status, seen, why, fix, rows=total, rate=rate, pairs=pair_leaks))
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


def _write_pairs(out: Path, report: LeakReport, state: _State) -> int:
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
                if check.id == NEAR:
                    detail = f"Jaccard {pair.scores[k]:.3f}"
                elif check.id == LABEL:
                    detail = f"label {ra[4]!r} vs {rb[4]!r}"
                elif check.id == GROUP:
                    detail = "; ".join(f"{f} = {rb[5][n]!r}" for n, f in enumerate(state.fields.group)
                                       if rb[5][n] is not None and ra[5][n] == rb[5][n]) or "shared group"
                else:
                    detail = "same normalized text"
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


def _targets(out: Path, listed: list[list[str]], names: Sequence[str]) -> dict[tuple[int, int], tuple[str, str | None]]:
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
            targets[s, k] = (str(out / name / b), str(out / f"{name}.leaking" / b) if s else None)
    for t in (p for pair in targets.values() for p in pair if p):
        if os.path.realpath(t) in inputs:
            raise InputError(f"{t}: writing there would overwrite an input shard; choose another --drop-to folder")
    for s, name in enumerate(names):
        for folder in (out / name, out / f"{name}.leaking"):
            if folder.is_dir():
                keep = {Path(p).name for (sp, _), pair in targets.items() if sp == s for p in pair if p}
                for e in os.scandir(folder):
                    if e.is_file() and e.name not in keep and Path(e.name).suffix.lower() in RECORD_FORMATS:
                        os.unlink(e.path)
            if folder.name == name or s:
                folder.mkdir(parents=True, exist_ok=True)
    return targets


def _drop_leaking(out: Path, targets: dict[tuple[int, int], tuple[str, str | None]], report: LeakReport,
                  state: _State, fields: Fields, config: DedupConfig, parts: int) -> int:
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
    written = _collect(state.mat.filter(expr=_kind(_SHARD)).map_batches(
        _write_clean, batch_size=1, batch_format="numpy",
        fn_kwargs={"drop": {k: sorted(v) for k, v in per_shard.items()}, "targets": targets}))
    recheck = find_leaks_ray([str(out / sp.name) for sp in state.splits], fields, names=[sp.name for sp in state.splits],
                             config=config, parts=parts)
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


__all__ = ["EngineError", "find_leaks_ray", "ray_module", "ray_session"]
