"""campaign models on a narrow terminal: every name is shown whole, and the name shown is one every command takes."""
from __future__ import annotations

import os
import subprocess
import sys


def test_models_never_cuts_a_name_at_80_columns(cli):
    from campaign.models import catalog_names

    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-m", "campaign", "models"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    shown = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│") and
             line.split("│")[1].strip()]
    names = catalog_names()
    assert len(shown) == len(names)
    for name, full in zip(shown, names, strict=True):
        assert full.endswith("/" + name) or full == name
        assert cli("models", name, "--json").json()["name"] == full


def test_a_model_without_attention_heads_shows_no_head_rows(cli):
    """mamba-130m-hf's config has no attention heads: the facts say so, never "1 head, 0 KV heads, GQA"."""
    r = cli("models", "mamba-130m-hf")
    assert r.code == 0, r.err
    assert "none in the config" in r.out
    assert "KV heads" not in r.out and "GQA" not in r.out
