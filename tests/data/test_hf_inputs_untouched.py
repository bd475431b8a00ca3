"""A Hugging Face dataset given to `campaign split` or `campaign leaks` is only read: every file of a save_to_disk
folder, of a DatasetDict's split folders and beside an .arrow file has the same name and bytes afterwards (no
cache-*.arrow written there), and the manifest's input sha256 is the one worked out here from the files as given,
on every run and on a copy elsewhere. A dataset_dict.json that lists no split, or one split twice, is one line and
exit 2."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from .test_hf_datasets import columns

datasets = pytest.importorskip("datasets")


def files(folder: Path) -> dict[str, bytes]:
    """Every file under folder (hidden ones too), by its relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def folder_sha256(snapshot: dict[str, bytes]) -> str:
    """The hash the manifest documents for a folder ("covers its files' names and bytes"): a sha256 over one line
    per file, in sorted order, of its relative path, a NUL and the hex sha256 of its bytes."""
    listing = "".join(f"{name}\0{hashlib.sha256(data).hexdigest()}\n" for name, data in sorted(snapshot.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def dataset_dict(folder: Path, n: int = 80) -> Path:
    """A DatasetDict saved with train (the first 60 rows) and test (the rest; rows 70..79 near copies of 9..0)."""
    cols = columns(n)
    parts = {"train": {k: v[:60] for k, v in cols.items()}, "test": {k: v[60:] for k, v in cols.items()}}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(c) for s, c in parts.items()}).save_to_disk(str(folder))
    return folder


def inputs(root: Path, kind: str) -> tuple[Path, list[Path]]:
    """Under root (created here): what `split` is given and what `leaks` is given, for each kind of input."""
    if kind == "dict":
        dd = dataset_dict(root / "dd")
        return dd, [dd]
    cols = columns(80)
    for name, part in (("train", slice(0, 60)), ("test", slice(60, 80))):
        datasets.Dataset.from_dict({k: v[part] for k, v in cols.items()}).save_to_disk(str(root / name))
    if kind == "dataset":
        return root / "train", [root / "train", root / "test"]
    for name in ("train", "test"):   # one .arrow file each, in a folder of their own
        shutil.move(next((root / name).glob("data-*.arrow")), root / f"{name}.arrow")
        shutil.rmtree(root / name)
    return root / "train.arrow", [root / "train.arrow", root / "test.arrow"]


@pytest.mark.parametrize("kind", ["dataset", "dict", "arrow"])
def test_split_and_leaks_leave_every_input_file_as_it_was(cli, tmp_path, kind):
    root = tmp_path / "in"
    given, checked = inputs(root, kind)
    before = files(root)
    r = cli("split", str(given), "--out", str(tmp_path / "out"), "--label", "label", "--group", "user")
    assert r.code == 0, r.err
    again = cli("split", str(given), "--out", str(tmp_path / "hf"), "--format", "hf", "--label", "label")
    assert again.code == 0, again.err
    leaks = cli("leaks", *map(str, checked), "--label", "label", "--drop-to", str(tmp_path / "clean"))
    assert leaks.code == 1, leaks.err           # rows 70..79 are near copies of rows 9..0: a leak, dropped
    assert files(root) == before               # no file added (a cache-*.arrow), changed or removed
    rows = [len(datasets.load_from_disk(str(tmp_path / "hf" / s))) for s in ("train", "val", "test")]
    assert sum(rows) == (60 if kind != "dict" else 80)


@pytest.mark.parametrize("kind", ["dataset", "dict"])
def test_the_manifest_hashes_the_folder_as_given_on_every_run_and_elsewhere(cli, tmp_path, kind):
    given = inputs(tmp_path / "in", kind)[0]
    expected = folder_sha256(files(given))

    def input_sha256(folder: Path, out: str) -> str:
        r = cli("split", str(folder), "--out", str(tmp_path / out), "--force")
        assert r.code == 0, r.err
        return json.loads((tmp_path / out / "split_manifest.json").read_text())["input"]["sha256"]

    assert input_sha256(given, "a") == expected
    assert input_sha256(given, "a") == expected        # a second run hashes the same files: none were added
    copy = tmp_path / "elsewhere" / given.name
    shutil.copytree(given, copy)
    assert input_sha256(copy, "b") == expected          # the same dataset elsewhere matches its manifest


def test_an_edited_dataset_gets_another_hash(cli, tmp_path):
    """The clean case of the hash: it follows the files' bytes, so a changed dataset is not taken for the same."""
    given = inputs(tmp_path / "in", "dataset")[0]
    info = given / "dataset_info.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "description": "edited"}))
    expected = folder_sha256(files(given))
    assert cli("split", str(given), "--out", str(tmp_path / "a")).code == 0
    got = json.loads((tmp_path / "a" / "split_manifest.json").read_text())["input"]["sha256"]
    assert got == expected and got != folder_sha256(files(inputs(tmp_path / "in2", "dataset")[0]))


@pytest.mark.parametrize(("splits", "named"), [([], "'splits' is empty"),
                                               (["train", "test", "train"], "the split 'train' more than once")])
def test_a_dataset_dict_json_with_no_split_or_a_split_twice_is_one_line(cli, capsys, tmp_path, splits, named):
    dd = dataset_dict(tmp_path / "dd")
    listing = dd / "dataset_dict.json"
    listing.write_text(json.dumps({"splits": splits}))
    capsys.readouterr()                         # save_to_disk's progress bars, before the commands run
    for args in (["split", str(dd), "--out", str(tmp_path / "out")], ["leaks", str(dd)]):
        r = cli(*args)
        assert r.code == 2, (args, r.err)
        line = r.err.strip()
        assert "\n" not in line and str(listing) in line and named in line, line
    assert not (tmp_path / "out").exists()


def test_a_dataset_dict_listed_in_its_own_order_is_read_whole(cli, tmp_path):
    """The clean case: each split listed once (here test first) is read once, 20 + 60 rows."""
    dd = dataset_dict(tmp_path / "dd")
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["test", "train"]}))
    r = cli("split", str(dd), "--out", str(tmp_path / "out"), "--json")
    assert r.code == 0, r.err
    assert r.json()["input"]["rows"] == 80
    leaks = cli("leaks", str(dd), "--json")
    assert leaks.code == 1 and [s["name"] for s in leaks.json()["splits"]] == ["test", "train"]
