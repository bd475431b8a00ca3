"""Sketches of a text collection for near-duplicate search: shingles, MinHash signatures and LSH band keys.

Everything is vectorized with numpy over chunks of documents (streaming: per document only the normalized text,
its content hash, the LSH band keys and a 32-bit copy of the signature are kept, ~700 bytes beyond the text).

- Shingles: polynomial hashes of character or word n-grams computed with prefix sums (no Python loop per shingle).
- MinHash: one-permutation hashing with optimal densification (Shrivastava, ICML 2017): each shingle is hashed
  once and falls in one of `num_perm` bins, the minimum per bin is the signature; an empty bin borrows from the
  first non-empty bin of a fixed probe sequence. P(slot i equal) = Jaccard, as with `num_perm` independent
  permutations, at a cost per shingle instead of per shingle and permutation.
- LSH banding: bands x rows chosen for recall at the threshold (DedupConfig, choose_banding).

All hashing is 64-bit integer arithmetic with fixed constants, so results are the same on every run and machine
for a given seed (never Python's hash()). dedup.py finds and confirms duplicates from these sketches.
"""
from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InputError, MissingDependencyError
from .normalize import normalize_text, normalize_texts, normalizer_id

if TYPE_CHECKING:  # numpy is the `data` extra: imported inside functions
    import numpy as np

    _SketchKernel = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]  # kernels.sketch_documents

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
        for name, most in (("ngram", 1024), ("num_perm", 1 << 16), ("max_bucket", 2**31 - 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= most:
                raise InputError(f"{name} must be a whole number from 1 to {most:,}, got {value!r}")
        b, r = self.banding()
        if b * r > self.num_perm:
            raise InputError(f"bands x rows = {b} x {r} exceeds num_perm {self.num_perm}; lower one of them")

    def banding(self) -> tuple[int, int]:
        """(bands, rows): the given ones, or choose_banding(threshold, num_perm)."""
        if self.bands and self.rows:
            return self.bands, self.rows
        if self.bands:
            return self.bands, self.num_perm // self.bands
        if self.rows:
            return self.num_perm // self.rows, self.rows
        return choose_banding(self.threshold, self.num_perm)

    def to_dict(self) -> dict[str, Any]:
        # by hand: the banding actually used, the normalizer's id and the candidate probability (derived, rounded)
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


def numpy():
    try:
        import numpy as np
    except ImportError as e:  # pragma: no cover - the data extra is installed in the tests
        raise MissingDependencyError("numpy", "data") from e
    return np


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic): a bijection with good avalanche."""
    np = numpy()
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    x ^= x >> np.uint64(31)
    return x


def mix_int(x: int) -> int:
    """mix64 on one Python int (the same function, for constants derived from the seed)."""
    x &= _M64
    x = ((x ^ (x >> 30)) * _MIX1) & _M64
    x = ((x ^ (x >> 27)) * _MIX2) & _M64
    return x ^ (x >> 31)


class _Powers:
    """BASE**t and BASE**-t mod 2**64 for t < length, grown on demand (cumprod wraps mod 2**64)."""

    def __init__(self) -> None:
        self.pw: np.ndarray | None = None
        self.ipw: np.ndarray | None = None

    def get(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        np = numpy()
        if self.pw is None or self.ipw is None or len(self.pw) < length:
            size = max(2 * length, 1 << 21)
            inv = pow(_BASE, -1, 1 << 64)
            pw = np.full(size, _BASE, dtype=np.uint64)
            pw[0] = 1
            ipw = np.full(size, inv, dtype=np.uint64)
            ipw[0] = 1
            with np.errstate(over="ignore"):
                self.pw, self.ipw = np.cumprod(pw, dtype=np.uint64), np.cumprod(ipw, dtype=np.uint64)
            return self.pw, self.ipw
        return self.pw, self.ipw


_POWERS = _Powers()


def _window_hashes(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Position-independent polynomial hash of values[s:s+l] for each window: sum values[s+i] * BASE**i mod 2**64.

    Prefix sums make every window O(1): (P[s+l] - P[s]) * BASE**-s. Shapes: values (L,), starts/lengths (W,).
    """
    np = numpy()
    pw, ipw = _POWERS.get(len(values) + 1)
    prefix = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values * pw[: len(values)], out=prefix[1:])
    return (prefix[starts + lengths] - prefix[starts]) * ipw[starts]


