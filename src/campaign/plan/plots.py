"""Pictures of plans (matplotlib, imported here only): the schedule as a Gantt chart, one row per card."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError, MissingDependencyError
from .schedule import Schedule

FORMATS = (".png", ".svg", ".pdf")


def gantt(sched: Schedule, path: str | os.PathLike[str], *, title: str = "", window: float | None = None) -> Path:
    """Every run as a bar on the card slots it holds, coloured by phase; the rental's window as a line."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"plot {str(path)!r}: write .png, .svg or .pdf")
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "report") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = list(dict.fromkeys(r.phase for r in sched.runs))
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(phases)}
    fig, ax = plt.subplots(figsize=(10, 1 + 0.5 * sched.cards))
    for r in sched.runs:
        for c in r.cards:
            ax.barh(c, r.end_hours - r.start_hours, left=r.start_hours, color=colors[r.phase], edgecolor="white")
    if window is not None:
        ax.axvline(window, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(range(sched.cards), [f"card {i}" for i in range(sched.cards)])
    ax.invert_yaxis()
    ax.set_xlabel("hours from the start")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases]
    ax.legend(handles, phases, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(len(phases), 5),
              fontsize="small", frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Date": None} if out.suffix.lower() == ".svg" else None)
    plt.close(fig)
    return out
