"""Exact and near-duplicate detection over sketches (sketch.py): a content hash for exact copies; for near copies,
documents sharing an LSH band key are candidates, confirmed by the exact Jaccard similarity of their shingle
sets, and clustered with union-find.

- Candidates: documents sharing any LSH band key (bands x rows chosen for recall at the threshold).
- Confirmation: candidates whose MinHash estimate is hopelessly low are dropped (P < 1e-6 for a true pair, see
  prefilter); the rest get the exact Jaccard of their shingle sets, and pairs >= threshold are kept.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .sketch import DedupConfig, Sketches, kernel_module, numpy, shingle_hashes

if TYPE_CHECKING:  # numpy is the `data` extra: imported inside functions
    import numpy as np

SCHEMA = "campaign.dedup/1"


def prefilter(index: Sketches, query: Sketches, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mask of candidate pairs worth an exact check: drops pairs whose MinHash estimate is so far below the
    threshold that a true near duplicate would give it with probability < 1e-6.

    Only pairs where both texts have >= num_perm shingles are filtered: then >= 63% of the bins hold a shingle
    and the estimate's standard deviation at J = threshold is at most sqrt(t(1-t) / (0.63 num_perm)); the cut is
    6 of those below the threshold, minus one slot. Shorter texts (few bins filled) always go to the exact check.
    """
    np = numpy()
    c = index.config
    if not len(a):
        return np.zeros(0, dtype=bool)
    est = np.empty(len(a), dtype=np.float64)
    for start in range(0, len(a), 1 << 16):  # bounded memory: 64k pairs at a time
        sl = slice(start, start + (1 << 16))
        est[sl] = (index.signature_rows(a[sl]) == query.signature_rows(b[sl])).mean(axis=1)
    sd = math.sqrt(c.threshold * (1 - c.threshold) / (0.63 * c.num_perm))
    cut = c.threshold - 6 * sd - 1 / c.num_perm
    long_enough = (index.counts[a] >= c.num_perm) & (query.counts[b] >= c.num_perm)
    return ~long_enough | (est >= cut)


# --------------------------------------------------------------------------------------------------- candidates


def pairs_in_sorted_runs(order: np.ndarray, keys_sorted: np.ndarray,
                          max_bucket: int) -> tuple[np.ndarray, np.ndarray, int]:
    """All (i, j) pairs of items sharing a key, from items sorted by key; buckets larger than max_bucket pair each
    item with its next max_bucket items only. Returns (a, b, number of capped buckets)."""
    np = numpy()
    n = len(keys_sorted)
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    new = np.concatenate(([True], keys_sorted[1:] != keys_sorted[:-1]))
    run_id = np.cumsum(new) - 1
    run_start = np.flatnonzero(new)
    run_len = np.diff(np.concatenate((run_start, [n])))
    remaining = (run_start + run_len)[run_id] - np.arange(n)  # items left in the run, this one included
    capped = int((run_len > max_bucket + 1).sum())
    out_a, out_b = [], []
    pos = np.flatnonzero(remaining > 1)
    d = 1
    while len(pos) and d <= max_bucket:
        out_a.append(order[pos])
        out_b.append(order[pos + d])
        d += 1
        pos = pos[remaining[pos] > d]
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), capped
    return np.concatenate(out_a), np.concatenate(out_b), capped


# Grouping n items by band key: numpy's stable argsorts take about 1.7 us per item and band, the kernels half that,
# so only from about half a million items does the grouping alone pay for numba's import (see sketch.py); below,
# the kernels serve when the sketching has already loaded them.
KERNEL_MIN_ITEMS = 500_000


def _compiled(name: str, items: int):
    """The compiled grouping kernel `name` of kernels.py when numba is installed and either loaded already or worth
    loading for `items` items, else None (numpy sorts)."""
    module = kernel_module(None if items >= KERNEL_MIN_ITEMS else 0)
    return getattr(module, name) if module else None


def _unique_pairs(a: np.ndarray, b: np.ndarray, n_b: int) -> tuple[np.ndarray, np.ndarray]:
    np = numpy()
    if not len(a):
        return a, b
    packed = np.unique(a.astype(np.int64) * n_b + b)
    return packed // n_b, packed % n_b


