"""benchmarks/dedup_scale.py --dry-run: the single machine and Ray with 1 and 2 local workers on the same shards,
end to end, with the same rows for every check."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parents[2]


def test_dedup_scale_dry_run_times_each_engine_on_the_same_rows(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dedup_scale.py"), "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((tmp_path / "dedup_scale.json").read_text())
    assert (doc["train"], doc["eval"]) == (2000, 500)
    single, one, two = doc["runs"]
    assert single["engine"] == "single machine" and single["docs_per_s"] > 0
    for run, workers in ((one, 1), (two, 2)):
        assert run["engine"] == f"ray, {workers} worker(s)" and run["same_rows"] is True
        assert run["docs_per_s"] > 0 and run["worker_peak_rss_bytes"] > 2**20 and run["worker_processes"] >= 1
    assert "same rows as the single machine: yes" in r.stdout
