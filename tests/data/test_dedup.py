"""Exact and near duplicates: MinHash estimates against exact Jaccard (and datasketch), LSH recall, confirmed
pairs against a brute-force comparison of all pairs, union-find against a second method, determinism."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from campaign.data.dedup import candidate_pairs, connected_components, exact_jaccard, find_duplicates
from campaign.data.normalize import normalize_text
from campaign.data.sketch import DedupConfig, Sketches, candidate_probability, choose_banding, signatures, sketch
from campaign.errors import InputError

from .conftest import brute_force_pairs, components, edit, jaccard, sentence, shingles


def pairs_with_spread_of_similarity(rng, n=150):
    """Pairs (a, b) where b is a with 0..half of its words replaced: Jaccard from 1 down to ~0.1."""
    out = []
    for _ in range(n):
        a = sentence(rng, 20, 80)
        out.append((a, edit(rng, a, rng.randint(0, len(a.split()) // 2))))
    return out


def test_choose_banding_by_hand():
    # 0.8**6 = 0.262144; 1 - (1 - 0.262144)**21 = 0.9983 >= 0.99, while 7 rows give 1 - (1 - 0.8**7)**18 = 0.9857
    assert choose_banding(0.8, 128) == (21, 6)
    assert candidate_probability(0.8, 21, 6) == pytest.approx(1 - (1 - 0.262144) ** 21)
    assert DedupConfig().banding() == (21, 6)
    assert DedupConfig(bands=16, rows=8).banding() == (16, 8)


def test_minhash_estimates_match_exact_jaccard(rng):
    pairs = pairs_with_spread_of_similarity(rng)
    sig = signatures([t for p in pairs for t in p])
    exact = np.array([jaccard(shingles(a), shingles(b)) for a, b in pairs])
    est = (sig[0::2] == sig[1::2]).mean(axis=1)
    err = est - exact
    assert abs(err.mean()) < 0.01  # unbiased
    # each estimate within 5 standard deviations of a 128-sample binomial (plus one slot)
    sd = np.sqrt(exact * (1 - exact) / 128)
    assert np.all(np.abs(err) <= 5 * sd + 1 / 128)
    assert exact.min() < 0.3 and exact.max() == 1.0  # the test covers the whole range


def test_minhash_error_is_no_worse_than_datasketch(rng):
    datasketch = pytest.importorskip("datasketch")
    pairs = pairs_with_spread_of_similarity(rng, 120)
    exact = np.array([jaccard(shingles(a), shingles(b)) for a, b in pairs])
    sig = signatures([t for p in pairs for t in p])
    ours = (sig[0::2] == sig[1::2]).mean(axis=1)
    theirs = []
    for a, b in pairs:
        ma, mb = datasketch.MinHash(num_perm=128), datasketch.MinHash(num_perm=128)
        ma.update_batch([s.encode() for s in shingles(a)])
        mb.update_batch([s.encode() for s in shingles(b)])
        theirs.append(ma.jaccard(mb))
    rmse = lambda e: float(np.sqrt(np.mean((e - exact) ** 2)))  # noqa: E731
    assert rmse(ours) <= 1.3 * rmse(np.array(theirs)) + 0.005


def test_exact_jaccard_equals_set_jaccard(rng):
    pairs = pairs_with_spread_of_similarity(rng, 60) + [("a b", "a b c"), ("tiny", "tin"), ("x" * 3, "x" * 4)]
    texts = [normalize_text(t) for p in pairs for t in p]
    idx = np.arange(0, len(texts), 2)
    got = exact_jaccard(texts, texts, idx, idx + 1, DedupConfig())
    want = [jaccard(shingles(a), shingles(b)) for a, b in pairs]
    assert got.tolist() == pytest.approx(want, abs=1e-12)
    got_w = exact_jaccard(texts, texts, idx, idx + 1, DedupConfig(shingle="word", ngram=2))
    want_w = [jaccard(shingles(a, 2, "word"), shingles(b, 2, "word")) for a, b in pairs]
    assert got_w.tolist() == pytest.approx(want_w, abs=1e-12)


def test_lsh_finds_every_pair_well_above_the_threshold(rng):
    pairs = pairs_with_spread_of_similarity(rng, 200)
    texts = [t for p in pairs for t in p]
    sk = sketch(texts)
    a, b, _ = candidate_pairs(sk)
    cand = set(zip(a.tolist(), b.tolist(), strict=True))
    exact = [jaccard(shingles(x), shingles(y)) for x, y in pairs]
    high = [(2 * i, 2 * i + 1) for i, j in enumerate(exact) if j >= 0.85]
    low = [(2 * i, 2 * i + 1) for i, j in enumerate(exact) if j < 0.3]
    assert len(high) >= 20 and len(low) >= 20
    # P(miss | J >= 0.85) = (1 - 0.85**6)**21 < 1e-5 per pair
    assert all(p in cand for p in high)
    # P(candidate | J < 0.3) <= 1 - (1 - 0.3**6)**21 = 0.015 per pair
    assert sum(p in cand for p in low) <= max(2, 0.1 * len(low))


def planted_corpus(rng, n_base=240):
    """Unrelated texts, near copies (1-3 edited words, sometimes a chain), and exact copies up to case and spaces."""
    texts = [sentence(rng) for _ in range(n_base)]
    for i in rng.sample(range(n_base), 25):
        texts.append(edit(rng, texts[i], rng.randint(1, 3)))
    texts.append(edit(rng, texts[-1], 1))  # a chain: copy of a copy
    for i in rng.sample(range(n_base), 6):
        texts.append("  " + texts[i].upper().replace(" ", "   ") + " ")
    texts += ["", "   "]  # empty texts are never duplicates of each other
    rng.shuffle(texts)
    return texts


def test_find_duplicates_matches_brute_force_exactly(rng):
    texts = planted_corpus(rng)
    truth = brute_force_pairs(texts)  # all pairs, exact Jaccard of character 5-gram sets
    norm = [normalize_text(t) for t in texts]
    exact_truth = {(i, j) for i, j in truth if norm[i] == norm[j]}
    assert len(truth) >= 25 and len(exact_truth) >= 6
    res = find_duplicates(texts)
    assert res.exact_duplicates == len(exact_truth)
    # near pairs are reported between exact-group representatives; every one is a true pair
    got = {(p.a, p.b) for p in res.near_pairs}
    assert got <= truth
    assert all(p.jaccard >= 0.8 for p in res.near_pairs)
    # the clusters are exactly the connected components of the brute-force pairs
    want = sorted(sorted(c) for c in components(len(texts), truth) if len(c) > 1)
    assert sorted(res.clusters) == want
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    assert all(res.cluster_of[i] == i for i in empty) and res.n_empty == 2


def test_word_shingles_match_brute_force(rng):
    texts = planted_corpus(rng, 150)
    cfg = DedupConfig(shingle="word", ngram=2, threshold=0.7)
    truth = brute_force_pairs(texts, 0.7, n=2, kind="word")
    res = find_duplicates(texts, cfg)
    want = sorted(sorted(c) for c in components(len(texts), truth) if len(c) > 1)
    assert sorted(res.clusters) == want and len(want) >= 20


def test_deterministic_for_a_seed_and_streaming_in_chunks(rng):
    texts = planted_corpus(rng, 120)
    one = sketch(texts, DedupConfig(seed=3))
    chunked = Sketches(DedupConfig(seed=3)).add(iter(texts), chunk_size=7)
    assert np.array_equal(one.band_keys, chunked.band_keys)
    other = sketch(texts, DedupConfig(seed=4))
    assert not np.array_equal(one.band_keys, other.band_keys)
    # different hash functions, same confirmed clusters
    assert find_duplicates(one).clusters == find_duplicates(other).clusters


def test_same_results_in_other_processes():
    code = ("from campaign.data.sketch import signatures; import hashlib; "
            "sig = signatures(['Near duplicate text here', 'near  duplicate text there']); "
            "print(hashlib.sha256(sig.tobytes()).hexdigest())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": s}).stdout for s in ("0", "1")}
    assert len(outs) == 1


def test_union_find_matches_scipy_connected_components():
    sparse = pytest.importorskip("scipy.sparse")
    csgraph = pytest.importorskip("scipy.sparse.csgraph")
    r = np.random.default_rng(0)
    for n, m in ((1, 0), (50, 10), (2000, 1500), (2000, 4000)):
        a, b = r.integers(0, n, m), r.integers(0, n, m)
        ours = connected_components(n, a, b)
        _, theirs = csgraph.connected_components(sparse.coo_matrix((np.ones(m), (a, b)), shape=(n, n)), directed=False)
        # same partition, and each label is the smallest member
        assert (len(set(zip(ours.tolist(), theirs.tolist(), strict=True)))
                == len(set(theirs.tolist())) == len(set(ours.tolist())))
        assert all(ours[i] <= i for i in range(n)) and all(ours[ours[i]] == ours[i] for i in range(n))
    # a long path (worst case for pointer jumping)
    path = connected_components(1000, np.arange(999), np.arange(1, 1000))
    assert set(path.tolist()) == {0}


def test_bad_settings_are_input_errors():
    with pytest.raises(InputError, match="threshold 1.5"):
        DedupConfig(threshold=1.5)
    with pytest.raises(InputError, match="shingle 'token'"):
        DedupConfig(shingle="token")
    with pytest.raises(InputError, match="exceeds num_perm"):
        DedupConfig(bands=20, rows=8)


def test_result_serializes(rng):
    res = find_duplicates(["same text here", "Same  text here", "other words entirely"])
    d = res.to_dict()
    assert d["schema"] == "campaign.dedup/1" and d["exact_duplicates"] == 1 and d["clusters"] == [[0, 1]]
    assert math.isclose(d["config"]["candidate_probability_at_threshold"], 1 - (1 - 0.8**6) ** 21, rel_tol=1e-5)


def test_prefilter_keeps_every_true_pair_and_drops_hopeless_ones(rng):
    from campaign.data.dedup import prefilter

    pairs = pairs_with_spread_of_similarity(rng, 300)
    sk = sketch([t for p in pairs for t in p])
    a = np.arange(0, 2 * len(pairs), 2)
    keep = prefilter(sk, sk, a, a + 1)
    exact = np.array([jaccard(shingles(x), shingles(y)) for x, y in pairs])
    long_enough = np.array([min(len(shingles(x)), len(shingles(y))) >= 128 for x, y in pairs])
    assert keep[exact >= 0.8].all()
    # the cut is 0.8 - 6 x sqrt(0.16 / (0.63 x 128)) - 1/128 = 0.525; pairs far below it are dropped when long enough
    far = (exact < 0.35) & long_enough
    assert far.sum() >= 30 and not keep[far].any()
    assert keep[~long_enough].all()  # short texts always go to the exact check


def test_short_texts_are_compared_exactly(rng):
    texts = ["the cat sat", "the cat sat!", "a dog ran", "the cat sa", "x"]
    truth = brute_force_pairs(texts)
    res = find_duplicates(texts)
    assert sorted(res.clusters) == sorted(sorted(c) for c in components(len(texts), truth) if len(c) > 1)


def test_core_package_imports_without_the_data_extra():
    code = ("import sys; "
            "[sys.modules.__setitem__(m, None) for m in ('numpy', 'pyarrow', 'sklearn', 'datasketch', 'scipy')]; "
            "import campaign, campaign.data, campaign.cli.data; from campaign.data import normalize_text; "
            "print(normalize_text('OK  fine'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok fine"


def test_progress_bar_when_asked(rng, capsys):
    texts = [sentence(rng) for _ in range(50)]
    assert find_duplicates(texts, progress=True).n_docs == 50
    assert find_duplicates(texts, progress=False).n_docs == 50
