"""Exact and near-duplicate detection: a content hash for exact copies; MinHash + LSH banding for near copies,
confirmed by the exact Jaccard similarity of the shingle sets, and clustered with union-find.

Everything is vectorized with numpy over chunks of documents (streaming: per document only the normalized text,
its content hash, the LSH band keys and a 32-bit copy of the signature are kept, ~700 bytes beyond the text).

- Shingles: polynomial hashes of character or word n-grams computed with prefix sums (no Python loop per shingle).
- MinHash: one-permutation hashing with optimal densification (Shrivastava, ICML 2017): each shingle is hashed
  once and falls in one of `num_perm` bins, the minimum per bin is the signature; an empty bin borrows from the
  first non-empty bin of a fixed probe sequence. P(slot i equal) = Jaccard, as with `num_perm` independent
  permutations, at a cost per shingle instead of per shingle and permutation.
- Candidates: documents sharing any LSH band key (bands x rows chosen for recall at the threshold).
- Confirmation: candidates whose MinHash estimate is hopelessly low are dropped (P < 1e-6 for a true pair, see
  prefilter); the rest get the exact Jaccard of their shingle sets, and pairs >= threshold are kept.

All hashing is 64-bit integer arithmetic with fixed constants, so results are the same on every run and machine
for a given seed (never Python's hash()).
"""
from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .normalize import normalize, normalizer_id

if TYPE_CHECKING:  # numpy is the `data` extra: imported inside functions
    import numpy as np

SCHEMA = "campaign.dedup/1"

# Odd 64-bit constants: the polynomial base (odd, so invertible mod 2**64) and the splitmix64 finalizer
# multipliers (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).
_BASE = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_M64 = (1 << 64) - 1


