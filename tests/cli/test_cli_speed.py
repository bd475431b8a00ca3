"""benchmarks/cli_speed.py's helpers: a cold run's CPU seconds come from the child, a run past its timeout is cut
and reported as such, and the --help lines cover every sub-command."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cli_speed", ROOT / "benchmarks" / "cli_speed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cli_speed"] = module   # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["cli_speed"]


def test_a_cold_run_reports_the_childs_cpu_and_wall_seconds(bench, tmp_path):
    run = bench.run_once(["--help"], cwd=tmp_path)
    assert run.code == 0 and 0 < run.cpu_s < 30 and run.wall_s > 0
    fig = bench.Figure(("--help",), 0.3, (run, bench.Run(run.cpu_s + 1, run.wall_s, 0), run))
    assert fig.cpu_s == run.cpu_s                       # the median of the three
    assert fig.verdict == ("ok" if run.cpu_s <= 0.3 else "SLOW (goal 0.3 CPU-s)")
    assert bench.Figure(("x",), None, (run,)).verdict == "-"


def test_a_run_past_its_timeout_is_cut_and_said_so(bench, tmp_path):
    fig = bench.measure(["--help"], goal_cpu_s=0.3, n=3, cwd=tmp_path, timeout_s=0.001)
    assert len(fig.runs) == 1 and fig.runs[0].code is None   # killed at once, not retried
    assert fig.verdict == "timeout" and fig.line().endswith("timeout")


def test_the_help_lines_cover_every_sub_command(bench):
    lines = {" ".join(args) for args in bench.help_lines()}
    assert {"--help", "memory --help", "run start --help", "runs list --help", "ablate analyze --help"} <= lines