def candidate_pairs(sk: Sketches, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Pairs (a < b) of documents in one collection that share at least one LSH band.

    Args:
        mask: (D,) bool, documents to consider (default: every non-empty document).
    Returns:
        (a, b, capped buckets), a and b int64 arrays of document indices.
    """
    np = numpy()
    keep = ~sk.empty if mask is None else (mask & ~sk.empty)
    idx = np.flatnonzero(keep)
    keys = np.ascontiguousarray(sk.band_keys[idx].T)  # (bands, documents): one band's keys contiguous
    kernel = _compiled("band_groups", len(idx))
    all_a, all_b, capped = [], [], 0
    bands = zip(*kernel(keys), strict=True) if kernel else ((None, None),) * len(keys)
    for band, (order, run_keys) in enumerate(bands):
        if kernel is None:
            order = np.argsort(keys[band], kind="stable")
            run_keys = keys[band, order]
        a, b, c = pairs_in_sorted_runs(idx[order], run_keys, sk.config.max_bucket)
        capped += c
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        all_a.append(lo)
        all_b.append(hi)
    if not all_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), capped
    a, b = _unique_pairs(np.concatenate(all_a), np.concatenate(all_b), max(len(sk), 1))
    return a, b, capped


def capped_matches(lo: np.ndarray, hi: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Query q matches the sorted index positions lo[q]..hi[q]-1: every (position, q), at most the first `cap`
    positions of each query. Returns (positions, queries, number of queries whose bucket held more than cap)."""
    np = numpy()
    cnt = hi - lo
    capped = int((cnt > cap).sum())
    cnt = np.minimum(cnt, cap)
    hit = np.flatnonzero(cnt)
    c = cnt[hit]
    first = np.cumsum(c) - c
    rel = np.arange(int(c.sum())) - np.repeat(first, c)
    return np.repeat(lo[hit], c) + rel, np.repeat(hit, c), capped


def cross_candidate_pairs(index: Sketches, query: Sketches) -> tuple[np.ndarray, np.ndarray, int]:
    """Pairs (i in index, q in query) sharing at least one LSH band: the index's sorted band keys are searched
    with each query key. Returns (index ids, query ids, capped buckets)."""
    np = numpy()
    if index.config.banding() != query.config.banding() or index.config.seed != query.config.seed:
        raise ValueError("index and query sketches were built with different settings")
    i_idx = np.flatnonzero(~index.empty)
    q_idx = np.flatnonzero(~query.empty)
    ik = np.ascontiguousarray(index.band_keys[i_idx].T)  # (bands, documents)
    qk = np.ascontiguousarray(query.band_keys[q_idx].T)
    cap = index.config.max_bucket
    kernel = _compiled("band_lookup", len(i_idx) + len(q_idx))
    looked_up = kernel(ik, qk) if kernel else None
    out_i, out_q, capped = [], [], 0
    for band in range(len(ik)):
        if looked_up is not None:
            order, lo, hi = looked_up[0][band], looked_up[1][band], looked_up[2][band]
        else:
            order = np.argsort(ik[band], kind="stable")
            sorted_keys = ik[band, order]
            lo = np.searchsorted(sorted_keys, qk[band], side="left")
            hi = np.searchsorted(sorted_keys, qk[band], side="right")
        pos, which, c = capped_matches(lo, hi, cap)
        capped += c
        if len(pos):
            out_i.append(i_idx[order[pos]])
            out_q.append(q_idx[which])
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), capped
    a, b = _unique_pairs(np.concatenate(out_i), np.concatenate(out_q), max(len(query), 1))
    return a, b, capped


_FP_BITS = 44  # shingle fingerprint bits in the exact check; the pair id takes the high bits of the sort key


