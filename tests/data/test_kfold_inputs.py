"""LeakFreeKFold's arguments as a notebook gives them: more folds than rows refused at once (nothing sized by k built
first), one string where texts are expected, a seed or a dedup of the wrong kind and a generator for X each refused
with one line naming the parameter, the value and what is accepted; lists, tuples, arrays, Series and numpy integers
taken as they are."""
from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from campaign.data.kfold import LeakFreeKFold
from campaign.data.sketch import DedupConfig
from campaign.errors import InputError

from .conftest import sentence


def texts(n: int = 12, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, 30, 40) for _ in range(n)]


def folds(cv: LeakFreeKFold, X, **kw) -> list[list[int]]:
    return [test.tolist() for _, test in cv.split(X, **kw)]


def test_more_folds_than_rows_are_refused_before_anything_sized_by_k_is_built():
    tracemalloc.start()
    try:
        cv = LeakFreeKFold(10**7)
        built = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert built < 2**20          # no list of 10**7 fold ratios (80 MB) made before the data is seen
    with pytest.raises(InputError, match=r"n_splits 10000000 is more than the 12 rows; use at most 12 folds"):
        list(cv.split(texts()))
    assert cv.dedup_ is None      # refused before the duplicate search


def test_more_folds_than_units_are_refused():
    rows = texts(6)
    twice = [t for t in rows for _ in range(2)]     # 12 rows, each text twice: 6 units of 2 rows
    with pytest.raises(InputError, match=r"12 rows form 6 unit\(s\).*fewer than 7 folds"):
        list(LeakFreeKFold(7).split(twice))
    got = folds(LeakFreeKFold(6), twice)            # the clean case: as many folds as units, a unit in each
    assert sorted(sorted(twice[i] for i in f) for f in got) == sorted([t, t] for t in rows)


def test_as_many_folds_as_rows_tests_each_row_alone():
    got = folds(LeakFreeKFold(np.int64(5)), texts(5))
    assert sorted(got) == [[0], [1], [2], [3], [4]]


def test_one_string_where_texts_are_expected_is_refused():
    with pytest.raises(InputError, match=r"texts is one string \('abcdef'\).*pass a list with one text per row"):
        LeakFreeKFold(2, texts="abcdef")
    with pytest.raises(InputError, match=r"X is one string \('abcdef'\).*pass a list with one text per row"):
        list(LeakFreeKFold(2).split("abcdef"))


@pytest.mark.parametrize("seed", ["a", 1.5, True, None])
def test_a_seed_that_is_no_integer_is_refused(seed):
    with pytest.raises(InputError, match=rf"seed {seed!r} must be an integer"):
        LeakFreeKFold(3, seed=seed)


def test_a_numpy_integer_seed_is_the_same_seed():
    data = texts(30)
    assert folds(LeakFreeKFold(3, seed=np.int64(4)), data) == folds(LeakFreeKFold(3, seed=4), data)


@pytest.mark.parametrize("dedup", ["char", {"shingle": "word"}])
def test_a_dedup_that_is_no_dedup_config_is_refused(dedup):
    with pytest.raises(InputError, match=rf"dedup {dedup!r} is not a DedupConfig; pass e.g. dedup=DedupConfig"):
        LeakFreeKFold(3, dedup=dedup)


def test_a_dedup_config_is_taken():
    got = folds(LeakFreeKFold(3, dedup=DedupConfig(shingle="word", ngram=3)), texts(12))
    assert sorted(i for f in got for i in f) == list(range(12))


def test_a_generator_for_x_is_refused_as_scikit_learn_refuses_it():
    from sklearn.model_selection import KFold

    data = texts(9)
    with pytest.raises(TypeError):                       # scikit-learn: "Expected sequence or array-like"
        list(KFold(3).split(t for t in data))
    with pytest.raises(InputError, match=r"X is a generator, not a sequence with a length; pass a list or an array"):
        list(LeakFreeKFold(3).split(t for t in data))
    with pytest.raises(InputError, match=r"texts is a generator"):
        LeakFreeKFold(3, texts=(t for t in data))
    with pytest.raises(InputError, match=r"groups is a generator"):
        list(LeakFreeKFold(3).split(data, groups=(f"u{i}" for i in range(9))))


def test_lists_tuples_arrays_and_series_give_the_same_folds():
    import pandas as pd

    data = texts(20)
    y = [i % 2 for i in range(20)]
    want = folds(LeakFreeKFold(4, seed=1), data, y=y)
    assert sorted(i for f in want for i in f) == list(range(20)) and len(want) == 4
    for X, labels in ((tuple(data), tuple(y)), (np.array(data, dtype=object), np.array(y)),
                      (pd.Series(data), pd.Series(y))):
        assert folds(LeakFreeKFold(4, seed=1), X, y=labels) == want
