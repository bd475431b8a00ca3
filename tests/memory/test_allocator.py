"""The caching-allocator model on sequences worked out by hand from CUDACachingAllocator's rules, for both of its
implementations (the Python one and the compiled one: test_allocator_compiled.py compares them event by event)."""
from __future__ import annotations

import random

import pytest

from campaign.memory import allocator
from campaign.memory.allocator import replay

MiB = 1 << 20
IMPLEMENTATIONS = {"python": allocator.PythonAllocator, "compiled": getattr(allocator, "CompiledAllocator", None)}
CachingAllocator = allocator.CachingAllocator  # each test runs with each implementation (the fixture below)


@pytest.fixture(autouse=True, params=sorted(IMPLEMENTATIONS))
def implementation(request, monkeypatch):
    cls = IMPLEMENTATIONS[request.param]
    if cls is None:
        pytest.skip("the compiled allocator was not built (no C compiler at install)")
    monkeypatch.setattr(allocator, "CachingAllocator", cls)  # replay()'s
    monkeypatch.setitem(globals(), "CachingAllocator", cls)
    return request.param


def test_small_requests_share_a_2_mib_segment():
    a = CachingAllocator()
    a.malloc("x", 100)  # rounds to 512 B, small pool, new 2 MiB segment
    a.malloc("y", 1000)  # 1024 B, carved from the same segment
    assert (a.allocated, a.reserved) == (512 + 1024, 2 * MiB)


def test_mid_requests_take_20_mib_segments_and_split():
    a = CachingAllocator()
    a.malloc("a", 5 * MiB)  # < 10 MiB: a 20 MiB segment, 15 MiB left (> 1 MiB: split)
    a.malloc("b", 5 * MiB)  # fits the 15 MiB remainder
    assert a.reserved == 20 * MiB and a.allocated == 10 * MiB


def test_large_requests_round_to_2_mib():
    a = CachingAllocator()
    a.malloc("big", 12 * MiB + 1)  # 12 MiB + 512 B -> a 14 MiB segment
    assert a.reserved == 14 * MiB and a.allocated == 12 * MiB + 512


def test_fragmentation_forces_a_new_segment():
    a = CachingAllocator()
    a.malloc("A", 6 * MiB)  # segment 1: A [0, 6), free [6, 20)
    a.malloc("B", 6 * MiB)  # B [6, 12), free [12, 20) = 8 MiB
    a.free("A")  # holes: 6 MiB and 8 MiB
    a.malloc("C", 7 * MiB)  # best fit is the 8 MiB hole; the 1 MiB rest is not > 1 MiB: no split
    assert a.allocated == 6 * MiB + 8 * MiB and a.reserved == 20 * MiB
    a.malloc("D", 7 * MiB)  # only a 6 MiB hole is left: a second 20 MiB segment
    assert a.reserved == 40 * MiB
    assert a.peak_reserved - a.peak_allocated > 0


def test_freed_neighbours_merge():
    events = [("alloc", "a", 6 * MiB), ("alloc", "b", 6 * MiB), ("alloc", "c", 8 * MiB),
              ("free", "a", 0), ("free", "b", 0), ("alloc", "d", 12 * MiB)]
    a = replay(events)
    # a and b merge into one 12 MiB free block, which d takes: no new segment
    assert a.reserved == 20 * MiB and a.allocated == 8 * MiB + 12 * MiB


def test_expandable_segment_grows_its_free_tail_by_20_mib_pages():
    # one 6 MiB request maps one 20 MiB page; freed, the whole page is the free tail; 25 MiB then maps one more page
    # (20 free + 20 new = 40 >= 25) instead of a new 26 MiB segment (25 MiB rounded to 2 MiB)
    a = CachingAllocator(expandable=True)
    a.malloc("a", 6 * MiB)
    assert a.reserved == 20 * MiB
    a.free("a")
    a.malloc("b", 25 * MiB)
    assert (a.reserved, a.allocated) == (40 * MiB, 25 * MiB)
    plain = replay([("alloc", "a", 6 * MiB), ("free", "a", 0), ("alloc", "b", 25 * MiB)])
    assert plain.reserved == 20 * MiB + 26 * MiB