def exact_jaccard(texts_a: Sequence[str], texts_b: Sequence[str], a: np.ndarray, b: np.ndarray,
                  config: DedupConfig, *, batch_pairs: int = 2048) -> np.ndarray:
    """Jaccard similarity of the shingle sets of pairs (texts_a[a[p]], texts_b[b[p]]) (see _exact_jaccard_batch),
    in batches of pairs so that only the shingles of a few thousand texts are held at once. Returns (P,) float64."""
    np = numpy()
    out = np.zeros(len(a), dtype=np.float64)
    order = np.argsort(a, kind="stable")
    for start in range(0, len(a), batch_pairs):
        sel = order[start:start + batch_pairs]
        out[sel] = _exact_jaccard_batch(texts_a, texts_b, a[sel], b[sel], config)
    return out


def _exact_jaccard_batch(texts_a: Sequence[str], texts_b: Sequence[str], a: np.ndarray, b: np.ndarray,
                         config: DedupConfig, *, batch_elements: int = 1 << 23) -> np.ndarray:
    """Jaccard similarity |A & B| / |A | B| of the shingle sets of pairs (texts_a[a[p]], texts_b[b[p]]), computed
    exactly over 44-bit shingle fingerprints (two different shingles of a pair share one with probability
    ~|A||B| / 2**44, about 1e-8 for two 500-shingle texts). Texts are already normalized. Returns (P,) float64.

    One sort per batch: key = pair id | fingerprint | side (0 for A, 1 for B); equal neighbours with the same side
    are repeats inside a text (dropped), equal neighbours across sides are the intersection.
    """
    np = numpy()
    out = np.zeros(len(a), dtype=np.float64)
    if not len(a):
        return out
    ua, inv_a = np.unique(a, return_inverse=True)
    ub, inv_b = np.unique(b, return_inverse=True)
    ha, ca = shingle_hashes([texts_a[i] for i in ua], config)
    hb, cb = shingle_hashes([texts_b[i] for i in ub], config)
    drop = np.uint64(64 - _FP_BITS)
    fa = (ha >> drop) << np.uint64(1)  # side bit 0
    fb = ((hb >> drop) << np.uint64(1)) | np.uint64(1)  # side bit 1
    oa, ob = np.cumsum(ca) - ca, np.cumsum(cb) - cb
    la, lb = ca[inv_a], cb[inv_b]
    max_pairs = 1 << (63 - _FP_BITS)
    start = 0
    while start < len(a):
        stop = min(len(a), start + max_pairs,
                   start + max(1, int(np.searchsorted(np.cumsum(la[start:] + lb[start:]), batch_elements))))
        sl = slice(start, stop)
        parts = []
        for f, off, ln in ((fa, oa[inv_a[sl]], la[sl]), (fb, ob[inv_b[sl]], lb[sl])):
            pid = np.repeat(np.arange(stop - start, dtype=np.uint64), ln)
            first = np.cumsum(ln) - ln
            idx = np.repeat(off, ln) + (np.arange(len(pid)) - np.repeat(first, ln))
            parts.append((pid << np.uint64(_FP_BITS + 1)) | f[idx])
        key = np.sort(np.concatenate(parts))
        new = np.ones(len(key), dtype=bool)
        new[1:] = key[1:] != key[:-1]
        key = key[new]  # distinct (pair, fingerprint, side)
        pid = (key >> np.uint64(_FP_BITS + 1)).astype(np.int64)
        both = (key[1:] >> np.uint64(1)) == (key[:-1] >> np.uint64(1))
        inter = np.bincount(pid[1:][both], minlength=stop - start)
        union = np.bincount(pid, minlength=stop - start) - inter
        out[sl] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        start = stop
    return out


# --------------------------------------------------------------------------------------------------- clusters


