"""The solves' searches: largest_within answers what the plain exponential-then-binary search answers, in a few
probes where the value is close to a line."""
from __future__ import annotations

import math
import random

from campaign.memory.search import largest_satisfying, largest_within


def _counted(value):
    probes: list[int] = []
    return probes, lambda n: probes.append(n) or value(n)


_VALUES = [
    lambda a, b, c, steps: lambda n: a + b * n,  # a line
    lambda a, b, c, steps: lambda n: a + b * n + int(c * n * n),  # curving up (attention scores: the length squared)
    lambda a, b, c, steps: lambda n: a + (b * n // 512) * 512,  # a line in 512 B steps (the allocator's rounding)
    lambda a, b, c, steps: lambda n: a + int(b * math.sqrt(n)),  # curving down
    lambda a, b, c, steps: lambda n: a + b * sum(s <= n for s in steps),  # flat, then jumps
]


def test_the_line_search_answers_as_the_plain_search_on_monotone_values():
    rng = random.Random(7)
    for trial in range(3000):
        a, b, c = rng.randint(0, 10**9), rng.randint(1, 10**6), rng.random()
        steps = sorted(rng.sample(range(1, 1 << 16), 40))
        value = _VALUES[trial % 5](a, b, c, steps)
        limit = rng.choice([1, 2, 3, 7, 100, 40960, 1 << 16])
        bound = rng.randint(0, value(limit) + 3 * b)
        probes, counted = _counted(value)
        expected = largest_satisfying(lambda n, value=value, bound=bound: value(n) <= bound, limit)
        assert largest_within(counted, bound, limit) == expected, (trial, limit, bound)
        assert all(1 <= n <= limit for n in probes)  # never past the limit, nor below 1
        if trial % 5 == 0 and limit > 100:  # a line: four to six probes, where the plain search makes ~2 log2
            assert len(probes) <= 6, (trial, len(probes))


def test_the_line_search_edges():
    assert largest_within(lambda n: 10 * n, 5, 100) == 0  # not even 1 fits
    assert largest_within(lambda n: 10 * n, 10, 100) == 1
    assert largest_within(lambda n: 10 * n, 10**9, 100) == 100  # all fit: the limit
    assert largest_within(lambda n: 7, 7, 1 << 16) == 1 << 16  # a flat value: the plain steps, up to the limit
    # 2 per item, 1,000 B of room: 500 items, found from the line through the first two probes
    probes, counted = _counted(lambda n: 2 * n)
    assert largest_within(counted, 1000, 1 << 16) == 500 and probes[:3] == [1, 2, 500]
