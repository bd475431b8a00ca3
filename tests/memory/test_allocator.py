"""The caching-allocator model on sequences worked out by hand from CUDACachingAllocator's rules."""
from __future__ import annotations

from campaign.memory.allocator import CachingAllocator, replay

MiB = 1 << 20


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
