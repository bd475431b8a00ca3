"""Shared fixtures: the CLI run in-process with its real error boundary, and tiny real model configs."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# Human output is checked as text: give every run the same wide terminal, whatever the machine's COLUMNS.
os.environ["COLUMNS"] = "200"


@pytest.fixture(autouse=True)
def _records_in_tmp(tmp_path, monkeypatch):
    """Run records (campaign run, a final-test use) go to the test's own folder, never the repository's .campaign."""
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / ".campaign"))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    """Run `campaign ARGS` through campaign.cli.main; returns exit code, stdout, stderr."""
    from campaign.cli import main

    def run(*args: str) -> Result:
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def tiny_llama(**overrides) -> dict:
    """A real Llama config, small enough to build and run on CPU."""
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=160,
               num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=1000,
               max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="bfloat16")
    cfg.update(overrides)
    return cfg


@pytest.fixture
def write_config(tmp_path):
    """Write a config dict as <tmp>/<name>/config.json and return the dir."""

    def write(cfg: dict, name: str = "model") -> Path:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        return d

    return write
