"""The worker side of the Ray engine's leak search (search.py): the functions Ray Data runs on batches of shards or
of partitions, each taking and returning columns of payloads (payload.py: pickled, loaded with an allowlist). A row of
a split is numbered (shard << ROW_BITS) | row in shard, so sorting those numbers sorts by the split's row order.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import InputError
from ..dedup import capped_matches, exact_jaccard, prefilter
from ..leak_report import LeakRow
from ..payload import dumps as dump_payload, loads as load_payload
from ..read import Fields, read_dataset
from ..shards import local_copy
from ..sketch import DedupConfig, Sketches
from .records import Confirmed, Fetched, ShardData, Texts

if TYPE_CHECKING:
    import numpy as np

ROW_BITS = 40           # a row is (shard << 40) | row in shard: sorting it sorts by the split's row order
SHARD, PART, META = 0, 1, 2     # stage-1 rows: a shard's Dataset, a part's payload, a shard's metadata


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def sketch_shards(batch: dict[str, Any], *, config: DedupConfig, fields: Fields, skip_bad: bool,
                   parts: int) -> dict[str, Any]:
    """Stage 1, per shard: the Dataset (kind SHARD), its metadata (META) and one payload per part (PART) with
    its band keys, content hashes (with labels) and group values, rows numbered (shard << 40) | row."""
    import numpy as np

    out: dict[str, list[Any]] = {"kind": [], "part": [], "split": [], "shard": [], "payload": []}

    def emit(kind: int, part: int, split: int, shard: int, payload: Any) -> None:
        for k, v in (("kind", kind), ("part", part), ("split", split), ("shard", shard),
                     ("payload", dump_payload(payload))):
            out[k].append(v)

    for split, shard, path, source in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["path"].tolist(),
                                          batch["source"].tolist(), strict=True):
        with local_copy(source) as local:
            try:
                ds = read_dataset(local, fields, skip_bad=skip_bad)
            except InputError as e:       # an object-store shard is read from a local copy: name the shard
                raise InputError(str(e).replace(local, path)) from None
        ds = replace(ds, path=path)     # refs name the shard as the user gave it
        sk = Sketches(config).add(ds.texts, progress=False)
        n = len(ds)
        enc = (np.int64(shard) << np.int64(ROW_BITS)) | np.arange(n, dtype=np.int64)
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
                    groups[hash64(f"{f}\0{v}") % parts].append((f, v, int(enc[r])))
        o_lsh = np.argsort(lsh_part, kind="stable")
        b_lsh = np.searchsorted(lsh_part[o_lsh], np.arange(parts + 1))
        o_dig = np.argsort(dig_part, kind="stable")
        b_dig = np.searchsorted(dig_part[o_dig], np.arange(parts + 1))
        for p in range(parts):
            sl, sd = o_lsh[b_lsh[p]:b_lsh[p + 1]], o_dig[b_dig[p]:b_dig[p + 1]]
            if not len(sl) and not len(sd) and not groups[p]:
                continue
            emit(PART, p, split, shard, {
                "band": lsh_band[sl], "key": lsh_key[sl], "enc": lsh_enc[sl],
                "dig": dig[sd], "dig_enc": enc[full][sd],
                "dig_label": None if labels is None else [labels[i] for i in sd.tolist()], "groups": groups[p]})
        emit(META, -1, split, shard, {"path": path, "rows": n, "sha256": ds.sha256, "n_bad": ds.n_bad,
                                       "format": ds.format})
        emit(SHARD, -1, split, shard, ShardData(ds, source))
    return {"kind": np.asarray(out["kind"], dtype=np.int8), "part": np.asarray(out["part"], dtype=np.int64),
            "split": np.asarray(out["split"], dtype=np.int64), "shard": np.asarray(out["shard"], dtype=np.int64),
            "payload": np.asarray(out["payload"], dtype=object)}


def match_part(batch: dict[str, Any], *, n_splits: int, cap: int) -> dict[str, Any]:
    """Stage 2, one part: for every split pair (a earlier than b), the LSH candidates (index row in a, query row
    in b; a query key's first `cap` index rows in row order), the exact copies with their first index row and
    count, the label conflicts among them, and the shared group values."""
    import numpy as np

    loads = [load_payload(p) for p in batch["payload"]]
    splits = batch["split"].astype(np.int64)
    result: dict[str, Any] = {"cand": {}, "capped": {}, "exact": {}, "label": {}, "group": {}}

    def cat(name: str, dtype: Any) -> np.ndarray:
        arrs = [d[name] for d in loads]
        return np.concatenate(arrs) if arrs else np.zeros(0, dtype)

    def spl(name: str) -> np.ndarray:
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
                pos, which, c = capped_matches(lo, hi, cap)
                capped += c
                if len(pos):
                    out_i.append(ie[pos])
                    out_q.append(qe[which])
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
    entries = [(s, f, v, e) for s, d in zip(splits.tolist(), loads, strict=True) for f, v, e in d["groups"]]
    for s, f, v, e in entries:
        k = (s, f, v)
        if k not in first_of or e < first_of[k]:
            first_of[k] = e
    for s, f, v, e in entries:
        for a in range(s):
            if (a, f, v) in first_of:
                result["group"].setdefault((a, s), []).append((f, e, first_of[a, f, v], v))
    return {"payload": np.asarray([dump_payload(result)], dtype=object)}


def send_texts(batch: dict[str, Any], *, wanted: dict[tuple[int, int], Any], parts: int) -> dict[str, Any]:
    """Stage 3 map: the raw texts of the rows candidate pairs need, sent to each part that needs them."""
    import numpy as np

    out_part, out_payload = [], []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"], strict=True):
        got = wanted.get((split, shard))
        if got is None:
            continue
        ds = load_payload(payload).dataset
        rows, to = got
        for p in np.unique(to).tolist():
            sel = rows[to == p]
            out_part.append(p)
            out_payload.append(dump_payload(Texts(split, (np.int64(shard) << np.int64(ROW_BITS)) | sel,
                                                  [ds.texts[r] for r in sel.tolist()])))
    return {"part": np.asarray(out_part, dtype=np.int64), "payload": np.asarray(out_payload, dtype=object)}


def confirm_part(batch: dict[str, Any], *, pairs: dict[int, Any], config: DedupConfig) -> dict[str, Any]:
    """Stage 3 reduce: the part's candidate pairs sketched again from both raw texts and confirmed as
    dedup.cross_duplicates does (prefilter, different content, exact Jaccard >= threshold)."""
    import numpy as np

    part = int(batch["part"][0])
    texts: dict[tuple[int, int], str] = {}
    for payload in batch["payload"]:
        got = load_payload(payload)
        texts.update(zip(((got.split, int(e)) for e in got.rows.tolist()), got.texts, strict=True))
    a, b, ie, qe = pairs[part]
    sa = Sketches(config).add([texts[s, e] for s, e in zip(a.tolist(), ie.tolist(), strict=True)], progress=False)
    sb = Sketches(config).add([texts[s, e] for s, e in zip(b.tolist(), qe.tolist(), strict=True)], progress=False)
    ar = np.arange(len(a))
    keep = prefilter(sa, sb, ar, ar)
    keep &= np.fromiter((x != y for x, y in zip(sa.digests, sb.digests, strict=True)), dtype=bool, count=len(a))
    sel = ar[keep]
    jac = exact_jaccard(sa.texts, sb.texts, sel, sel, config)
    hit = sel[jac >= config.threshold]
    found = Confirmed(a[hit], b[hit], ie[hit], qe[hit], jac[jac >= config.threshold])
    return {"payload": np.asarray([dump_payload(found)], dtype=object)}


def fetch_rows(batch: dict[str, Any], *, wanted: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """Stage 4: what the report and the outputs show of some rows (LeakRow: ref, text, line, id, label, groups)."""
    import numpy as np

    out = []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"], strict=True):
        rows = wanted.get((split, shard))
        if rows is None:
            continue
        ds = load_payload(payload).dataset
        got = {(shard << ROW_BITS) | r: LeakRow.of(ds, r) for r in rows}
        out.append(dump_payload(Fetched(split, got)))
    return {"payload": np.asarray(out, dtype=object)}
