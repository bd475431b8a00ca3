"""The estimate's options as the user writes them: the reserve ('10%', 0.1, '4GiB') and a share ('10%', 0.1)."""
from __future__ import annotations

from ..errors import InputError
from ..units import parse_size


def parse_reserve(reserve: str | float | int) -> tuple[float, int]:
    """'10%' or 0.1 -> (fraction of device bytes, 0); '4GiB' -> (0, bytes)."""
    if isinstance(reserve, (int, float)) and not isinstance(reserve, bool):
        if not 0 <= reserve < 1:
            raise InputError(f"reserve {reserve!r} as a number is a fraction in [0, 1); "
                             "write e.g. 0.1, '10%' or '4GiB'")
        return float(reserve), 0
    text = str(reserve).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise InputError(f"reserve {reserve!r} is not a percentage; write e.g. '10%' or '4GiB'") from None
        if not 0 <= pct < 100:
            raise InputError(f"reserve {reserve!r} must be between 0% and 100%")
        return pct / 100, 0
    try:
        value = float(text)
    except ValueError:
        return 0.0, parse_size(text, what="reserve")
    return parse_reserve(value)


def parse_share(value: str | float, *, what: str = "fragmentation") -> float:
    """'10%' or 0.1 -> 0.1: a share in [0, 1)."""
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{what} {value!r} is not a share; write e.g. '10%' or 0.1") from None
    if not 0 <= share < 1:
        raise InputError(f"{what} {value!r} must be a share between 0 and 1 (0% to 100%)")
    return share
