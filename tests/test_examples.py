"""The protocol notebook runs top to bottom (on the CPU here), cell by cell in one namespace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "memory_protocol.ipynb"


def test_memory_protocol_notebook_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    namespace: dict = {}
    code = [c for c in cells if c["cell_type"] == "code"]
    assert len(code) >= 5
    for i, cell in enumerate(code):
        exec(compile("".join(cell["source"]), f"{NOTEBOOK.name}[cell {i}]", "exec"), namespace)
    assert (tmp_path / "measured.json").is_file()
    out = capsys.readouterr().out
    assert "margin" in out and "analytic/measured" in out
