"""Paired bootstrap speed: campaign's paired_bootstrap against scipy.stats.bootstrap doing the same work.

10,000 resamples of the mean difference over 100,000 examples scored by two models (one seed), 95% percentile
interval. Two kinds of per-example scores:
  - 0/1 correctness (accuracy, exact match, pass@1): differences take 3 values, so campaign draws multinomial
    counts over the distinct values (the same resampling law as drawing 100,000 indices);
  - continuous scores (e.g. sentence-level F1): every difference is distinct, so campaign draws indices too.
    With numba (the `fast` extra) a compiled kernel draws each index and adds the difference it points to in
    one pass on all cores; numpy alone needs a pass per step and reaches about 2x per free core.
    The kernel is compiled once per install and cached on disk: the first call of a process also imports numba
    and loads it (or compiles it, the first time ever); that first call is printed too.
The peer's best call: campaign gets the per-example differences, so scipy does too (one sample, np.mean,
vectorized=True): the same interval as the two-sample paired=True form from the same generator, in about half
the time. Its batch is the fastest of 10/25/50/100 timed on 1,000 resamples first (batch=None would need 8 GB).
The paired form runs once, for reference. The two random streams differ, so the intervals agree up to Monte
Carlo error: the check is that each endpoint differs by less than 4 standard errors of the difference of two
independent percentile estimates, sqrt(2) x sqrt(p(1-p)/B) / phi(z_p) x SD(bootstrap distribution), printed.
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
BATCHES = (10, 25, 50, 100)
Z = 1.959963984540054  # the normal 97.5% quantile: a 95% two-sided interval


def scipy_on_differences(d, n_resamples, batch):
    return stats.bootstrap((d,), np.mean, vectorized=True, n_resamples=n_resamples, method="percentile",
                           batch=batch, rng=np.random.default_rng(0))


def fastest_batch(d):
    """scipy's batch size that runs 1,000 resamples of `d` fastest here."""
    return min(BATCHES, key=lambda b: best_of(lambda: scipy_on_differences(d, 1_000, b), 1)[0])


def tolerance(replicates, n_resamples):
    """4 standard errors of the difference between two independent Monte Carlo estimates of the 2.5% (or 97.5%)
    quantile of the bootstrap distribution (normal approximation of its density at the quantile)."""
    p = 0.025
    se = np.sqrt(p * (1 - p) / n_resamples) / (np.exp(-Z * Z / 2) / np.sqrt(2 * np.pi)) * np.std(replicates)
    return 4 * np.sqrt(2) * se


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
          f"scipy {scipy.__version__}, {cpus} CPU(s)"
          + (f", load average {os.getloadavg()[0]:.2f} (the kernel uses every core: other work slows it)"
             if hasattr(os, "getloadavg") else ""))
    rng = np.random.default_rng(2024)
    ok = True
    for name, base, cand in datasets(rng):
        d = cand - base
        t0 = time.perf_counter()
        first = paired_bootstrap(d, n_resamples=B, seed=0)
        t_first = time.perf_counter() - t0
        t_ours, ours = best_of(lambda d=d: paired_bootstrap(d, n_resamples=B, seed=0), REPEATS)
        batch = fastest_batch(d)
        t_scipy, ref = best_of(lambda d=d, batch=batch: scipy_on_differences(d, B, batch), REPEATS)
        t_pair, pair = best_of(lambda base=base, cand=cand, batch=batch: stats.bootstrap(
            (base, cand), mean_diff, paired=True, vectorized=True, n_resamples=B, method="percentile", batch=batch,
            rng=np.random.default_rng(0)), 1)
        lo, hi = ref.confidence_interval.low, ref.confidence_interval.high
        pair_gap = max(abs(pair.confidence_interval.low - lo), abs(pair.confidence_interval.high - hi))
        gap = max(abs(ours.low - lo), abs(ours.high - hi))
        tol = tolerance(ref.bootstrap_distribution, B)
        same = gap < tol
        speedup = t_scipy / t_ours
        ok &= same and speedup >= GOAL and pair_gap < 1e-12
        print(f"\n{name} (mean difference {np.mean(d):+.4f}, {ours.patterns:,} distinct values)")
        print(f"  campaign paired_bootstrap        {t_ours:8.3f} s   [{ours.low:.5f}, {ours.high:.5f}]  engine "
              f"{ours.engine}; first call in this process {t_first:.3f} s ({t_scipy / t_first:.1f}x)")
        assert (first.low, first.high) == (ours.low, ours.high)
        print(f"  scipy.stats.bootstrap, on d      {t_scipy:8.3f} s   [{lo:.5f}, {hi:.5f}]  batch {batch}")
        print(f"  scipy, two samples paired=True   {t_pair:8.3f} s   the same interval to {pair_gap:.1e} "
              "(reference: the slower form of the same work)")
        print(f"  speedup {speedup:,.1f}x over scipy on d ({'meets' if speedup >= GOAL else 'BELOW'} the {GOAL:g}x "
              f"goal); largest endpoint gap {gap:.6f}, tolerance {tol:.6f} (4 Monte Carlo SE): "
              f"{'same' if same else 'NOT the same'} interval")
    print("\nall cases meet the goal" if ok else "\nsome case misses the goal (see above)")


if __name__ == "__main__":
    main()
