"""The canvas every figure is drawn on: matplotlib's object-oriented API on the Agg canvas (a `Figure` with a
`FigureCanvasAgg`), never pyplot, so no global backend is chosen and no figure is registered with pyplot's state;
a notebook's backend and rcParams are left as they were. matplotlib is imported inside the functions (the `report`
extra): `campaign --help` does not load it.

A figure goes two ways: `write(fig, path)` for --plot (.png, .svg or .pdf, atomically) and `svg(fig)` for the HTML
report (inline SVG, text drawn as paths, stable ids). The two SVG settings they need (`svg.fonttype`,
`svg.hashsalt`) are matplotlib rcParams with no per-call argument: they are set only while the file is written
(`matplotlib.rc_context`), and rcParams are as they were afterwards.
"""
from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError, MissingDependencyError

FORMATS = (".png", ".svg", ".pdf")
DPI = 150                       # raster files (.png); vector files ignore it
GiB = 2**30
# text as paths (no font is referenced: the same picture everywhere); ids hashed from a fixed salt, so the same
# records give the same file
SVG_RC = {"svg.fonttype": "path", "svg.hashsalt": "campaign"}


def check_path(path: str | os.PathLike[str]) -> Path:
    """The file a figure will be written to, its format from the suffix: .png, .svg or .pdf.

    Raises:
        InputError: another suffix (one line naming the file).
    """
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise InputError(f"plot file {str(p)!r} has suffix {p.suffix or '(none)'!r}; use .png, .svg or .pdf")
    return p


def figure(width: float, height: float, *,
           layout: Literal["constrained", "compressed", "tight"] | None = "constrained") -> Any:
    """A matplotlib Figure of width x height inches on its own Agg canvas (pyplot is never involved).

    Raises:
        MissingDependencyError: matplotlib is not installed (the `report` extra).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", "report") from None
    fig = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(fig)
    return fig


def write(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Save a figure to `path` (.png, .svg or .pdf by its suffix), atomically: a temporary file in the same folder,
    then a rename. An SVG carries no date, so the same figure gives the same file. Returns the path.

    Raises:
        InputError: another suffix, or no figure (None: the result had nothing to draw).
    """
    p = check_path(path)
    if fig is None:
        raise InputError(f"plot file {str(p)!r}: the result has nothing to draw")
    import matplotlib

    p.parent.mkdir(parents=True, exist_ok=True)
    fmt = p.suffix.lower()[1:]
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=p.suffix)
    os.close(fd)
    try:
        with matplotlib.rc_context(SVG_RC):
            fig.savefig(tmp, format=fmt, dpi=DPI, metadata={"Date": None} if fmt == "svg" else None,
                        bbox_inches="tight")      # a legend beside the plot is kept
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def svg(fig: Any) -> str:
    """A figure as an inline SVG string for HTML (no XML prologue, no metadata); '' for None (nothing to draw)."""
    if fig is None:
        return ""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(SVG_RC):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg"):]                 # drop the XML prologue and DOCTYPE: inline in HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)   # RDF metadata (creator, date)


def number(v: Any, default: float = 0.0) -> float:
    """A dict's value as a float for drawing: a number as it is, anything else (None, text) as `default`."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


HEADROOM = 1.18        # a bar chart's value axis reaches this far past its tallest bar: room for the totals


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """The axes' legend beside the plot, right of the frame, so it never covers a bar or a point."""
    return ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kwargs)


def bar_totals(ax: Any, positions: list[float], totals: list[float], *, horizontal: bool = False,
               unit: str = "") -> None:
    """Each bar's total written past its end, with HEADROOM on the value axis so that no bar meets the frame
    and no total crosses it."""
    top = max([t for t in totals if t > 0], default=1.0)
    for x, t in zip(positions, totals, strict=True):
        if horizontal:
            ax.annotate(f"{t:,.3g}{unit}", (t, x), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize=7)
        else:
            ax.annotate(f"{t:,.3g}{unit}", (x, t), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=7)
    (ax.set_xlim if horizontal else ax.set_ylim)(0, top * HEADROOM)


def label_inside(ax: Any, text: str, xy: tuple[float, float], xmid: float, **kwargs: Any) -> Any:
    """A point's label, written on the side of the point that faces the middle of the plot (xmid, in data
    units), so that a label near the right edge does not cross the frame."""
    right = xy[0] > xmid
    return ax.annotate(text, xy, textcoords="offset points", xytext=(-5 if right else 5, 4),
                       ha="right" if right else "left", **kwargs)


__all__ = ["DPI", "FORMATS", "GiB", "HEADROOM", "SVG_RC", "bar_totals", "check_path", "figure", "label_inside",
           "legend_outside", "number", "svg", "write"]
