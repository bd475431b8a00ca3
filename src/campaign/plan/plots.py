"""The schedule as a Gantt chart, for `budget(plot=...)`: drawn by campaign.plots.gantt from the schedule's dict
(the same figure the HTML report shows) and written atomically."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..plots import FORMATS, gantt as gantt_figure, write
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
