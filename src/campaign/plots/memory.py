"""Memory figures, each a function of a result's to_dict(): an estimate's phases by category, the cards against its
total, a measurement's peaks per phase, several sources side by side. Each returns a matplotlib Figure, or None
when the dict lacks what the figure needs (an old record, another kind)."""
from __future__ import annotations

from typing import Any

from .canvas import GiB, figure

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
        ax.bar(names, values, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper left", bbox_to_anchor=(1.0, 1.0))
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
    ax.barh(names, [f["memory_bytes"] / GiB for f in fits],
            color=[VERDICT_COLORS.get(f.get("verdict"), "grey") for f in fits])
    if isinstance(device, (int, float)):
        ax.axvline(device / GiB, color="black", linestyle=":", label="estimate on the device")
    ax.axvline(need / GiB, color="black", label="with the reserve")
    ax.invert_yaxis()
    ax.set_xlabel("GiB (bar: the card; green fits, yellow tight, red does not fit)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
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
    ax.bar([i - 0.2 for i in x], [p.get("peak_allocated_bytes", 0) / GiB for p in phases], 0.4,
           label="peak allocated")
    ax.bar([i + 0.2 for i in x], [p.get("peak_reserved_bytes", 0) / GiB for p in phases], 0.4, label="peak reserved")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
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
    for i, (label, values) in enumerate(series):
        ax.bar([j + i * width - 0.4 + width / 2 for j in range(len(phases))],
               [values.get(p, 0) / GiB for p in phases], width, label=label)
    ax.set_xticks(range(len(phases)), phases)
    ax.set_ylabel("GiB, peak allocated")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return fig


__all__ = ["card_fit", "measured_phases", "memory_phases", "side_by_side"]
