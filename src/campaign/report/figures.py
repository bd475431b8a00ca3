"""The report's pictures as inline SVG strings (matplotlib, text drawn as paths: no font or file is referenced).
Each function takes a record's result dict and returns '' when the record lacks what the picture needs."""
from __future__ import annotations

import io
import re
from typing import Any

GiB = 2**30
COLORS = {"completed": "#2a9d8f", "running": "#457b9d", "planned": "#adb5bd", "stopped": "#e9c46a",
          "failed": "#e76f51", "invalid": "#9d0208"}


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]                 # drop the XML prologue and DOCTYPE: inline in HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)   # RDF metadata (creator, date)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "path"
    matplotlib.rcParams["svg.hashsalt"] = "campaign"  # stable ids: the same records give the same file
    import matplotlib.pyplot as plt

    return plt


def memory_phases(result: dict[str, Any], title: str) -> str:
    """Stacked bars: each phase's bytes by category (weights, gradients, optimizer, activations...)."""
    phases = result.get("phases") or []
    if not phases or not all(isinstance(p, dict) and isinstance(p.get("items"), list) for p in phases):
        return ""
    plt = _plt()
    categories: list[str] = []
    for p in phases:
        for item in p["items"]:
            c = str(item.get("category", "other"))
            if c not in categories:
                categories.append(c)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [str(p.get("name", "?")) for p in phases]
    bottom = [0.0] * len(phases)
    for c in categories:
        values = [sum(float(i.get("bytes", 0)) for i in p["items"] if i.get("category", "other") == c) / GiB
                  for p in phases]
        ax.bar(names, values, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def card_fit(result: dict[str, Any], title: str) -> str:
    """Each card's memory as a bar, coloured by the verdict, against the estimate's device total and the total with
    the reserve (two vertical lines)."""
    fits = [f for f in result.get("fits") or [] if isinstance(f, dict) and isinstance(f.get("memory_bytes"), int)]
    need, device = result.get("required_bytes"), result.get("device_bytes")
    if not fits or not isinstance(need, (int, float)):
        return ""
    plt = _plt()
    colours = {"fits": "#2a9d8f", "tight": "#e9c46a", "does not fit": "#e76f51"}
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.32 * len(fits)))
    names = [str(f.get("card")) for f in fits]
    ax.barh(names, [f["memory_bytes"] / GiB for f in fits], color=[colours.get(f.get("verdict"), "grey")
                                                                    for f in fits])
    if isinstance(device, (int, float)):
        ax.axvline(device / GiB, color="black", linestyle=":", label="estimate on the device")
    ax.axvline(need / GiB, color="black", label="with the reserve")
    ax.invert_yaxis()
    ax.set_xlabel("GiB (bar: the card; green fits, yellow tight, red does not fit)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return _svg(fig)


def side_by_side(series: list[tuple[str, dict[str, float]]], title: str) -> str:
    """Grouped bars: each phase's peak allocated from each source (estimated, traced, measured)."""
    if len(series) < 2:
        return ""
    plt = _plt()
    phases: list[str] = []
    for _, values in series:
        phases += [p for p in values if p not in phases]
    fig, ax = plt.subplots(figsize=(7, 3))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar([j + i * width - 0.4 + width / 2 for j in range(len(phases))],
               [values.get(p, 0) / GiB for p in phases], width, label=label)
    ax.set_xticks(range(len(phases)), phases)
    ax.set_ylabel("GiB, peak allocated")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return _svg(fig)


def measured_phases(result: dict[str, Any], title: str) -> str:
    """Bars: peak allocated and peak reserved per measured phase."""
    phases = result.get("phases") or []
    if not phases:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))
    names = [str(p.get("name", "?")) for p in phases]
    x = range(len(phases))
    ax.bar([i - 0.2 for i in x], [p.get("peak_allocated_bytes", 0) / GiB for p in phases], 0.4,
           label="peak allocated")
    ax.bar([i + 0.2 for i in x], [p.get("peak_reserved_bytes", 0) / GiB for p in phases], 0.4, label="peak reserved")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return _svg(fig)


def confusion(result: dict[str, Any], title: str) -> str:
    """The confusion matrix as a heatmap (rows: gold, columns: predicted), counts written in the cells."""
    labels, matrix = result.get("labels"), result.get("matrix")
    if not labels or not matrix or len(labels) > 30:
        return ""
    plt = _plt()
    size = 1.2 + 0.45 * len(labels)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), [str(v) for v in labels], rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), [str(v) for v in labels], fontsize=7)
    top = max((max(row) for row in matrix if row), default=0)
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=7, color="white" if v > top / 2 else "black")
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _svg(fig)