def _windows(doc_starts: np.ndarray, doc_lengths: np.ndarray,
             n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and length of every n-window inside each doc [start, start+length); a doc shorter than n is one
    window; an empty doc has none. Returns (starts, lengths, windows per doc), grouped by doc in order."""
    np = numpy()
    count = np.where(doc_lengths >= n, doc_lengths - n + 1, (doc_lengths > 0).astype(np.int64))
    total = int(count.sum())
    first = np.cumsum(count) - count
    rel = np.arange(total, dtype=np.int64) - np.repeat(first, count)
    starts = np.repeat(doc_starts, count) + rel
    lengths = np.repeat(np.minimum(doc_lengths, n), count)
    return starts, lengths, count


def shingle_hashes(norm_texts: Sequence[str], config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of the shingles of already-normalized texts.

    Returns (hashes uint64 (S,), counts int64 (D,)): hashes grouped by document in order, counts[d] shingles of
    document d (0 for an empty text). Repeated shingles inside a document are kept (the MinHash is unaffected).
    """
    np = numpy()
    lengths = np.fromiter((len(t) for t in norm_texts), dtype=np.int64, count=len(norm_texts))
    if not len(norm_texts) or not lengths.any():
        return np.zeros(0, dtype=np.uint64), np.zeros(len(norm_texts), dtype=np.int64)
    # One code point per element ("\n" separates documents; normalized texts hold no newline).
    cp = np.frombuffer("\n".join(norm_texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    cp = cp.astype(np.uint64)
    doc_starts = np.cumsum(lengths + 1) - (lengths + 1)
    salt = np.uint64(mix_int(config.seed * 0x2545F4914F6CDD1D + 1))
    if config.shingle == "char":
        starts, wl, counts = _windows(doc_starts, lengths, config.ngram)
        h = _window_hashes(cp, starts, wl)
    else:
        sep = (cp == 32) | (cp == 10)
        tok = ~sep
        edge = np.diff(np.concatenate(([0], tok.view(np.int8), [0])))
        t_start = np.flatnonzero(edge == 1)
        t_end = np.flatnonzero(edge == -1)
        tokens = mix64(_window_hashes(cp, t_start, t_end - t_start) ^ salt)
        t_doc = np.searchsorted(doc_starts, t_start, side="right") - 1
        n_tok = np.bincount(t_doc, minlength=len(norm_texts)).astype(np.int64)
        tok_doc_start = np.cumsum(n_tok) - n_tok
        starts, wl, counts = _windows(tok_doc_start, n_tok, config.ngram)
        h = _window_hashes(tokens, starts, wl)
    h += wl.astype(np.uint64) * np.uint64(_MIX2)
    return mix64(h ^ salt), counts


# --------------------------------------------------------------------------------------------------- sketches


_MAX_PROBES = 4096


class _Densify:
    """Fixed probe sequences for empty bins: probe[a, i] is the a-th bin that empty bin i borrows from."""

    def __init__(self, num_perm: int, seed: int) -> None:
        self.k, self.seed = num_perm, seed
        self.table: np.ndarray | None = None

    def probes(self, attempts: int) -> np.ndarray:
        np = numpy()
        if self.table is None or len(self.table) < attempts:
            size = max(attempts, 64, 0 if self.table is None else 2 * len(self.table))
            cells = np.arange(size * self.k, dtype=np.uint64) + np.uint64(mix_int(self.seed + 0x51ED27))
            self.table = (mix64(cells * np.uint64(_BASE)) % np.uint64(self.k)).astype(np.int64).reshape(size, self.k)
            return self.table
        return self.table


def minhash_signatures(hashes: np.ndarray, counts: np.ndarray, config: DedupConfig,
                       densify: _Densify | None = None) -> np.ndarray:
    """One-permutation MinHash with optimal densification. Returns (D, num_perm) uint64; an empty document's row
    is all 2**64 - 1. For two documents, P(sig_a[i] == sig_b[i]) = Jaccard(a, b) for every slot i."""
    np = numpy()
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


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(D, bands) uint64: one hash of each band's `rows` signature values."""
    np = numpy()
    keys = np.empty((sig.shape[0], bands), dtype=np.uint64)
    for b in range(bands):
        acc = np.full(sig.shape[0], mix_int(b + 1), dtype=np.uint64)
        for c in range(b * rows, (b + 1) * rows):
            acc = mix64(acc ^ sig[:, c])
        keys[:, b] = acc
    return keys


# numba's import and the load of the cached kernels cost about 0.7 s of CPU in a fresh process, what numpy takes to
# sketch some 3M characters: the first KERNEL_MIN_CHARS characters a process sketches go through numpy and later
# ones through the kernels, so that a small input (a test set, the examples) never pays for the import and a large
# one pays for it once. The bits are the same either way.
KERNEL_MIN_CHARS = 2_000_000
_NUMPY_CHARS = 0  # characters sketched by numpy in this process while the kernels were not loaded


def kernel_module(chars: int | None = None):
    """The compiled kernels module (kernels.py) when numba (the `fast` extra) is installed, CAMPAIGN_NO_NUMBA is
    unset and the work pays for the import, else None: the numpy functions here give the same bits. chars: the
    characters about to be sketched, counted with those sketched before (None: load the kernels now); once loaded
    (here or by an import of kernels.py), the kernels serve every size."""
    global _KERNEL, _NUMPY_CHARS
    if _KERNEL is None and chars is not None and f"{__package__}.kernels" not in sys.modules:
        if _NUMPY_CHARS + chars < KERNEL_MIN_CHARS:
            _NUMPY_CHARS += chars
            return None
    if _KERNEL is None:
        _KERNEL = False
        if not os.environ.get("CAMPAIGN_NO_NUMBA"):
            try:
                from . import kernels as _KERNEL
            except ImportError:
                pass
    return _KERNEL or None


_KERNEL: ModuleType | Literal[False] | None = None   # None: not tried yet; False: numba missing, or CAMPAIGN_NO_NUMBA


def sketch_chunk(norm_texts: Sequence[str], config: DedupConfig, densify: _Densify | None = None, *,
                 compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Band keys (D, bands) uint64, MinHash signatures (D, num_perm) uint64 and shingle counts (D,) int64 of
    already-normalized texts: the compiled kernel when numba is installed (compiled=None) or asked for, the numpy
    functions otherwise; both give the same bits."""
    np = numpy()
    bands, rows = config.banding()
    kernel: _SketchKernel | None
    if compiled:
        try:
            from .kernels import sketch_documents as kernel
        except ImportError as e:
                raise MissingDependencyError("numba", "fast") from e
    else:
        module = kernel_module(sum(map(len, norm_texts))) if compiled is None else None
        kernel = module.sketch_documents if module else None
    if kernel is None:
        h, counts = shingle_hashes(norm_texts, config)
        sig = minhash_signatures(h, counts, config, densify)
        return band_keys(sig, bands, rows), sig, counts
    lengths = np.fromiter((len(t) for t in norm_texts), dtype=np.int64, count=len(norm_texts))
    starts = np.cumsum(lengths + 1) - (lengths + 1)
    cp = np.frombuffer("\n".join(norm_texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    salt = np.uint64(mix_int(config.seed * 0x2545F4914F6CDD1D + 1))
    band_seeds = np.array([mix_int(b + 1) for b in range(bands)], dtype=np.uint64)
    return kernel(cp, starts, lengths, config.shingle == "word", config.ngram, config.num_perm, bands, rows, salt,
                  np.uint64(mix_int(config.seed + 0x51ED27)), band_seeds, _MAX_PROBES,
                  (densify or _Densify(config.num_perm, config.seed)).probes(64)[:64])


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
            total: int | None = None, description: str = "MinHash") -> Sketches:
        """Normalize, hash and sketch texts, consuming the iterable chunk by chunk."""
        np = numpy()
        strip = self.config.strip_punctuation
        if total is None and hasattr(texts, "__len__"):
            total = len(texts)  # type: ignore[arg-type]
        with progress_bar(description, total, progress) as advance:
            for chunk in _chunks(texts, chunk_size):
                norm = normalize_texts(chunk, strip_punctuation=strip)
                self._digests.extend(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in norm)
                keys, sig, counts = sketch_chunk(norm, self.config, self._densify)
                self._parts["keys"].append(keys)
                self._parts["sigs"].append(sig.astype(np.uint32))
                self._parts["counts"].append(counts.astype(np.int32))
                self.texts.extend(norm)
                self._cache.clear()
                advance(len(chunk))
        return self

    def _joined(self, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        np = numpy()
        if name not in self._cache:
            parts = self._parts[name]
            self._cache[name] = np.concatenate(parts) if parts else np.zeros(shape, dtype=dtype)
            self._parts[name] = [self._cache[name]]
        return self._cache[name]

    @property
    def band_keys(self) -> np.ndarray:
        """(D, bands) uint64."""
        return self._joined("keys", (0, self.config.banding()[0]), "uint64")

    @property
    def signatures(self) -> np.ndarray:
        """(D, num_perm) uint32: the low 32 bits of each MinHash slot (enough to compare slots)."""
        return self._joined("sigs", (0, self.config.num_perm), "uint32")

    def signature_rows(self, idx: np.ndarray) -> np.ndarray:
        """signatures[idx], gathered from the per-chunk arrays (no copy of the whole matrix: streaming memory)."""
        np = numpy()
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
    def counts(self) -> np.ndarray:
        """(D,) int32: shingles per document (repeats included)."""
        return self._joined("counts", (0,), "int32")

    @property
    def digests(self) -> list[bytes]:
        """SHA-256 of each normalized text (the exact-duplicate key)."""
        return self._digests

    @property
    def empty(self) -> np.ndarray:
        np = numpy()
        return np.fromiter((not t for t in self.texts), dtype=bool, count=len(self.texts))


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


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """MinHash estimate of the Jaccard similarity: the share of equal signature slots."""
    np = numpy()
    return float(np.mean(sig_a == sig_b))


def sketch(texts: Iterable[str], config: DedupConfig | None = None, *, progress: bool | None = None,
           description: str = "MinHash") -> Sketches:
    """Sketches of a collection (streaming over the iterable)."""
    return Sketches(config or DedupConfig()).add(texts, progress=progress, description=description)


def signatures(texts: Sequence[str], config: DedupConfig | None = None) -> np.ndarray:
    """(D, num_perm) MinHash signatures of raw texts (normalized first); for inspection and tests."""
    config = config or DedupConfig()
    norm = [normalize_text(t, strip_punctuation=config.strip_punctuation) for t in texts]
    h, counts = shingle_hashes(norm, config)
    return minhash_signatures(h, counts, config)


__all__ = ["DedupConfig", "Sketches", "band_keys", "candidate_probability", "choose_banding", "estimate_jaccard",
           "minhash_signatures", "mix64", "mix_int", "progress_bar", "shingle_hashes", "signatures", "sketch",
           "sketch_chunk"]