@dataclass(frozen=True)
class DedupConfig:
    """How near duplicates are found. Defaults suit short and long texts: character 5-grams, Jaccard >= 0.8.

    Args:
        threshold: pairs with exact Jaccard similarity of their shingle sets >= threshold are near duplicates.
        shingle: "char" (character n-grams, spaces included) or "word" (word n-grams).
        ngram: n of the n-grams; a text shorter than n is one shingle.
        num_perm: MinHash signature length (bins).
        bands, rows: LSH banding (bands x rows <= num_perm); chosen from the threshold when not given.
        seed: changes every hash function; results are deterministic for a seed.
        strip_punctuation: passed to the normalizer.
        max_bucket: an LSH bucket with more documents than this pairs each with its next `max_bucket` neighbours
            only (reported in the notes); guards against quadratic blow-up on degenerate data.
    """

    threshold: float = 0.8
    shingle: str = "char"
    ngram: int = 5
    num_perm: int = 128
    bands: int | None = None
    rows: int | None = None
    seed: int = 0
    strip_punctuation: bool = False
    max_bucket: int = 256

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise InputError(f"near-duplicate threshold {self.threshold!r} is not in (0, 1]; use e.g. 0.8")
        if self.shingle not in ("char", "word"):
            raise InputError(f"shingle {self.shingle!r} is unknown; use 'char' or 'word'")
        for name in ("ngram", "num_perm", "max_bucket"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        b, r = self.banding()
        if b * r > self.num_perm:
            raise InputError(f"bands x rows = {b} x {r} exceeds num_perm {self.num_perm}; lower one of them")

    def banding(self) -> tuple[int, int]:
        """(bands, rows): the given ones, or choose_banding(threshold, num_perm)."""
        if self.bands and self.rows:
            return self.bands, self.rows
        if self.bands or self.rows:
            given = self.bands or self.rows
            return (given, self.num_perm // given) if self.bands else (self.num_perm // given, given)
        return choose_banding(self.threshold, self.num_perm)

    def to_dict(self) -> dict[str, Any]:
        b, r = self.banding()
        return {"threshold": self.threshold, "shingle": self.shingle, "ngram": self.ngram, "num_perm": self.num_perm,
                "bands": b, "rows": r, "seed": self.seed, "strip_punctuation": self.strip_punctuation,
                "max_bucket": self.max_bucket, "normalizer": normalizer_id(strip_punctuation=self.strip_punctuation),
                "candidate_probability_at_threshold": round(candidate_probability(self.threshold, b, r), 6)}


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """P(a pair with this Jaccard similarity shares at least one LSH band) = 1 - (1 - J**rows)**bands."""
    return 1.0 - (1.0 - jaccard**rows) ** bands


def choose_banding(threshold: float, num_perm: int, *, recall_at_threshold: float = 0.99) -> tuple[int, int]:
    """The most selective banding (largest rows) whose candidate probability at the threshold is >= the target.

    Recall matters more than speed here: a missed near duplicate is a leak; a false candidate only costs one exact
    Jaccard check. For 0.8 and 128 bins: 21 bands x 6 rows, P(candidate | J = 0.8) = 0.998.
    """
    for rows in range(num_perm, 0, -1):
        bands = num_perm // rows
        if candidate_probability(threshold, bands, rows) >= recall_at_threshold:
            return bands, rows
    return num_perm, 1


# --------------------------------------------------------------------------------------------------- hashing


def _np():
    try:
        import numpy as np
    except ImportError as e:  # pragma: no cover - the data extra is installed in the tests
        from ..errors import MissingDependencyError

        raise MissingDependencyError("numpy", "data") from e
    return np


def _mix64(x: "np.ndarray") -> "np.ndarray":
    """splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic): a bijection with good avalanche."""
    np = _np()
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    x ^= x >> np.uint64(31)
    return x


def _mix_int(x: int) -> int:
    """_mix64 on one Python int (the same function, for constants derived from the seed)."""
    x &= _M64
    x = ((x ^ (x >> 30)) * _MIX1) & _M64
    x = ((x ^ (x >> 27)) * _MIX2) & _M64
    return x ^ (x >> 31)


class _Powers:
    """BASE**t and BASE**-t mod 2**64 for t < length, grown on demand (cumprod wraps mod 2**64)."""

    def __init__(self) -> None:
        self.pw = None
        self.ipw = None

    def get(self, length: int) -> tuple["np.ndarray", "np.ndarray"]:
        np = _np()
        if self.pw is None or len(self.pw) < length:
            size = max(2 * length, 1 << 21)
            inv = pow(_BASE, -1, 1 << 64)
            pw = np.full(size, _BASE, dtype=np.uint64)
            pw[0] = 1
            ipw = np.full(size, inv, dtype=np.uint64)
            ipw[0] = 1
            with np.errstate(over="ignore"):
                self.pw, self.ipw = np.cumprod(pw, dtype=np.uint64), np.cumprod(ipw, dtype=np.uint64)
        return self.pw, self.ipw


_POWERS = _Powers()


def _window_hashes(values: "np.ndarray", starts: "np.ndarray", lengths: "np.ndarray") -> "np.ndarray":
    """Position-independent polynomial hash of values[s:s+l] for each window: sum values[s+i] * BASE**i mod 2**64.

    Prefix sums make every window O(1): (P[s+l] - P[s]) * BASE**-s. Shapes: values (L,), starts/lengths (W,).
    """
    np = _np()
    pw, ipw = _POWERS.get(len(values) + 1)
    prefix = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values * pw[: len(values)], out=prefix[1:])
    return (prefix[starts + lengths] - prefix[starts]) * ipw[starts]


def _windows(doc_starts: "np.ndarray", doc_lengths: "np.ndarray",
             n: int) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """Start and length of every n-window inside each doc [start, start+length); a doc shorter than n is one
    window; an empty doc has none. Returns (starts, lengths, windows per doc), grouped by doc in order."""
    np = _np()
    count = np.where(doc_lengths >= n, doc_lengths - n + 1, (doc_lengths > 0).astype(np.int64))
    total = int(count.sum())
    first = np.cumsum(count) - count
    rel = np.arange(total, dtype=np.int64) - np.repeat(first, count)
    starts = np.repeat(doc_starts, count) + rel
    lengths = np.repeat(np.minimum(doc_lengths, n), count)
    return starts, lengths, count


def shingle_hashes(norm_texts: Sequence[str], config: DedupConfig) -> tuple["np.ndarray", "np.ndarray"]:
    """64-bit hashes of the shingles of already-normalized texts.

    Returns (hashes uint64 (S,), counts int64 (D,)): hashes grouped by document in order, counts[d] shingles of
    document d (0 for an empty text). Repeated shingles inside a document are kept (the MinHash is unaffected).
    """
    np = _np()
    lengths = np.fromiter((len(t) for t in norm_texts), dtype=np.int64, count=len(norm_texts))
    if not len(norm_texts) or not lengths.any():
        return np.zeros(0, dtype=np.uint64), np.zeros(len(norm_texts), dtype=np.int64)
    # One code point per element ("\n" separates documents; normalized texts hold no newline).
    cp = np.frombuffer("\n".join(norm_texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    cp = cp.astype(np.uint64)
    doc_starts = np.cumsum(lengths + 1) - (lengths + 1)
    salt = np.uint64(_mix_int(config.seed * 0x2545F4914F6CDD1D + 1))
    if config.shingle == "char":
        starts, wl, counts = _windows(doc_starts, lengths, config.ngram)
        h = _window_hashes(cp, starts, wl)
    else:
        sep = (cp == 32) | (cp == 10)
        tok = ~sep
        edge = np.diff(np.concatenate(([0], tok.view(np.int8), [0])))
        t_start = np.flatnonzero(edge == 1)
        t_end = np.flatnonzero(edge == -1)
        tokens = _mix64(_window_hashes(cp, t_start, t_end - t_start) ^ salt)
        t_doc = np.searchsorted(doc_starts, t_start, side="right") - 1
        n_tok = np.bincount(t_doc, minlength=len(norm_texts)).astype(np.int64)
        tok_doc_start = np.cumsum(n_tok) - n_tok
        starts, wl, counts = _windows(tok_doc_start, n_tok, config.ngram)
        h = _window_hashes(tokens, starts, wl)
    h += wl.astype(np.uint64) * np.uint64(_MIX2)
    return _mix64(h ^ salt), counts


# --------------------------------------------------------------------------------------------------- sketches


_MAX_PROBES = 4096


class _Densify:
    """Fixed probe sequences for empty bins: probe[a, i] is the a-th bin that empty bin i borrows from."""

    def __init__(self, num_perm: int, seed: int) -> None:
        self.k, self.seed = num_perm, seed
        self.table = None

    def probes(self, attempts: int) -> "np.ndarray":
        np = _np()
        if self.table is None or len(self.table) < attempts:
            size = max(attempts, 64, 0 if self.table is None else 2 * len(self.table))
            cells = np.arange(size * self.k, dtype=np.uint64) + np.uint64(_mix_int(self.seed + 0x51ED27))
            self.table = (_mix64(cells * np.uint64(_BASE)) % np.uint64(self.k)).astype(np.int64).reshape(size, self.k)
        return self.table


def minhash_signatures(hashes: "np.ndarray", counts: "np.ndarray", config: DedupConfig,
                       densify: _Densify | None = None) -> "np.ndarray":
    """One-permutation MinHash with optimal densification. Returns (D, num_perm) uint64; an empty document's row
    is all 2**64 - 1. For two documents, P(sig_a[i] == sig_b[i]) = Jaccard(a, b) for every slot i."""
    np = _np()
    k, d = config.num_perm, len(counts)
    empty_value = np.uint64(_M64)
    sig = np.full(d * k, empty_value, dtype=np.uint64)
    doc = np.repeat(np.arange(d, dtype=np.int64), counts)
    np.minimum.at(sig, doc * k + (hashes % np.uint64(k)).astype(np.int64), hashes // np.uint64(k))
    sig = sig.reshape(d, k)
    orig = sig.copy()
    has_any = counts > 0
    rows, cols = np.nonzero((orig == empty_value) & has_any[:, None])
    densify = densify or _Densify(k, config.seed)
    attempt = 0
    while len(rows):
        if attempt == _MAX_PROBES:  # (1 - 1/k)**4096 < 1e-13 per bin for k = 128: a guard, not a path
            first = np.argmax(orig[rows] != empty_value, axis=1)
            sig[rows, cols] = orig[rows, first]
            break
        probes = densify.probes(attempt + 1)
        j = probes[attempt, cols]
        v = orig[rows, j]
        ok = v != empty_value
        sig[rows[ok], cols[ok]] = v[ok]
        rows, cols = rows[~ok], cols[~ok]
        attempt += 1
    return sig


def band_keys(sig: "np.ndarray", bands: int, rows: int) -> "np.ndarray":
    """(D, bands) uint64: one hash of each band's `rows` signature values."""
    np = _np()
    keys = np.empty((sig.shape[0], bands), dtype=np.uint64)
    for b in range(bands):
        acc = np.full(sig.shape[0], _mix_int(b + 1), dtype=np.uint64)
        for c in range(b * rows, (b + 1) * rows):
            acc = _mix64(acc ^ sig[:, c])
        keys[:, b] = acc
    return keys


class Sketches:
    """A collection's normalized texts, content hashes, shingle counts, MinHash signatures (low 32 bits of each
    slot) and LSH band keys, built chunk by chunk (streaming): about 4 x num_perm + 8 x bands bytes per document
    beyond its text."""

    def __init__(self, config: DedupConfig) -> None:
        self.config = config
        self.texts: list[str] = []
        self._digests: list[bytes] = []
        self._parts: dict[str, list[np.ndarray]] = {"keys": [], "sigs": [], "counts": []}
        self._densify = _Densify(config.num_perm, config.seed)
        self._cache: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, texts: Iterable[str], *, chunk_size: int = 4096, progress: bool | None = None,
            total: int | None = None, description: str = "MinHash") -> "Sketches":
        """Normalize, hash and sketch texts, consuming the iterable chunk by chunk."""
        np = _np()
        bands, rows = self.config.banding()
        strip = self.config.strip_punctuation
        if total is None and hasattr(texts, "__len__"):
            total = len(texts)  # type: ignore[arg-type]
        with progress_bar(description, total, progress) as advance:
            for chunk in _chunks(texts, chunk_size):
                norm = [normalize(t, strip_punctuation=strip) for t in chunk]
                self._digests.extend(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in norm)
                h, counts = shingle_hashes(norm, self.config)
                sig = minhash_signatures(h, counts, self.config, self._densify)
                self._parts["keys"].append(band_keys(sig, bands, rows))
                self._parts["sigs"].append(sig.astype(np.uint32))
                self._parts["counts"].append(counts.astype(np.int32))
                self.texts.extend(norm)
                self._cache.clear()
                advance(len(chunk))
        return self

    def _joined(self, name: str, shape: tuple[int, ...], dtype: str) -> "np.ndarray":
        np = _np()
        if name not in self._cache:
            parts = self._parts[name]
            self._cache[name] = np.concatenate(parts) if parts else np.zeros(shape, dtype=dtype)
            self._parts[name] = [self._cache[name]]
        return self._cache[name]

    @property
    def band_keys(self) -> "np.ndarray":
        """(D, bands) uint64."""
        return self._joined("keys", (0, self.config.banding()[0]), "uint64")

    @property
    def signatures(self) -> "np.ndarray":
        """(D, num_perm) uint32: the low 32 bits of each MinHash slot (enough to compare slots)."""
        return self._joined("sigs", (0, self.config.num_perm), "uint32")

    def signature_rows(self, idx: "np.ndarray") -> "np.ndarray":
        """signatures[idx], gathered from the per-chunk arrays (no copy of the whole matrix: streaming memory)."""
        np = _np()
        parts = self._parts["sigs"]
        out = np.empty((len(idx), self.config.num_perm), dtype=np.uint32)
        bounds = np.cumsum([0] + [len(p) for p in parts])
        which = np.searchsorted(bounds, idx, side="right") - 1
        for k, part in enumerate(parts):
            sel = np.flatnonzero(which == k)
            if len(sel):
                out[sel] = part[idx[sel] - bounds[k]]
        return out

    @property
    def counts(self) -> "np.ndarray":
        """(D,) int32: shingles per document (repeats included)."""
        return self._joined("counts", (0,), "int32")

    @property
    def digests(self) -> list[bytes]:
        """SHA-256 of each normalized text (the exact-duplicate key)."""
        return self._digests

    @property
    def empty(self) -> "np.ndarray":
        np = _np()
        return np.fromiter((not t for t in self.texts), dtype=bool, count=len(self.texts))


def prefilter(index: Sketches, query: Sketches, a: "np.ndarray", b: "np.ndarray") -> "np.ndarray":
    """Mask of candidate pairs worth an exact check: drops pairs whose MinHash estimate is so far below the
    threshold that a true near duplicate would give it with probability < 1e-6.

    Only pairs where both texts have >= num_perm shingles are filtered: then >= 63% of the bins hold a shingle
    and the estimate's standard deviation at J = threshold is at most sqrt(t(1-t) / (0.63 num_perm)); the cut is
    6 of those below the threshold, minus one slot. Shorter texts (few bins filled) always go to the exact check.
    """
    np = _np()
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


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class progress_bar:
    """A rich progress bar on stderr when it is a terminal (or when forced); a no-op otherwise."""

    def __init__(self, description: str, total: int | None, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.description, self.total = description, total
        self._progress = None

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import Progress

        self._progress = Progress(console=Console(stderr=True), transient=True)
        self._progress.start()
        task = self._progress.add_task(self.description, total=self.total)
        return lambda n: self._progress.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


# --------------------------------------------------------------------------------------------------- candidates


def _pairs_in_sorted_runs(order: "np.ndarray", keys_sorted: "np.ndarray",
                          max_bucket: int) -> tuple["np.ndarray", "np.ndarray", int]:
    """All (i, j) pairs of items sharing a key, from items sorted by key; buckets larger than max_bucket pair each
    item with its next max_bucket items only. Returns (a, b, number of capped buckets)."""
    np = _np()
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


def _unique_pairs(a: "np.ndarray", b: "np.ndarray", n_b: int) -> tuple["np.ndarray", "np.ndarray"]:
    np = _np()
    if not len(a):
        return a, b
    packed = np.unique(a.astype(np.int64) * n_b + b)
    return packed // n_b, packed % n_b


def candidate_pairs(sk: Sketches, mask: "np.ndarray | None" = None) -> tuple["np.ndarray", "np.ndarray", int]:
    """Pairs (a < b) of documents in one collection that share at least one LSH band.

    Args:
        mask: (D,) bool, documents to consider (default: every non-empty document).
    Returns:
        (a, b, capped buckets), a and b int64 arrays of document indices.
    """
    np = _np()
    keep = ~sk.empty if mask is None else (mask & ~sk.empty)
    idx = np.flatnonzero(keep)
    keys = sk.band_keys[idx]
    all_a, all_b, capped = [], [], 0
    for band in range(keys.shape[1]):
        order = np.argsort(keys[:, band], kind="stable")
        a, b, c = _pairs_in_sorted_runs(idx[order], keys[order, band], sk.config.max_bucket)
        capped += c
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        all_a.append(lo)
        all_b.append(hi)
    if not all_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), capped
    a, b = _unique_pairs(np.concatenate(all_a), np.concatenate(all_b), max(len(sk), 1))
    return a, b, capped


def cross_candidate_pairs(index: Sketches, query: Sketches) -> tuple["np.ndarray", "np.ndarray", int]:
    """Pairs (i in index, q in query) sharing at least one LSH band: the index's sorted band keys are searched
    with each query key. Returns (index ids, query ids, capped buckets)."""
    np = _np()
    if index.config.banding() != query.config.banding() or index.config.seed != query.config.seed:
        raise ValueError("index and query sketches were built with different settings")
    i_idx = np.flatnonzero(~index.empty)
    q_idx = np.flatnonzero(~query.empty)
    ik, qk = index.band_keys[i_idx], query.band_keys[q_idx]
    cap = index.config.max_bucket
    out_i, out_q, capped = [], [], 0
    for band in range(ik.shape[1]):
        order = np.argsort(ik[:, band], kind="stable")
        sorted_keys = ik[order, band]
        lo = np.searchsorted(sorted_keys, qk[:, band], side="left")
        hi = np.searchsorted(sorted_keys, qk[:, band], side="right")
        cnt = hi - lo
        capped += int((cnt > cap).sum())
        cnt = np.minimum(cnt, cap)
        hit = np.flatnonzero(cnt)
        if not len(hit):
            continue
        c = cnt[hit]
        first = np.cumsum(c) - c
        rel = np.arange(int(c.sum())) - np.repeat(first, c)
        out_i.append(i_idx[order[np.repeat(lo[hit], c) + rel]])
        out_q.append(q_idx[np.repeat(hit, c)])
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), capped
    a, b = _unique_pairs(np.concatenate(out_i), np.concatenate(out_q), max(len(query), 1))
    return a, b, capped


_FP_BITS = 44  # shingle fingerprint bits in the exact check; the pair id takes the high bits of the sort key


def exact_jaccard(texts_a: Sequence[str], texts_b: Sequence[str], a: "np.ndarray", b: "np.ndarray",
                  config: DedupConfig, *, batch_pairs: int = 2048) -> "np.ndarray":
    """Jaccard similarity of the shingle sets of pairs (texts_a[a[p]], texts_b[b[p]]) (see _exact_jaccard_batch),
    in batches of pairs so that only the shingles of a few thousand texts are held at once. Returns (P,) float64."""
    np = _np()
    out = np.zeros(len(a), dtype=np.float64)
    order = np.argsort(a, kind="stable")
    for start in range(0, len(a), batch_pairs):
        sel = order[start:start + batch_pairs]
        out[sel] = _exact_jaccard_batch(texts_a, texts_b, a[sel], b[sel], config)
    return out


def _exact_jaccard_batch(texts_a: Sequence[str], texts_b: Sequence[str], a: "np.ndarray", b: "np.ndarray",
                         config: DedupConfig, *, batch_elements: int = 1 << 23) -> "np.ndarray":
    """Jaccard similarity |A & B| / |A | B| of the shingle sets of pairs (texts_a[a[p]], texts_b[b[p]]), computed
    exactly over 44-bit shingle fingerprints (two different shingles of a pair share one with probability
    ~|A||B| / 2**44, about 1e-8 for two 500-shingle texts). Texts are already normalized. Returns (P,) float64.

    One sort per batch: key = pair id | fingerprint | side (0 for A, 1 for B); equal neighbours with the same side
    are repeats inside a text (dropped), equal neighbours across sides are the intersection.
    """
    np = _np()
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


def connected_components(n: int, a: "np.ndarray", b: "np.ndarray") -> "np.ndarray":
    """Union-find over n items joined by the pairs (a[p], b[p]), vectorized: each round hooks the larger root of
    every edge under the smaller, then compresses paths by pointer jumping. Returns (n,) int64: the smallest item
    index of each item's component (so labels are stable and readable)."""
    np = _np()
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

    def to_dict(self) -> dict[str, Any]:
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

    @property
    def clusters(self) -> list[list[int]]:
        """Clusters with two or more documents, each sorted, ordered by first member."""
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(self.cluster_of):
            groups.setdefault(c, []).append(i)
        return [g for g in groups.values() if len(g) > 1]

    def to_dict(self) -> dict[str, Any]:
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
    for i, (d, e) in enumerate(zip(digests, empty)):
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
    np = _np()
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
    pairs = tuple(NearPair(int(x), int(y), float(j)) for x, y, j in zip(pa, pb, pj))
    return DedupResult(n_docs=n, n_empty=int(empty.sum()), exact_duplicates=n_exact, near_pairs=pairs,
                       cluster_of=tuple(int(x) for x in labels), candidates=n_candidates, checked=len(a),
                       capped_buckets=capped,
                       config=config, notes=tuple(notes))


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
    for i, (d, t) in enumerate(zip(sk.digests, sk.texts)):
        if t:
            first, count = out.get(d, (i, 0))
            out[d] = (first, count + 1)
    return out


def cross_duplicates(index: Sketches, query: Sketches, *,
                     max_exact_examples: int = MAX_EXACT_EXAMPLES) -> CrossMatches:
    """Index one collection (train), query another (eval, test) for exact and near duplicates.

    Exact copies are matched by content hash and counted, so k x m copies cost O(k + m), not O(k x m).
    """
    np = _np()
    by_digest = exact_index(index)
    exact: list[tuple[int, int]] = []
    rows: list[int] = []
    links = 0
    for q, (d, t) in enumerate(zip(query.digests, query.texts)):
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
        different = np.fromiter((x != y for x, y in zip(ida, idb)), dtype=bool, count=len(a))
        a, b = a[different], b[different]
    jac = exact_jaccard(index.texts, query.texts, a, b, index.config)
    hit = jac >= index.config.threshold
    near = tuple((int(i), int(q), float(j)) for i, q, j in zip(a[hit], b[hit], jac[hit]))
    return CrossMatches(exact=tuple(exact), near=near, candidates=n_candidates, capped_buckets=capped,
                        exact_rows=tuple(rows), exact_links=links)


def estimate_jaccard(sig_a: "np.ndarray", sig_b: "np.ndarray") -> float:
    """MinHash estimate of the Jaccard similarity: the share of equal signature slots."""
    np = _np()
    return float(np.mean(sig_a == sig_b))


def sketch(texts: Iterable[str], config: DedupConfig | None = None, *, progress: bool | None = None,
           description: str = "MinHash") -> Sketches:
    """Sketches of a collection (streaming over the iterable)."""
    return Sketches(config or DedupConfig()).add(texts, progress=progress, description=description)


def signatures(texts: Sequence[str], config: DedupConfig | None = None) -> "np.ndarray":
    """(D, num_perm) MinHash signatures of raw texts (normalized first); for inspection and tests."""
    config = config or DedupConfig()
    norm = [normalize(t, strip_punctuation=config.strip_punctuation) for t in texts]
    h, counts = shingle_hashes(norm, config)
    return minhash_signatures(h, counts, config)


__all__ = ["MAX_EXACT_EXAMPLES", "CrossMatches", "DedupConfig", "DedupResult", "NearPair", "Sketches",
           "candidate_pairs", "candidate_probability", "choose_banding", "connected_components",
           "cross_candidate_pairs", "cross_duplicates", "estimate_jaccard", "exact_index", "exact_jaccard",
           "find_duplicates", "shingle_hashes", "signatures", "sketch"]
