"""The table `campaign quant --csv` writes: one row per variant (its figure, --plot, is campaign.plots.quant)."""
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
               "p_value", "ms_per_token", "status", "guards_failed", "equivalence_margin", "equivalence_p_value")


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
                    _cell(v.ms_per_token, ".4g"), v.status, ";".join(g.expression for g in v.guards if not g.passed),
                    _cell(v.equivalence.margin if v.equivalence else None, "g"),
                    _cell(v.equivalence.p_value if v.equivalence else None, ".4g")])
    return atomic_write_text(path, buf.getvalue())


def _cell(x: Any, fmt: str = "") -> str:
    return "" if x is None else format(x, fmt)
