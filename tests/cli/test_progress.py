"""Progress on long work: on stderr, only on a terminal, never under --json. A real pseudo-terminal run shows the
spinner of one command; the data commands hand the library's own progress bars the right switch."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "examples" / "data" / "seeds.csv"


def _run_with_stderr_on_a_terminal(*args: str, command: tuple[str, ...] = ("-m", "campaign")) -> tuple[int, str, str]:
    """`campaign ARGS` (or `python COMMAND ARGS`) in a fresh process whose stderr is a pseudo-terminal and stdout a
    pipe: (code, out, err)."""
    pytest.importorskip("numpy")
    main, follower = os.openpty()
    err: list[bytes] = []

    def drain() -> None:  # read as it comes, so a full terminal buffer never blocks the command
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the command has exited and its end of the terminal is closed
                return
            if not chunk:
                return
            err.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        r = subprocess.run([sys.executable, *command, *args], stdout=subprocess.PIPE, stderr=follower,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120"})
    finally:
        os.close(follower)
        reader.join(timeout=10)
        os.close(main)
    return r.returncode, r.stdout.decode(), b"".join(err).decode(errors="replace")


def test_a_terminal_sees_the_spinner_and_json_does_not():
    code, out, err = _run_with_stderr_on_a_terminal("seeds", str(SEEDS), "--resamples", "200")
    assert code == 0, err
    assert "seeds: 200 bootstrap resamples" in err      # the phase, on stderr
    assert "seeds: " not in out                          # the result alone on stdout
    code, out, err = _run_with_stderr_on_a_terminal("seeds", str(SEEDS), "--resamples", "200", "--json")
    assert code == 0, err
    assert "bootstrap resamples" not in err and out.lstrip().startswith("{")


def test_no_spinner_when_stderr_is_not_a_terminal():
    r = subprocess.run([sys.executable, "-m", "campaign", "seeds", str(SEEDS), "--resamples", "200"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


SLOW = """
import sys, time
from campaign.cli.render import progress_after
with progress_after("reading a big model", after=0.2, enabled=sys.argv[2] == "on"):
    time.sleep(float(sys.argv[1]))
"""


def test_slow_work_shows_its_spinner_after_a_while_and_fast_work_none():
    code, _, err = _run_with_stderr_on_a_terminal("1.5", "on", command=("-c", SLOW))
    assert code == 0 and "reading a big model" in err
    code, _, err = _run_with_stderr_on_a_terminal("0", "on", command=("-c", SLOW))
    assert code == 0 and err == ""  # done before the spinner was due: nothing printed
    code, _, err = _run_with_stderr_on_a_terminal("1.5", "off", command=("-c", SLOW))
    assert code == 0 and err == ""  # --json turns it off


def test_the_model_is_read_under_that_spinner(monkeypatch):
    from campaign.cli import common

    seen = []

    class Spy:
        def __init__(self, label, *, after=1.0, enabled=True):
            seen.append((label, enabled))

        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr("campaign.cli.render.progress_after", Spy)
    assert common.load_model("llama-3.2-1b", as_json=True).name
    assert seen == [("reading llama-3.2-1b", False)]


def test_progress_reporter_is_a_no_op_when_not_enabled(monkeypatch):
    from campaign.cli.render import progress_reporter

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress_reporter("x", enabled=False) as tell:
        assert tell("phase") is None


@pytest.mark.parametrize("as_json, expected", [(False, None), (True, False)])
def test_leaks_and_split_hand_the_library_its_progress_switch(monkeypatch, tmp_path, as_json, expected):
    """None lets the library show its bars of rows sketched when stderr is a terminal; --json turns them off."""
    import campaign.data.leaks
    import campaign.data.split

    seen = {}

    class Stop(Exception):
        pass

    def record(name):
        def call(*args, **kwargs):
            seen[name] = kwargs.get("progress", "missing")
            raise Stop

        return call

    monkeypatch.setattr(campaign.data.leaks, "check_files", record("leaks"))
    monkeypatch.setattr(campaign.data.split, "split_file", record("split"))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"text": "x"}\n')
    b.write_text('{"text": "y"}\n')
    flag = ["--json"] if as_json else []
    with pytest.raises(Stop):
        from campaign.cli import main

        main(["leaks", str(a), str(b), *flag, "--debug"])
    with pytest.raises(Stop):
        main(["split", str(a), "--out", str(tmp_path / "out"), *flag, "--debug"])
    assert seen == {"leaks": expected, "split": expected}
