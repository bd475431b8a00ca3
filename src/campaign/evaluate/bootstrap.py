"""Bootstrap intervals of a mean difference: over seeds (percentile and BCa), and over seeds x examples.

`bootstrap_mean` resamples n values exactly as scipy.stats.bootstrap does (rng.integers(0, n, (B, n)) from a
numpy Generator), so with the same seed and batch=None it reproduces scipy's percentile and BCa intervals.
`paired_bootstrap` resamples per-example differences D (shape (seeds, examples)) two-level and *crossed*: each
replicate draws seeds with replacement and, within them, examples with replacement, the same examples for
every drawn seed because all seeds were scored on the same test set. The statistic is the mean of D over the
drawn seeds x drawn examples. Nesting (fresh examples per seed) would average the test-set noise away over
seeds and give too narrow an interval.

With clusters (examples that share a movie, a document, a template), `paired_bootstrap(..., clusters=labels)`
resamples clusters instead of examples (`cluster_distribution`): each replicate draws seeds with replacement
and G clusters with replacement, with all the examples of each drawn cluster, the same clusters for every drawn
seed; the statistic is the mean over the drawn seeds x the drawn clusters' examples (a ratio of sums when the
clusters' sizes differ). It needs only each seed's sum over each cluster, so a replicate costs O(seeds x G)
whatever the number of examples. With one seed and clusters of one size its variance is (G - 1) / G times the
cluster-robust (CR1) variance of the mean (the plug-in variance of the mean of G cluster means).

Speed: D's columns take few distinct patterns in practice (0/1 correctness: at most 3**seeds), so a replicate
is multinomial counts over distinct patterns (O(patterns)) instead of `examples` random indices; this is the
same resampling distribution, drawn with a different random stream. Otherwise every replicate needs `examples`
random indices: with numba installed (the `fast` extra) and enough work, a compiled kernel (kernels.py) draws,
gathers and sums them in one pass on all cores (benchmarks/bootstrap_speed.py prints its speed against
scipy.stats.bootstrap on the same differences); without it, numpy draws them in chunks on several threads.
Both give each chunk its own generator from the seed, so the thread count never changes the result; the two
engines draw different streams (`engine` in the result says which ran).
"""
from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..results import Record
from ..validate import check_seed
from .stats import check_alternative, numpy

CHUNK_ELEMENTS = 1 << 22      # random indices drawn per chunk (16 MiB of uint32)
MAX_THREADS = 8
# Resampled elements (replicates x examples x seeds) from which the compiled kernel pays off: numpy does this
# much in ~0.3 s on 2 cores, about what importing numba and loading its cached kernel cost once per process.
KERNEL_MIN_ELEMENTS = 1e8
ENGINES = ("auto", "multinomial", "numba", "numpy")
_KERNEL_LOCK = threading.Lock()


def _cpus() -> int:
    try:
        return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))
    except AttributeError:  # macOS, Windows
        return max(1, min(MAX_THREADS, os.cpu_count() or 1))


@dataclass(frozen=True)
class BootstrapInterval(Record):
    """Percentile and BCa intervals of the mean; `low`/`high` are the BCa ones, or the percentile ones when
    BCa is undefined (`note` says why). One-sided intervals have None on the open side."""

    method: str
    low: float | None
    high: float | None
    percentile_low: float | None
    percentile_high: float | None
    bca_low: float | None
    bca_high: float | None
    n_resamples: int
    seed: int
    confidence: float
    alternative: str
    note: str = ""


MAX_RESAMPLES = 10_000_000  # past this the interval's Monte Carlo error is far below any other; memory is not


def _levels(confidence: float, alternative: str, n_resamples: int) -> float:
    """The tail level of each open end, after checking the arguments every interval shares."""
    check_alternative(alternative)
    if not 0 < confidence < 1:
        raise InputError(f"confidence {confidence!r} must be between 0 and 1, e.g. 0.95")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or not 1 <= n_resamples <= MAX_RESAMPLES:
        raise InputError(f"resamples must be a whole number from 1 to {MAX_RESAMPLES:,}, got {n_resamples!r}; "
                         "10,000 is the usual choice")
    return (1 - confidence) / 2 if alternative == "two-sided" else 1 - confidence


