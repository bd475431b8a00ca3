"""The searches every solve uses: the largest n a monotone yes/no question answers yes to."""
from __future__ import annotations

from collections.abc import Callable


def largest_satisfying(ok: Callable[[int], bool], limit: int, start: int = 1) -> int:
    """Largest n in [0, limit] with ok(n) true, for a monotone predicate: doubling from `start` (or, where start
    does not hold, halving down to 1) until the answer is bracketed, then binary search."""
    start = max(1, min(start, limit))
    if ok(start):
        lo, hi = start, 2 * start
        while hi <= limit and ok(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, limit + 1)
    else:
        lo, hi = start // 2, start
        while lo >= 1 and not ok(lo):
            lo, hi = lo // 2, lo
        if lo < 1:
            return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