def test_expandable_small_pool_grows_in_2_mib_pages():
    a = CachingAllocator(expandable=True)
    for k in range(5):  # 5 x 512 KiB = 2.5 MiB of small requests: two 2 MiB pages of one segment
        a.malloc(k, 512 * 1024)
    assert a.reserved == 4 * MiB and a.segments == 1


def test_a_full_card_releases_wholly_free_segments():
    # limit 50 MiB: A (30 MiB segment) freed stays cached; B of 32 MiB does not fit it and 30 + 32 > 50: the
    # cached segment is released first (release_cached_blocks), so reserved is B's segment only
    a = CachingAllocator(limit=50 * MiB)
    a.malloc("A", 30 * MiB)
    a.free("A")
    a.malloc("B", 32 * MiB)
    assert a.reserved == 32 * MiB
    unlimited = replay([("alloc", "A", 30 * MiB), ("free", "A", 0), ("alloc", "B", 32 * MiB)])
    assert unlimited.reserved == 62 * MiB


def test_expandable_best_fit_keeps_the_free_end_for_growth():
    # A 20, B 8, free A, C 6, D 30 (MiB), worked by hand from get_free_block / try_allocate_expandable_segment:
    # A maps one 20 MiB page [0, 20); B maps a second [20, 40): B [20, 28), free end [28, 40) = 12 MiB; freeing A
    # leaves a 20 MiB hole. C (6) fits both, but the free end counts at the size it can grow to, so C takes the
    # hole: [0, 6), 14 MiB left. D (30) fits no block: the free end (12) grows by one page to 32: reserved 60 MiB.
    # Taking the end for C (plain best fit) would leave 6 MiB there and D would map two pages: 80 MiB.
    events = [("alloc", "A", 20 * MiB), ("alloc", "B", 8 * MiB), ("free", "A", 0), ("alloc", "C", 6 * MiB),
              ("alloc", "D", 30 * MiB)]
    pages = replay(events, expandable=True)
    assert pages.peak_reserved == 60 * MiB
    # the default on the same sequence: A's own 20 MiB segment; B (< 10 MiB) a 20 MiB one, C the 12 MiB rest of it;
    # D a 30 MiB segment: 70 MiB. Expandable segments reserve less here, as they should.
    assert replay(events).peak_reserved == 70 * MiB


