"""Leaks between splits: a partial leak (some shared groups, a few exact and near copies, label conflicts) is
found exactly, counted against a brute-force comparison; a clean pair reports zero; thresholds and skips."""
from __future__ import annotations

import hashlib
import json
import random

import pytest

from campaign.data.leaks import check_files, find_leaks
from campaign.data.normalize import normalize_text
from campaign.data.read import Fields, make_dataset
from campaign.errors import InputError

from .conftest import edit, jaccard, sentence, shingles, write_jsonl


def leaky_splits(seed=21):
    rng = random.Random(seed)
    train = [{"text": sentence(rng, 40, 60), "label": rng.choice("ab"), "user": f"u{i // 2}"} for i in range(200)]
    test = [{"text": sentence(rng, 40, 60), "label": rng.choice("ab"), "user": f"e{i}"} for i in range(100)]
    for row, user in zip(test[:7], ["u1", "u1", "u2", "u3", "u3", "u4", "u4"], strict=True):
        row["user"] = user  # 4 shared users, 7 test rows
    for k, (t, src) in enumerate(zip((10, 11, 12), (20, 21, 22), strict=True)):
        test[t]["text"] = "  " + train[src]["text"].upper() + "  "  # exact copy up to case and spaces
        test[t]["label"] = train[src]["label"] if k == 0 else ("b" if train[src]["label"] == "a" else "a")
    for t, src in zip(range(20, 25), range(30, 35), strict=True):
        test[t]["text"] = edit(rng, train[src]["text"], 2)  # near copy: two words edited
    test[25]["text"] = edit(rng, train[35]["text"], 30)  # mostly rewritten: not a near copy
    return train, test


def expected(train, test, threshold=0.8):
    """Brute force: every train x test pair."""
    exact = {(i, q) for i, a in enumerate(train) for q, b in enumerate(test)
             if normalize_text(a["text"]) == normalize_text(b["text"])}
    sh_a = [shingles(r["text"]) for r in train]
    sh_b = [shingles(r["text"]) for r in test]
    near = {(i, q) for i in range(len(train)) for q in range(len(test))
            if (i, q) not in exact and jaccard(sh_a[i], sh_b[q]) >= threshold}
    users = {r["user"] for r in train}
    group_rows = {q for q, r in enumerate(test) if r["user"] in users}
    conflicts = {(i, q) for i, q in exact if train[i]["label"] != test[q]["label"]}
    return exact, near, group_rows, {r["user"] for r in test} & users, conflicts


def test_partial_leak_is_found_exactly(tmp_path):
    train, test = leaky_splits()
    exact, near, group_rows, shared, conflicts = expected(train, test)
    assert (len(exact), len(near), len(group_rows), len(shared), len(conflicts)) == (3, 5, 7, 4, 2)
    a = write_jsonl(tmp_path / "train.jsonl", train)
    b = write_jsonl(tmp_path / "test.jsonl", test)
    hashes = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)]
    r = check_files([a, b], Fields(label="label", group=("user",)))
    assert not r.passed and r.status == "fail"
    got = {c.id: (c.status, c.rows, c.pairs[0].links, c.rate) for c in r.checks}
    assert got == {
        "leak.exact_duplicate": ("fail", 3, 3, 0.03),
        "leak.near_duplicate": ("fail", 5, 5, 0.05),
        "leak.group_overlap": ("fail", 7, 4, 0.07),
        "leak.label_conflict": ("fail", 2, 2, 0.02),
    }
    near_pair = r.check("leak.near_duplicate").pairs[0]
    i, q = sorted(near)[0]
    assert near_pair.examples[0].index_ref == f"{a}:{i + 1}" and near_pair.examples[0].query_ref == f"{b}:{q + 1}"
    assert near_pair.examples[0].detail.startswith("Jaccard ")
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)] == hashes  # inputs untouched


def test_threshold_is_a_rate_of_the_queried_split():
    train, test = leaky_splits()
    ds = lambda rows, name: make_dataset([r["text"] for r in rows], labels=[r["label"] for r in rows],  # noqa: E731
                                         groups={"user": [r["user"] for r in rows]}, name=name)
    r = find_leaks({"train": ds(train, "train"), "test": ds(test, "test")}, threshold=0.05)
    assert {c.id: c.status for c in r.checks} == {
        "leak.exact_duplicate": "pass", "leak.near_duplicate": "pass",  # 3% and 5% are not above 5%
        "leak.group_overlap": "fail", "leak.label_conflict": "pass"}  # 7% is
    with pytest.raises(InputError, match="threshold 5"):
        find_leaks({"train": ds(train, "a"), "test": ds(test, "b")}, threshold=5)


def test_three_splits_check_every_earlier_split(tmp_path):
    rng = random.Random(2)
    train = [{"text": sentence(rng)} for _ in range(50)]
    val = [{"text": sentence(rng)} for _ in range(20)]
    test = [{"text": sentence(rng)} for _ in range(20)]
    test[0]["text"] = val[3]["text"]  # val -> test copy
    test[1]["text"] = train[7]["text"].title()  # train -> test copy
    files = [write_jsonl(tmp_path / f"{n}.jsonl", rows) for n, rows in (("train", train), ("val", val), ("test", test))]
    r = check_files(files)
    pairs = {(p.index, p.query): p.rows for p in r.check("leak.exact_duplicate").pairs}
    assert pairs == {("train.jsonl", "val.jsonl"): 0, ("train.jsonl", "test.jsonl"): 1, ("val.jsonl", "test.jsonl"): 1}
    # two distinct test rows leak (one from val, one from train): 2 of test's 20 rows
    assert r.check("leak.exact_duplicate").rows == 2 and r.check("leak.exact_duplicate").rate == 0.10
    assert r.check("leak.label_conflict").status == "skipped" and r.check("leak.group_overlap").status == "skipped"


