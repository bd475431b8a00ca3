"""The compiled sketching and grouping kernels (numba) give the same bits as the numpy functions, which stay the
reference (and the path without the `fast` extra)."""
from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("numba")

import importlib  # noqa: E402

from campaign.data import dedup  # noqa: E402
from campaign.data.normalize import normalize_text  # noqa: E402
from campaign.data.sketch import DedupConfig, Sketches, sketch_chunk  # noqa: E402

# letters, accents (composed and combining), CJK, an emoji (outside the BMP), spaces, tabs, newlines
ALPHABET = ["a", "b", "c", "d", "é", "e\u0301", "\u4e2d", "\U0001F600", " ", " ", "  ", "\t", "\n", "K", "İ"]


def _texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 90))) for _ in range(count)]
    return out + ["", "a", "ab", "a b", "a b c d e f"]   # empty, shorter than n, exactly n, longer


@pytest.mark.parametrize("config", [
    DedupConfig(),                                               # char 5-grams, 128 slots (a power of two)
    DedupConfig(shingle="word", ngram=3, bands=32, rows=4),
    DedupConfig(shingle="char", ngram=1, num_perm=7, seed=5),    # 7 slots: the division path, few bins
    DedupConfig(shingle="word", ngram=2, num_perm=256, seed=3),
    DedupConfig(shingle="char", ngram=40, num_perm=96, seed=11), # most texts shorter than n: one shingle each
], ids=["char5", "word3", "char1-k7", "word2-k256", "char40-k96"])
def test_compiled_sketch_equals_numpy_bit_for_bit(config):
    norm = [normalize_text(t) for t in _texts(config.seed + config.ngram, 2000)]
    keys_np, sig_np, counts_np = sketch_chunk(norm, config, compiled=False)
    keys_nb, sig_nb, counts_nb = sketch_chunk(norm, config, compiled=True)
    np.testing.assert_array_equal(counts_nb, counts_np)
    np.testing.assert_array_equal(sig_nb, sig_np)
    np.testing.assert_array_equal(keys_nb, keys_np)
    # and the counts are what the definition gives: word n-grams of the space-separated words
    if config.shingle == "word":
        words = [len(t.split()) for t in norm]
        assert counts_np.tolist() == [max(w - config.ngram + 1, 1) if w else 0 for w in words]


def test_densification_fills_every_bin_of_a_short_text():
    # 3 shingles in 128 bins: at most 3 distinct values, every bin filled with one of them, identical both ways
    config = DedupConfig(shingle="word", ngram=1)
    _, sig, counts = sketch_chunk(["alpha beta gamma"], config, compiled=True)
    assert counts.tolist() == [3]
    assert len(set(sig[0].tolist())) <= 3 and (sig[0] != np.uint64(2**64 - 1)).all()


def _stable_groups(keys: np.ndarray) -> list[list[int]]:
    order = np.argsort(keys, kind="stable")
    groups: dict[int, list[int]] = {}
    for i in order.tolist():
        groups.setdefault(int(keys[i]), []).append(i)
    return sorted(groups.values())


def test_band_groups_group_equal_keys_ascending_like_a_stable_sort():
    from campaign.data.kernels import band_groups

    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, size=(3, 1000)).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    order, gid = band_groups(keys)
    for b in range(3):
        runs: dict[int, list[int]] = {}
        for pos, g in zip(order[b].tolist(), gid[b].tolist(), strict=True):
            runs.setdefault(g, []).append(pos)
        assert sorted(runs.values()) == _stable_groups(keys[b])
        assert (np.diff(gid[b]) >= 0).all()                       # each group's items are contiguous


def test_band_lookup_matches_searchsorted():
    from campaign.data.kernels import band_lookup

    rng = np.random.default_rng(1)
    index = rng.integers(0, 300, size=(4, 2000)).astype(np.uint64) << np.uint64(40)
    query = rng.integers(0, 400, size=(4, 500)).astype(np.uint64) << np.uint64(40)  # a quarter match nothing
    order, lo, hi = band_lookup(index, query)
    for b in range(4):
        ref = np.argsort(index[b], kind="stable")
        sorted_keys = index[b, ref]
        want_lo = np.searchsorted(sorted_keys, query[b], side="left")
        want_hi = np.searchsorted(sorted_keys, query[b], side="right")
        np.testing.assert_array_equal(hi[b] - lo[b], want_hi - want_lo)
        for q in range(500):
            assert order[b, lo[b, q]:hi[b, q]].tolist() == ref[want_lo[q]:want_hi[q]].tolist()


@pytest.mark.parametrize("max_bucket", [256, 3])
def test_candidates_compiled_equal_numpy(monkeypatch, max_bucket):
    # near copies and a crowded bucket (many copies of one text): the same pairs and capped counts both ways
    rng = random.Random(7)
    words = [f"w{i}" for i in range(300)]
    base = [" ".join(rng.choices(words, k=30)) for _ in range(400)]
    texts = base + [t.replace("w1 ", "w2 ", 1) for t in base[:100]] + [base[0]] * 8
    config = DedupConfig(shingle="word", ngram=2, max_bucket=max_bucket)
    index = Sketches(config).add(texts[:300])
    query = Sketches(config).add(texts[300:])
    both = Sketches(config).add(texts)
    compiled = (dedup.candidate_pairs(both), dedup.cross_candidate_pairs(index, query))
    monkeypatch.setattr(importlib.import_module("campaign.data.sketch"), "_KERNEL", False)  # the numpy path
    reference = (dedup.candidate_pairs(both), dedup.cross_candidate_pairs(index, query))
    for (a, b, c), (ra, rb, rc) in zip(compiled, reference, strict=True):
        assert c == rc
        np.testing.assert_array_equal(a, ra)
        np.testing.assert_array_equal(b, rb)
    assert len(reference[0][0]) and len(reference[1][0])
    if max_bucket == 3:
        assert reference[0][2] > 0


def test_threads_follow_the_cpu_share_a_scheduler_gives(monkeypatch):
    import os

    from campaign.data import kernels

    cpus = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")          # what Ray sets for a task of one CPU
    assert kernels._workers() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(cpus + 5))  # never more than the process may use
    assert kernels._workers() == cpus
    for junk in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", junk)
        assert kernels._workers() == cpus
    # and the result does not depend on the thread count
    config = DedupConfig(shingle="word", ngram=2)
    texts = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(20)) for i in range(3000)]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = sketch_chunk(texts, config, compiled=True)
    monkeypatch.delenv("OMP_NUM_THREADS")
    for a, b in zip(one, sketch_chunk(texts, config, compiled=True), strict=True):
        np.testing.assert_array_equal(a, b)
