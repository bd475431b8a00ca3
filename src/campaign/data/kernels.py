"""Compiled sketching (numba, the `fast` extra): shingle hashes, one-permutation MinHash with optimal
densification and LSH band keys in one pass per document, documents in parallel.

It computes exactly what sketch.py's numpy functions compute (shingle_hashes -> minhash_signatures -> band_keys),
bit for bit, with the same 64-bit wrapping arithmetic and constants; tests/data/test_kernels.py checks the
two against each other. numpy needs about ten passes over every shingle (code points, prefix sums, windows, mix,
scatter-min through `np.minimum.at`, then the densification rounds over a (documents x bins) mask); here a
shingle is hashed and binned while it is in a register, and an empty bin's probes stop at the first filled bin.

numba is optional and its import costs about 0.2 s (compiled code is cached on disk after the first run):
sketch.py imports this module only when numba is installed.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

_u64 = np.uint64
_BASE = _u64(0x9E3779B97F4A7C15)
_MIX1 = _u64(0xBF58476D1CE4E5B9)
_MIX2 = _u64(0x94D049BB133111EB)
_EMPTY = _u64(0xFFFFFFFFFFFFFFFF)


@numba.njit(inline="always")
def _mix64(x):
    x = x ^ (x >> _u64(30))
    x = x * _MIX1
    x = x ^ (x >> _u64(27))
    x = x * _MIX2
    return x ^ (x >> _u64(31))


@numba.njit(inline="always")
def _window(values, start, length):
    # sum values[start + i] * BASE**i mod 2**64 (sketch._window_hashes without prefix sums)
    h = _u64(0)
    p = _u64(1)
    for i in range(length):
        h += values[start + i] * p
        p *= _BASE
    return h


@numba.njit(cache=True, nogil=True)
def _sketch_range(cp, starts, lengths, word, n, k, bands, rows, salt, probe0, band_seeds, max_probes, probes,
                  keys, sig, counts, first, stop):
    """Documents first..stop-1 into keys, sig and counts (see sketch_documents)."""
    uk = _u64(k)
    # a power-of-two k (the usual 128, 256) bins with a mask and a shift instead of two 64-bit divisions
    shift = 0
    while (1 << shift) < k:
        shift += 1
    pow2 = (1 << shift) == k
    ushift = _u64(shift)
    low = uk - _u64(1)
    n_table = probes.shape[0]
    for d in range(first, stop):
        s0 = starts[d]
        length = lengths[d]
        row = sig[d]
        row[:] = _EMPTY
        if word:
            # token hashes: maximal runs of non-separators, each mix64(window hash ^ salt)
            tok = np.empty(length // 2 + 1, dtype=np.uint64)
            nt = 0
            i = 0
            while i < length:
                c = cp[s0 + i]
                if c == 32 or c == 10:
                    i += 1
                    continue
                j = i
                while j < length and cp[s0 + j] != 32 and cp[s0 + j] != 10:
                    j += 1
                tok[nt] = _mix64(_window(cp, s0 + i, j - i) ^ salt)
                nt += 1
                i = j
            values = tok
            base = 0
            total = nt
        else:
            values = cp
            base = s0
            total = length
        if total >= n:
            windows = total - n + 1
            width = n
        else:
            windows = 1 if total > 0 else 0
            width = total
        counts[d] = windows
        for w in range(windows):
            h = _window(values, base + w, width) + _u64(width) * _MIX2
            h = _mix64(h ^ salt)
            if pow2:
                b = h & low
                v = h >> ushift
            else:
                b = h % uk
                v = h // uk
            if v < row[b]:
                row[b] = v
        if windows:
            orig = row.copy()
            first = -1
            for b in range(k):
                if orig[b] != _EMPTY:
                    first = b
                    break
            for b in range(k):
                if orig[b] != _EMPTY:
                    continue
                filled = False
                for a in range(max_probes):
                    if a < n_table:
                        j = probes[a, b]
                    else:
                        j = np.int64(_mix64((_u64(a * k + b) + probe0) * _BASE) % uk)
                    if orig[j] != _EMPTY:
                        row[b] = orig[j]
                        filled = True
                        break
                if not filled:
                    row[b] = orig[first]
        for b in range(bands):
            acc = band_seeds[b]
            for c in range(b * rows, (b + 1) * rows):
                acc = _mix64(acc ^ row[c])
            keys[d, b] = acc


def sketch_documents(cp, starts, lengths, word, n, k, bands, rows, salt, probe0, band_seeds, max_probes, probes):
    """Sketch D documents held as code points, in parallel threads over slices of documents.

    cp: uint64 code points of every document; starts/lengths: int64 (D,) each document's slice of cp.
    word: word n-grams (tokens separated by space or newline) instead of character n-grams.
    salt, probe0: sketch.py's seed-derived constants; band_seeds: (bands,) uint64, mix_int(b + 1).
    probes: (A, k) int64, the first A rows of sketch._Densify's probe table (later rows are computed here).
    Returns (band keys (D, bands) uint64, signatures (D, k) uint64, shingle counts (D,) int64).
    """
    d_count = len(starts)
    keys = np.empty((d_count, bands), dtype=np.uint64)
    sig = np.empty((d_count, k), dtype=np.uint64)
    counts = np.zeros(d_count, dtype=np.int64)
    args = (cp, starts, lengths, word, n, k, bands, rows, salt, probe0, band_seeds, max_probes, probes, keys, sig,
            counts)
    parts = _slices(d_count, 256)
    _in_threads(lambda part: _sketch_range(*args, *part), parts)
    return keys, sig, counts


@numba.njit(inline="always")
def _group(keys, order, gid_sorted, starts):
    """Stable grouping of equal keys with an open-addressing hash table (no sort): order lists the items group by
    group (groups in first-seen order, items ascending inside each), gid_sorted[p] the group of order[p],
    starts[g]..starts[g + 1] group g's slice of order. Returns (table keys, table groups, mask, groups)."""
    n = len(keys)
    size = 1
    while size < 2 * n:
        size *= 2
    mask = _u64(size - 1)
    tkey = np.empty(size, dtype=np.uint64)
    tgid = np.full(size, -1, dtype=np.int64)
    gid = np.empty(n, dtype=np.int64)
    groups = 0
    for i in range(n):
        k = keys[i]
        s = k & mask
        while tgid[s] != -1 and tkey[s] != k:
            s = (s + _u64(1)) & mask
        if tgid[s] == -1:
            tgid[s] = groups
            tkey[s] = k
            groups += 1
        gid[i] = tgid[s]
    starts[: groups + 1] = 0
    for i in range(n):
        starts[gid[i] + 1] += 1
    for g in range(groups):
        starts[g + 1] += starts[g]
    pos = starts[:groups].copy()
    for i in range(n):
        g = gid[i]
        order[pos[g]] = i
        gid_sorted[pos[g]] = g
        pos[g] += 1
    return tkey, tgid, mask, groups


