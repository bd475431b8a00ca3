"""The compiled caching-allocator model (memory/_allocator.c) against the Python one (memory/allocator.py): built where
it can be, and in the same state after every event of random sequences."""
from __future__ import annotations

import random
import shutil
import sysconfig

import pytest

from campaign.memory import allocator

MiB = 1 << 20
Compiled = getattr(allocator, "CompiledAllocator", None)
needs_compiled = pytest.mark.skipif(Compiled is None, reason="the compiled allocator was not built (no C compiler)")


def test_the_compiled_allocator_is_built_where_a_c_compiler_is():
    # setup.py builds it optionally: a failed build must not pass unseen where it should have worked
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if not shutil.which(compiler):
        pytest.skip(f"no C compiler ({compiler}) on this machine")
    assert Compiled is not None and allocator.CachingAllocator is Compiled


def _counters(a) -> tuple:
    return (a.state(), a.diverged_at, a.allocated_bound, a.limit)


@needs_compiled
@pytest.mark.parametrize("expandable", [False, True])
def test_the_compiled_allocator_follows_the_python_one_event_by_event(expandable):
    # the two implementations, given the same random events (small, mid and large requests, frees, a limit that
    # releases, empty_cache, reset_peaks, forks replayed on), are in the same state after every event
    rng = random.Random(3 + expandable)
    for trial in range(120):
        limit = rng.choice([None, 120 * MiB, 400 * MiB])
        py, c = allocator.PythonAllocator(expandable=expandable, limit=limit), \
            Compiled(expandable=expandable, limit=limit)
        live: list = []
        for _ in range(80):
            roll = rng.random()
            if live and roll < 0.4:
                a, b = live.pop(rng.randrange(len(live)))
                py.give(a)
                c.give(b)
            elif roll < 0.43:
                py.empty_cache()
                c.empty_cache()
            elif roll < 0.45:
                py.reset_peaks()
                c.reset_peaks()
            elif roll < 0.47 and not expandable:  # a fork replays on; the handles taken so far are dropped
                new = rng.choice([None, 200 * MiB])
                py, c, live = py.fork(limit=new), c.fork(limit=new), []
            else:
                size = rng.choice([rng.randint(0, 4096), rng.randint(1, 2 * MiB), rng.randint(1, 30 * MiB),
                                   rng.randint(1, 200 * MiB)])
                live.append((py.take(size), c.take(size)))
            assert _counters(c) == _counters(py), trial
        assert (c.peak_allocated, c.peak_reserved, c.segments, c.released) == \
            (py.peak_allocated, py.peak_reserved, py.segments, py.released)


@needs_compiled
def test_the_compiled_allocator_refuses_a_block_given_twice():
    # its handles are block numbers: a stale one is refused, not followed into another block
    a = Compiled()
    block = a.take(MiB)
    a.give(block)
    with pytest.raises(ValueError, match="not a block taken"):
        a.give(block)


@needs_compiled
def test_allocators_in_reference_cycles_are_collected():
    # the compiled type keeps a Python subclass's attributes (a dict the garbage collector must see): forks caught
    # in a cycle through it are freed, and the subclass's own count of references is back where it was
    import gc
    import sys
    import weakref

    before = sys.getrefcount(Compiled)
    base = Compiled()
    base.give(base.take(3 * MiB))
    refs = []
    for _ in range(200):
        fork = base.fork(limit=None)
        fork.me = fork
        refs.append(weakref.ref(fork))
    del fork, base
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert sys.getrefcount(Compiled) == before
