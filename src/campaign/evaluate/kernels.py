"""Compiled bootstrap kernel (numba, the `fast` extra): draw, gather and sum in one pass over the examples.

numpy needs three passes per resampled index (draw a bounded integer, gather, reduce) and each touches memory;
this kernel keeps the index in a register: one xoshiro256++ output gives two 32-bit words, each mapped to
[0, n) by Lemire's multiply-shift with rejection (exactly uniform), then d[j] is added at once. Replicates are
split into fixed chunks of CHUNK rows, each with its own generator state taken from numpy's SeedSequence, and
the chunks run in parallel: the result depends on the seed, never on the number of threads.

numba is optional and its import costs about 0.2 s: bootstrap.py imports this module only for large work.
"""
from __future__ import annotations

import numba
import numpy as np

CHUNK = 32                      # replicates per generator state (the unit of parallel work)
_u64 = np.uint64
_M32 = _u64(0xFFFFFFFF)


@numba.njit(inline="always")
def _rotl(x, k):
    return (x << _u64(k)) | (x >> _u64(64 - k))


@numba.njit(inline="always")
def _next64(s):
    # xoshiro256++ (Blackman & Vigna 2019), state s[0..3] updated in place
    result = _rotl(s[0] + s[3], 23) + s[0]
    t = s[1] << _u64(17)
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


@numba.njit(inline="always")
def _bounded(word, n, s):
    # Lemire (2019), "Fast random integer generation in an interval": exact, rejects with probability < n/2**32
    m = (word & _M32) * n
    low = m & _M32
    if low < n:
        threshold = ((_M32 + _u64(1)) - n) % n
        while low < threshold:
            m = (_next64(s) & _M32) * n
            low = m & _M32
    return m >> _u64(32)


@numba.njit(parallel=True, cache=True, nogil=True)
def crossed_means(d, n_resamples, states):
    """Means of D over n_resamples crossed resamples: seeds with replacement, the same examples within each.

    d: (examples, seeds) float64, C-contiguous; states: (chunks, 4) uint64 from `states_for`.
    """
    n_e, n_s = d.shape
    out = np.empty(n_resamples)
    ne = _u64(n_e)
    ns = _u64(n_s)
    for c in numba.prange(states.shape[0]):
        s = states[c].copy()
        w = np.zeros(n_s)
        for r in range(c * CHUNK, min(n_resamples, (c + 1) * CHUNK)):
            acc = 0.0
            if n_s == 1:
                for _ in range(n_e // 2):
                    word = _next64(s)
                    acc += d[_bounded(word, ne, s), 0]
                    acc += d[_bounded(word >> _u64(32), ne, s), 0]
                if n_e % 2:
                    acc += d[_bounded(_next64(s), ne, s), 0]
                out[r] = acc / n_e
                continue
            # seeds with replacement (counts w), then examples with replacement, the same ones for every seed
            w[:] = 0.0
            for _ in range(n_s):
                w[_bounded(_next64(s), ns, s)] += 1.0
            for _ in range(n_e):
                j = _bounded(_next64(s), ne, s)
                for k in range(n_s):
                    acc += w[k] * d[j, k]
            out[r] = acc / (n_s * n_e)
    return out


def states_for(seed: int, n_resamples: int) -> np.ndarray:
    """One xoshiro256++ state per chunk of CHUNK replicates, from numpy's SeedSequence (never all zero)."""
    chunks = -(-n_resamples // CHUNK)
    states = np.random.SeedSequence(seed).generate_state(4 * chunks, np.uint64).reshape(chunks, 4)
    states[~states.any(axis=1), 0] = 1
    return np.ascontiguousarray(states)
