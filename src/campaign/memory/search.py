"""The search every solve uses: the largest n a monotone yes/no question answers yes to."""
from __future__ import annotations

from collections.abc import Callable


def largest_satisfying(ok: Callable[[int], bool], limit: int) -> int:
    """Largest n in [0, limit] with ok(n) true, for a monotone predicate (exponential then binary search)."""
    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
