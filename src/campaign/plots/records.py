"""Figures of many records at once, for the report: the runs over time, a stacked histogram of one figure across
records, pairs against the line y = x. Each takes plain values read from the records' dicts and returns a
matplotlib Figure, or None when there is nothing to draw."""
from __future__ import annotations

from typing import Any

from .canvas import figure, label_inside, legend_outside

STATUS_COLORS = {"completed": "#2a9d8f", "running": "#457b9d", "planned": "#adb5bd", "stopped": "#e9c46a",
                 "failed": "#e76f51", "invalid": "#9d0208"}
RUNS_NAMED = 40          # runs drawn one by one, each named, up to this many; more: one dot each, unnamed
RUNS_DOTTED = 500        # more runs than this: how many started in each stretch of time, by status (bars)


def runs_over_time(runs: list[dict[str, Any]]) -> Any:
    """Every run (a run manifest's dict) at its start time, coloured by status (a legend names the colours);
    accepted runs ringed, rejected crossed (names written up to RUNS_NAMED runs); tick labels distinct down to the
    second. Beyond RUNS_DOTTED runs: the runs started per stretch of time,
    stacked by status."""
    from datetime import datetime

    points = []
    for r in runs:
        try:
            points.append((datetime.fromisoformat(str(r["created"]).replace("Z", "+00:00")), r))
        except (KeyError, ValueError):
            continue
    if not points:
        return None
    import matplotlib.dates as mdates

    points.sort(key=lambda p: p[0])
    fig = figure(7, 2.6, layout=None)
    ax = fig.add_subplot()
    if len(points) > RUNS_DOTTED:
        statuses = [s for s in STATUS_COLORS if any(r.get("status") == s for _, r in points)]
        statuses += sorted({str(r.get("status")) for _, r in points} - set(statuses))
        when = {s: [mdates.date2num(w) for w, r in points if r.get("status") == s] for s in statuses}
        ax.hist([when[s] for s in statuses], bins=min(60, max(10, len(points) // 50)), stacked=True,
                color=[STATUS_COLORS.get(s, "grey") for s in statuses], label=statuses)
        ax.set_ylabel("runs started")
        legend_outside(ax, title="status")
        accepted = sum(r.get("decision") == "accepted" for _, r in points)
        rejected = sum(r.get("decision") == "rejected" for _, r in points)
        ax.set_title(f"{len(points):,} runs by start time and status ({accepted:,} accepted, {rejected:,} rejected)",
                     fontsize=10)
    else:
        x = [mdates.date2num(w) for w, _ in points]
        for status in dict.fromkeys(str(r.get("status", "")) for _, r in points):
            index = [i for i, (_, r) in enumerate(points) if str(r.get("status", "")) == status]
            ax.scatter([x[i] for i in index], index, color=STATUS_COLORS.get(status, "grey"), zorder=3,
                       label=status or "no status")
        for decision, style in (("accepted", {"s": 160, "facecolors": "none", "edgecolors": "green"}),
                                ("rejected", {"marker": "x", "s": 90, "color": "black"})):
            index = [i for i, (_, r) in enumerate(points) if r.get("decision") == decision]
            if index:
                ax.scatter([x[i] for i in index], index, label=decision, **style)
        legend_outside(ax, title="status, decision")
        if len(points) <= RUNS_NAMED:
            middle = (min(x) + max(x)) / 2
            for i, (_, r) in enumerate(points):
                label_inside(ax, str(r.get("name", "")), (x[i], i), middle, fontsize=7)
        ax.set_yticks([])
        ax.set_ylabel("runs, in start order")
        ax.margins(x=0.15, y=0.15)
        ax.set_title("runs over time (colour: status; ring: accepted; cross: rejected)", fontsize=10)
    # a date on every tick (not a bare time of day): runs span days, and the reader needs the day; down to the
    # second where ticks are seconds apart, so that runs minutes apart get distinct labels
    ax.xaxis_date()
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    formatter = mdates.AutoDateFormatter(locator)
    formatter.scaled = {365.0: "%Y", 30.0: "%Y-%m", 1.0: "%Y-%m-%d", 1 / 24: "%Y-%m-%d %H:%M",
                        1 / (24 * 60): "%Y-%m-%d %H:%M", 1 / (24 * 60 * 60): "%Y-%m-%d %H:%M:%S",
                        1 / (24 * 60 * 60 * 1000): "%Y-%m-%d %H:%M:%S.%f"}
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(formatter)
    ax.set_xlabel("start time (UTC)")
    fig.autofmt_xdate()
    return fig


def histogram(groups: dict[str, list[float]], xlabel: str, title: str, *, lines: dict[str, float] | None = None,
              band: float | None = None) -> Any:
    """Many records of one kind in one picture: the values of each group stacked in one histogram (e.g. required
    GiB by verdict), with labelled vertical lines (the cards' memory) and a grey band |x| < band."""
    groups = {k: [float(v) for v in vs] for k, vs in groups.items() if vs}
    if not groups:
        return None
    fig = figure(7, 2.8, layout=None)
    ax = fig.add_subplot()
    if band:
        ax.axvspan(-band, band, color="#dddddd", label=f"|x| < {band:g}")
    palette = {"fits": "#2a9d8f", "tight": "#e9c46a", "does not fit": "#e76f51", "passed": "#2a9d8f",
               "failed": "#e76f51", **STATUS_COLORS}
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
    return fig


def against(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> Any:
    """Pairs (x, y) of each series as dots, with the line y = x: e.g. each workload's traced or measured peak
    against its estimate."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig = figure(5, 4, layout=None)
    ax = fig.add_subplot()
    top = max(max(max(x, y) for x, y in pairs) for pairs in series.values())
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="y = x")
    for label, pairs in series.items():
        ax.scatter([x for x, _ in pairs], [y for _, y in pairs], s=14, label=label, zorder=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    legend_outside(ax)
    return fig


def curves(series: dict[str, list[tuple[float, float]]], ylabel: str, title: str) -> Any:
    """One line per run: a metric (the loss) against the step, from the runs' metrics.jsonl; named in a legend up
    to RUNS_NAMED lines (beyond, unnamed thin lines)."""
    series = {k: sorted(v) for k, v in series.items() if v}
    if not series:
        return None
    fig = figure(7, 3, layout=None)
    ax = fig.add_subplot()
    named = len(series) <= RUNS_NAMED
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.2 if named else 0.6,
                marker="o" if len(points) == 1 else None, ms=3, label=label if named else None,
                alpha=1.0 if named else 0.5)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if named:
        legend_outside(ax, title="run")
    return fig


__all__ = ["RUNS_DOTTED", "RUNS_NAMED", "STATUS_COLORS", "against", "curves", "histogram", "runs_over_time"]
