"""The report's runs-over-time and quantization figures read right: a legend names the status colours, runs minutes
(or seconds) apart get distinct tick labels, and the quant plot draws each variant's change from the reference with
its paired interval on an axis that does not blow up a change within noise."""
from __future__ import annotations

import pytest


def _runs(step_seconds: int, n: int = 7) -> list[dict[str, object]]:
    statuses = ["completed", "failed", "completed", "stopped", "completed", "completed", "failed"]
    return [{"created": f"2026-11-01T10:{(i * step_seconds) // 60:02d}:{(i * step_seconds) % 60:02d}Z",
             "name": f"r{i}", "status": statuses[i % len(statuses)],
             "decision": "accepted" if i == 4 else "rejected" if i == 2 else None} for i in range(n)]


@pytest.mark.parametrize("step_seconds", [120, 20])
def test_runs_minutes_or_seconds_apart_get_distinct_tick_labels(step_seconds):
    pytest.importorskip("matplotlib")
    from campaign.plots import runs_over_time

    fig = runs_over_time(_runs(step_seconds))
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(label.startswith("2026-11-01") for label in labels)      # each names its day


def test_runs_over_time_names_its_colours():
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from campaign.plots import runs_over_time
    from campaign.plots.records import STATUS_COLORS

    fig = runs_over_time(_runs(120))
    legend = fig.axes[0].get_legend()
    assert legend is not None
    names = [t.get_text() for t in legend.get_texts()]
    assert names == ["completed", "failed", "stopped", "accepted", "rejected"]
    for text, handle in zip(names[:3], legend.legend_handles[:3], strict=True):
        assert to_hex(handle.get_facecolor()[0]) == STATUS_COLORS[text]


def _quant(metric: str, variants: list[dict[str, object]], examples: int = 300) -> dict[str, object]:
    return {"model": "m", "metric": metric, "reference": "bf16", "device": "cpu",
            "evaluation": {"examples": examples}, "variants": variants}


def _error_bar(ax, index: int) -> tuple[float, float]:
    """The (low, high) of the index-th error bar drawn, in data units."""
    segments = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    (low_xy, high_xy) = segments[index].get_segments()[0]
    return float(low_xy[1]), float(high_xy[1])


def test_the_quant_plot_draws_the_change_with_its_interval_from_a_meaningful_baseline():
    pytest.importorskip("matplotlib")
    from campaign.plots import quant

    # perplexity 169.20 -> 169.30: +0.0591% of the reference; the interval of the per-example mean NLL difference
    # (-0.001, 0.003) is exp(d) - 1: -0.09995% to +0.30045% (by hand: e^-0.001 = 0.9990005, e^0.003 = 1.0030045)
    fig = quant(_quant("perplexity", [
        {"name": "bf16", "weight_bytes_stored": 2 * 2**30, "quality": 169.20, "status": "reference"},
        {"name": "int8", "weight_bytes_stored": 2**30, "quality": 169.30, "delta": 0.10, "interval": [-0.001, 0.003],
         "status": "pass"}]))
    ax = fig.axes[0]
    low, high = _error_bar(ax, 0)
    assert low == pytest.approx(-0.099950, abs=1e-5) and high == pytest.approx(0.300450, abs=1e-5)
    bottom, top = ax.get_ylim()
    assert bottom <= -1 and top >= 1                     # a 0.06% change does not fill the axis
    assert ax.get_xlim()[0] == 0                         # memory from zero: 1 GiB is half of 2 GiB on the page
    assert "169.2" in ax.get_ylabel()


def test_the_quant_plot_gives_an_accuracy_change_the_paired_interval_of_its_flips():
    pytest.importorskip("matplotlib")
    from campaign.plots import quant

    # b = 10 right to wrong, c = 4 wrong to right of n = 300: change (4 - 10) / 300 = -2 points; Wald interval
    # +/- 1.96 sqrt(14 - 36/300) / 300 = 1.96 x 3.725587 / 300 = +/- 0.0243405 (by hand): -4.43405 to +0.43405 points
    fig = quant(_quant("classification", [
        {"name": "bf16", "weight_bytes_stored": 2**30, "quality": 0.9, "status": "reference"},
        {"name": "int4", "weight_bytes_stored": 2**28, "quality": 0.88, "delta": -0.02, "interval": None,
         "flips": [10, 4], "status": "pass"}]))
    low, high = _error_bar(fig.axes[0], 0)
    assert low == pytest.approx(-4.43405, abs=1e-4) and high == pytest.approx(0.43405, abs=1e-4)