def test_clean_splits_report_zero(tmp_path):
    rng = random.Random(8)
    train = [{"text": sentence(rng), "label": "a", "user": f"t{i}"} for i in range(150)]
    test = [{"text": sentence(rng), "label": "b", "user": f"s{i}"} for i in range(60)]
    r = check_files([write_jsonl(tmp_path / "a.jsonl", train), write_jsonl(tmp_path / "b.jsonl", test)],
                    Fields(label="label", group=("user",)))
    assert r.passed and all(c.status == "pass" and c.rows == 0 for c in r.checks)
    d = r.to_dict()
    assert d["schema"] == "campaign.leaks/1" and json.dumps(d)
    assert [c["id"] for c in d["checks"]] == ["leak.exact_duplicate", "leak.near_duplicate", "leak.group_overlap",
                                              "leak.label_conflict"]


def test_needs_two_splits():
    with pytest.raises(InputError, match="at least two splits"):
        find_leaks({"only": make_dataset(["a"])})


def test_a_row_leaking_from_two_earlier_splits_counts_once():
    rng = random.Random(6)
    shared = sentence(rng)
    train = [shared] + [sentence(rng) for _ in range(9)]
    val = [shared] + [sentence(rng) for _ in range(4)]
    test = [shared, sentence(rng), sentence(rng), sentence(rng)]
    users = {"train": ["u"] + [f"t{i}" for i in range(9)], "val": ["u"] + [f"v{i}" for i in range(4)],
             "test": ["u", "s1", "s2", "s3"]}
    named = {n: make_dataset(t, groups={"user": users[n]}, name=n)
             for n, t in (("train", train), ("val", val), ("test", test))}
    r = find_leaks(named, threshold=0.2)
    for cid in ("leak.exact_duplicate", "leak.group_overlap"):
        c = r.check(cid)
        assert [(p.index, p.query, p.rows) for p in c.pairs] == [("train", "val", 1), ("train", "test", 1),
                                                                 ("val", "test", 1)]
        # distinct rows: val row 0 and test row 0, not 3; rate: test's 1 of 4 rows (val: 1 of 5)
        assert c.rows == 2 and c.rate == 0.25 and c.status == "fail"


def test_exact_copies_are_counted_not_listed():
    from campaign.data.dedup import MAX_EXACT_EXAMPLES, cross_duplicates
    from campaign.data.sketch import sketch

    text = "the very same sentence, copied many times over"
    rng = random.Random(9)
    # train: 300 copies (100 labelled a, 200 b) and 20 others; test: 200 copies (50 a, 150 b) and 10 others
    train = make_dataset([text] * 300 + [sentence(rng) for _ in range(20)],
                         labels=["a"] * 100 + ["b"] * 200 + ["c"] * 20, name="train")
    test = make_dataset([text] * 200 + [sentence(rng) for _ in range(10)],
                        labels=["a"] * 50 + ["b"] * 150 + ["c"] * 10, name="test")
    m = cross_duplicates(sketch(train.texts), sketch(test.texts), max_exact_examples=25)
    assert m.exact_links == 300 * 200 and m.exact_rows == tuple(range(200))
    assert len(m.exact) == 25 and all(i == 0 for i, _ in m.exact)       # one example per test row: its first copy
    assert len(cross_duplicates(sketch(train.texts), sketch(test.texts)).exact) == min(200, MAX_EXACT_EXAMPLES)
    r = find_leaks([train, test])
    ex = r.check("leak.exact_duplicate").pairs[0]
    assert (ex.rows, ex.links, len(ex.examples)) == (200, 60_000, 3)
    # conflicting pairs: 50 test 'a' x 200 train 'b' + 150 test 'b' x 100 train 'a'; every copy conflicts
    lab = r.check("leak.label_conflict").pairs[0]
    assert (lab.rows, lab.links, len(lab.examples)) == (200, 50 * 200 + 150 * 100, 3)
    assert lab.examples[0].detail == "label 'b' vs 'a'" and lab.examples[0].index_ref == "train:101"


def test_a_partial_near_duplicate_search_is_skipped_not_passed():
    from campaign.data.sketch import DedupConfig

    rng = random.Random(10)
    crowd = sentence(rng)
    # 5 copies of one text crowd every LSH bucket of the test copy beyond max_bucket = 2
    train = make_dataset([crowd] * 5 + [sentence(rng) for _ in range(20)], name="train")
    test = make_dataset([crowd] + [sentence(rng) for _ in range(10)], name="test")
    r = find_leaks([train, test], config=DedupConfig(max_bucket=2))
    near = r.check("leak.near_duplicate")
    assert near.status == "skipped" and near.seen.startswith("incomplete: ") and "--max-bucket" in near.fix
    assert any("only partly searched" in n for n in r.notes)
    assert r.check("leak.exact_duplicate").status == "fail"
    assert find_leaks([train, test]).check("leak.near_duplicate").status == "pass"   # default cap: searched fully
    # a leak found in the part searched still fails
    test2 = make_dataset([edit(rng, crowd, 1)] + [sentence(rng) for _ in range(10)], name="test")
    assert find_leaks([train, test2], config=DedupConfig(max_bucket=2)).check("leak.near_duplicate").status == "fail"


@pytest.mark.parametrize("examples", [0, -1, 1.5, True])
def test_examples_must_be_a_positive_count(examples):
    with pytest.raises(InputError, match=f"examples {examples!r} must be a positive number"):
        find_leaks([make_dataset(["a b c d e"], name="a"), make_dataset(["f g h i j"], name="b")], examples=examples)
