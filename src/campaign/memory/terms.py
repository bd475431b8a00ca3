"""The small named figures the formulas return: bytes with the formula that gave them, in words (what a breakdown
Item shows). Named tuples, so `bytes, formula = term` still reads."""
from __future__ import annotations

from typing import NamedTuple


class Term(NamedTuple):
    """Bytes and the formula that gives them."""

    bytes: int
    formula: str


class SavedActivations(NamedTuple):
    """What a training forward keeps for backward: over all layers, of the largest single layer, and how."""

    bytes: int
    one_layer: int
    formula: str
