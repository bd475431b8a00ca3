"""The files `campaign quant` writes: the table as CSV (--csv) and memory against quality as a figure (--plot)."""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from ..io import atomic_write_text
from .result import QuantReport

CSV_COLUMNS = ("variant", "library", "memory_format", "weight_bytes_estimated", "weight_bytes_stored",
               "weight_bytes_measured", "peak_bytes_measured", "kv_bytes_estimated", "required_bytes_estimated",
               "smallest_card", "cheapest_card", "hourly_cents", "metric", "quality", "delta",
               "p_value", "ms_per_token", "status", "guards_failed")


def write_csv(report: QuantReport, path: str | os.PathLike[str]) -> Path:
    """The table, one row per variant, written atomically."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for v in report.variants:
        w.writerow([v.name, v.library, v.memory_format, _cell(v.weight_bytes_estimated), v.weight_bytes_stored,
                    v.weight_bytes_measured, v.peak_bytes_measured, _cell(v.kv_bytes_estimated),
                    _cell(v.required_bytes_estimated), v.smallest_card or "", v.cheapest_card or "",
                    _cell(v.hourly_cents), report.metric,
                    f"{v.quality:.6g}", _cell(v.delta, ".6g"), _cell(v.p_value, ".4g"),
                    _cell(v.ms_per_token, ".4g"), v.status, ";".join(g.expression for g in v.guards if not g.passed)])
    return atomic_write_text(path, buf.getvalue())


def _cell(x: Any, fmt: str = "") -> str:
    return "" if x is None else format(x, fmt)


def plot_quant(report: QuantReport, path: str | os.PathLike[str]) -> Path:
    """Memory (stored weight bytes) against quality, one point per variant, flagged ones in red."""
    from ..evaluate.plots import _check_path, _figure, _save

    p = _check_path(path)
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    unit, div = ("GiB", 2 ** 30) if max(v.weight_bytes_stored for v in report.variants) >= 2 ** 30 else ("MiB", 2 ** 20)
    for v in report.variants:
        colour = "tab:red" if v.flagged else ("tab:gray" if v.status == "reference" else "tab:blue")
        x = v.weight_bytes_stored / div
        ax.scatter([x], [v.quality], color=colour, zorder=3)
        ax.annotate(v.name + (" (flagged)" if v.flagged else ""), (x, v.quality), textcoords="offset points",
                    xytext=(5, 4), fontsize=9)
    ax.margins(x=0.2, y=0.2)
    ax.set_xlabel(f"weights stored ({unit})")
    ax.set_ylabel("perplexity (lower is better)" if report.metric == "perplexity" else f"{report.metric} accuracy")
    ax.set_title(f"{report.model}: memory against quality\n{report.evaluation.examples} examples, reference "
                 f"{report.reference}, on {report.device}", fontsize=10)
    ax.grid(True, alpha=0.3)
    return _save(fig, p)
