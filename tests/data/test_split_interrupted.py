"""kill -9 during `split`: what is on disk afterwards is the previous set or the complete new one, never a mix, and
the next run leaves no temporary behind.

Two ways to interrupt: a child process that SIGKILLs itself just before its k-th file-system step (every fsync,
rename, link, chmod, unlink, removal and the directory exchange, for every k: each crash point is visited once),
and the real command (its own process) killed at file-system steps spread over its run.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.data.read import Fields
from campaign.data.split import MANIFEST_NAME, load_manifest, split_file

from .conftest import sentence, write_jsonl

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": sentence(rng), "label": rng.choice("abc"), "user": f"u{rng.randrange(n // 3)}"}
            for _ in range(n)]


def _snapshot(out: Path) -> dict[str, str] | None:
    """{file name: sha256} of the files in the folder, the manifest by the seed it records (it also holds its
    creation time and paths, which differ between two writes of the same split); None when there is no folder."""
    if not out.exists():
        return None
    snap = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())
            if p.name != MANIFEST_NAME}
    if (out / MANIFEST_NAME).exists():
        snap[MANIFEST_NAME] = str(json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))["seed"])
    return snap


def _complete(out: Path) -> bool:
    """The folder holds a manifest whose every split file is there with the bytes it names."""
    try:
        load_manifest(out / MANIFEST_NAME)
    except Exception:
        return False
    return True


_STEPS = ("fsync", "rename", "replace", "link", "chmod", "unlink", "rmdir")


def _run_killed_at(k: int | None, data: Path, out: Path, seed: int, force: bool) -> int:
    """Run split_file in a forked child that SIGKILLs itself before its k-th file-system step (None: never);
    return how many steps it took (from the child, through a pipe) or -1 when it was killed."""
    return _killed_at(k, lambda: split_file(data, out, Fields(label="label", group=("user",)), ratios="80/10/10",
                                            seed=seed, force=force))


def _killed_at(k: int | None, work) -> int:
    """Run work() in a forked child that SIGKILLs itself before its k-th file-system step (None: never)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            import shutil

            import campaign.io as cio

            count = [0]

            def step(fn):
                def wrapped(*a, **kw):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*a, **kw)
                return wrapped

            for name in _STEPS:
                setattr(os, name, step(getattr(os, name)))
            cio._exchange = step(cio._exchange)
            shutil.rmtree = step(shutil.rmtree)
            work()
            os.write(write, str(count[0]).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    answer = os.read(read, 64)
    os.close(read)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return -1
    return int(answer)


def _leftovers(parent: Path, out: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{out.name}")]


def test_a_kill_at_every_step_leaves_nothing_or_the_complete_set(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(600, 1))
    out = tmp_path / "o"
    steps = _run_killed_at(None, data, out, seed=0, force=False)
    assert steps >= 8 and _complete(out)
    full = _snapshot(out)
    outcomes = []
    for k in range(1, steps + 1):
        fresh = tmp_path / f"fresh{k}"
        assert _run_killed_at(k, data, fresh, seed=0, force=False) == -1
        state = _snapshot(fresh)
        assert state is None or (state == full and _complete(fresh)), (k, state)
        outcomes.append(state is not None)
        # the next run cleans up and completes
        assert _run_killed_at(None, data, fresh, seed=0, force=True) > 0
        assert _snapshot(fresh) == full and _leftovers(tmp_path, fresh) == []
    assert not outcomes[0] and outcomes[-1]       # killed early: nothing; killed while cleaning up: the full set


def test_a_kill_at_every_step_of_a_forced_resplit_keeps_the_old_set_or_the_new_one(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(600, 2))
    out, probe = tmp_path / "o", tmp_path / "probe"
    for folder in (out, probe):
        _run_killed_at(None, data, folder, seed=0, force=False)
        (folder / "notes.txt").write_text("mine\n", encoding="utf-8")     # a user's file in the folder is kept
    old = _snapshot(out)
    _run_killed_at(None, data, probe, seed=7, force=True)
    new = _snapshot(probe)
    assert new != old and new["notes.txt"] == old["notes.txt"] and new.keys() == old.keys()
    outcomes = set()
    for k in range(1, 100):
        code = _run_killed_at(k, data, out, seed=7, force=True)
        state = _snapshot(out)
        assert _complete(out) and state in (old, new), (k, state)
        outcomes.add("new" if state == new else "old")
        if code != -1:
            assert state == new
            break
        _run_killed_at(None, data, out, seed=0, force=True)      # back to the old set for the next crash point
        assert _snapshot(out) == old and _leftovers(tmp_path, out) == []
    else:
        pytest.fail("the re-split never completed")
    assert k > 8 and outcomes == {"old", "new"}   # crash points before and after the swap were both visited


def test_the_real_command_killed_at_steps_spread_over_its_run(tmp_path):
    """`campaign split` as a user runs it (`python -m campaign`, its own process), SIGKILLed during a --force re-split
    of 20,000 rows at six of its file-system steps spread from the first to the last: each kill lands at the same
    point on any machine, however loaded (a kill after a delay would land wherever the load put the command)."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(20_000, 3))
    out, counted = tmp_path / "o", tmp_path / "steps"
    args = ["split", str(data), "--out", str(out), "--label", "label", "--group", "user", "--force"]
    # the command in a fresh interpreter that SIGKILLs itself just before its k-th file-system step (0: never) and
    # otherwise writes how many it took; the same steps as _killed_at counts
    code = ("import os, runpy, shutil, signal, sys\n"
            "import campaign.io as cio\n"
            "k, counted, steps = int(sys.argv[1]), sys.argv[2], sys.argv[3].split(',')\n"
            "count = [0]\n"
            "def step(fn):\n"
            "    def wrapped(*a, **kw):\n"
            "        count[0] += 1\n"
            "        if count[0] == k:\n"
            "            os.kill(os.getpid(), signal.SIGKILL)\n"
            "        return fn(*a, **kw)\n"
            "    return wrapped\n"
            "for name in steps:\n"
            "    setattr(os, name, step(getattr(os, name)))\n"
            "cio._exchange = step(cio._exchange)\n"
            "shutil.rmtree = step(shutil.rmtree)\n"
            "sys.argv = ['campaign', *sys.argv[4:]]\n"
            "try:\n"
            "    runpy.run_module('campaign', run_name='__main__', alter_sys=True)\n"
            "finally:\n"
            "    open(counted, 'w').write(str(count[0]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def split(k: int, seed: int) -> int:
        done = subprocess.run([sys.executable, "-c", code, str(k), str(counted), ",".join(_STEPS), *args,
                               "--seed", str(seed)], capture_output=True, env=env)
        assert done.returncode in (0, -signal.SIGKILL), done.stderr.decode()
        return done.returncode

    assert split(0, 0) == 0
    old = _snapshot(out)
    assert split(0, 0) == 0 and _snapshot(out) == old        # a forced re-split of the same seed: the same set
    steps = int(counted.read_text())
    kill_at = sorted({1 + round(i * (steps - 1) / 5) for i in range(6)})
    assert steps >= 8 and len(kill_at) == 6
    outcomes = []
    for trial, k in enumerate(kill_at):
        assert split(k, trial + 1) == -signal.SIGKILL, k
        state = _snapshot(out)
        assert _complete(out), (trial, k)
        manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
        assert state == old or manifest["seed"] == trial + 1, (trial, k)
        outcomes.append("old" if state == old else "new")
        old = state
    assert outcomes[0] == "old" and "new" in outcomes     # killed at its first step: the earlier set; late: the new
    assert split(0, 9) == 0
    assert _leftovers(tmp_path, out) == [] and _complete(out)


def test_leaks_drop_to_killed_at_every_step_leaves_nothing_or_the_complete_set(tmp_path):
    from campaign.data.leak_files import CLEAN_MANIFEST
    from campaign.data.leaks import check_files

    rows = _rows(300, 4)
    train = write_jsonl(tmp_path / "train.jsonl", rows[:200])
    evals = write_jsonl(tmp_path / "eval.jsonl", rows[150:])          # 50 rows copied from train: they leak
    def work(out):
        return lambda: check_files([train, evals], Fields(label="label", group=("user",)), drop_to=out)

    steps = _killed_at(None, work(tmp_path / "full"))
    full = {p.name: p.read_bytes() for p in (tmp_path / "full").iterdir() if p.name != CLEAN_MANIFEST}
    assert steps >= 6 and len(full) == 3
    outcomes = []
    for k in range(1, steps + 1):
        out = tmp_path / f"k{k}"
        assert _killed_at(k, work(out)) == -1
        state = {p.name: p.read_bytes() for p in out.iterdir() if p.name != CLEAN_MANIFEST} if out.exists() else None
        assert state is None or (state == full and (out / CLEAN_MANIFEST).exists()), k
        outcomes.append(state is not None)
    assert not outcomes[0] and outcomes[-1]