def _ends(lo: float, hi: float, alternative: str) -> tuple[float | None, float | None]:
    return (None if alternative == "less" else lo), (None if alternative == "greater" else hi)


def resample_means(x: Any, n_resamples: int, seed: int) -> Any:
    """Means of n_resamples resamples of x (shape (n,)) -> shape (n_resamples,), drawn as scipy draws them."""
    np = numpy()
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(check_seed(seed))
    n = x.size
    rows = max(1, CHUNK_ELEMENTS // max(n, 1))
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, rows):
        stop = min(n_resamples, start + rows)
        out[start:stop] = x[rng.integers(0, n, (stop - start, n))].mean(axis=-1)
    return out


def bootstrap_mean(x: Sequence[float], *, n_resamples: int = 10_000, confidence: float = 0.95,
                   alternative: str = "two-sided", seed: int = 0) -> BootstrapInterval:
    """Percentile and BCa bootstrap intervals of mean(x), x of shape (n,) (Efron & Tibshirani 1993, 14.3).

    BCa is undefined when every resample mean lies on one side of the mean (the bias correction is
    infinite) or every jackknife mean is equal (the acceleration is 0/0): then the percentile interval is used.
    """
    np = numpy()
    from scipy.special import ndtr, ndtri

    alpha = _levels(confidence, alternative, n_resamples)
    values = np.asarray(x, dtype=float)
    if values.size == 0:
        raise InputError("nothing to bootstrap; give at least one value")
    theta_b = resample_means(values, n_resamples, seed)
    p_lo, p_hi = (float(v) for v in np.quantile(theta_b, [alpha, 1 - alpha]))
    pct = _ends(p_lo, p_hi, alternative)
    theta = float(np.mean(values))
    share = (np.count_nonzero(theta_b < theta) + np.count_nonzero(theta_b <= theta)) / (2 * n_resamples)
    note = ""
    bca: tuple[float | None, float | None] = (None, None)
    if values.size < 2:
        note = "one value: every resample is the same, so the interval is the point and BCa is undefined"
    elif share in (0.0, 1.0):
        note = "BCa undefined: every resample mean is on one side of the mean (e.g. all differences equal)"
    else:
        z0 = float(ndtri(share))
        jack = (values.sum() - values) / (values.size - 1)  # leave-one-out means
        u = (values.size - 1) * (jack.mean() - jack)
        den = float((u**2).sum())
        if den == 0:
            note = "BCa undefined: all leave-one-out means are equal (acceleration 0/0)"
        else:
            a = float((u**3).sum()) / (6 * den**1.5)
            levels = []
            for z in (float(ndtri(alpha)), -float(ndtri(alpha))):
                levels.append(float(ndtr(z0 + (z0 + z) / (1 - a * (z0 + z)))))
            if all(math.isfinite(v) for v in levels):
                lo, hi = (float(v) for v in np.quantile(theta_b, levels))
                bca = _ends(lo, hi, alternative)
            else:
                note = "BCa undefined: the adjusted levels are not finite"
    if note:
        return BootstrapInterval("percentile", *pct, *pct, None, None, n_resamples, seed, confidence, alternative,
                                 note + "; the percentile interval is used")
    return BootstrapInterval("bca", *bca, *pct, *bca, n_resamples, seed, confidence, alternative)


@dataclass(frozen=True)
class ExampleBootstrap(Record):
    """The crossed seeds x examples bootstrap interval of the mean per-example difference."""

    seeds: int
    examples: int
    mean_diff: float
    low: float | None
    high: float | None
    n_resamples: int
    seed: int
    confidence: float
    alternative: str
    patterns: int           # distinct columns of D: the resampling runs over these when few (0 with clusters)
    engine: str = "numpy"   # what drew the resamples: "multinomial" (few patterns), "numba", "numpy" or "clusters"
    method: str = "crossed bootstrap: seeds with replacement, and the same resampled examples within each"
    clusters: int | None = None     # G when clusters were resampled (a cluster bootstrap); None: examples were


CLUSTER_METHOD = ("cluster bootstrap: seeds with replacement, and {g:,} clusters with replacement (all the "
                  "examples of each drawn cluster), the same for every drawn seed")


def _load_kernels() -> Any:
    """The compiled kernel module, or None: numba missing, not built for this numpy, or no cache directory."""
    try:
        from . import kernels
    except (ImportError, RuntimeError):
        return None
    return None if kernels.numba.config.DISABLE_JIT else kernels


