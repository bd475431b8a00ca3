"""Bootstrap intervals: identical to scipy.stats.bootstrap on the same stream; the crossed seeds x examples
bootstrap has the variance derived by hand; fallbacks when BCa is undefined."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from campaign.errors import InputError
from campaign.evaluate import bootstrap as bs
from campaign.evaluate.bootstrap import bootstrap_mean, paired_bootstrap, paired_distribution

ALTS = ["two-sided", "greater", "less"]


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize("n", [3, 8, 30])
def test_percentile_and_bca_equal_scipy_with_the_same_seed(alternative, n):
    x = np.random.default_rng(n).gamma(2.0, 1.0, n) - 1.5            # skewed: BCa differs from percentile
    ours = bootstrap_mean(x, n_resamples=4000, seed=11, alternative=alternative, confidence=0.9)
    for method, lo, hi in (("percentile", ours.percentile_low, ours.percentile_high),
                           ("BCa", ours.bca_low, ours.bca_high)):
        ref = stats.bootstrap((x,), np.mean, n_resamples=4000, rng=np.random.default_rng(11), method=method,
                              alternative=alternative, confidence_level=0.9).confidence_interval
        assert (-np.inf if lo is None else lo) == pytest.approx(ref.low, rel=1e-9, abs=1e-12)
        assert (np.inf if hi is None else hi) == pytest.approx(ref.high, rel=1e-9, abs=1e-12)
    assert ours.method == "bca" and (ours.low, ours.high) == (ours.bca_low, ours.bca_high)


def test_chunked_resampling_draws_the_same_stream(monkeypatch):
    x = np.random.default_rng(0).normal(size=50)
    whole = bs.resample_means(x, 1000, 3)
    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 50 * 7)                 # 7 resamples per chunk
    assert np.array_equal(bs.resample_means(x, 1000, 3), whole)


def test_bca_falls_back_to_percentile_when_undefined():
    same = bootstrap_mean([0.5, 0.5, 0.5], n_resamples=500)
    assert same.method == "percentile" and same.bca_low is None and (same.low, same.high) == (0.5, 0.5)
    assert "BCa undefined" in same.note
    one = bootstrap_mean([0.2], n_resamples=100)
    assert one.method == "percentile" and (one.low, one.high) == (0.2, 0.2) and "one value" in one.note


def crossed_variance(d: np.ndarray) -> float:
    """Var of the crossed bootstrap mean, derived by hand: with D = mu + a_s + b_e + r_se (row effects a,
    column effects b, residual r), multinomial seed counts and example counts are independent, and
    Var = var(a) / S + var(b) / E + mean(r**2) / (S E)  (population variances)."""
    s, e = d.shape
    a = d.mean(axis=1) - d.mean()
    b = d.mean(axis=0) - d.mean()
    r = d - d.mean(axis=1, keepdims=True) - d.mean(axis=0, keepdims=True) + d.mean()
    return float((a**2).mean() / s + (b**2).mean() / e + (r**2).mean() / (s * e))


def nested_variance(d: np.ndarray) -> float:
    """The same for a nested bootstrap (fresh examples for every drawn seed): the example term shrinks by S."""
    s, e = d.shape
    a = d.mean(axis=1) - d.mean()
    return float((a**2).mean() / s + ((d - d.mean(axis=1, keepdims=True))**2).mean() / (s * e))


def test_crossed_bootstrap_variance_pattern_path():
    # Per-example correctness mostly decided by the example (seeds flip 5% of outcomes): the test set, not
    # the seed, is the main source of noise, which a nested bootstrap would divide by the number of seeds.
    rng = np.random.default_rng(5)
    base_e = rng.random(20_000) < 0.70
    cand_e = np.where(rng.random(20_000) < 0.9, base_e, rng.random(20_000) < 0.8)
    flips = lambda: rng.random((3, 20_000)) < 0.05                      # noqa: E731
    d = (cand_e ^ flips()).astype(float) - (base_e ^ flips()).astype(float)
    dist, k, engine = paired_distribution(d, n_resamples=20_000, seed=1)
    assert k <= 27 and engine == "multinomial"                          # 3 values per seed
    expected = crossed_variance(d)
    assert abs(nested_variance(d) - expected) > 0.3 * expected         # the check tells the two designs apart
    assert dist.mean() == pytest.approx(d.mean(), abs=4 * dist.std() / np.sqrt(20_000))
    assert dist.var(ddof=1) == pytest.approx(expected, rel=0.05)       # 1.0% MC error: 5 sigma


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_crossed_bootstrap_variance_index_path(engine):
    if engine == "numba":
        pytest.importorskip("numba")
    rng = np.random.default_rng(6)
    d = rng.normal(0.1, 0.3, (4, 3000)) + rng.normal(0, 0.05, (4, 1)) + rng.normal(0, 1.0, (1, 3000))
    dist, k, used = paired_distribution(d, n_resamples=8000, seed=2, engine=engine)
    assert k == 3000 and used == engine                                # continuous: index path
    expected = crossed_variance(d)
    assert abs(nested_variance(d) - expected) > 0.3 * expected
    assert dist.var(ddof=1) == pytest.approx(expected, rel=0.08)       # 1.6% MC error: 5 sigma


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_single_seed_continuous_interval_agrees_with_scipy(engine):
    if engine == "numba":
        pytest.importorskip("numba")
    rng = np.random.default_rng(10)
    base = rng.beta(5, 2, 20_001)                                      # odd: the kernel's last lone draw
    cand = np.clip(base + 0.01 + rng.normal(0, 0.1, base.size), 0, 1)
    ours = paired_bootstrap(cand - base, n_resamples=4000, seed=0, engine=engine)
    ref = stats.bootstrap((base, cand), lambda a, b, axis=-1: np.mean(b, axis=axis) - np.mean(a, axis=axis),
                          paired=True, vectorized=True, n_resamples=4000, method="percentile", batch=100,
                          rng=np.random.default_rng(0)).confidence_interval
    se = np.std(cand - base) / np.sqrt(base.size)
    assert ours.engine == engine and ours.patterns == base.size
    assert ours.low == pytest.approx(ref.low, abs=0.25 * se)           # Monte Carlo error of an end: ~0.06 se
    assert ours.high == pytest.approx(ref.high, abs=0.25 * se)


def test_kernel_indices_are_uniform_over_examples():
    """Put 1 on one example and 0 elsewhere: n x (resample mean) counts how often that example was drawn, which
    must follow Binomial(n, 1/n) whatever the example's position (Lemire's mapping must not favour any)."""
    pytest.importorskip("numba")
    n, b = 1001, 20_000
    for position in (0, 500, n - 1):
        d = np.zeros(n)
        d[position] = 1.0
        dist, _, used = paired_distribution(d, n_resamples=b, seed=position, engine="numba")
        counts = np.rint(dist * n).astype(int)
        assert used == "numba" and np.allclose(dist * n, counts)
        observed = np.bincount(np.minimum(counts, 4), minlength=5)
        pmf = stats.binom.pmf(np.arange(4), n, 1 / n)
        expected = b * np.append(pmf, 1 - pmf.sum())
        assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_kernel_seed_counts_are_multinomial():
    """Two seeds, every example equal within a seed (0 and 1): a replicate's mean is the share of seed 1 among
    the two drawn seeds, so it takes 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4."""
    pytest.importorskip("numba")
    d = np.vstack([np.zeros(300), np.ones(300)]) + np.linspace(0, 1e-9, 300)   # distinct columns: index path
    dist, k, used = paired_distribution(d, n_resamples=8000, seed=3, engine="numba")
    assert k == 300 and used == "numba"
    observed = np.bincount(np.rint(dist * 2).astype(int), minlength=3)
    assert stats.chisquare(observed, 8000 * np.array([0.25, 0.5, 0.25])).pvalue > 1e-4


def test_kernel_result_does_not_depend_on_threads():
    numba = pytest.importorskip("numba")
    d = np.random.default_rng(4).normal(size=(2, 2000))
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one, _, _ = paired_distribution(d, n_resamples=1000, seed=8, engine="numba")
    finally:
        numba.set_num_threads(threads)
    many, _, _ = paired_distribution(d, n_resamples=1000, seed=8, engine="numba")
    assert np.array_equal(one, many)
    other, _, _ = paired_distribution(d, n_resamples=1000, seed=9, engine="numba")
    assert not np.array_equal(one, other)


def test_kernel_called_from_several_threads_under_the_workqueue_layer():
    """numba's workqueue threading layer (used where neither OpenMP nor TBB is available) aborts the process when
    two threads launch parallel kernels at once; calls are serialized, and every thread gets the sequential result."""
    pytest.importorskip("numba")
    import subprocess
    import sys

    code = """
