"""batch, inspect (and check, quant, through the same helper) hand the library's phases to the spinner
(render.progress_reporter), and not under --json."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture()
def spinner(monkeypatch):
    import campaign.cli.render as render

    seen: list[tuple[str, str]] = []

    @contextmanager
    def reporter(label, **_kwargs):
        yield lambda phase: seen.append((label, phase))

    monkeypatch.setattr(render, "progress_reporter", reporter)
    return seen


@pytest.mark.parametrize("argv, label, phases", [
    (["batch", f"{EXAMPLES / 'train_setup.py'}:make_setup", "--normalization", "token"], "batch",
     ["building the setup", "gradient 1/3", "gradient 2/3", "gradient 3/3"]),
    (["inspect", f"{EXAMPLES / 'inspect_setup.py'}:make_setup"], "inspect",
     ["building the setup", "collating example 1 of 12", "collating the examples shown"]),
])
def test_the_phases_reach_the_spinner_and_json_turns_it_off(cli, spinner, argv, label, phases):
    r = cli(*argv)
    assert r.code in (0, 1), r.err
    assert {lb for lb, _ in spinner} == {label}
    seen = [p for _, p in spinner]
    firsts = [next((i for i, p in enumerate(seen) if p.startswith(want)), -1) for want in phases]
    assert -1 not in firsts and firsts == sorted(firsts), seen                # each phase, in this order
    spinner.clear()
    r = cli(*argv, "--json")
    assert r.code in (0, 1) and spinner == []
