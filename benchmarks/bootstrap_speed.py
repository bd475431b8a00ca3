"""Paired bootstrap speed: campaign's paired_bootstrap against scipy.stats.bootstrap on the same data.

10,000 resamples of the mean difference over 100,000 examples scored by two models (one seed), 95% percentile
interval. Two kinds of per-example scores:
  - 0/1 correctness (accuracy, exact match, pass@1): differences take 3 values, so campaign draws multinomial
    counts over the distinct values (the same resampling law as drawing 100,000 indices);
  - continuous scores (e.g. sentence-level F1): every difference is distinct, so campaign draws indices too.
    With numba (the `fast` extra) a compiled kernel draws each index and adds the difference it points to in
    one pass on all cores; numpy alone needs a pass per step and reaches about 2x per free core.
    The kernel is compiled once per install and cached on disk: the first call of a process also imports numba
    and loads it (or compiles it, the first time ever); that first call is printed too.
scipy runs paired=True, vectorized=True with batch=25, its fastest batch size on a 2-core machine among
10/25/50/100/400 (batch=None would need 3 x 8 GB). The two random streams differ, so the intervals agree up to
Monte Carlo error (about 1e-4 here); the check is |difference| < 0.005 at both ends (the same to two decimals).
Usage: python benchmarks/bootstrap_speed.py [n_examples] [n_resamples]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import scipy
from scipy import stats

from campaign.evaluate.bootstrap import paired_bootstrap

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
B = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
GOAL = 5.0
REPEATS = 2          # best of 2 runs for both


def mean_diff(base, cand, axis=-1):
    return np.mean(cand, axis=axis) - np.mean(base, axis=axis)


def datasets(rng):
    # Two correlated models: the candidate fixes some of the baseline's errors and makes a few new ones.
    base = (rng.random(N) < 0.70).astype(float)
    flip = rng.random(N)
    cand = np.where(base == 1, (flip > 0.05).astype(float), (flip < 0.20).astype(float))
    yield "0/1 correctness", base, cand
    quality = rng.beta(5, 2, N)
    base_c = np.clip(quality + rng.normal(0, 0.10, N), 0, 1)
    cand_c = np.clip(quality + 0.01 + rng.normal(0, 0.10, N), 0, 1)
    yield "continuous scores", base_c, cand_c


def best_of(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{B:,} paired resamples over {N:,} examples, 95% percentile interval; numpy {np.__version__}, "
          f"scipy {scipy.__version__}, {cpus} CPU(s)")
    rng = np.random.default_rng(2024)
    ok = True
    for name, base, cand in datasets(rng):
        t0 = time.perf_counter()
        first = paired_bootstrap(cand - base, n_resamples=B, seed=0)
        t_first = time.perf_counter() - t0
        t_ours, ours = best_of(lambda: paired_bootstrap(cand - base, n_resamples=B, seed=0), REPEATS)
        t_scipy, ref = best_of(lambda: stats.bootstrap((base, cand), mean_diff, paired=True, vectorized=True,
                                                       n_resamples=B, method="percentile", batch=25,
                                                       rng=np.random.default_rng(0)), REPEATS)
        lo, hi = ref.confidence_interval.low, ref.confidence_interval.high
        gap = max(abs(ours.low - lo), abs(ours.high - hi))
        same = gap < 0.005
        speedup = t_scipy / t_ours
        ok &= same and speedup >= GOAL
        print(f"\n{name} (mean difference {np.mean(cand - base):+.4f}, {ours.patterns:,} distinct values)")
        print(f"  campaign paired_bootstrap  {t_ours:8.3f} s   [{ours.low:.4f}, {ours.high:.4f}]  engine {ours.engine}"
              f"; first call in this process {t_first:.3f} s ({t_scipy / t_first:.1f}x)")
        assert (first.low, first.high) == (ours.low, ours.high)
        print(f"  scipy.stats.bootstrap      {t_scipy:8.3f} s   [{lo:.4f}, {hi:.4f}]")
        print(f"  speedup {speedup:,.1f}x ({'meets' if speedup >= GOAL else 'BELOW'} the {GOAL:g}x goal); "
              f"largest endpoint gap {gap:.5f} ({'same' if same else 'NOT the same'} to two decimals)")
    print("\nall cases meet the goal" if ok else "\nsome case misses the goal (see above)")


if __name__ == "__main__":
    main()
