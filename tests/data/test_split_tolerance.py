"""A grouped, stratified split meets its 1-point tolerance whenever the units allow it (cross-checked against
scikit-learn's StratifiedGroupKFold on the same units), and says which units block it when they do not."""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from sklearn.model_selection import StratifiedGroupKFold

from campaign.data.read import Fields
from campaign.data.split import split_file
from campaign.data.splitter import assign_units

from .conftest import read_jsonl, sentence, write_jsonl

RATIOS = (0.8, 0.1, 0.1)
TOL = 0.01


def movie_corpus(seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """The issue's shape: 547 single-row movies all labelled 'neg', then 300 movies of 5..30 rows, each with its
    own label mix (Dirichlet(0.5, 1, 1): 'neg' rarer there): 5,710 rows, 847 groups, 3 labels. The largest-first
    greedy alone leaves a label 3.2 to 3.8 points off here (seeds 0-3): its last units, the single 'neg' rows, cannot
    balance 'neu' and 'pos'; StratifiedGroupKFold comes within 0.11 points."""
    rng = np.random.default_rng(seed)
    movie = [f"m{g}" for g in range(547)]
    labels = ["neg"] * 547
    for g in range(547, 847):
        size = int(rng.integers(5, 31))
        mix = rng.dirichlet([0.5, 1.0, 1.0])
        movie += [f"m{g}"] * size
        labels += [str(x) for x in rng.choice(["neg", "neu", "pos"], size=size, p=mix)]
    return np.asarray(movie, dtype=object), labels


def gaps(split_of: np.ndarray, labels: list[str]) -> tuple[float, float]:
    """Largest |share of rows - ratio| over splits, and largest |share of a label's rows - ratio| over labels and
    splits, counted directly."""
    lab = np.asarray(labels)
    row = max(abs(np.mean(split_of == s) - r) for s, r in enumerate(RATIOS))
    label = max(abs(np.mean(split_of[lab == x] == s) - r) for x in set(labels) for s, r in enumerate(RATIOS))
    return float(row), float(label)


def sklearn_split(movie: np.ndarray, labels: list[str]) -> np.ndarray:
    """StratifiedGroupKFold with 10 folds: 8 folds train, 1 val, 1 test (80/10/10)."""
    fold = np.empty(len(movie), dtype=int)
    cv = StratifiedGroupKFold(10, shuffle=True, random_state=0)
    for i, (_, te) in enumerate(cv.split(np.zeros(len(movie)), labels, movie)):
        fold[te] = i
    return np.where(fold < 8, 0, np.where(fold == 8, 1, 2))


def test_the_units_allow_it_sklearn_shows_it_and_every_seed_meets_the_tolerance():
    movie, labels = movie_corpus()
    assert len(movie) == 5710 and len(set(movie)) == 847 and len(set(labels)) == 3
    row, label = gaps(sklearn_split(movie, labels), labels)
    assert row <= TOL and label <= TOL                       # achievable on these units
    for seed in range(4):
        split_of = assign_units(movie, RATIOS, labels=labels, seed=seed)
        where = defaultdict(set)
        for m, s in zip(movie.tolist(), split_of.tolist(), strict=True):
            where[m].add(s)
        assert all(len(v) == 1 for v in where.values())                   # no movie crosses splits
        row, label = gaps(split_of, labels)
        assert row <= TOL and label <= TOL, (seed, row, label)
        assert np.array_equal(split_of, assign_units(movie, RATIOS, labels=labels, seed=seed))   # per seed


def test_the_split_files_of_the_movie_corpus_meet_the_tolerance(tmp_path):
    movie, labels = movie_corpus()
    rng = random.Random(3)
    rows = [{"id": i, "text": sentence(rng), "movie": m, "label": y}
            for i, (m, y) in enumerate(zip(movie, labels, strict=True))]
    rng.shuffle(rows)
    res = split_file(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "o",
                     Fields(label="label", group=("movie",), id="id"), ratios="80/10/10", seed=0)
    assert {c.id: c.status for c in res.checks}["split.ratio"] == "pass"
    assert {c.id: c.status for c in res.checks}["split.label_ratio"] == "pass" and res.passed
    # counted from the written files
    split_of = np.empty(len(rows), dtype=int)
    where = defaultdict(set)
    for s, part in enumerate(res.parts):
        for r in read_jsonl(Path(part.path)):
            split_of[r["id"]] = s
            where[r["movie"]].add(s)
    assert all(len(v) == 1 for v in where.values()) and len(where) == 847      # no movie crosses splits
    row, label = gaps(split_of, labels)
    assert row <= TOL and label <= TOL


def test_one_giant_group_cannot_meet_the_ratios_and_the_check_names_it(tmp_path):
    rng = random.Random(2)
    rows = [{"text": sentence(rng), "user": "big" if i < 80 else f"u{i}"} for i in range(100)]
    res = split_file(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "o", Fields(group=("user",)),
                     ratios="30/70")
    ratio = next(c for c in res.checks if c.id == "split.ratio")
    # 80 rows move together: 20/80 is the nearest to 30/70, 10 points off
    assert [p.rows for p in res.parts] == [20, 80] and ratio.status == "fail"
    assert "80 rows (user='big')" in ratio.why and "of the 100 rows" in ratio.why
    assert "--group" in ratio.fix and "--tolerance" in ratio.fix


def test_a_label_held_by_one_giant_group_fails_the_label_check_with_why_and_fix(tmp_path):
    """Label 'rare' has 300 rows, 250 of them in one user: no split can hold 10% of them (the user goes whole
    to one split), so the label check fails and names that user and --no-stratify."""
    rng = random.Random(4)
    rows = [{"text": sentence(rng), "user": "whale", "label": "rare"} for _ in range(250)]
    rows += [{"text": sentence(rng), "user": f"u{i}", "label": "rare" if i < 50 else rng.choice("ab")}
             for i in range(2750)]
    res = split_file(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "o",
                     Fields(label="label", group=("user",)), ratios="80/10/10")
    check = next(c for c in res.checks if c.id == "split.label_ratio")
    assert check.status == "fail" and "label 'rare'" in check.seen
    assert "250 rows (user='whale')" in check.why and "rows of label 'rare'" in check.why
    assert "--no-stratify" in check.fix


@pytest.mark.parametrize("seed", [0, 1])
def test_unstratified_rows_meet_the_ratios_around_a_large_unit(seed):
    """Rows only: a 500-row unit and 1,500 single rows split 80/10/10 exactly (500 + 1,100 train, 200, 200)."""
    units = np.concatenate([np.zeros(500, dtype=int), np.arange(1, 1501)])
    split_of = assign_units(units, RATIOS, seed=seed)
    assert np.bincount(split_of).tolist() == [1600, 200, 200]
    assert len(set(split_of[:500])) == 1