def test_expandable_segments_split_any_remainder_of_512_bytes_or_more():
    # should_split: `is_small || expandable_segments()` -> remaining >= 512 B. A 19.5 MiB request maps one 20 MiB
    # page and leaves 0.5 MiB, split off (the default large pool keeps a remainder of <= 1 MiB in the block).
    pages = CachingAllocator(expandable=True)
    pages.malloc("a", 19 * MiB + MiB // 2)
    assert (pages.allocated, pages.reserved) == (19 * MiB + MiB // 2, 20 * MiB)
    plain = CachingAllocator()
    plain.malloc("a", 9 * MiB + MiB // 2)  # a 20 MiB segment: 10.5 MiB left (> 1 MiB): split
    plain.malloc("b", 10 * MiB)  # takes the 10.5 MiB rest whole: 0.5 MiB is not > 1 MiB
    assert plain.allocated == 20 * MiB


class _Plain:
    """A second, deliberately naive reading of the same rules: each segment a list of [offset, size, free] in
    address order, best fit by scanning every free block; no sorted pools, no neighbour links."""

    def __init__(self, expandable: bool) -> None:
        self.expandable, self.segments, self.live = expandable, [], {}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def malloc(self, key, size):
        size = max(512, -(-size // 512) * 512)
        small = size <= MiB
        pages = [s for s in self.segments if s["small"] == small]
        fits = [(b[1], s["id"], b[0], s, b) for s in pages for b in s["blocks"] if b[2] and b[1] >= size]
        if self.expandable and pages:
            tail = pages[0]["blocks"][-1]
            others = [f for f in fits if f[4] is not tail]
            fits = others or fits  # the free end block only when nothing else fits
        if fits:
            _, _, _, seg, block = min(fits, key=lambda f: f[:3])
        elif self.expandable:
            page = 2 * MiB if small else 20 * MiB
            if not pages:
                self.segments.append({"id": -1 if small else -2, "small": small, "blocks": []})
                pages = [self.segments[-1]]
            seg = pages[0]
            last = seg["blocks"][-1] if seg["blocks"] else None
            if last is not None and last[2]:
                mapped = -(-(size - last[1]) // page) * page
                last[1] += mapped
                block = last
            else:
                mapped = -(-size // page) * page
                block = [last[0] + last[1] if last else 0, mapped, True]
                seg["blocks"].append(block)
            self._reserve(mapped)
        else:
            total = 2 * MiB if small else 20 * MiB if size < 10 * MiB else -(-size // (2 * MiB)) * 2 * MiB
            seg = {"id": len(self.segments) + 1, "small": small, "blocks": [[0, total, True]]}
            self.segments.append(seg)
            block = seg["blocks"][0]
            self._reserve(total)
        rest = block[1] - size
        if rest >= 512 if (small or self.expandable) else rest > MiB:
            blocks = seg["blocks"]
            blocks.insert(blocks.index(block) + 1, [block[0] + size, rest, True])
            block[1] = size
        block[2] = False
        self.live[key] = (seg, block)
        self.allocated += block[1]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def _reserve(self, nbytes):
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, key):
        seg, block = self.live.pop(key)
        self.allocated -= block[1]
        block[2] = True
        blocks = seg["blocks"]
        i = blocks.index(block)
        if i + 1 < len(blocks) and blocks[i + 1][2]:
            block[1] += blocks.pop(i + 1)[1]
        if i > 0 and blocks[i - 1][2]:
            blocks[i - 1][1] += blocks.pop(i)[1]


@pytest.mark.parametrize("expandable", [False, True])
def test_the_model_matches_a_naive_reading_of_the_rules_on_random_sequences(expandable):
    rng = random.Random(7)
    for _ in range(150):
        fast, plain, live, key = CachingAllocator(expandable=expandable), _Plain(expandable), [], 0
        for _ in range(60):
            if live and rng.random() < 0.45:
                k = live.pop(rng.randrange(len(live)))
                fast.free(k)
                plain.free(k)
            else:
                size = rng.choice([rng.randint(1, 2 * MiB), rng.randint(1, 30 * MiB), rng.randint(1, 200 * MiB)])
                fast.malloc(key, size)
                plain.malloc(key, size)
                live.append(key)
                key += 1
            assert (fast.allocated, fast.reserved, fast.peak_reserved) == \
                (plain.allocated, plain.reserved, plain.peak_reserved)


def test_a_segment_with_a_live_block_is_not_released_at_the_limit():
    # limit 40 MiB. C and D (4 MiB each, < 10 MiB) share one 20 MiB segment; C freed leaves a 4 MiB hole, but D
    # still lives there: release_cached_blocks frees only whole segments, so E (30 MiB) needs 20 + 30 = 50 MiB,
    # past the limit: the allocator's out-of-memory, which the model shows as reserved above the limit
    a = CachingAllocator(limit=40 * MiB)
    a.malloc("C", 4 * MiB)
    a.malloc("D", 4 * MiB)
    a.free("C")
    a.malloc("E", 30 * MiB)
    assert (a.reserved, a.released) == (50 * MiB, 0)
    # the same with D freed too: the 20 MiB segment is wholly free and goes back first, 30 MiB stay reserved
    b = CachingAllocator(limit=40 * MiB)
    b.malloc("C", 4 * MiB)
    b.malloc("D", 4 * MiB)
    b.free("C")
    b.free("D")
    b.malloc("E", 30 * MiB)
    assert (b.reserved, b.released, b.peak_reserved) == (30 * MiB, 20 * MiB, 30 * MiB)


@pytest.mark.parametrize("limit", [None, 300 * MiB])
def test_a_fork_replays_on_as_the_allocator_it_was_forked_from(limit):
    # the training replay forks the allocator after the weights (whose blocks it never frees) for each probe of a
    # card solve: a fork and the original, given the same events from there, end in the same state
    rng = random.Random(11)
    for _ in range(60):
        first = CachingAllocator()
        for _ in range(20):  # the part forked: blocks taken and freed, handles to the kept ones dropped
            block = first.take(rng.choice([rng.randint(1, 2 * MiB), rng.randint(1, 30 * MiB)]))
            if rng.random() < 0.4:
                first.give(block)
        fork = first.fork(limit=limit)
        first.limit = limit
        live: list = []
        for _ in range(60):
            if live and rng.random() < 0.45:
                i = rng.randrange(len(live))
                a, b = live.pop(i)
                first.give(a)
                fork.give(b)
            else:
                size = rng.choice([rng.randint(1, 2 * MiB), rng.randint(1, 30 * MiB), rng.randint(1, 200 * MiB)])
                live.append((first.take(size), fork.take(size)))
            assert fork.state() == first.state()


def test_a_fork_refuses_keyed_blocks_and_expandable_segments():
    a = CachingAllocator()
    a.malloc("x", MiB)
    with pytest.raises(ValueError):
        a.fork(limit=None)
    with pytest.raises(ValueError):
        CachingAllocator(expandable=True).fork(limit=None)


def test_pass_each_takes_and_gives_back_each_size_in_turn():
    # 30 MiB, 5 MiB, 12 MiB made and dropped one after the other: the first takes a 30 MiB segment, which the 5 MiB
    # one then splits (25 MiB left, > 1 MiB) and gives back whole; the 12 MiB one reuses it too. Nothing stays
    # allocated, one segment is reserved, and the peak allocated is the largest single tensor.
    a, b = CachingAllocator(), CachingAllocator()
    a.pass_each([30 * MiB, 5 * MiB, 12 * MiB])
    for size in (30 * MiB, 5 * MiB, 12 * MiB):
        b.give(b.take(size))
    assert a.state() == b.state()
    assert (a.allocated, a.reserved, a.peak_allocated, a.segments) == (0, 30 * MiB, 30 * MiB, 1)
    with pytest.raises(TypeError):
        a.pass_each([MiB, None])  # a size, not a handle


def test_the_layer_calls_replay_a_forward_and_a_backward_as_counted_by_hand():
    # forward, one block: it keeps 30 MiB (a 30 MiB segment) and makes and drops 12 MiB (a 12 MiB segment, then
    # cached): 42 MiB reserved, 30 allocated. Backward: 12 MiB made (the cached block, whole), a 4 MiB gradient
    # kept (under 10 MiB: a 20 MiB segment, 16 MiB split off), then 12 MiB and the block's 30 MiB freed: 62 MiB
    # reserved over 3 segments, the gradient's 4 MiB allocated, the peak 30 + 12 + 4 = 46 MiB
    a, b = CachingAllocator(), CachingAllocator()
    saved = a.forward_layers([[30 * MiB]], [12 * MiB])
    assert len(saved) == 1 and len(saved[0]) == 1
    assert (a.allocated, a.reserved, a.segments) == (30 * MiB, 42 * MiB, 2)
    grads = a.backward_layers(saved, [12 * MiB], 0, [[4 * MiB]], True)
    assert len(grads) == 1
    assert (a.allocated, a.reserved, a.peak_allocated, a.segments) == (4 * MiB, 62 * MiB, 46 * MiB, 3)
    # the same events one by one; with `keep` off the gradient is given back at once
    kept = b.take(30 * MiB)
    b.give(b.take(12 * MiB))
    made = b.take(12 * MiB)
    b.take(4 * MiB)  # the gradient, kept
    b.give(made)
    b.give(kept)
    assert a.state() == b.state()
    c = CachingAllocator()
    c.backward_layers(c.forward_layers([[30 * MiB]], [12 * MiB]), [12 * MiB], 0, [[4 * MiB]], False)
    assert (c.allocated, c.reserved) == (0, 62 * MiB)
    with pytest.raises(ValueError):
        c.backward_layers([[]], [MiB], 2, [], True)  # `first` past what is made


def test_take_each_and_give_each_are_take_and_give_in_order():
    sizes = [3 * MiB, 700, 25 * MiB, MiB, 12 * MiB + 1]
    a, b = CachingAllocator(), CachingAllocator()
    many, one = a.take_each(sizes), [b.take(size) for size in sizes]
    # 25 MiB takes a 26 MiB segment whole (the 1 MiB left is not > 1 MiB: no split); 700 B rounds to 1024
    assert a.state() == b.state() and a.allocated == 3 * MiB + 1024 + 26 * MiB + MiB + 12 * MiB + 512
    a.give_each([many[2], None, many[0], many[4]])  # None: nothing was taken (Replay.alloc of 0 bytes)
    for block in (one[2], one[0], one[4]):
        b.give(block)
    assert a.state() == b.state() and a.allocated == 1024 + MiB