def seeds(result: dict[str, Any], title: str) -> str:
    """Per-seed differences (candidate - baseline), their interval, and the useful-effect band around zero."""
    diffs = result.get("differences")
    if not diffs:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.4))
    effect = result.get("min_effect")
    if isinstance(effect, (int, float)) and effect > 0:
        ax.axvspan(-effect, effect, color="#dddddd", label=f"|effect| < {effect:g} (not useful)")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.scatter(diffs, [0] * len(diffs), zorder=3, label="per-seed difference")
    lo, hi = result.get("ci_low"), result.get("ci_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        ax.errorbar([result.get("mean_diff", (lo + hi) / 2)], [0.3], xerr=[[result.get("mean_diff", 0) - lo],
                    [hi - result.get("mean_diff", 0)]], fmt="o", color="#e76f51", capsize=4, label="mean, interval")
    ax.set_yticks([])
    ax.set_ylim(-0.5, 0.8)
    ax.set_xlabel(f"{result.get('metric', 'metric')}: candidate - baseline")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def gantt(schedule: dict[str, Any], title: str) -> str:
    """The recommended rental's schedule: one bar per run on its card(s), coloured by phase."""
    runs = [r for r in schedule.get("runs") or [] if isinstance(r, dict)]
    if not runs:
        return ""
    plt = _plt()
    phases: list[str] = []
    for r in runs:
        if r.get("phase") not in phases:
            phases.append(r.get("phase"))
    palette = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.25 * max(1, int(schedule.get("cards") or 1))))
    for r in runs:
        start, end = float(r.get("start_hours", 0)), float(r.get("end_hours", 0))
        for card in r.get("cards") or [0]:
            ax.barh(card, end - start, left=start, color=palette(phases.index(r.get("phase")) % 10), edgecolor="white")
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette(i % 10)) for i in range(len(phases))]
    ax.legend(handles, phases, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlabel("hours from the start of the rental")
    ax.set_ylabel("card")
    ax.set_yticks(range(max(1, int(schedule.get("cards") or 1))))
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    return _svg(fig)


def quant_tradeoff(result: dict[str, Any], title: str) -> str:
    """Each variant's stored weight bytes against its quality; flagged variants in red."""
    variants = [v for v in result.get("variants") or [] if isinstance(v, dict)]
    if not variants:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for v in variants:
        colour = "#e76f51" if v.get("status") == "flagged" else "#264653"
        x, y = float(v.get("weight_bytes_stored") or 0) / 2**20, float(v.get("quality") or 0)
        ax.scatter([x], [y], color=colour, zorder=3)
        ax.annotate(str(v.get("name")), (x, y), xytext=(5, 3), textcoords="offset points", fontsize=8)
    ax.set_xlabel("weights stored (MiB)")
    ax.set_ylabel(str(result.get("metric", "quality")))
    ax.set_title(title, fontsize=10)
    return _svg(fig)


def runs_over_time(runs: list[dict[str, Any]]) -> str:
    """Every run at its start time, coloured by status; accepted runs ringed, rejected crossed."""
    from datetime import datetime

    points = []
    for r in runs:
        try:
            points.append((datetime.fromisoformat(str(r["created"]).replace("Z", "+00:00")), r))
        except (KeyError, ValueError):
            continue
    if not points:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.6))
    for i, (when, r) in enumerate(sorted(points, key=lambda p: p[0])):
        ax.scatter([when], [i], color=COLORS.get(r.get("status", ""), "grey"), zorder=3)
        if r.get("decision") == "accepted":
            ax.scatter([when], [i], s=160, facecolors="none", edgecolors="green")
        elif r.get("decision") == "rejected":
            ax.scatter([when], [i], marker="x", s=90, color="black")
        ax.annotate(str(r.get("name", "")), (when, i), xytext=(6, -3), textcoords="offset points", fontsize=7)
    ax.set_yticks([])
    ax.set_title("runs over time (colour: status; ring: accepted; cross: rejected)", fontsize=10)
    fig.autofmt_xdate()
    return _svg(fig)


__all__ = ["side_by_side", "card_fit", "confusion", "gantt", "quant_tradeoff", "measured_phases", "memory_phases", "runs_over_time", "seeds"]
