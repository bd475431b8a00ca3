"""Figures for the evaluate commands: confusion heatmap, per-field match, seed dispersion.

matplotlib is imported here only, through its object-oriented API on the Agg canvas (no pyplot, no global
backend switch), so a notebook's backend is left alone. The format follows the suffix: .png, .svg or .pdf.
Files are written atomically (a temporary file in the same folder, then a rename).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from .analysis import ClassificationReport
from .extraction import ExtractionReport
from .seeds import SeedsReport

FORMATS = (".png", ".svg", ".pdf")


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", "report") from None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _check_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise InputError(f"plot file {str(p)!r} has suffix {p.suffix or '(none)'!r}; use .png, .svg or .pdf")
    return p


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, format=path.suffix.lower()[1:], dpi=150)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def plot_confusion(report: ClassificationReport, path: str | os.PathLike[str]) -> Path:
    """Row-normalized confusion matrix as a heatmap, counts written in the cells (up to 25 labels)."""
    p = _check_path(path)
    k = len(report.labels)
    size = min(3 + 0.55 * k, 24)
    fig = _figure(size + 1.2, size)
    ax = fig.add_subplot()
    im = ax.imshow(report.matrix_normalized, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(k), labels=report.labels, rotation=45, ha="right")
    ax.set_yticks(range(k), labels=report.labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(f"Confusion (row-normalized), accuracy {report.accuracy:.3f}, n = {report.examples}")
    if k <= 25:
        for i, row in enumerate(report.matrix):
            for j, count in enumerate(row):
                if count:
                    share = report.matrix_normalized[i][j]
                    ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                            color="white" if share > 0.5 else "black")
    fig.colorbar(im, ax=ax, label="share of the gold class")
    return _save(fig, p)


def plot_fields(report: ExtractionReport, path: str | os.PathLike[str]) -> Path:
    """Exact and normalized match rate per field, as horizontal bars."""
    p = _check_path(path)
    names = [f.field for f in report.fields]
    fig = _figure(7, 1.5 + 0.35 * max(len(names), 1))
    ax = fig.add_subplot()
    y = list(range(len(names)))
    ax.barh([v + 0.2 for v in y], [f.normalized_rate for f in report.fields], height=0.4, label="normalized")
    ax.barh([v - 0.2 for v in y], [f.exact_rate for f in report.fields], height=0.4, label="exact")
    ax.set_yticks(y, labels=names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("match rate over examples whose gold has the field")
    ax.set_title(f"Valid JSON {report.valid_json:.1%}, all fields right {report.accuracy:.1%}, n = {report.examples}")
    ax.legend(loc="lower right")
    return _save(fig, p)


def plot_seeds(report: SeedsReport, path: str | os.PathLike[str]) -> Path:
    """Left: each seed's metric for both variants, joined per seed. Right: the differences with their mean,
    the t and bootstrap intervals, zero and the minimum useful effect."""
    p = _check_path(path)
    fig = _figure(11, 4.2)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    for a, b in zip(report.baseline_values, report.candidate_values):
        left.plot([0, 1], [a, b], color="0.6", lw=1, marker="o", ms=4)
    left.set_xticks([0, 1], labels=[report.baseline, report.candidate])
    left.set_xlim(-0.4, 1.4)
    left.set_ylabel(report.metric)
    left.set_title(f"{report.n_seeds} seeds, paired")
    d = report.differences
    jitter = [0.04 * ((i % 7) - 3) for i in range(len(d))]
    right.scatter(jitter, d, color="0.4", s=18, zorder=3, label="per seed")
    right.axhline(0, color="0.2", lw=0.8)
    if report.min_effect:
        right.axhline(report.min_effect, color="tab:green", ls="--", lw=1, label=f"min effect {report.min_effect:g}")
    right.plot([0.5], [report.mean_diff], "o", color="tab:blue", zorder=4)
    for x, lo, hi, label, color in ((0.5, report.ci_low, report.ci_high, "t interval", "tab:blue"),
                                    (0.7, report.bootstrap.low, report.bootstrap.high,
                                     f"bootstrap ({report.bootstrap.method})", "tab:orange")):
        if lo is not None or hi is not None:
            ylo = lo if lo is not None else min(d)
            yhi = hi if hi is not None else max(d)
            right.plot([x, x], [ylo, yhi], color=color, lw=3, label=label)
    right.set_xticks([])
    right.set_xlim(-0.4, 1.0)
    sign = "candidate - baseline" if report.higher_is_better else "baseline - candidate"
    right.set_ylabel(f"difference ({sign})")
    right.set_title(f"{report.verdict}: mean {report.mean_diff:+.4g}")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    return _save(fig, p)
