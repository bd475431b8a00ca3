"""Every figure campaign draws, each one function of a result's to_dict() (a plain dict, so a saved record draws
the same as a live result), shared by the commands' --plot and the HTML report:

    from campaign import plots
    plots.write(plots.seeds(report.to_dict()), "seeds.png")      # --plot
    html = plots.svg(plots.seeds(record, "over seeds"))           # the report, inline

Each figure function returns a matplotlib Figure, or None when the dict lacks what it needs (`svg(None)` is '').
They draw on matplotlib's object-oriented Agg canvas (canvas.py): no pyplot, no global backend switch, no global
rcParams change, so a notebook is left as it was. matplotlib (the `report` extra) is imported inside the functions.

canvas.py: the figure, writing it (.png, .svg, .pdf) and inline SVG. memory.py: an estimate's phases, card fit,
measured phases, sources side by side. evaluate.py: confusion, per-field match, seeds. plan.py: the budget's Gantt
chart, an ablation's half-normal plot, quantization's memory against quality. records.py: many records at once
(runs over time, the runs' loss curves, histogram, y = x).
"""
from __future__ import annotations

from .canvas import FORMATS, check_path, figure, svg, write
from .evaluate import confusion, fields, seeds
from .memory import card_fit, measured_phases, memory_phases, side_by_side
from .plan import gantt, half_normal, quant
from .records import RUNS_DOTTED, RUNS_NAMED, against, curves, histogram, runs_over_time

__all__ = ["FORMATS", "RUNS_DOTTED", "RUNS_NAMED", "against", "card_fit", "check_path", "confusion", "curves",
           "fields", "figure", "gantt", "half_normal", "histogram", "measured_phases", "memory_phases", "quant",
           "runs_over_time", "seeds", "side_by_side", "svg", "write"]