import threading, numpy as np
from campaign.evaluate.bootstrap import paired_distribution
d = np.random.default_rng(0).normal(size=(2, 3000))
want = paired_distribution(d, n_resamples=300, seed=1, engine="numba")[0]
got = []
threads = [threading.Thread(target=lambda: got.append(paired_distribution(d, n_resamples=300, seed=1,
                                                                            engine="numba")[0])) for _ in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
import numba
assert numba.threading_layer() == "workqueue" and len(got) == 4 and all(np.array_equal(g, want) for g in got)
"""
    env = {**__import__("os").environ, "NUMBA_THREADING_LAYER": "workqueue"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_auto_engine_uses_the_kernel_only_for_large_work(monkeypatch):
    d = np.random.default_rng(2).normal(size=500)
    assert paired_distribution(d, n_resamples=100, engine="auto")[2] == "numpy"      # 5e4 elements
    monkeypatch.setattr(bs, "KERNEL_MIN_ELEMENTS", 1e4)
    expected = "numpy" if bs._load_kernels() is None else "numba"
    assert paired_distribution(d, n_resamples=100, engine="auto")[2] == expected
    monkeypatch.setattr(bs, "_load_kernels", lambda: None)
    assert paired_distribution(d, n_resamples=100, engine="auto")[2] == "numpy"
    with pytest.raises(InputError, match="numba"):
        paired_distribution(d, n_resamples=100, engine="numba")
    with pytest.raises(InputError, match="engine"):
        paired_distribution(d, n_resamples=100, engine="gpu")


def test_single_seed_interval_agrees_with_scipy_paired_bootstrap():
    rng = np.random.default_rng(9)
    base = (rng.random(5000) < 0.7).astype(float)
    cand = np.where(rng.random(5000) < 0.9, base, 1 - base)
    ours = paired_bootstrap(cand - base, n_resamples=5000, seed=0)
    ref = stats.bootstrap((base, cand), lambda a, b, axis=-1: np.mean(b, axis=axis) - np.mean(a, axis=axis),
                          paired=True, vectorized=True, n_resamples=5000, method="percentile",
                          rng=np.random.default_rng(0)).confidence_interval
    se = np.std(cand - base) / np.sqrt(5000)
    assert ours.low == pytest.approx(ref.low, abs=0.25 * se)           # Monte Carlo error of an end: ~0.05 se
    assert ours.high == pytest.approx(ref.high, abs=0.25 * se)
    assert ours.patterns == 3 and ours.mean_diff == pytest.approx(np.mean(cand - base))


def test_thread_count_does_not_change_the_result(monkeypatch):
    d = np.random.default_rng(4).normal(size=(2, 2000))
    monkeypatch.setattr(bs, "CHUNK_ELEMENTS", 2000 * 2 * 50)           # 20 chunks of 50 resamples
    monkeypatch.setattr(bs, "_cpus", lambda: 1)
    one, _, _ = paired_distribution(d, n_resamples=1000, seed=8, engine="numpy")
    monkeypatch.setattr(bs, "_cpus", lambda: 4)
    four, _, _ = paired_distribution(d, n_resamples=1000, seed=8, engine="numpy")
    assert np.array_equal(one, four)
    other, _, _ = paired_distribution(d, n_resamples=1000, seed=9, engine="numpy")
    assert not np.array_equal(one, other)


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_one_sided_example_interval_is_open_on_one_side(alternative):
    d = np.random.default_rng(1).normal(0.05, 1, 3000)
    two = paired_bootstrap(d, n_resamples=3000, seed=0)
    one = paired_bootstrap(d, n_resamples=3000, seed=0, alternative=alternative)
    if alternative == "greater":
        assert one.high is None and two.low < one.low < d.mean()
    else:
        assert one.low is None and d.mean() < one.high < two.high


def test_bad_arguments():
    with pytest.raises(InputError, match="confidence"):
        bootstrap_mean([1, 2], confidence=95)
    with pytest.raises(InputError, match="alternative"):
        paired_bootstrap([1, 2], alternative="bigger")
    with pytest.raises(InputError, match="resamples"):
        bootstrap_mean([1, 2], n_resamples=0)
