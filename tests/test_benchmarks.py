"""The GPU check is one prepared run on a lent card: its --dry-run (tiny models on the CPU) must work end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_writes_every_workload(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(rows) == 6 and not any("failed" in row for row in rows)
    for row in rows:
        # on the CPU, the formula and the trace each land within 15% of the measured peak of every phase
        for p in row["phases"]:
            assert 0.85 < p["analytic"] / p["measured"] < 1.15, (row["label"], p)
            assert 0.85 < p["traced"] / p["measured"] < 1.15, (row["label"], p)
        gaps = row["explain"]["gaps"]
        assert sum(g["bytes"] for g in gaps) == row["measured"]["peak_allocated"] - row["estimate"]["peak_allocated"]
        assert row["explain"]["margin"] >= 0.05


def test_gpu_train_check_dry_run_passes_on_the_cpu_setups(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_train_check.py"), "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "train_check.json").read_text())
    assert [row["setup"] for row in rows] == ["make_setup", "lora_setup"]
    assert all(row["passed"] for row in rows)
    assert rows[1]["checks"]["adapter.reload_equal"] == "pass"


def test_gpu_quant_check_dry_run_compares_the_cpu_formats(tmp_path):
    pytest.importorskip("torchao")
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_quant_check.py"), "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "quant_check.json").read_text())
    assert [row["format"] for row in rows] == ["int8", "int4"] and not any("failed" in row for row in rows)
    for row in rows:
        ref, variant = row["variants"]
        assert variant["weight_bytes_stored"] < ref["weight_bytes_stored"] and variant["p_value"] is not None
