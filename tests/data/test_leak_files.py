"""leaks --pairs and --drop-to: every leaking pair in a file, and the splits written again without the leaking rows
(one set with a manifest and a re-check), on planted leaks counted by construction."""
from __future__ import annotations

import csv
import hashlib
import json
import random
from collections import Counter
from pathlib import Path

from campaign.data.leaks import check_files
from campaign.data.read import Fields

from .conftest import edit, read_jsonl, sentence, write_jsonl


def _planted(tmp_path: Path):
    rng = random.Random(3)
    train = [{"text": sentence(rng, 30, 50), "label": rng.choice("ab"), "user": f"t{i}"} for i in range(100)]
    evals = []
    for k in range(10):                                  # exact copies; the first 3 with the other label
        row = dict(train[k], user=f"e{k}")
        if k < 3:
            row["label"] = "b" if row["label"] == "a" else "a"
        evals.append(row)
    evals += [dict(train[20 + k], text=edit(rng, train[20 + k]["text"], 2), user=f"n{k}") for k in range(5)]
    evals += [{"text": sentence(rng, 30, 50), "label": "a", "user": f"t{40 + k}"} for k in range(6)]   # groups
    clean = [{"text": sentence(rng, 30, 50), "label": "b", "user": f"c{k}"} for k in range(20)]
    evals += clean
    return (write_jsonl(tmp_path / "train.jsonl", train), write_jsonl(tmp_path / "eval.jsonl", evals), clean)


def test_pairs_list_every_leak_and_drop_to_writes_the_clean_set(tmp_path):
    train, evals, clean = _planted(tmp_path)
    fields = Fields(label="label", group=("user",))
    report = check_files([train, evals], fields, pairs=tmp_path / "pairs.csv", drop_to=tmp_path / "clean")
    assert not report.passed                             # the inputs leak; the written copies do not
    with open(tmp_path / "pairs.csv", newline="", encoding="utf-8") as f:
        pairs = list(csv.DictReader(f))
    per_check = Counter(p["check"] for p in pairs)
    assert per_check == {"leak.exact_duplicate": 10, "leak.near_duplicate": 5, "leak.group_overlap": 6,
                         "leak.label_conflict": 3}
    # the planted rows, by line: exact 1-10, near 11-15, groups 16-21
    assert {int(p["query_line"]) for p in pairs if p["check"] == "leak.exact_duplicate"} == set(range(1, 11))
    assert {int(p["query_line"]) for p in pairs if p["check"] == "leak.near_duplicate"} == set(range(11, 16))
    assert {int(p["query_line"]) for p in pairs if p["check"] == "leak.group_overlap"} == set(range(16, 22))
    assert all(p["detail"].startswith("Jaccard 0.") for p in pairs if p["check"] == "leak.near_duplicate")

    out = tmp_path / "clean"
    kept = read_jsonl(out / "eval.jsonl")
    assert kept == clean and len(read_jsonl(out / "eval.leaking.jsonl")) == 21
    assert (out / "train.jsonl").read_bytes() == train.read_bytes()
    manifest = json.loads((out / "leak_fix_manifest.json").read_text(encoding="utf-8"))
    for s in manifest["splits"]:
        assert hashlib.sha256(Path(s["path"]).read_bytes()).hexdigest() == s["sha256"]
    assert [s["dropped"] for s in manifest["splits"]] == [0, 21] and manifest["recheck"]["status"] == "pass"
    # an independent run of the check on the written files
    assert check_files([out / "train.jsonl", out / "eval.jsonl"], fields).passed


def test_drop_to_refuses_to_overwrite_an_input_or_an_earlier_set(tmp_path):
    import pytest

    from campaign.errors import InputError

    train, evals, _ = _planted(tmp_path)
    with pytest.raises(InputError, match="would overwrite an input"):
        check_files([train, evals], drop_to=tmp_path)
    check_files([train, evals], drop_to=tmp_path / "c")
    with pytest.raises(InputError, match="already exists; pass --force"):
        check_files([train, evals], drop_to=tmp_path / "c")
    check_files([train, evals], drop_to=tmp_path / "c", force=True)


