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
    return (a.state(), a.limit)


def _size(rng: random.Random) -> int:
    """Request sizes clustered at the rules' thresholds: 512 B blocks, the 1 MiB small/large border and split
    threshold, 10 MiB (a 20 MiB segment or one rounded to 2 MiB), 2 and 20 MiB multiples, a 1 MiB remainder."""
    r = rng.random()
    near = lambda x, span: max(0, x + rng.randint(-span, span))  # noqa: E731
    if r < 0.12:
        return near(512 * rng.randint(0, 4), 2)
    if r < 0.25:
        return near(MiB, 600)
    if r < 0.35:
        return near(10 * MiB, 600)
    if r < 0.50:
        return near(2 * MiB * rng.randint(1, 15), 600)
    if r < 0.58:
        return near(20 * MiB * rng.randint(1, 3), 600)
    if r < 0.65:
        return near(19 * MiB, 600)
    return rng.choice([rng.randint(0, 8192), rng.randint(1, 3 * MiB), rng.randint(1, 40 * MiB),
                       rng.randint(1, 300 * MiB)])


@needs_compiled
@pytest.mark.parametrize("expandable", [False, True])
def test_the_compiled_allocator_follows_the_python_one_event_by_event(expandable):
    # the two implementations, given the same random events (requests at the rules' thresholds, frees, the last
    # block freed often (an expandable segment's tail), take_each / give_each / pass_each / forward_layers /
    # backward_layers (a training step's blocks in one call), limits that release and
    # change, empty_cache, forks replayed on), are in the same state after every event
    rng = random.Random(3 + expandable)
    for trial in range(150):
        limit = rng.choice([None, 30 * MiB, 100 * MiB, 250 * MiB, 1000 * MiB])
        py, c = allocator.PythonAllocator(expandable=expandable, limit=limit), \
            Compiled(expandable=expandable, limit=limit)
        live: list = []
        give = rng.uniform(0.25, 0.55)
        for _ in range(500):
            roll = rng.random()
            if live and roll < give:
                a, b = live.pop(-1 if rng.random() < 0.3 else rng.randrange(len(live)))
                py.give(a)
                c.give(b)
            elif roll < give + 0.02:
                py.empty_cache()
                c.empty_cache()
            elif roll < give + 0.06:
                py.limit = c.limit = rng.choice([None, 20 * MiB, 80 * MiB, 300 * MiB])
            elif roll < give + 0.075 and not expandable:  # a fork replays on; the handles so far are dropped
                new = rng.choice([None, 50 * MiB, 200 * MiB])
                py, c, live = py.fork(limit=new), c.fork(limit=new), []
            elif roll < give + 0.09:
                sizes = [_size(rng) for _ in range(rng.randint(0, 4))]
                py.pass_each(sizes)
                c.pass_each(sizes)
            elif roll < give + 0.10:  # a forward over blocks: each keeps some tensors, makes and frees others
                kept = [[max(1, _size(rng)) for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(0, 4))]
                passed = [max(1, _size(rng)) for _ in range(rng.randint(0, 3))]
                for a, b in zip(py.forward_layers(kept, passed), c.forward_layers(kept, passed), strict=True):
                    live += zip(a, b, strict=True)
            elif roll < give + 0.11 and live:  # a backward over blocks, freeing what each kept (some of live)
                blocks = rng.randint(1, 4)
                saved = [[live.pop(rng.randrange(len(live))) for _ in range(rng.randint(0, min(2, len(live))))]
                         for _ in range(blocks)]
                made = [max(1, _size(rng)) for _ in range(rng.randint(0, 4))]
                first = rng.randint(0, len(made))
                grads = [[max(1, _size(rng)) for _ in range(rng.randint(0, 2))] for _ in range(rng.randint(0, blocks))]
                keep = rng.random() < 0.5
                live += zip(py.backward_layers([[a for a, _ in s] for s in saved], made, first, grads, keep),
                            c.backward_layers([[b for _, b in s] + [None] for s in saved], made, first, grads, keep),
                            strict=True)
            elif roll < give + 0.13:
                sizes = [_size(rng) for _ in range(rng.randint(0, 6))]
                live += zip(py.take_each(sizes), c.take_each(sizes), strict=True)
                k = rng.randint(0, len(live))
                back, live = live[len(live) - k:], live[:len(live) - k]
                py.give_each([None] + [a for a, _ in back])
                c.give_each([None] + [b for _, b in back])
            else:
                size = _size(rng)
                live.append((py.take(size), c.take(size)))
            assert _counters(c) == _counters(py), trial
        assert (c.peak_allocated, c.peak_reserved, c.segments, c.released) == \
            (py.peak_allocated, py.peak_reserved, py.segments, py.released)


@needs_compiled
def test_the_compiled_allocator_refuses_a_block_given_twice():
    # its handles are block numbers: one given back twice is refused while its number is not taken again (a
    # handle kept past that names the new block, as a kept Python list would name a merged one)
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
    base.note = "an attribute"
    referents = gc.get_referents(base)  # its dict, and its type once (the subclass's traverse visits it)
    assert referents.count(Compiled) == 1 and vars(base) in referents
    del referents
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


def test_without_the_compiled_model_the_python_one_passes_the_same_tests():
    # an install without a C compiler: the extension cannot be imported, PythonAllocator stands in, and the
    # allocator's and the replay's tests pass on it as they do on the compiled one
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.modules['campaign.memory._allocator'] = None\n"
            "from campaign.memory import allocator\n"
            "assert allocator.CachingAllocator is allocator.PythonAllocator\n"
            "import pytest\n"
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/memory/test_allocator.py',"
            " 'tests/memory/test_reserved.py', 'tests/memory/test_reserved_process.py']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_the_estimate_names_the_allocator_model_that_ran(monkeypatch):
    # `campaign memory --json` says which model replayed the step; the Python one is also named in the notes, so that
    # an install that could not build the compiled model is not slow unseen
    from campaign.memory import estimate_memory, make_workload, replay
    from campaign.models import load_spec

    spec, w = load_spec("gpt2"), make_workload(seq_len=128)
    est = estimate_memory(spec, w)
    assert est.allocator_model == ("compiled" if Compiled is not None else "python")
    assert est.to_dict()["allocator_model"] == est.allocator_model
    monkeypatch.setattr(replay, "CachingAllocator", allocator.PythonAllocator)
    slow = estimate_memory(spec, w)
    assert slow.allocator_model == "python" and slow.required_bytes == est.required_bytes  # the same result
    assert any("ran on the Python model" in n for n in slow.notes)
    assert not any("Python model" in n for n in est.notes) or Compiled is None
    assert estimate_memory(spec, w, fragmentation=0.1).allocator_model == ""  # a given share: no replay
