"""The figures read on their own: labelled axes and colour bars, legends beside the data (never over a bar or a
point), bars that do not meet the frame and carry their totals, labels inside the frame, dates on a time axis.
Checked on the drawn figures' own objects (window extents in pixels), not by eye."""
from __future__ import annotations

import re

import pytest

from tests.plots.test_plots import MEASURED, MEMORY, QUANT, SEEDS, GiB, _every_figure


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _plot_axes(fig):
    """The axes that plot data (not a colour bar's)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_every_axis_and_colour_bar_is_labelled():
    pytest.importorskip("matplotlib")
    for fig in _every_figure():
        _drawn(fig)
        for ax in fig.axes:
            name = ax.get_title() or fig.get_suptitle() or "?"
            if ax.get_label() == "<colorbar>":
                assert ax.get_ylabel(), f"{name}: an unlabelled colour bar"
                continue
            assert ax.get_xlabel(), f"{name}: no x label"
            assert ax.get_ylabel(), f"{name}: no y label"


def _data_extents(ax, renderer):
    """Window extents of what an axes plots: bars (rectangles), points (collections), lines with markers."""
    from matplotlib.patches import Rectangle

    out = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle) and p.get_height()
           and p.get_width()]
    from matplotlib.transforms import Bbox

    for c in ax.collections:                              # scatter points: each point's pixel position
        for x, y in ax.transData.transform(c.get_offsets()):
            out.append(Bbox([[x - 2, y - 2], [x + 2, y + 2]]))
    return out


def test_no_legend_covers_a_bar_or_a_point():
    pytest.importorskip("matplotlib")
    checked = 0
    for fig in _every_figure():
        renderer = _drawn(fig)
        for ax in _plot_axes(fig):
            legend = ax.get_legend()
            if legend is None:
                continue
            box = legend.get_window_extent(renderer)
            for extent in _data_extents(ax, renderer):
                assert not box.overlaps(extent), f"{ax.get_title()}: the legend covers data at {extent}"
            checked += 1
    assert checked >= 8                  # memory phases, card fit, measured, side by side, fields, seeds, hist, y = x


def _bar_charts():
    from campaign import plots

    return [plots.memory_phases(MEMORY, "t"), plots.card_fit(MEMORY, "t"), plots.measured_phases(MEASURED, "t"),
            plots.side_by_side([("estimated", {"step": GiB}), ("measured", {"step": 2 * GiB})], "t")]


def test_bars_stop_short_of_the_frame_and_carry_their_totals():
    pytest.importorskip("matplotlib")
    phases, fit, measured, side = (fig.axes[0] for fig in _bar_charts())
    # the stacked phases: load 16 GiB, step 16 + 2 = 18 GiB, summed here from the dict
    assert [t.get_text() for t in phases.texts] == ["16 GiB", "18 GiB"]
    assert phases.get_ylim()[1] > 18 * 1.1
    assert [t.get_text() for t in fit.texts] == ["80 GiB", "24 GiB"] and fit.get_xlim()[1] > 80 * 1.1
    assert sorted(t.get_text() for t in measured.texts) == ["1", "2"] and measured.get_ylim()[1] > 2 * 1.1
    assert sorted(t.get_text() for t in side.texts) == ["1", "2"] and side.get_ylim()[1] > 2 * 1.1


def test_labels_stay_inside_the_frame():
    pytest.importorskip("matplotlib")
    from campaign import plots

    wide = {**QUANT, "variants": [*QUANT["variants"], {"name": "a-very-long-variant-name-int4-awq-g128",
                                                         "weight_bytes_stored": 3 * 2**20, "quality": 11.0,
                                                         "status": "flagged"}]}
    runs = [{"created": f"2026-11-0{1 + i}T10:00:00Z", "name": f"a-long-run-name-number-{i}", "status": "completed"}
            for i in range(5)]
    figures = [plots.quant(wide), plots.runs_over_time(runs), *_bar_charts()]
    for fig in figures:
        renderer = _drawn(fig)
        for ax in _plot_axes(fig):
            frame = ax.get_window_extent(renderer)
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                assert frame.x0 - 0.5 <= box.x0 and box.x1 <= frame.x1 + 0.5, f"{text.get_text()!r} crosses the frame"
                assert frame.y0 - 0.5 <= box.y0 and box.y1 <= frame.y1 + 0.5, f"{text.get_text()!r} crosses the frame"


def test_the_time_axis_of_runs_shows_dates():
    pytest.importorskip("matplotlib")
    from campaign import plots

    runs = [{"created": f"2026-11-03T1{i}:00:00Z", "name": f"r{i}", "status": "completed"} for i in range(3)]
    many = [{"created": f"2026-11-{1 + i % 20:02d}T{i % 24:02d}:00:00Z", "name": f"r{i}", "status": "failed"}
            for i in range(plots.RUNS_DOTTED + 1)]
    for fig in (plots.runs_over_time(runs), plots.runs_over_time(many)):
        _drawn(fig)
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert labels and all(re.match(r"2026-11-\d\d", label) for label in labels), labels
        assert "UTC" in ax.get_xlabel()


def test_the_seeds_figure_is_labelled_on_both_panels():
    pytest.importorskip("matplotlib")
    from campaign import plots

    left, right = plots.seeds(SEEDS).axes
    assert left.get_xlabel() and right.get_xlabel() and right.get_ylabel().startswith("difference")


def test_loss_curves_are_one_line_per_run_named_in_a_legend():
    pytest.importorskip("matplotlib")
    from campaign import plots

    fig = plots.curves({"a: loss": [(2, 1.0), (1, 2.0)], "b: loss": [(1, 3.0)]}, "loss", "t")
    ax = fig.axes[0]
    assert [list(line.get_xdata()) for line in ax.lines] == [[1, 2], [1]]      # sorted by step
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a: loss", "b: loss"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "loss"
    assert plots.curves({}, "loss", "t") is None
