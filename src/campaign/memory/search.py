"""The searches every solve uses: the largest n a monotone yes/no question answers yes to."""
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


def largest_within(value: Callable[[int], int], bound: int, limit: int) -> int:
    """Largest n in [0, limit] with value(n) <= bound, for a value that never decreases with n: what
    largest_satisfying(lambda n: value(n) <= bound, limit) answers, in fewer probes where the value is close to a
    line in n (a batch's or a context's bytes: 4 to 6 probes where the search above makes 2 log2(answer)).

    Each probe is placed where the line through two probes (the nearest below and above the bound, or the two
    largest below it while none is above) crosses the bound; where that does not halve the interval the answer lies
    in (or, with none above, double its lower end), the next probe is the exponential-then-binary search's step, so
    that a curve far from a line costs at most about twice that search's probes."""
    v_lo = value(1)
    if v_lo > bound:
        return 0
    lo, hi, v_hi = 1, max(limit, 1) + 1, None  # lo within the bound; hi past it (v_hi None: limit + 1, not probed)
    below: tuple[int, int] | None = None  # the probe within the bound before lo: the line's second point
    line = True  # the next probe is the line's (else the plain search's step)
    while hi - lo > 1:
        was_lo, was_hi, bracketed = lo, hi, v_hi is not None
        guess = None
        points = (lo, v_lo, hi, v_hi) if v_hi is not None else (*below, lo, v_lo) if below else None
        if line and points and points[3] > points[1]:
            x0, y0, x1, y1 = points
            guess = x0 + (bound - y0) * (x1 - x0) // (y1 - y0)  # the last n on the line within the bound
        if guess is None:  # the plain search's step: halve, or double where none past the bound is known
            guess = (lo + hi) // 2 if bracketed else 2 * lo
        guess = min(max(guess, lo + 1), hi - 1)
        v = value(guess)
        if v <= bound:
            below, lo, v_lo = (lo, v_lo), guess, v
        else:
            hi, v_hi = guess, v
        if not line:
            line = True
        else:  # the line's probe halved the interval (or doubled lo, or found the first past the bound)
            line = hi - lo <= (was_hi - was_lo) // 2 if bracketed else v_hi is not None or lo >= 2 * was_lo
    return lo
