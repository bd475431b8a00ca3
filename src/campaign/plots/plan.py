"""Figures of plans and variants, each a function of a result's to_dict(): a budget's schedule as a Gantt chart, a
quantization comparison's memory against quality. Each returns a matplotlib Figure, or None when the dict lacks
what the figure needs."""
from __future__ import annotations

from typing import Any

from .canvas import figure, label_inside, number

MiB = 2**20


def gantt(schedule: dict[str, Any], title: str = "", *, window: float | None = None) -> Any:
    """A schedule's (a budget's `schedule`) every run as a bar on the card slots it holds, coloured by phase; the
    rental's window (hours), when given, as a dashed line."""
    runs = [r for r in schedule.get("runs") or [] if isinstance(r, dict)]
    if not runs:
        return None
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    cards = max(1, int(schedule.get("cards") or 1))
    phases = list(dict.fromkeys(str(r.get("phase")) for r in runs))
    palette = colormaps["tab10"]
    colors = {p: palette(i % 10) for i, p in enumerate(phases)}
    fig = figure(10, 1 + 0.5 * cards, layout="tight")
    ax = fig.add_subplot()
    for r in runs:
        start, end = float(r.get("start_hours", 0)), float(r.get("end_hours", 0))   # a bad record raises
        for c in r.get("cards") or [0]:
            ax.barh(c, end - start, left=start, color=colors[str(r.get("phase"))], edgecolor="white")
    if window is not None:
        ax.axvline(window, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(range(cards), [f"card {i}" for i in range(cards)])
    ax.invert_yaxis()
    ax.set_xlabel("hours from the start of the rental")
    ax.set_ylabel("card slot")
    ax.set_title(title)
    handles = [Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases]
    ax.legend(handles, phases, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(len(phases), 5),
              fontsize="small", frameon=False)
    return fig


def quant(result: dict[str, Any], title: str | None = None) -> Any:
    """A quantization comparison: each variant's stored weight bytes against its quality, one point each; flagged
    variants (a guard broke) in red and named so, the reference in grey. `title`: the default names the model,
    the examples, the reference and the device."""
    variants = [v for v in result.get("variants") or [] if isinstance(v, dict)]
    if not variants:
        return None
    fig = figure(6.4, 4.2)
    ax = fig.add_subplot()
    stored = [number(v.get("weight_bytes_stored")) for v in variants]
    unit, div = ("GiB", 2 ** 30) if max(stored) >= 2 ** 30 else ("MiB", MiB)
    xs = [size / div for size in stored]
    xmid = (min(xs) + max(xs)) / 2
    for v, x in zip(variants, xs, strict=True):
        flagged = v.get("status") == "flagged"
        colour = "tab:red" if flagged else ("tab:gray" if v.get("status") == "reference" else "tab:blue")
        y = number(v.get("quality"))
        ax.scatter([x], [y], color=colour, zorder=3)
        label_inside(ax, str(v.get("name")) + (" (flagged)" if flagged else ""), (x, y), xmid, fontsize=9)
    ax.margins(x=0.2, y=0.2)
    metric = str(result.get("metric", "quality"))
    ax.set_xlabel(f"weights stored ({unit})")
    ax.set_ylabel("perplexity (lower is better)" if metric == "perplexity" else f"{metric} accuracy")
    if title is None:
        evaluation = result.get("evaluation") if isinstance(result.get("evaluation"), dict) else {}
        title = (f"{result.get('model')}: memory against quality\n{evaluation.get('examples')} examples, reference "
                 f"{result.get('reference')}, on {result.get('device')}")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return fig


__all__ = ["gantt", "quant"]
