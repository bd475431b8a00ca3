"""The report's tables print what a reader writes, never a Python repr: a changed parameter set as 'r=8', a guard
that held as 'yes', nothing as '-'."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from campaign.track.run import end_run, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_tables_hold_no_python_reprs(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    base = start_run("baseline", params={"lora": {"r": 8, "alpha": 16}}, with_torch=False)
    end_run(base.id, "completed")
    run = start_run("lora-r16", params={"lora": {"r": 16, "alpha": 16}}, baseline=base.id, with_torch=False)
    end_run(run.id, "completed")
    assert cli("--record", "regress", str(EXAMPLES / "data" / "baseline.jsonl"),
               str(EXAMPLES / "data" / "candidate.jsonl"), "--guard", "accuracy>=-0.01").code in (0, 1)
    assert cli("report", "--out", "report.html").code == 0
    html = Path("report.html").read_text()
    cells = re.findall(r"<td>(.*?)</td>", html, re.S)
    assert cells
    reprs = [c for c in cells if re.search(r"\{&#x27;|\{'|^(True|False|None)$|\[&#x27;", c)]
    assert reprs == []
    # the baseline's parameter set where it differs, written as the reader writes it
    assert "<td>lora.r</td><td>16</td><td>8</td>" in html and "<td>lora.alpha</td><td>16</td><td></td>" in html
    # the guard held (accuracy rose by 0.06 on the example files): 'yes'
    assert re.search(r"<td>accuracy&gt;=-0.01</td><td>[^<]*</td><td>yes</td>", html)
