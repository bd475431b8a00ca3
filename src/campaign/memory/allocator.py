"""A model of PyTorch's CUDA caching allocator: replay allocations and frees, predict reserved memory.

Rules from c10/cuda/CUDACachingAllocator.cpp (defaults: no max_split_size, no expandable segments):
  - requests round up to 512 B (kMinBlockSize);
  - requests up to 1 MiB (kSmallSize) use the small pool, whose segments are 2 MiB (kSmallBuffer);
  - larger requests use the large pool: under 10 MiB (kMinLargeAlloc) they get a 20 MiB segment
    (kLargeBuffer), else a segment rounded up to 2 MiB (kRoundLarge);
  - a request takes the smallest free block that fits (best fit), split when the remainder is >= 512 B
    (small pool) or > 1 MiB (large pool); freed blocks merge with free neighbours of the same segment;
  - segments are never returned to the driver (no empty_cache), so reserved only grows.
With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) each pool has one segment, a virtual
address range that grows at its end in pages (2 MiB for the small pool, 20 MiB for the large: `segment_size =
pool->is_small ? kSmallBuffer : kLargeBuffer` in try_allocate_expandable_segment): a request no free block fits maps
only the pages it lacks, starting from the free block at the end; best fit, splitting and merging stay the same.
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


_EXPANDABLE = {True: -1, False: -2}  # segment ids of the two expandable segments (small, large pool)


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
    expandable: bool = False
    limit: int | None = None  # device bytes the allocator may reserve: past it, cached free segments are released
    _last: dict[bool, int] = field(default_factory=dict)  # expandable: offset of each pool's last block
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
        elif self.expandable:
            block = self._grow(size, small)
        else:
            seg_bytes = segment_size(size)
            if self.limit is not None and self.reserved + seg_bytes > self.limit:
                self.release_cached()  # cudaMalloc failed: release_cached_blocks, then retry
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
            if self._last.get(small) == block.offset and block.segment == _EXPANDABLE[small]:
                self._last[small] = rest.offset
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
                    if self._last.get(block.small) == block.offset and block.segment == _EXPANDABLE[block.small]:
                        self._last[block.small] = neighbour.offset
                    del self._blocks[(block.segment, block.offset)]
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    if self._last.get(block.small) == neighbour.offset and block.segment == _EXPANDABLE[block.small]:
                        self._last[block.small] = block.offset
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
                self._blocks[(block.segment, block.offset)] = block
        bisect.insort(pool, (block.size, block.segment, block.offset))

    def _grow(self, size: int, small: bool) -> _Block:
        """Expandable segments: map the pages the request lacks at the end of the pool's one segment."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        seg = _EXPANDABLE[small]
        last = self._blocks.get((seg, self._last[small])) if small in self._last else None
        if last is not None and last.free:  # the free block at the end grows
            self._pools[small].remove((last.size, last.segment, last.offset))
            mapped = -(-(size - last.size) // page) * page
            last.size += mapped
            block = last
        else:
            mapped = -(-size // page) * page
            offset = last.offset + last.size if last is not None else 0
            block = _Block(seg, offset, mapped, small, True, last, None)
            if last is not None:
                last.next = block
            else:
                self.segments += 1
            self._blocks[(seg, offset)] = block
            self._last[small] = offset
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def release_cached(self) -> None:
        """Return every cached segment that is wholly free to the driver (what the allocator does when cudaMalloc
        fails, and what empty_cache does): blocks split off a segment that still has a live block stay."""
        for pool in self._pools.values():
            keep = []
            for size, seg, off in pool:
                block = self._blocks[(seg, off)]
                if block.prev is None and block.next is None and seg >= 0:
                    del self._blocks[(seg, off)]
                    self.reserved -= size
                else:
                    keep.append((size, seg, off))
            pool[:] = keep  # in place: malloc holds this list

    def reset_peaks(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def replay(events: Iterable[tuple[str, object, int]], *, expandable: bool = False) -> CachingAllocator:
    """Replay ('alloc', key, bytes) / ('free', key, 0) events through a fresh allocator."""
    a = CachingAllocator(expandable=expandable)
    for op, key, size in events:
        if op == "alloc":
            a.malloc(key, size)
        else:
            a.free(key)
    return a
