"""LeakFreeKFold as scikit-learn's `cv=`: k folds, each row tested once, no group and no near-duplicate cluster
across folds (checked from the data by brute-force Jaccard, not from the splitter), label shares kept."""
from __future__ import annotations

import random
from itertools import combinations

import numpy as np
import pytest

from campaign.data.kfold import LeakFreeKFold
from campaign.errors import InputError

POS = ["excellent", "great", "superb", "lovely", "fine", "brilliant"]
NEG = ["awful", "poor", "dreadful", "bad", "terrible", "dismal"]
FILLER = ["the", "film", "plot", "actor", "scene", "music", "story", "ending", "camera", "script", "cast", "score"]


def corpus(seed=0):
    """Reviews: 90 distinct ones, 10 of which get 2 near copies (one word changed); users who wrote several
    reviews (groups). Returns texts, labels, groups, and the planted near-duplicate cluster of each row."""
    rng = random.Random(seed)
    texts, labels, groups, cluster = [], [], [], []
    for i in range(90):
        label = i % 3 != 0                     # 2 positive : 1 negative
        words = [rng.choice(FILLER) for _ in range(60)]
        for _ in range(3):
            words[rng.randrange(60)] = rng.choice(POS if label else NEG)
        copies = 3 if i < 10 else 1
        for c in range(copies):
            w = list(words)
            if c:
                w[rng.randrange(60)] = f"word{c}"  # one word of 60 changed: char 5-gram Jaccard well above 0.8
            texts.append(f"review {i}: " + " ".join(w))
            labels.append(int(label))
            groups.append(f"user{rng.randrange(40)}" if i % 2 else None)   # half the reviews carry a user
            cluster.append(i)
    return texts, np.array(labels), groups, np.array(cluster)


def shingles(text, n=5):
    t = " ".join(text.lower().split())
    return {t[i:i + n] for i in range(len(t) - n + 1)}


def jaccard(a, b):
    return len(a & b) / len(a | b)


def test_folds_keep_groups_and_near_duplicates_whole(tmp_path):
    texts, y, groups, cluster = corpus()
    n = len(texts)
    cv = LeakFreeKFold(5, seed=3)
    assert cv.get_n_splits() == 5
    splits = list(cv.split(texts, y, groups))
    assert len(splits) == 5
    fold = np.full(n, -1)
    for f, (train, test) in enumerate(splits):
        assert sorted(np.concatenate([train, test]).tolist()) == list(range(n)) and not set(train) & set(test)
        assert (fold[test] == -1).all()        # every row in exactly one test fold
        fold[test] = f
    assert (fold >= 0).all()
    # independently: every pair at char 5-gram Jaccard >= 0.8 (brute force over all pairs), and the planted copies
    sh = [shingles(t) for t in texts]
    near = [(i, j) for i, j in combinations(range(n), 2) if jaccard(sh[i], sh[j]) >= 0.8]
    planted = [(i, j) for i, j in combinations(range(n), 2) if cluster[i] == cluster[j]]
    assert set(planted) <= set(near) and len(planted) == 30
    assert all(fold[i] == fold[j] for i, j in near)
    by_group: dict[str, set[int]] = {}
    for g, f in zip(groups, fold, strict=True):
        if g is not None:
            by_group.setdefault(g, set()).add(int(f))
    assert all(len(fs) == 1 for fs in by_group.values())
    # stratified: each fold's positive share within 0.1 of the whole's (2/3)
    for f in range(5):
        assert abs(y[fold == f].mean() - y.mean()) < 0.1
    # the data can leak: scikit-learn's plain KFold puts some near copy or some user in two folds
    from sklearn.model_selection import KFold

    plain = np.empty(n, dtype=int)
    for f, (_, test) in enumerate(KFold(5, shuffle=True, random_state=0).split(texts)):
        plain[test] = f
    assert any(plain[i] != plain[j] for i, j in near)


def test_scikit_learn_takes_it_as_cv():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_validate
    from sklearn.pipeline import make_pipeline

    texts, y, groups, _ = corpus(1)
    cv = LeakFreeKFold(4, seed=0)
    model = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=200))
    out = cross_validate(model, texts, y, groups=groups, cv=cv)
    assert len(out["test_score"]) == 4 and np.isfinite(out["test_score"]).all()
    grid = GridSearchCV(model, {"logisticregression__C": [0.1, 10.0]}, cv=cv).fit(texts, y, groups=groups)
    assert grid.n_splits_ == 4 and np.isfinite(grid.best_score_)
    # a feature matrix as X: the texts given apart
    X = TfidfVectorizer().fit_transform(texts)
    out = cross_validate(LogisticRegression(max_iter=200), X, y, groups=groups, cv=LeakFreeKFold(3, texts=texts))
    assert len(out["test_score"]) == 3


def test_bad_input_is_one_line():
    with pytest.raises(InputError, match="at least 2"):
        LeakFreeKFold(1)
    with pytest.raises(InputError, match="texts="):
        list(LeakFreeKFold(2).split(np.zeros((4, 2))))
    same = ["one and the same review text"] * 6    # one exact-duplicate cluster: one unit
    with pytest.raises(InputError, match="1 unit"):
        list(LeakFreeKFold(3).split(same))
