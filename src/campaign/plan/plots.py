"""The schedule as a Gantt chart, for `budget(plot=...)` and the HTML report: one rental's runs on its card slots
(campaign.plots.gantt, from the schedule's dict) or, with a card per phase, every rental's phases on their own rows
on the campaign's clock (lanes, rentals_figure); written atomically."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..plots import FORMATS, gantt as gantt_figure, write
from .prices import offer_label
from .schedule import Schedule


def gantt(sched: Schedule, path: str | os.PathLike[str], *, title: str = "", window: float | None = None,
          label: str | None = None, setup_hours: float = 0.0) -> Path:
    """Every run as a bar on the card slots it holds, coloured by phase; where the package ends as a line (label:
    its legend entry); the set-up billed before the first step hatched from 0 (setup_hours)."""
    if Path(path).suffix.lower() not in FORMATS:
        raise InputError(f"plot {str(path)!r}: write .png, .svg or .pdf")
    fig = gantt_figure(sched.to_dict(), title, window=window, label=label, setup_hours=setup_hours)
    if fig is None:
        raise InputError(f"plot {str(path)!r}: the schedule has no run to draw")
    return write(fig, path)


@dataclass(frozen=True)
class Row:
    """One phase of one rental on the campaign's clock: from its first run's start to its last run's end (hours
    from the campaign's start, the rental's start and set-up included)."""

    rental: str                 # 'L40S-48GB@spot 3-day': the card with its offer, and the rental
    phase: str
    start_hours: float
    end_hours: float


@dataclass(frozen=True)
class Lane:
    """A rental on the campaign's clock: where it starts, its set-up (billed before its first step), where its
    package ends (None: on demand alone; on_demand_after: the package topped up on demand), its phases' rows."""

    card: str                   # the card with its offer: 'L40S-48GB@spot'
    name: str                   # the rental: '3-day', 'on-demand', '3-day + on-demand'
    start_hours: float
    setup_hours: float
    package_end_hours: float | None
    on_demand_after: bool
    rows: tuple[Row, ...]

    @property
    def rental(self) -> str:
        return f"{self.card} {self.name}"


def lanes(report: dict[str, Any]) -> list[Lane]:
    """Every rental of a budget (its to_dict(): the recommended one and, with a card per phase, each phase group's
    on a rental of its own, `rentals`), in the order they start: each phase on its own row, placed on the campaign's
    clock (the rental's start + its set-up + the phase's span in its schedule), as the text Gantt draws them. A
    rental without an option or a schedule (none fits) is left out; [] when nothing is recommended."""
    chosen = next((p for p in _dicts(report.get("packages")) if p.get("name") == report.get("recommended")
                   and p.get("card") == report.get("recommended_card")
                   and p.get("offer") == report.get("recommended_offer")), None)
    found: list[tuple[Any, float, Any]] = [] if chosen is None else \
        [(chosen, _hours(report.get("start_hours")), report.get("schedule"))]
    found += [(x.get("option"), _hours(x.get("start_hours")), x.get("schedule")) for x in _dicts(report.get("rentals"))]
    out = []
    for option, start, sched in found:
        if not isinstance(option, dict) or not isinstance(sched, dict):
            continue
        card, name = offer_label(str(option.get("card")), option.get("offer")), str(option.get("name"))
        setup = _hours(option.get("setup_hours"))
        package = option.get("package_hours")
        rows = tuple(Row(f"{card} {name}", str(sp.get("phase")), start + setup + _hours(sp.get("start_hours")),
                         start + setup + _hours(sp.get("end_hours"))) for sp in _dicts(sched.get("spans")))
        out.append(Lane(card, name, start, setup, start + _hours(package) if _real(package) else None,
                        _real(package) and option.get("window_hours") is None, rows))
    return sorted(out, key=lambda lane: lane.start_hours)


def rentals_figure(report: dict[str, Any], title: str = "") -> Any:
    """Every rental's phases on their own rows (lanes), labelled with the phase and its rental (CARD@OFFER and the
    rental's name), coloured by phase, on the campaign's clock; each rental's set-up hatched before its first step
    and where its package ends as a dashed line across its own rows, named in the legend. None: nothing to draw."""
    found = [lane for lane in lanes(report) if lane.rows]
    if not found:
        return None
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    from ..plots.canvas import figure

    rows = [row for lane in found for row in lane.rows]
    phases = list(dict.fromkeys(r.phase for r in rows))
    palette = colormaps["tab10"]
    colors = {p: palette(i % 10) for i, p in enumerate(phases)}
    fig = figure(10, 1 + 0.5 * len(rows), layout="tight")
    ax = fig.add_subplot()
    handles: list[Any] = [Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases]
    names = list(phases)
    y = 0
    for k, lane in enumerate(found):
        first = y
        for r in lane.rows:
            if lane.setup_hours > 0:
                ax.barh(y, lane.setup_hours, left=lane.start_hours, color="lightgrey", hatch="//", edgecolor="grey")
            ax.barh(y, r.end_hours - r.start_hours, left=r.start_hours, color=colors[r.phase], edgecolor="white")
            y += 1
        if lane.package_end_hours is not None:
            handles.append(ax.vlines(lane.package_end_hours, first - 0.45, y - 0.55, colors="black",
                                     linestyles=("--", ":", "-.")[k % 3], linewidth=1))
            names.append(f"{lane.card}: {lane.name.removesuffix(' + on-demand')} ends at "
                         f"{lane.package_end_hours:,.4g} h" + ("; on demand after" if lane.on_demand_after else ""))
    for lane in found:
        if lane.setup_hours > 0:
            handles.append(Rectangle((0, 0), 1, 1, facecolor="lightgrey", hatch="//", edgecolor="grey"))
            names.append(f"set-up: {lane.setup_hours:,.4g} h billed before the first step ({lane.card})")
    ax.set_yticks(range(len(rows)), [f"{r.phase} · {r.rental}" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("hours from the start of the campaign")
    ax.set_title(title)
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig


def gantt_rentals(report: dict[str, Any], path: str | os.PathLike[str], *, title: str = "") -> Path:
    """rentals_figure written atomically (.png, .svg or .pdf)."""
    if Path(path).suffix.lower() not in FORMATS:
        raise InputError(f"plot {str(path)!r}: write .png, .svg or .pdf")
    fig = rentals_figure(report, title)
    if fig is None:
        raise InputError(f"plot {str(path)!r}: the schedule has no run to draw")
    return write(fig, path)


def _dicts(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _hours(v: Any) -> float:
    """A record's hours for drawing: a finite number as it is, anything else (None, text) as 0."""
    return float(v) if _real(v) else 0.0
