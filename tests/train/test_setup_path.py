"""A setup file that imports the script beside it (issue 47): `campaign check FILE.py:F` puts the file's folder on
sys.path, as `python FILE.py` does."""
from __future__ import annotations

import sys

from campaign.train.setup import run_factory


def test_a_setup_imports_its_sibling_script(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "sibling_of_the_setup.py").write_text("ROWS = [1, 2, 3]\n")
    (folder / "setup.py").write_text("from sibling_of_the_setup import ROWS\n\n\ndef make():\n    return sum(ROWS)\n")
    monkeypatch.chdir(tmp_path)                      # not the setup's folder: only the fix makes the import work
    monkeypatch.setattr(sys, "path", list(sys.path))  # the test's own change to sys.path is undone
    monkeypatch.delitem(sys.modules, "sibling_of_the_setup", raising=False)
    made, where = run_factory(f"{folder / 'setup.py'}:make")
    assert made == 6 and where.endswith("setup.py:make")
