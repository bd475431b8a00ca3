"""A model of PyTorch's CUDA caching allocator: replay allocations and frees, predict reserved memory.

Rules from c10/cuda/CUDACachingAllocator.cpp (defaults: no max_split_size, no expandable segments):
  - requests round up to 512 B (kMinBlockSize);
  - requests up to 1 MiB (kSmallSize) use the small pool, whose segments are 2 MiB (kSmallBuffer);
  - larger requests use the large pool: under 10 MiB (kMinLargeAlloc) they get a 20 MiB segment
    (kLargeBuffer), else a segment rounded up to 2 MiB (kRoundLarge);
  - a request takes the smallest free block that fits (best fit), split when the remainder is >= 512 B
    (small pool) or > 1 MiB (large pool); freed blocks merge with free neighbours of the same segment;
  - segments are never returned to the driver (no empty_cache), so reserved only grows.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from .constants import LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE


def round_size(size: int) -> int:
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class CachingAllocator:
    """Replay `malloc(key, size)` / `free(key)`; `allocated`, `reserved` and their peaks follow the real allocator."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    _pools: dict[bool, list[tuple[int, int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _blocks: dict[tuple[int, int], _Block] = field(default_factory=dict)
    _live: dict[object, _Block] = field(default_factory=dict)

    def malloc(self, key: object, size: int) -> None:
        size = round_size(size)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            _, seg, off = pool.pop(i)
            block = self._blocks[(seg, off)]
        else:
            seg_bytes = segment_size(size)
            self.segments += 1
            block = _Block(self.segments, 0, seg_bytes, small)
            self._blocks[(block.segment, 0)] = block
            self.reserved += seg_bytes
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            rest = _Block(block.segment, block.offset + size, remaining, small, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._blocks[(rest.segment, rest.offset)] = rest
            bisect.insort(pool, (rest.size, rest.segment, rest.offset))
        block.free = False
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        pool = self._pools[block.small]
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                pool.remove((neighbour.size, neighbour.segment, neighbour.offset))
                del self._blocks[(neighbour.segment, neighbour.offset)]
                if neighbour is block.prev:
                    del self._blocks[(block.segment, block.offset)]
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
                self._blocks[(block.segment, block.offset)] = block
        bisect.insort(pool, (block.size, block.segment, block.offset))

    def reset_peaks(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def replay(events: Iterable[tuple[str, object, int]]) -> CachingAllocator:
    """Replay ('alloc', key, bytes) / ('free', key, 0) events through a fresh allocator."""
    a = CachingAllocator()
    for op, key, size in events:
        if op == "alloc":
            a.malloc(key, size)
        else:
            a.free(key)
    return a
