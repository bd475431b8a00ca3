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


RUNS_NAMED = 40          # runs drawn one by one, each named, up to this many; more: one dot each, unnamed
RUNS_DOTTED = 500        # more runs than this: how many started in each stretch of time, by status (bars)


def runs_over_time(runs: list[dict[str, Any]]) -> str:
    """Every run at its start time, coloured by status; accepted runs ringed, rejected crossed (names written up to
    RUNS_NAMED runs). Beyond RUNS_DOTTED runs: the runs started per stretch of time, stacked by status."""
    from datetime import datetime

    points = []
    for r in runs:
        try:
            points.append((datetime.fromisoformat(str(r["created"]).replace("Z", "+00:00")), r))
        except (KeyError, ValueError):
            continue
    if not points:
        return ""
    points.sort(key=lambda p: p[0])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.6))
    if len(points) > RUNS_DOTTED:
        import matplotlib.dates as mdates

        statuses = [s for s in COLORS if any(r.get("status") == s for _, r in points)]
        statuses += sorted({str(r.get("status")) for _, r in points} - set(statuses))
        when = {s: [mdates.date2num(w) for w, r in points if r.get("status") == s] for s in statuses}
        ax.hist([when[s] for s in statuses], bins=min(60, max(10, len(points) // 50)), stacked=True,
                color=[COLORS.get(s, "grey") for s in statuses], label=statuses)
        ax.xaxis_date()
        ax.set_ylabel("runs started")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        accepted = sum(r.get("decision") == "accepted" for _, r in points)
        rejected = sum(r.get("decision") == "rejected" for _, r in points)
        ax.set_title(f"{len(points):,} runs by start time and status ({accepted:,} accepted, {rejected:,} rejected)",
                     fontsize=10)
    else:
        import matplotlib.dates as mdates

        x = [mdates.date2num(w) for w, _ in points]
        for status in dict.fromkeys(str(r.get("status", "")) for _, r in points):
            index = [i for i, (_, r) in enumerate(points) if str(r.get("status", "")) == status]
            ax.scatter([x[i] for i in index], index, color=COLORS.get(status, "grey"), zorder=3)
        for decision, style in (("accepted", {"s": 160, "facecolors": "none", "edgecolors": "green"}),
                                ("rejected", {"marker": "x", "s": 90, "color": "black"})):
            index = [i for i, (_, r) in enumerate(points) if r.get("decision") == decision]
            if index:
                ax.scatter([x[i] for i in index], index, **style)
        if len(points) <= RUNS_NAMED:
            for i, (_, r) in enumerate(points):
                ax.annotate(str(r.get("name", "")), (x[i], i), xytext=(6, -3), textcoords="offset points", fontsize=7)
        ax.xaxis_date()
        ax.set_yticks([])
        ax.set_title("runs over time (colour: status; ring: accepted; cross: rejected)", fontsize=10)
    fig.autofmt_xdate()
    return _svg(fig)


def histogram(groups: dict[str, list[float]], xlabel: str, title: str, *, lines: dict[str, float] | None = None,
              band: float | None = None) -> str:
    """Many records of one kind in one picture: the values of each group stacked in one histogram (e.g. required
    GiB by verdict), with labelled vertical lines (the cards' memory) and a grey band |x| < band."""
    groups = {k: [float(v) for v in vs] for k, vs in groups.items() if vs}
    if not groups:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.8))
    if band:
        ax.axvspan(-band, band, color="#dddddd", label=f"|x| < {band:g}")
    palette = {"fits": "#2a9d8f", "tight": "#e9c46a", "does not fit": "#e76f51", "passed": "#2a9d8f",
               "failed": "#e76f51", **COLORS}
    values = [v for vs in groups.values() for v in vs]
    bins: Any = min(40, max(5, len(values) // 10))
    low, high = min(values), max(values)
    if low > 0 and high / low > 20:                   # GiB from a small model to a large one: a log scale
        import numpy as np

        bins = np.geomspace(low, high, bins + 1)
        ax.set_xscale("log")
    ax.hist(list(groups.values()), bins=bins, stacked=True, label=list(groups),
            color=[palette.get(k, f"C{i}") for i, k in enumerate(groups)])
    for i, (label, x) in enumerate(sorted((lines or {}).items(), key=lambda kv: kv[1])):
        ax.axvline(x, color="black", linestyle=(":", "--", "-.")[i % 3], linewidth=0.8, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("records")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def against(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> str:
    """Pairs (x, y) of each series as dots, with the line y = x: e.g. each workload's traced or measured peak
    against its estimate."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4))
    top = max(max(max(x, y) for x, y in pairs) for pairs in series.values())
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="y = x")
    for label, pairs in series.items():
        ax.scatter([x for x, _ in pairs], [y for _, y in pairs], s=14, label=label, zorder=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return _svg(fig)


__all__ = ["against", "card_fit", "confusion", "gantt", "histogram", "measured_phases", "memory_phases", "quant_tradeoff",
           "runs_over_time", "seeds", "side_by_side"]