def test_examples_are_spread_over_different_rows(tmp_path):
    """The first eval row near-copies a text that train holds five times (five pairs for one row); two later rows
    leak once each: three examples show three different eval rows, not the first row five ways."""
    rng = random.Random(9)
    base = sentence(rng, 40, 50)
    train = [{"text": edit(rng, base, 1)} for _ in range(5)] + [{"text": sentence(rng, 40, 50)} for _ in range(30)]
    evals = [{"text": edit(rng, base, 1)}] + [{"text": edit(rng, train[5 + k]["text"], 1)} for k in range(2)]
    evals += [{"text": sentence(rng, 40, 50)} for _ in range(5)]
    report = check_files([write_jsonl(tmp_path / "a.jsonl", train), write_jsonl(tmp_path / "b.jsonl", evals)])
    near = report.check("leak.near_duplicate").pairs[0]
    assert near.links >= 7                               # 5 + 1 + 1 pairs (and any among the base's copies)
    shown = [e.query_ref for e in near.examples]
    assert len(shown) == 3 and len(set(shown)) == 3


def test_pairs_link_each_evaluation_row_to_the_training_rows_it_matches(tmp_path):
    from .conftest import jaccard, shingles

    train, evals, _ = _planted(tmp_path)
    check_files([train, evals], Fields(label="label", group=("user",), id="user"), pairs=tmp_path / "pairs.jsonl")
    pairs = read_jsonl(tmp_path / "pairs.jsonl")
    exact = sorted((p["query_line"], p["query_id"], p["index_line"], p["index_id"], p["similarity"])
                   for p in pairs if p["check"] == "leak.exact_duplicate")
    assert exact == [(k + 1, f"e{k}", k + 1, f"t{k}", 1.0) for k in range(10)]   # eval row k copies train row k
    t, e = read_jsonl(train), read_jsonl(evals)
    for p in (p for p in pairs if p["check"] == "leak.near_duplicate"):
        k = p["query_line"] - 11                          # eval row 10 + k is an edit of train row 20 + k
        assert (p["index_line"], p["index_id"]) == (21 + k, f"t{20 + k}")
        expected = jaccard(shingles(t[20 + k]["text"]), shingles(e[10 + k]["text"]))
        assert p["similarity"] == round(expected, 6)


def test_drop_clusters_removes_every_copy_from_every_split(tmp_path):
    rng = random.Random(5)
    train = [{"text": sentence(rng, 40, 50), "user": f"t{i}"} for i in range(60)]
    train += [dict(train[0], user="t60"), dict(train[1], text=edit(rng, train[1]["text"], 1), user="t61")]
    evals = [dict(train[0], user="e0"), dict(train[1], text=edit(rng, train[1]["text"], 1), user="e1")]
    evals += [{"text": sentence(rng, 40, 50), "user": f"e{k}"} for k in range(2, 12)]
    a, b = write_jsonl(tmp_path / "train.jsonl", train), write_jsonl(tmp_path / "eval.jsonl", evals)
    out = tmp_path / "clean"
    check_files([a, b], Fields(id="user"), drop_to=out, drop_clusters=True)
    kept_train = [r["user"] for r in read_jsonl(out / "train.jsonl")]
    # the two clusters: train rows 0, 60 (exact) and 1, 61 (near), with eval rows 0 and 1
    assert kept_train == [f"t{i}" for i in range(2, 60)]
    assert sorted(r["user"] for r in read_jsonl(out / "train.leaking.jsonl")) == ["t0", "t1", "t60", "t61"]
    assert [r["user"] for r in read_jsonl(out / "eval.jsonl")] == [f"e{k}" for k in range(2, 12)]
    manifest = json.loads((out / "leak_fix_manifest.json").read_text(encoding="utf-8"))
    assert [s["dropped"] for s in manifest["splits"]] == [4, 2] and manifest["recheck"]["status"] == "pass"
    # the default drops the evaluation side only: the training file is copied as it was
    check_files([a, b], Fields(id="user"), drop_to=tmp_path / "eval_only")
    assert (tmp_path / "eval_only" / "train.jsonl").read_bytes() == a.read_bytes()