def _engine(engine: str, work: float, few_patterns: bool) -> str:
    if engine not in ENGINES:
        raise InputError(f"unknown bootstrap engine {engine!r}; use one of {', '.join(ENGINES)}")
    if engine == "numba" and _load_kernels() is None:
        raise InputError("the numba engine needs a working numba for this numpy: pip install 'campaign[fast]'")
    if engine != "auto":
        return engine
    if few_patterns:
        return "multinomial"
    return "numba" if work >= KERNEL_MIN_ELEMENTS and _load_kernels() is not None else "numpy"


def paired_distribution(diffs: Any, *, n_resamples: int = 10_000, seed: int = 0,
                        engine: str = "auto") -> tuple[Any, int, str]:
    """Bootstrap distribution (shape (n_resamples,)) of the mean of D over resampled seeds x examples.

    Args:
        diffs: D, shape (seeds, examples) or (examples,): candidate minus baseline score per seed and example.
        engine: "multinomial" (counts over distinct patterns), "numba" (compiled kernel over indices), "numpy"
            (indices), or "auto": multinomial when there are few patterns, else numba when installed and the
            work is large enough to repay loading it, else numpy.
    Returns:
        (resample means, number of distinct example patterns, the engine that drew them).
    """
    np = numpy()
    d = np.asarray(diffs, dtype=float)
    if d.ndim == 1:
        d = d[None, :]
    if d.ndim != 2 or d.size == 0:
        raise InputError("per-example differences must form a non-empty seeds x examples table")
    n_s, n_e = d.shape
    rng = np.random.default_rng(seed)
    patterns, counts = np.unique(d.T, axis=0, return_counts=True)          # (k, n_s), (k,)
    k = patterns.shape[0]
    used = _engine(engine, float(n_resamples) * n_e * n_s, few_patterns=k * 8 <= n_e)
    out = np.empty(n_resamples)
    if used == "multinomial":
        # Multinomial counts over the k patterns: the same law as drawing n_e example indices.
        p = counts / n_e
        rows = max(1, CHUNK_ELEMENTS // max(k + n_s, 1))
        for start in range(0, n_resamples, rows):
            m = min(n_resamples, start + rows) - start
            ce = rng.multinomial(n_e, p, size=m)                              # (m, k)
            cs = rng.multinomial(n_s, np.full(n_s, 1 / n_s), size=m)         # (m, n_s)
            out[start:start + m] = ((ce @ patterns) * cs).sum(axis=1) / (n_s * n_e)
        return out, k, "multinomial"
    if used == "numba" and n_e < 2**32:              # the kernel maps 32-bit words to indices
        kernels = _load_kernels()
        with _KERNEL_LOCK:      # one call at a time: it uses every core, and numba's workqueue layer aborts otherwise
            means = kernels.crossed_means(np.ascontiguousarray(d.T), n_resamples,
                                          kernels.states_for(seed, n_resamples))
        return means, k, "numba"
    # Chunks of replicates, each with its own generator spawned from `seed`: the result does not depend on
    # the number of threads, and numpy releases the GIL while drawing and gathering, so threads run in parallel.
    rows = max(1, CHUNK_ELEMENTS // (n_e * n_s))
    starts = list(range(0, n_resamples, rows))
    streams = np.random.SeedSequence(seed).spawn(len(starts))
    dtype = np.uint32 if n_e < 2**32 else np.int64

    def run(i: int) -> None:
        r = np.random.default_rng(streams[i])
        start = starts[i]
        m = min(n_resamples, start + rows) - start
        ie = r.integers(0, n_e, (m, n_e), dtype=dtype)
        if n_s == 1:
            out[start:start + m] = d[0][ie].mean(axis=1)
            return
        per_seed = np.stack([d[s][ie].sum(axis=1) for s in range(n_s)], axis=1)    # (m, n_s)
        cs = r.multinomial(n_s, np.full(n_s, 1 / n_s), size=m)
        out[start:start + m] = (per_seed * cs).sum(axis=1) / (n_s * n_e)

    workers = min(len(starts), _cpus())
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, range(len(starts))))
    else:
        for i in range(len(starts)):
            run(i)
    return out, k, "numpy"


