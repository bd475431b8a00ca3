"""Hugging Face `datasets` in and out of split and leaks: a real Dataset.save_to_disk folder, an .arrow file, a
DatasetDict; the fingerprint recorded beside the sha256; a DatasetDict written back all-or-nothing."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from campaign.data.leaks import check_files
from campaign.data.read import Fields, read_dataset
from campaign.data.split import load_manifest, split_file
from campaign.errors import InputError

from .conftest import edit, sentence

datasets = pytest.importorskip("datasets")


def columns(n=120, seed=0):
    """Texts with 10 planted near copies (1 word of 50-60 edited) and users who wrote several rows."""
    rng = random.Random(seed)
    text = [sentence(rng, 50, 60) for _ in range(n)]
    for i in range(10):
        text[n - 1 - i] = edit(rng, text[i], 1)
    return {"text": text, "label": [rng.choice("ab") for _ in range(n)], "user": [f"u{i % 40}" for i in range(n)],
            "score": [float(i) for i in range(n)]}


def saved(tmp_path, name="ds", **kw):
    cols = columns(**kw)
    ds = datasets.Dataset.from_dict(cols)
    ds.save_to_disk(str(tmp_path / name))
    return tmp_path / name, cols


def test_split_reads_a_saved_dataset_and_writes_a_dataset_dict(tmp_path):
    path, cols = saved(tmp_path)
    out = tmp_path / "out"
    res = split_file(path, out, Fields(label="label", group=("user",)), ratios="70/15/15", seed=1)
    assert res.passed, [c.to_dict() for c in res.checks if c.status != "pass"]
    fingerprint = datasets.load_from_disk(str(path))._fingerprint
    doc = json.loads((out / "split_manifest.json").read_text())
    assert doc["input"]["fingerprint"] == fingerprint and doc["input"]["format"] == "hf"
    assert list(doc["input"])[:4] == ["path", "format", "sha256", "fingerprint"]
    back = datasets.load_from_disk(str(out))
    assert isinstance(back, datasets.DatasetDict) and list(back) == ["train", "val", "test"]
    # every input row in exactly one split, with its columns and types as they were
    rows = [r for name in back for r in back[name]]
    assert Counter(r["text"] for r in rows) == Counter(cols["text"]) and len(rows) == 120
    assert back["train"].features == datasets.load_from_disk(str(path)).features
    # independently: no user and no planted near copy in two splits
    where = {r["text"]: name for name in back for r in back[name]}
    users = {}
    for name in back:
        for r in back[name]:
            users.setdefault(r["user"], set()).add(name)
    assert all(len(s) == 1 for s in users.values())
    assert all(where[cols["text"][i]] == where[cols["text"][119 - i]] for i in range(10))
    assert sum(p["rows"] for p in doc["splits"]) == 120
    load_manifest(out)                                   # the folders' hashes verify
    (out / "test" / "state.json").write_text((out / "test" / "state.json").read_text() + " ")
    with pytest.raises(InputError, match="changed since the split"):
        load_manifest(out)


def test_a_forced_resplit_replaces_the_dataset_dict_and_never_an_input(tmp_path):
    path, _ = saved(tmp_path)
    out = tmp_path / "out"
    split_file(path, out, Fields(label="label"), ratios="80/20", seed=0)
    with pytest.raises(InputError, match="already exists"):
        split_file(path, out, Fields(label="label"), ratios="80/20", seed=0)
    again = split_file(path, out, Fields(label="label"), ratios="50/50", seed=3, force=True)
    assert again.passed and [len(d) for d in datasets.load_from_disk(str(out)).values()] == [60, 60]
    (out / "notes.txt").write_text("kept")                # a user's file beside the splits survives a re-split
    split_file(path, out, Fields(label="label"), ratios="80/20", seed=4, force=True)
    assert (out / "notes.txt").read_text() == "kept" and list(datasets.load_from_disk(str(out))) == ["train", "test"]
    (out / "mine").mkdir()                               # a folder no split wrote would be lost: refused
    with pytest.raises(InputError, match="holds the folder 'mine'"):
        split_file(path, out, Fields(label="label"), ratios="80/20", force=True)
    assert (out / "mine").is_dir()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not an earlier campaign split"):
        split_file(path, other, Fields(label="label"), ratios="80/20", force=True)
    assert (other / "notes.txt").read_text() == "mine"


def test_a_kill_during_a_forced_resplit_leaves_the_old_dict_or_the_new(tmp_path):
    from .test_split_interrupted import _killed_at

    path, _ = saved(tmp_path, n=60)
    out = tmp_path / "out"

    def run(seed):
        return lambda: split_file(path, out, Fields(label="label"), ratios="80/20", seed=seed, force=True)

    def state():
        try:
            return tuple(len(d) for d in datasets.load_from_disk(str(out)).values()), load_manifest(out)["seed"]
        except Exception:
            return None

    assert _killed_at(None, run(0)) > 0
    old = state()
    steps = _killed_at(None, run(5))
    new = state()
    assert old is not None and new is not None and old[1] == 0 and new[1] == 5
    seen = set()
    for k in range(1, steps + 1, max(1, steps // 5)):    # crash points spread over the run
        _killed_at(None, run(0))
        assert _killed_at(k, run(5)) == -1
        now = state()
        assert now in (old, new), (k, now)
        seen.add(now)
    assert old in seen


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_format_hf_writes_a_dataset_dict_from_files(tmp_path, kind):
    cols = columns(60)
    src = datasets.Dataset.from_dict(cols)
    path = tmp_path / f"d.{kind}"
    src.to_parquet(str(path)) if kind == "parquet" else src.to_json(str(path), lines=True)
    out = tmp_path / "out"
    res = split_file(path, out, Fields(label="label"), ratios="80/20", output="hf")
    assert res.passed and res.parameters["output"] == "hf"
    back = datasets.load_from_disk(str(out))
    assert sorted(r for name in back for r in back[name]["text"]) == sorted(cols["text"])
    assert back["train"].features["score"].dtype == "float64"


def test_an_arrow_file_in_gives_arrow_files_out(tmp_path):
    path, cols = saved(tmp_path, n=60)
    arrow = next(path.glob("*.arrow"))
    ds = read_dataset(arrow, Fields(label="label"))
    assert len(ds) == 60 and ds.format == "hf"
    assert ds.fingerprint == datasets.Dataset.from_file(str(arrow))._fingerprint
    res = split_file(arrow, tmp_path / "out", Fields(label="label"), ratios="80/20")
    assert res.passed
    parts = [datasets.Dataset.from_file(str(tmp_path / "out" / f"{n}.arrow")) for n in ("train", "test")]
    assert sorted([*parts[0]["text"], *parts[1]["text"]]) == sorted(cols["text"])


def test_leaks_read_a_dataset_dict_and_find_a_planted_leak(tmp_path):
    cols = columns(80)
    train = {k: v[:60] for k, v in cols.items()}
    test = {k: v[60:] for k, v in cols.items()}   # rows 70..79 are near copies of rows 9..0: in train
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(train), "test": datasets.Dataset.from_dict(test)})
    dd.save_to_disk(str(tmp_path / "dd"))
    rep = check_files([tmp_path / "dd"])
    assert [s.name for s in rep.splits] == ["train", "test"] and not rep.passed
    assert rep.check("leak.near_duplicate").rows == 10
    clean = tmp_path / "clean"
    rep = check_files([tmp_path / "dd"], drop_to=clean)
    fixed = datasets.load_from_disk(str(clean / "test"))
    assert len(fixed) == 10 and set(fixed["text"]) == set(cols["text"][60:70])
    assert check_files([clean / "train", clean / "test"]).passed


def test_a_leaky_dataset_dict_is_split_again_whole(tmp_path):
    cols = columns(80)
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({k: v[:60] for k, v in cols.items()}),
                               "test": datasets.Dataset.from_dict({k: v[60:] for k, v in cols.items()})})
    dd.save_to_disk(str(tmp_path / "dd"))              # test rows 70..79 are near copies of train rows 9..0
    assert not check_files([tmp_path / "dd"]).passed
    res = split_file(tmp_path / "dd", tmp_path / "out", ratios="75/25", seed=2)
    assert res.passed and res.input["rows"] == 80 and res.input["format"] == "hf"
    back = datasets.load_from_disk(str(tmp_path / "out"))
    where = {t: name for name in back for t in back[name]["text"]}
    assert sorted(where) == sorted(cols["text"])
    assert all(where[cols["text"][i]] == where[cols["text"][79 - i]] for i in range(10))
    assert check_files([tmp_path / "out"]).passed
    other = datasets.DatasetDict({"a": datasets.Dataset.from_dict({"text": ["x y z w v"]}),
                                  "b": datasets.Dataset.from_dict({"text": ["x y z w v"], "n": [1]})})
    other.save_to_disk(str(tmp_path / "mixed"))
    with pytest.raises(InputError, match="splits have other columns"):
        split_file(tmp_path / "mixed", tmp_path / "out2")


def test_the_ray_engine_refuses_a_dataset_rather_than_read_its_json_as_shards(tmp_path):
    from campaign.data.shards import list_shards

    path, _ = saved(tmp_path, n=10)
    for spec in (path, next(path.glob("*.arrow")), f"{path}/*"):
        with pytest.raises(InputError, match="ray engine reads shards of JSONL, CSV or Parquet"):
            list_shards(str(spec))


def test_a_split_of_zero_rows_is_refused_before_a_dataset_that_cannot_be_reloaded(cli, tmp_path):
    # datasets' load_from_disk fails (IndexError) on a Dataset of 0 rows that save_to_disk wrote: 3 rows at 99/1
    # leave the test split empty, so --format hf is refused in one line, nothing written; at 80/20 each split has
    # rows and the DatasetDict loads back with every row
    import datasets

    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"text": "row {i} here"}}\n' for i in range(3)), encoding="utf-8")
    res = cli("split", str(data), "--out", str(tmp_path / "empty"), "--format", "hf", "--ratios", "99/1")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "split 'test' gets 0 of 3 rows" in res.err and "write jsonl or parquet" in res.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]            # no output, no stray folder
    res = cli("split", str(data), "--out", str(tmp_path / "out"), "--format", "hf", "--ratios", "67/33")
    assert res.code in (0, 1), res.err
    back = datasets.load_from_disk(str(tmp_path / "out"))
    assert sum(len(back[s]) for s in back) == 3
