"""kill -9 during `split --format hf` (a DatasetDict written from a JSONL file): what is on disk afterwards is the
previous DatasetDict or the complete new one, never a mix, nothing beside it but the hidden stage folder, which the
next run removes.

As tests/data/test_split_interrupted.py does for files: a forked child that SIGKILLs itself before its k-th file-system
step (every step, each crash point once), and the real command (its own process) killed at the points of the
DatasetDict's own life: its stage folder made, its first split folder saved there, the swap into place done.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.data.read import Fields
from campaign.data.split import MANIFEST_NAME, load_manifest, split_file

from .conftest import write_jsonl
from .test_split_interrupted import _killed_at, _leftovers, _rows

datasets = pytest.importorskip("datasets")   # imported here, so each forked child has it already
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _state(out: Path) -> dict[str, str] | None:
    """{relative path: sha256 (a folder: 'dir')} of everything under out, the manifest by the seed it records (it
    also holds its creation time); None when there is no out."""
    if not out.exists():
        return None
    state = {p.relative_to(out).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(out.rglob("*"))}
    if (out / MANIFEST_NAME).exists():
        state[MANIFEST_NAME] = str(load_manifest(out, verify=False)["seed"])
    return state


def _complete(out: Path) -> bool:
    """The manifest verifies (every split folder has the files and bytes it names) and datasets opens the dict
    with the manifest's splits and rows."""
    try:
        doc = load_manifest(out)
        back = datasets.load_from_disk(str(out))
    except Exception:
        return False
    return {s["name"]: s["rows"] for s in doc["splits"]} == {name: len(back[name]) for name in back}


def _visible(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if not p.name.startswith("."))


def _split(data: Path, out: Path, seed: int, force: bool = True):
    return lambda: split_file(data, out, Fields(label="label", group=("user",)), ratios="80/10/10", seed=seed,
                              force=force, output="hf")


def test_a_kill_at_every_step_of_a_first_hf_split_leaves_nothing_or_the_whole_dict(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(150, 5))
    full = tmp_path / "full"
    steps = _killed_at(None, _split(data, full, seed=0, force=False))
    assert steps >= 5 and _complete(full)
    whole = _state(full)
    for k in range(1, steps + 1):
        out = tmp_path / f"k{k}"
        assert _killed_at(k, _split(data, out, seed=0, force=False)) == -1
        state = _state(out)
        assert state is None or (state == whole and _complete(out)), k
        assert _killed_at(None, _split(data, out, seed=0)) > 0          # the next run completes, cleans up
        assert _state(out) == whole and _leftovers(tmp_path, out) == []


def test_a_kill_at_every_step_of_a_forced_hf_resplit_keeps_the_old_dict_or_the_new(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(150, 6))
    out = tmp_path / "o"
    _killed_at(None, _split(data, out, seed=7))
    new = _state(out)
    _killed_at(None, _split(data, out, seed=0))
    old = _state(out)
    steps = _killed_at(None, _split(data, out, seed=7))
    assert old != new and _state(out) == new and steps >= 8
    outcomes = []
    for k in range(1, steps + 1):
        _killed_at(None, _split(data, out, seed=0))     # the old dict back (and the last kill's stage removed)
        assert _state(out) == old and _leftovers(tmp_path, out) == []
        assert _killed_at(k, _split(data, out, seed=7)) == -1
        state = _state(out)
        assert state in (old, new) and _complete(out), k
        assert _visible(tmp_path) == ["d.jsonl", "o"], k                 # no stray folder but the hidden stage
        outcomes.append("new" if state == new else "old")
    assert outcomes[0] == "old" and outcomes[-1] == "new"   # killed early: the old dict; at its last step: the new


# `campaign` in a fresh interpreter that SIGKILLs itself just after one point of the DatasetDict's write: its stage
# folder made (io._mkdtemp), its first split folder saved there (Dataset.save_to_disk), the swap done (io._exchange)
_AT_POINT = """
import os, runpy, signal, sys
import datasets
import campaign.io as cio

def then_die(fn):
    def wrapped(*a, **kw):
        out = fn(*a, **kw)
        os.kill(os.getpid(), signal.SIGKILL)
        return out
    return wrapped

point = sys.argv[1]
if point == "stage":
    cio._mkdtemp = then_die(cio._mkdtemp)
elif point == "split":
    datasets.Dataset.save_to_disk = then_die(datasets.Dataset.save_to_disk)
elif point == "swap":
    cio._exchange = then_die(cio._exchange)
sys.argv = ["campaign", *sys.argv[2:]]
runpy.run_module("campaign", run_name="__main__", alter_sys=True)
"""


def test_the_real_command_killed_while_it_writes_the_dataset_dict(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(150, 7))
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def split(point: str, seed: int) -> int:
        args = ["split", str(data), "--out", str(out), "--format", "hf", "--label", "label", "--force",
                "--seed", str(seed)]
        done = subprocess.run([sys.executable, "-c", _AT_POINT, point, *args], capture_output=True, env=env)
        assert done.returncode in (0, -signal.SIGKILL), done.stderr.decode()
        return done.returncode

    assert split("never", 0) == 0 and _complete(out)
    old = _state(out)
    for point, seed, outcome in (("stage", 1, "old"), ("split", 2, "old"), ("swap", 3, "new")):
        assert split(point, seed) == -signal.SIGKILL, point
        state = _state(out)
        assert _complete(out) and (state == old if outcome == "old" else state[MANIFEST_NAME] == str(seed)), point
        assert _visible(tmp_path) == ["d.jsonl", "o"] and len(_leftovers(tmp_path, out)) == 1, point
    assert split("never", 4) == 0
    assert _complete(out) and _leftovers(tmp_path, out) == [] and _visible(tmp_path) == ["d.jsonl", "o"]
