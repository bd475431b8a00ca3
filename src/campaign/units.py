"""Units at the edges: bytes are ints inside; GiB (2**30) and GB (10**9) are never mixed."""
from __future__ import annotations

import re

from .errors import InputError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": KB, "kb": KB, "m": MB, "mb": MB, "g": GB, "gb": GB, "t": TB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
}
_SIZE_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int | float, *, what: str = "size") -> int:
    """Parse '24GB' (10**9), '80GiB' (2**30), '512MiB' or a plain number of bytes into int bytes."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise InputError(f"{what} {text!r} is not a size; write e.g. '80GiB', '24GB' or '512MiB'")
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit not in _SIZE_UNITS:
            raise InputError(f"{what} {text!r} has an unknown unit {m.group(2)!r}; "
                             "use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB")
    if value < 0:
        raise InputError(f"{what} {text!r} is negative; give a size of 0 or more")
    return int(round(value * _SIZE_UNITS[unit]))


def gib(n_bytes: int | float) -> float:
    """Bytes to GiB (2**30)."""
    return n_bytes / GiB


def fmt_gib(n_bytes: int | float) -> str:
    """Bytes as 'x.xx GiB' (two decimals, the project's human unit)."""
    return f"{n_bytes / GiB:,.2f} GiB"


def fmt_count(n: int) -> str:
    """A parameter count as 8.03B / 124.4M / 1.2K."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def positive_int(value: int, *, what: str) -> int:
    """Reject zero and negative sizes with a one-line error."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return value