@numba.njit(cache=True, nogil=True)
def _band_groups(keys, order, gid_sorted):
    _group(keys, order, gid_sorted, np.empty(len(keys) + 1, dtype=np.int64))


def band_groups(keys):
    """keys: (bands, n) uint64. For each band, the items grouped by equal key (see _group): (order, group of each
    position) as (bands, n) int64 arrays; items of one group are contiguous and ascending, as after a stable
    argsort by key (the groups come in another order). Bands in parallel threads."""
    bands, n = keys.shape
    order = np.empty((bands, n), dtype=np.int64)
    gid_sorted = np.empty((bands, n), dtype=np.int64)
    _in_threads(lambda b: _band_groups(keys[b], order[b], gid_sorted[b]), range(bands))
    return order, gid_sorted


@numba.njit(cache=True, nogil=True)
def _band_lookup(index_keys, query_keys, order, lo, hi):
    n = len(index_keys)
    starts = np.empty(n + 1, dtype=np.int64)
    gid_sorted = np.empty(n, dtype=np.int64)
    tkey, tgid, mask, groups = _group(index_keys, order, gid_sorted, starts)
    for q in range(len(query_keys)):
        k = query_keys[q]
        s = k & mask
        while tgid[s] != -1 and tkey[s] != k:
            s = (s + _u64(1)) & mask
        g = tgid[s]
        if g != -1:
            lo[q] = starts[g]
            hi[q] = starts[g + 1]


def band_lookup(index_keys, query_keys):
    """index_keys: (bands, n) uint64, query_keys: (bands, m). For each band: order (bands, n) of the index items
    grouped by key (ascending inside a group) and, for each query, the slice lo..hi of order holding the index
    items with its key (lo == hi: none), as a stable argsort + searchsorted would give. Bands in parallel threads."""
    bands, n = index_keys.shape
    m = query_keys.shape[1]
    order = np.empty((bands, n), dtype=np.int64)
    lo = np.zeros((bands, m), dtype=np.int64)
    hi = np.zeros((bands, m), dtype=np.int64)
    _in_threads(lambda b: _band_lookup(index_keys[b], query_keys[b], order[b], lo[b], hi[b]), range(bands))
    return order, lo, hi


# ----------------------------------------------------------------------------------------------- threads


def _workers() -> int:
    """Threads for the kernels: the CPUs this process may use, or fewer where OMP_NUM_THREADS says so (Ray sets it
    to a task's CPU share, so two Ray workers on one machine do not each start a thread per core)."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        cpus = os.cpu_count() or 1
    share = os.environ.get("OMP_NUM_THREADS", "").strip()
    return max(1, min(cpus, int(share))) if share.isdigit() and int(share) > 0 else cpus


def _slices(count: int, least: int) -> list[tuple[int, int]]:
    """count items in about 4 slices per worker of at least `least` items each."""
    size = max(least, -(-count // (4 * _workers())))
    return [(i, min(count, i + size)) for i in range(0, count, size)]


def _in_threads(work, items) -> None:
    """work(item) for each item, in a pool of threads (the kernels release the GIL). A pool per call, not numba's
    parallel threading layer: GNU OpenMP's kills a process that forks after using it (a DataLoader worker, a
    multiprocessing child), and the workqueue layer aborts on concurrent calls from two threads."""
    items = list(items)
    if len(items) <= 1 or _workers() == 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(min(_workers(), len(items))) as pool:
        for _ in pool.map(work, items):
            pass
