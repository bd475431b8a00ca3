"""The solves' search: the largest n a monotone yes/no question answers yes to, from any starting point, checked
against a scan of every n."""
from __future__ import annotations

import random

from campaign.memory.search import largest_satisfying


def test_the_search_answers_as_a_scan_from_any_start():
    rng = random.Random(7)
    for trial in range(2000):
        limit = rng.choice([1, 2, 3, 7, 100, 4096])
        answer = rng.randint(0, limit)  # ok(n) is n <= answer: monotone
        start = rng.randint(-3, limit + 5)
        probes: list[int] = []
        found = largest_satisfying(lambda n, a=answer, seen=probes: seen.append(n) or n <= a, limit, start)
        assert found == max(n for n in range(limit + 1) if n == 0 or n <= answer), (trial, limit, answer, start)
        assert all(1 <= n <= limit for n in probes)  # never past the limit, nor below 1
        assert len(probes) <= 2 * limit.bit_length() + 2  # logarithmic, not a scan


def test_the_search_edges():
    assert largest_satisfying(lambda n: n <= 0, 100) == 0  # not even 1
    assert largest_satisfying(lambda n: True, 100) == 100  # all: the limit
    assert largest_satisfying(lambda n: n <= 37, 100, start=64) == 37  # the start fails: down, then binary
    probes: list[int] = []
    assert largest_satisfying(lambda n: probes.append(n) or n <= 2048, 1 << 16, start=2048) == 2048
    assert probes[:2] == [2048, 4096]  # the user's own value first, then doubling