def connected_components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union-find over n items joined by the pairs (a[p], b[p]), vectorized: each round hooks the larger root of
    every edge under the smaller, then compresses paths by pointer jumping. Returns (n,) int64: the smallest item
    index of each item's component (so labels are stable and readable)."""
    np = numpy()
    parent = np.arange(n, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    while len(a):
        ra, rb = parent[a], parent[b]
        differ = ra != rb
        if not differ.any():
            break
        a, b, ra, rb = a[differ], b[differ], ra[differ], rb[differ]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    return parent


@dataclass(frozen=True)
class NearPair:
    """Two documents (indices) whose shingle sets have exact Jaccard similarity >= the threshold."""

    a: int
    b: int
    jaccard: float

    def to_dict(self) -> dict[str, Any]:  # by hand: the similarity rounded for reading
        return {"a": self.a, "b": self.b, "jaccard": round(self.jaccard, 6)}


@dataclass(frozen=True)
class DedupResult:
    """Duplicate clusters of a collection. cluster_of[i] is the smallest index in document i's cluster (i itself
    when it has no duplicate); empty texts are never clustered."""

    n_docs: int
    n_empty: int
    exact_duplicates: int
    near_pairs: tuple[NearPair, ...]
    cluster_of: tuple[int, ...] = field(repr=False)
    candidates: int
    checked: int
    capped_buckets: int
    config: DedupConfig
    notes: tuple[str, ...] = ()
    schema: str = SCHEMA
    exact_of: tuple[int, ...] = field(default=(), repr=False)  # first index with the same normalized text

    @property
    def clusters(self) -> list[list[int]]:
        """Clusters with two or more documents, each sorted, ordered by first member."""
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(self.cluster_of):
            groups.setdefault(c, []).append(i)
        return [g for g in groups.values() if len(g) > 1]

    def to_dict(self) -> dict[str, Any]:
        # by hand: the clusters and their sizes derived from cluster_of (which stays out, one entry per document)
        clusters = self.clusters
        return {"schema": self.schema, "n_docs": self.n_docs, "n_empty": self.n_empty,
                "exact_duplicates": self.exact_duplicates, "near_pairs": [p.to_dict() for p in self.near_pairs],
                "clusters": clusters, "docs_in_clusters": sum(len(c) for c in clusters),
                "largest_cluster": max((len(c) for c in clusters), default=1), "candidates": self.candidates,
                "checked_exactly": self.checked,
                "capped_buckets": self.capped_buckets, "config": self.config.to_dict(), "notes": list(self.notes)}


def exact_groups(digests: Sequence[bytes], empty: Sequence[bool]) -> tuple[list[int], int]:
    """First index with the same digest for each document (itself when it is the first or is empty), and the
    number of documents that repeat an earlier one."""
    first: dict[bytes, int] = {}
    rep = []
    for i, (d, e) in enumerate(zip(digests, empty, strict=True)):
        rep.append(i if e else first.setdefault(d, i))
    return rep, sum(1 for i, r in enumerate(rep) if r != i)


def find_duplicates(texts: Iterable[str] | Sketches, config: DedupConfig | None = None, *,
                    progress: bool | None = None) -> DedupResult:
    """Exact and near-duplicate clusters of a collection.

    Exact: equal normalized text (SHA-256). Near: MinHash/LSH candidates confirmed by exact Jaccard >= threshold,
    computed between one representative of each exact group. Clusters join both by union-find.

    Args:
        texts: raw texts (any iterable; consumed in chunks), or Sketches already built with the same config.
        progress: a progress bar on stderr (default: when stderr is a terminal).
    """
    np = numpy()
    if isinstance(texts, Sketches):
        sk = texts
        config = sk.config
    else:
        config = config or DedupConfig()
        sk = Sketches(config).add(texts, progress=progress)
    n = len(sk)
    empty = sk.empty
    rep, n_exact = exact_groups(sk.digests, empty.tolist())
    rep_arr = np.asarray(rep, dtype=np.int64)
    is_rep = rep_arr == np.arange(n)
    a, b, capped = candidate_pairs(sk, mask=is_rep)
    n_candidates = len(a)
    keep = prefilter(sk, sk, a, b)
    a, b = a[keep], b[keep]
    jac = exact_jaccard(sk.texts, sk.texts, a, b, config)
    hit = jac >= config.threshold
    pa, pb, pj = a[hit], b[hit], jac[hit]
    # exact copies join their representative; near pairs join representatives
    ea = np.flatnonzero(~is_rep)
    labels = connected_components(n, np.concatenate((ea, pa)), np.concatenate((rep_arr[ea], pb)))
    notes = []
    if capped:
        notes.append(f"{capped} LSH bucket(s) held more than {config.max_bucket} texts; only neighbouring pairs in "
                     "them were checked (degenerate data: many near-identical texts)")
    if empty.any():
        notes.append(f"{int(empty.sum())} empty text(s) are never counted as duplicates")
    pairs = tuple(NearPair(int(x), int(y), float(j)) for x, y, j in zip(pa, pb, pj, strict=True))
    return DedupResult(n_docs=n, n_empty=int(empty.sum()), exact_duplicates=n_exact, near_pairs=pairs,
                       cluster_of=tuple(int(x) for x in labels), candidates=n_candidates, checked=len(a),
                       capped_buckets=capped,
                       config=config, notes=tuple(notes), exact_of=tuple(rep))


MAX_EXACT_EXAMPLES = 1000  # exact (index, query) pairs listed by cross_duplicates; all are counted


@dataclass(frozen=True)
class CrossMatches:
    """Documents of a query collection that duplicate documents of an index collection.

    exact: example (index id, query id) pairs with equal normalized text: one per matching query document (its
    first copy in the index), at most `max_exact_examples`; exact_rows: every query id with an exact copy in the
    index; exact_links: the number of (index, query) pairs with equal text, counted per content hash, never
    listed (k copies in the index and m in the query are k x m pairs). near: (index id, query id, jaccard) pairs
    with Jaccard >= threshold and different normalized text. candidates: pairs sharing an LSH band.
    capped_buckets: query band lookups whose bucket held more than max_bucket index documents (only the first
    max_bucket were compared: the near-duplicate search was partial).
    """

    exact: tuple[tuple[int, int], ...]
    near: tuple[tuple[int, int, float], ...]
    candidates: int
    capped_buckets: int
    exact_rows: tuple[int, ...] = ()
    exact_links: int = 0


def exact_index(sk: Sketches) -> dict[bytes, tuple[int, int]]:
    """{content hash: (first document id, number of documents)} over the non-empty documents of a collection."""
    out: dict[bytes, tuple[int, int]] = {}
    for i, (d, t) in enumerate(zip(sk.digests, sk.texts, strict=True)):
        if t:
            first, count = out.get(d, (i, 0))
            out[d] = (first, count + 1)
    return out


def cross_duplicates(index: Sketches, query: Sketches, *,
                     max_exact_examples: int = MAX_EXACT_EXAMPLES) -> CrossMatches:
    """Index one collection (train), query another (eval, test) for exact and near duplicates.

    Exact copies are matched by content hash and counted, so k x m copies cost O(k + m), not O(k x m).
    """
    np = numpy()
    by_digest = exact_index(index)
    exact: list[tuple[int, int]] = []
    rows: list[int] = []
    links = 0
    for q, (d, t) in enumerate(zip(query.digests, query.texts, strict=True)):
        hit = by_digest.get(d) if t else None
        if hit is None:
            continue
        rows.append(q)
        links += hit[1]
        if len(exact) < max_exact_examples:
            exact.append((hit[0], q))
    a, b, capped = cross_candidate_pairs(index, query)
    n_candidates = len(a)
    keep = prefilter(index, query, a, b)
    a, b = a[keep], b[keep]
    if len(a):
        ida = [index.digests[i] for i in a.tolist()]
        idb = [query.digests[q] for q in b.tolist()]
        different = np.fromiter((x != y for x, y in zip(ida, idb, strict=True)), dtype=bool, count=len(a))
        a, b = a[different], b[different]
    jac = exact_jaccard(index.texts, query.texts, a, b, index.config)
    close = jac >= index.config.threshold
    near = tuple((int(i), int(q), float(j)) for i, q, j in zip(a[close], b[close], jac[close], strict=True))
    return CrossMatches(exact=tuple(exact), near=near, candidates=n_candidates, capped_buckets=capped,
                        exact_rows=tuple(rows), exact_links=links)


__all__ = ["MAX_EXACT_EXAMPLES", "CrossMatches", "DedupResult", "NearPair", "candidate_pairs", "capped_matches",
           "connected_components", "cross_candidate_pairs", "cross_duplicates", "exact_index", "exact_jaccard",
           "find_duplicates", "pairs_in_sorted_runs", "prefilter"]
