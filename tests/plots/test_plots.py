"""The figures: each a function of a result's dict, drawn without touching matplotlib's global state (backend,
rcParams, pyplot's figures), the same whether written for --plot or inlined in the report."""
from __future__ import annotations

import sys

import pytest

from campaign.errors import InputError

GiB = 2**30

# The dicts below have the shape of each result's to_dict() (only the keys the figures read).
MEMORY = {"model": "m", "required_bytes": 20 * GiB, "device_bytes": 18 * GiB,
          "phases": [{"name": "load", "items": [{"category": "weights", "bytes": 16 * GiB}]},
                     {"name": "step", "items": [{"category": "weights", "bytes": 16 * GiB},
                                                {"category": "activations", "bytes": 2 * GiB}]}],
          "fits": [{"card": "a100-80g", "memory_bytes": 80 * GiB, "verdict": "fits"},
                   {"card": "l4", "memory_bytes": 24 * GiB, "verdict": "tight"}]}
MEASURED = {"phases": [{"name": "forward", "peak_allocated_bytes": GiB, "peak_reserved_bytes": 2 * GiB}]}
ERRORS = {"labels": ["a", "b"], "matrix": [[3, 1], [0, 4]], "matrix_normalized": [[0.75, 0.25], [0.0, 1.0]],
          "accuracy": 0.875, "examples": 8}
FIELDS = {"fields": [{"field": "name", "exact_rate": 0.5, "normalized_rate": 1.0}], "valid_json": 0.5,
          "accuracy": 0.5, "examples": 2}
SEEDS = {"baseline": "base", "candidate": "cand", "metric": "acc", "higher_is_better": True, "n_seeds": 3,
         "baseline_values": [1.0, 2.0, 3.0], "candidate_values": [2.0, 2.5, 3.5], "differences": [1.0, 0.5, 0.5],
         "mean_diff": 0.667, "ci_low": -0.05, "ci_high": 1.38, "min_effect": 0.2, "verdict": "inconclusive",
         "bootstrap": {"method": "percentile", "low": 0.5, "high": 1.0}}
SCHEDULE = {"cards": 2, "runs": [{"phase": "sweep", "cards": [0], "start_hours": 0, "end_hours": 3},
                                 {"phase": "final", "cards": [0, 1], "start_hours": 3, "end_hours": 5}]}
QUANT = {"model": "m", "metric": "perplexity", "reference": "bf16", "device": "cpu", "evaluation": {"examples": 4},
         "variants": [{"name": "bf16", "weight_bytes_stored": 2 * 2**20, "quality": 10.0, "status": "reference"},
                      {"name": "nf4", "weight_bytes_stored": 2**19, "quality": 12.0, "status": "flagged"}]}


def _every_figure():
    from campaign import plots

    return [plots.memory_phases(MEMORY, "t"), plots.card_fit(MEMORY, "t"), plots.measured_phases(MEASURED, "t"),
            plots.side_by_side([("estimated", {"step": GiB}), ("measured", {"step": 2 * GiB})], "t"),
            plots.confusion(ERRORS), plots.confusion(ERRORS, "t"), plots.fields(FIELDS), plots.seeds(SEEDS),
            plots.seeds(SEEDS, "t"), plots.gantt(SCHEDULE, "t", window=4.0), plots.quant(QUANT),
            plots.runs_over_time([{"created": "2026-11-01T10:00:00Z", "name": "r", "status": "completed",
                                   "decision": "accepted"}]),
            plots.histogram({"fits": [1.0, 2.0, 30.0]}, "GiB", "t", lines={"l4": 24.0}, band=0.5),
            plots.against({"traced": [(1.0, 1.1), (2.0, 2.2)]}, "x", "y", "t")]


def test_drawing_leaves_the_backend_rcparams_and_pyplot_alone(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    from campaign import plots

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": None, "font.size": 13}):  # a user's own
        backend = matplotlib.get_backend()
        before = dict(matplotlib.rcParams)
        open_figures = sys.modules["matplotlib.pyplot"].get_fignums() if "matplotlib.pyplot" in sys.modules else None
        figures = _every_figure()
        assert all(f is not None for f in figures)
        inline = [plots.svg(f) for f in figures]
        for i, f in enumerate(figures):
            plots.write(f, tmp_path / f"f{i}.svg")
        plots.write(figures[0], tmp_path / "f.png")
        assert matplotlib.get_backend() == backend
        assert dict(matplotlib.rcParams) == before
        if open_figures is not None:
            assert sys.modules["matplotlib.pyplot"].get_fignums() == open_figures
        # the report's settings applied all the same: text as paths, ids from the fixed salt
        assert all(s.startswith("<svg") and "<text" not in s for s in inline)
        assert plots.svg(plots.seeds(SEEDS, "t")) == inline[8]               # the same dict, the same picture


def test_each_figure_is_none_without_what_it_needs():
    pytest.importorskip("matplotlib")
    from campaign import plots

    empty = {}
    assert [plots.memory_phases(empty, "t"), plots.card_fit(empty, "t"), plots.measured_phases(empty, "t"),
            plots.side_by_side([], "t"), plots.confusion(empty), plots.fields(empty), plots.seeds(empty),
            plots.gantt(empty), plots.quant(empty), plots.runs_over_time([]), plots.histogram({}, "x", "t"),
            plots.against({}, "x", "y", "t")] == [None] * 12
    assert plots.svg(None) == ""
    # an old errors record without the normalized matrix: the shares are worked out from the counts
    old = {k: v for k, v in ERRORS.items() if k != "matrix_normalized"}
    assert plots.svg(plots.confusion(old)) == plots.svg(plots.confusion(ERRORS))


def test_write_checks_the_suffix_and_is_atomic(tmp_path):
    pytest.importorskip("matplotlib")
    from campaign import plots

    with pytest.raises(InputError, match=r"use \.png, \.svg or \.pdf"):
        plots.write(plots.seeds(SEEDS), tmp_path / "x.jpg")
    with pytest.raises(InputError, match="nothing to draw"):
        plots.write(None, tmp_path / "x.png")
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    plots.write(plots.seeds(SEEDS), a)
    plots.write(plots.seeds(SEEDS), b)
    assert a.read_bytes() == b.read_bytes()                                  # no date, stable ids
    plots.write(plots.quant(QUANT), tmp_path / "sub" / "q.pdf")
    assert (tmp_path / "sub" / "q.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.svg", "b.svg", "q.pdf", "sub"]   # no temporary left


def test_many_runs_are_one_figure_of_bounded_size():
    pytest.importorskip("matplotlib")
    from campaign.plots import RUNS_DOTTED, runs_over_time, svg

    runs = [{"created": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00Z", "name": f"sweep-{i}",
             "status": ("completed", "failed", "stopped")[i % 3], "decision": "accepted" if i % 50 == 0 else None}
            for i in range(RUNS_DOTTED * 4)]
    drawn = svg(runs_over_time(runs))
    assert drawn.startswith("<svg") and f"{RUNS_DOTTED * 4:,} runs by start time and status (40 accepted" in drawn
    assert len(drawn) < 150_000                                # not one mark and one name per run
    few = svg(runs_over_time(runs[:10]))
    assert few.startswith("<svg")