def _draw_counts(rng: Any, k: int, m: int) -> Any:
    """How often each of k units is drawn in m resamples of k draws with replacement: shape (m, k).
    (Indices counted with one bincount: about 4x faster than rng.multinomial, the same law.)"""
    np = numpy()
    idx = rng.integers(0, k, (m, k))
    idx += (k * np.arange(m))[:, None]
    return np.bincount(idx.ravel(), minlength=m * k).reshape(m, k)


def cluster_distribution(diffs: Any, codes: Any, *, n_resamples: int = 10_000, seed: int = 0) -> Any:
    """Bootstrap distribution (shape (n_resamples,)) of the mean of D over resampled seeds x clusters.

    Args:
        diffs: D, shape (seeds, examples) or (examples,).
        codes: each example's cluster as an integer 0..G-1 (difference.cluster_codes), every code used.
    Each replicate draws the seeds with replacement (counts c_s) and G clusters with replacement (counts k_g);
    with T[s, g] the sum of D over cluster g's examples in seed s and n_g its size, the replicate's mean is
    sum_{s,g} c_s k_g T[s, g] / (seeds x sum_g k_g n_g). Seeded: one numpy Generator from `seed`, in chunks.
    """
    np = numpy()
    d = np.asarray(diffs, dtype=float)
    if d.ndim == 1:
        d = d[None, :]
    c = np.asarray(codes, dtype=np.intp)
    if d.ndim != 2 or d.size == 0 or c.shape != (d.shape[1],):
        raise InputError("per-example differences must form a non-empty seeds x examples table with one cluster "
                         "per example")
    if c.min() < 0 or not np.bincount(c).all():
        raise InputError("cluster codes must number the clusters 0..G-1, each with an example; make them with "
                         "difference.cluster_codes")
    n_s = d.shape[0]
    sizes = np.bincount(c).astype(float)                                           # n_g: (G,)
    g = sizes.size
    sums = np.stack([np.bincount(c, weights=row, minlength=g) for row in d])       # T: (seeds, G)
    rng = np.random.default_rng(check_seed(seed))
    out = np.empty(n_resamples)
    rows = max(1, CHUNK_ELEMENTS // (g + n_s))
    for start in range(0, n_resamples, rows):
        m = min(n_resamples, start + rows) - start
        kc = _draw_counts(rng, g, m)                                               # (m, G)
        cs = _draw_counts(rng, n_s, m)                                             # (m, seeds)
        out[start:start + m] = ((kc @ sums.T) * cs).sum(axis=1) / (n_s * (kc @ sizes))
    return out


def paired_bootstrap(diffs: Any, *, n_resamples: int = 10_000, confidence: float = 0.95,
                     alternative: str = "two-sided", seed: int = 0, engine: str = "auto",
                     clusters: Sequence[Any] | None = None) -> ExampleBootstrap:
    """Percentile interval of the mean per-example difference, resampling seeds x examples (crossed), or with
    `clusters` (one label per example, D's columns) seeds x clusters (cluster_distribution; `engine` is then
    unused).

    Raises:
        InputError: clusters of another length than the examples, or fewer than 2 clusters.
    """
    np = numpy()
    alpha = _levels(confidence, alternative, n_resamples)
    d = np.asarray(diffs, dtype=float)
    d2 = d[None, :] if d.ndim == 1 else d
    g = None
    if clusters is not None:
        from .difference import cluster_codes

        codes, g = cluster_codes(clusters, d2.shape[1], "example")
        dist = cluster_distribution(d2, codes, n_resamples=n_resamples, seed=seed)
        k, used = 0, "clusters"
    else:
        dist, k, used = paired_distribution(d2, n_resamples=n_resamples, seed=seed, engine=engine)
    lo, hi = (float(v) for v in np.quantile(dist, [alpha, 1 - alpha]))
    low, high = _ends(lo, hi, alternative)
    if g is not None:
        return ExampleBootstrap(d2.shape[0], d2.shape[1], float(d2.mean()), low, high, n_resamples, seed,
                                confidence, alternative, k, used, CLUSTER_METHOD.format(g=g), g)
    return ExampleBootstrap(d2.shape[0], d2.shape[1], float(d2.mean()), low, high, n_resamples, seed, confidence,
                            alternative, k, used)
