"""The evaluate figures moved to campaign.plots (confusion, fields, seeds: functions of a result's to_dict()). The
three canvas helpers compress/ still imports from here are the shared ones, under their old names."""
from __future__ import annotations

from ..plots.canvas import FORMATS, check_path as _check_path, figure as _figure, write as _save

__all__ = ["FORMATS", "_check_path", "_figure", "_save"]
