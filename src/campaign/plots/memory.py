"""Memory figures, each a function of a result's to_dict(): an estimate's phases by category, the cards against its
total, a measurement's peaks per phase, several sources side by side. Each returns a matplotlib Figure, or None
when the dict lacks what the figure needs (an old record, another kind)."""
from __future__ import annotations

from typing import Any

from .canvas import HEADROOM, GiB, bar_totals, figure, legend_outside, number

VERDICT_COLORS = {"fits": "#2a9d8f", "tight": "#e9c46a", "does not fit": "#e76f51"}


def memory_phases(result: dict[str, Any], title: str) -> Any:
    """Stacked bars: each phase's bytes by category (weights, gradients, optimizer, activations...), from an
    estimate's (or trace's) `phases`."""
    phases = result.get("phases") or []
    if not phases or not all(isinstance(p, dict) and isinstance(p.get("items"), list) for p in phases):
        return None
    categories: list[str] = []
    for p in phases:
        for item in p["items"]:
            c = str(item.get("category", "other"))
            if c not in categories:
                categories.append(c)
    fig = figure(7, 3.2, layout=None)
    ax = fig.add_subplot()
    names = [str(p.get("name", "?")) for p in phases]
    bottom = [0.0] * len(phases)
    for c in categories:
        values = [sum(float(i.get("bytes", 0)) for i in p["items"] if i.get("category", "other") == c) / GiB
                  for p in phases]
        ax.bar(range(len(names)), values, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(range(len(names)), names)
    bar_totals(ax, list(range(len(names))), bottom, unit=" GiB")
    ax.set_xlabel("phase (bar top: the phase's total)")
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    legend_outside(ax, title="category")
    return fig


def card_fit(result: dict[str, Any], title: str) -> Any:
    """Each card's memory as a bar, coloured by the verdict, against the estimate's device total and the total with
    the reserve (two vertical lines)."""
    fits = [f for f in result.get("fits") or [] if isinstance(f, dict) and isinstance(f.get("memory_bytes"), int)]
    need, device = result.get("required_bytes"), result.get("device_bytes")
    if not fits or not isinstance(need, (int, float)):
        return None
    fig = figure(7, 0.5 + 0.32 * len(fits), layout=None)
    ax = fig.add_subplot()
    names = [str(f.get("card")) for f in fits]
    sizes = [f["memory_bytes"] / GiB for f in fits]
    ax.barh(range(len(names)), sizes, color=[VERDICT_COLORS.get(str(f.get("verdict")), "grey") for f in fits])
    ax.set_yticks(range(len(names)), names)
    bar_totals(ax, list(range(len(names))), sizes, horizontal=True, unit=" GiB")
    ax.set_xlim(0, max(sizes + [need / GiB]) * HEADROOM)
    if isinstance(device, (int, float)):
        ax.axvline(device / GiB, color="black", linestyle=":", label="estimate on the device")
    ax.axvline(need / GiB, color="black", label="with the reserve")
    ax.invert_yaxis()
    ax.set_xlabel("GiB (bar: the card; green fits, yellow tight, red does not fit)")
    ax.set_ylabel("card")
    ax.set_title(title, fontsize=10)
    legend_outside(ax)
    return fig


def measured_phases(result: dict[str, Any], title: str) -> Any:
    """Bars: peak allocated and peak reserved per phase of a measurement."""
    phases = [p for p in result.get("phases") or [] if isinstance(p, dict)]
    if not phases:
        return None
    fig = figure(7, 3, layout=None)
    ax = fig.add_subplot()
    names = [str(p.get("name", "?")) for p in phases]
    x = range(len(phases))
    allocated = [number(p.get("peak_allocated_bytes")) / GiB for p in phases]
    reserved = [number(p.get("peak_reserved_bytes")) / GiB for p in phases]
    ax.bar([i - 0.2 for i in x], allocated, 0.4, label="peak allocated")
    ax.bar([i + 0.2 for i in x], reserved, 0.4, label="peak reserved")
    bar_totals(ax, [i - 0.2 for i in x] + [i + 0.2 for i in x], allocated + reserved)
    ax.set_xticks(list(x), names)
    ax.set_xlabel("phase")
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    legend_outside(ax)
    return fig


def side_by_side(series: list[tuple[str, dict[str, float]]], title: str) -> Any:
    """Grouped bars: each phase's peak allocated from each source (estimated, traced, measured): series is
    [(source, {phase: bytes})], from the records' dicts. None with fewer than two sources."""
    if len(series) < 2:
        return None
    phases: list[str] = []
    for _, values in series:
        phases += [p for p in values if p not in phases]
    fig = figure(7, 3, layout=None)
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    at: list[float] = []
    heights: list[float] = []
    for i, (label, values) in enumerate(series):
        xs = [j + i * width - 0.4 + width / 2 for j in range(len(phases))]
        ys = [number(values.get(p)) / GiB for p in phases]
        ax.bar(xs, ys, width, label=label)
        at += xs
        heights += ys
    bar_totals(ax, at, heights)
    ax.set_xticks(range(len(phases)), phases)
    ax.set_xlabel("phase")
    ax.set_ylabel("GiB, peak allocated")
    ax.set_title(title, fontsize=10)
    legend_outside(ax, title="source")
    return fig


__all__ = ["card_fit", "measured_phases", "memory_phases", "side_by_side"]
