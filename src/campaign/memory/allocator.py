"""A model of PyTorch's CUDA caching allocator: replay allocations and frees, predict reserved memory.

Rules from c10/cuda/CUDACachingAllocator.cpp (defaults: no max_split_size, no expandable segments):
  - requests round up to 512 B (kMinBlockSize);
  - requests up to 1 MiB (kSmallSize) use the small pool, whose segments are 2 MiB (kSmallBuffer);
  - larger requests use the large pool: under 10 MiB (kMinLargeAlloc) they get a 20 MiB segment
    (kLargeBuffer), else a segment rounded up to 2 MiB (kRoundLarge);
  - a request takes the smallest free block that fits (best fit; ties by address), split when the remainder is
    >= 512 B (small pool) or > 1 MiB (large pool) (should_split); freed blocks merge with free neighbours of the
    same segment;
  - segments are never returned to the driver (no empty_cache), so reserved only grows, unless `limit` is set: a
    cudaMalloc past it first releases the wholly free cached segments (release_cached_blocks), then retries.
With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) each pool has one segment, a virtual
address range that grows at its end in pages (2 MiB for the small pool, 20 MiB for the large: `segment_size =
pool->is_small ? kSmallBuffer : kLargeBuffer` in find_expandable_block). Three rules differ from the default:
  - a request no free block fits maps only the pages it lacks, starting from the free block at the end, if the
    last block is free (try_allocate_expandable_segment, map_block);
  - best fit counts that free last block at the size it can grow to, the rest of the address range
    (`expandable_size` in get_free_block): it is taken only when no other free block fits;
  - every pool splits when the remainder is >= 512 B (should_split: `is_small || expandable_segments()`).

Two implementations of these rules, one state and one result: PythonAllocator below (blocks are plain lists [size,
segment, offset, free, prev, next, small], each pool a sorted list of (size, segment, offset, block)), and the
compiled one of _allocator.c (the same, in C), built at install where a C compiler is found. CachingAllocator is the
compiled one where it was built, else the Python one: a card solve replays tens of thousands of events per probe,
about 2.5 us each in Python and 0.15 us compiled. tests/memory/test_allocator_compiled.py replays random sequences
through both and compares their state after every event.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .constants import LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE

SIZE, SEG, OFF, FREE, PREV, NEXT, SMALL = range(7)  # the fields of a block (as literal indices below)
_EXPANDABLE = {True: -1, False: -2}  # segment ids of the two expandable segments (small, large pool)
_UP, _DOWN = MIN_BLOCK - 1, ~(MIN_BLOCK - 1)  # MIN_BLOCK is a power of two: rounding up by masking


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class Allocator:
    """What both implementations share: blocks named by the caller's keys (the trace's bookkeeping) over take() and
    give(), and fork(); their counters and methods, for the type checker."""

    _live: dict[object, Any]
    expandable: bool
    limit: int | None
    allocated: int
    reserved: int
    peak_allocated: int
    peak_reserved: int
    segments: int
    released: int
    if TYPE_CHECKING:  # each implementation's own (a definition here would hide the compiled one's)
        def __init__(self, *, expandable: bool = False, limit: int | None = None) -> None: ...

        def take(self, size: int) -> Any: ...

        def give(self, block: Any) -> None: ...

        def take_each(self, sizes: Sequence[int]) -> list: ...

        def give_each(self, blocks: Sequence[Any]) -> None: ...

        def pass_each(self, sizes: Sequence[int]) -> None: ...

        def forward_layers(self, kept: Sequence[Sequence[int]], passed: Sequence[int]) -> list[list]: ...

        def backward_layers(self, saved: Sequence[Sequence[Any]], made: Sequence[int], first: int,
                            grads: Sequence[Sequence[int]], keep: bool) -> list: ...

        def _fork(self, *, limit: int | None) -> Allocator: ...

        def empty_cache(self) -> None: ...

        def state(self) -> tuple: ...

    def malloc(self, key: object, size: int) -> None:
        """Allocate `size` bytes under `key` (freed by free(key))."""
        self._live[key] = self.take(size)

    def free(self, key: object) -> None:
        block = self._live.pop(key, None)
        if block is not None:
            self.give(block)

    def fork(self, *, limit: int | None) -> Allocator:
        """A copy that replays on from here under `limit`, for a caller that keeps no handle to a block taken so
        far (so none will be given back). Not for expandable segments, nor blocks taken by key."""
        if self.expandable or self._live:
            raise ValueError("fork: expandable segments or blocks taken by key")
        new = self._fork(limit=limit)
        new._live = {}
        return new


class PythonAllocator(Allocator):
    """Replay `malloc(key, size)` / `free(key)`; `allocated`, `reserved` and their peaks follow the real allocator.

    `limit`: device bytes the allocator may reserve; past it, cached free segments are released first.
    """

    def __init__(self, *, expandable: bool = False, limit: int | None = None) -> None:
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = self.segments = 0
        self.released = 0  # bytes returned to the driver by release_cached
        self._whole_free = 0  # cached segments that are wholly free
        self.expandable = expandable
        self.limit = limit
        self._small: list = []  # free blocks of each pool, as (size, segment, offset, block), sorted
        self._large: list = []
        self._pools = {True: self._small, False: self._large}
        self._tail: dict[bool, list | None] = {True: None, False: None}  # expandable: each pool's last block
        self._live: dict[object, list] = {}

    def take(self, size: int) -> list:
        """Allocate `size` bytes; the block returned is the handle to give back (no key bookkeeping)."""
        size = (size + _UP) & _DOWN or MIN_BLOCK  # rounded up to 512 B, at least 512 B
        small = size <= SMALL_SIZE
        expandable = self.expandable
        pool = self._small if small else self._large
        i = bisect_left(pool, (size,))
        if i < len(pool):
            if expandable and pool[i][3] is self._tail[small] and i + 1 < len(pool):
                i += 1  # the free end block counts at the size it can grow to: any other fitting block first
            block = pool.pop(i)[3]
            if block[4] is None and block[5] is None and block[1] >= 0:
                self._whole_free -= 1
        elif expandable:
            block = self._grow(size, small)
        else:
            seg_bytes = SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC else \
                -(-size // ROUND_LARGE) * ROUND_LARGE
            if self.limit is not None and self.reserved + seg_bytes > self.limit:
                self.release_cached()  # cudaMalloc failed: release_cached_blocks, then retry
            self.segments += 1
            block = [seg_bytes, self.segments, 0, True, None, None, small]
            self.reserved += seg_bytes
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        remaining = block[0] - size
        if remaining > SMALL_SIZE or (remaining >= MIN_BLOCK and (small or expandable)):  # should_split
            after = block[5]
            rest = [remaining, block[1], block[2] + size, True, block, after, small]
            if after is not None:
                after[4] = rest
            elif expandable and self._tail[small] is block:
                self._tail[small] = rest
            block[5] = rest
            block[0] = size
            insort(pool, (remaining, rest[1], rest[2], rest))
        block[3] = False
        allocated = self.allocated = self.allocated + block[0]
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
        return block

    def give(self, block: list) -> None:
        """Free a block from take(): it merges with its free neighbours and returns to its pool."""
        self.allocated -= block[0]
        small = block[6]
        pool = self._small if small else self._large
        block[3] = True
        before, after = block[4], block[5]
        if before is not None and before[3]:  # merge into the free block before
            del pool[bisect_left(pool, (before[0], before[1], before[2]))]
            before[0] += block[0]
            before[5] = after
            if after is not None:
                after[4] = before
            elif self.expandable and self._tail[small] is block:
                self._tail[small] = before
            block = before
        if after is not None and after[3]:  # absorb the free block after
            del pool[bisect_left(pool, (after[0], after[1], after[2]))]
            block[0] += after[0]
            nxt = block[5] = after[5]
            if nxt is not None:
                nxt[4] = block
            elif self.expandable and self._tail[small] is after:
                self._tail[small] = block
        if block[4] is None and block[5] is None and block[1] >= 0:
            self._whole_free += 1
        insort(pool, (block[0], block[1], block[2], block))

    def take_each(self, sizes: Sequence[int]) -> list:
        """[take(size) for size in sizes]."""
        return [self.take(size) for size in sizes]

    def give_each(self, blocks: Sequence[list | None]) -> None:
        """give(block) for each block that is not None, in order."""
        for block in blocks:
            if block is not None:
                self.give(block)

    def pass_each(self, sizes: Sequence[int]) -> None:
        """give(take(size)) for each size, in order: tensors made and dropped at once."""
        for size in sizes:
            self.give(self.take(size))

    def forward_layers(self, kept: Sequence[Sequence[int]], passed: Sequence[int]) -> list[list]:
        """A training forward over its blocks, one call: per block, take each size of kept[i] (what it keeps for
        backward), then take each size of `passed` and give them back in order (what it computes without
        keeping). Returns the handles kept, a list per block."""
        out = []
        for sizes in kept:
            out.append(self.take_each(sizes))
            self.give_each(self.take_each(passed))
        return out

    def backward_layers(self, saved: Sequence[Sequence[Any]], made: Sequence[int], first: int,
                        grads: Sequence[Sequence[int]], keep: bool) -> list:
        """A training backward over its blocks, one call, from the last: per block, take each size of `made`
        (the tensors its backward makes: the first `first` of them recomputed, then the activation gradients);
        where block i has gradients (i < len(grads)), take each of grads[i], kept (returned, in order) when
        `keep`, else given back at once; then give back made[first:], made[:first], and saved[i]'s handles."""
        if not 0 <= first <= len(made):
            raise ValueError("backward_layers: first past made")
        out: list = []
        for i in reversed(range(len(saved))):
            blocks = self.take_each(made)
            if i < len(grads):
                if keep:
                    out += self.take_each(grads[i])
                else:
                    self.pass_each(grads[i])
            self.give_each(blocks[first:] + blocks[:first])
            self.give_each(saved[i])
        return out

    def _grow(self, size: int, small: bool) -> list:
        """Expandable segments: map the pages the request lacks at the end of the pool's one segment."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        last = self._tail[small]
        if last is not None and last[FREE]:  # the free block at the end grows
            pool = self._pools[small]
            del pool[bisect_left(pool, (last[SIZE], last[SEG], last[OFF]))]
            mapped = -(-(size - last[SIZE]) // page) * page
            last[SIZE] += mapped
            block = last
        else:
            mapped = -(-size // page) * page
            if last is None:
                self.segments += 1
                block = [mapped, _EXPANDABLE[small], 0, True, None, None, small]
            else:
                block = [mapped, last[SEG], last[OFF] + last[SIZE], True, last, None, small]
                last[NEXT] = block
            self._tail[small] = block
        self.reserved += mapped
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return block

    def release_cached(self) -> None:
        """Return every cached segment that is wholly free to the driver (what the allocator does when cudaMalloc
        fails, and what empty_cache does): blocks split off a segment that still has a live block stay."""
        for pool in self._pools.values():
            keep = []
            for entry in pool:
                block = entry[3]
                if block[PREV] is None and block[NEXT] is None and block[SEG] >= 0:
                    self.reserved -= block[SIZE]
                    self.released += block[SIZE]
                    self._whole_free -= 1
                else:
                    keep.append(entry)
            pool[:] = keep  # in place: malloc holds this list

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(), called by the program: the wholly free cached segments go back to the driver.
        Not a release forced by the limit: `released` (what a limit made the allocator give back) is unchanged."""
        released = self.released
        self.release_cached()
        self.released = released

    def _fork(self, *, limit: int | None) -> PythonAllocator:
        """fork(): the counters, the free blocks and the blocks of their segments (a free block's neighbours are
        what splitting and merging touch); segments with no free block are counted, not copied."""
        new = PythonAllocator.__new__(PythonAllocator)
        new.__dict__.update(self.__dict__)
        new.limit = limit
        new._live = {}
        copies: dict[int, list] = {}

        def copy(block: list) -> list:
            if id(block) not in copies:  # the block's whole segment, from its first block
                head = block
                while head[4] is not None:
                    head = head[4]
                before = None
                while head is not None:
                    twin = [*head[:4], before, None, head[6]]
                    if before is not None:
                        before[5] = twin
                    copies[id(head)] = before = twin
                    head = head[5]
            return copies[id(block)]

        new._small = [(e[0], e[1], e[2], copy(e[3])) for e in self._small]
        new._large = [(e[0], e[1], e[2], copy(e[3])) for e in self._large]
        new._pools = {True: new._small, False: new._large}
        new._tail = {True: None, False: None}
        return new

    def state(self) -> tuple:
        """Everything the next events' outcome depends on but the live blocks: the counters and peaks, and each
        pool's free blocks by (size, segment, offset). Two equal states with the same live blocks replay the same
        events identically (the allocator is deterministic)."""
        tails = tuple(None if b is None else (b[SIZE], b[SEG], b[OFF], b[FREE]) for b in self._tail.values())
        return (self.allocated, self.reserved, self.peak_allocated, self.peak_reserved, self.segments, self.released,
                self._whole_free, tails,
                tuple(e[:3] for e in self._small), tuple(e[:3] for e in self._large))



try:
    from ._allocator import Core
except ImportError:  # built without a C compiler: the Python model, the same results, ~25 times slower
    Core = None  # type: ignore[assignment,misc]

CachingAllocator: type[Allocator] = PythonAllocator
if Core is not None:
    class CompiledAllocator(Allocator, Core):  # type: ignore[misc]
        """PythonAllocator's rules and state, compiled (_allocator.c); handles are block numbers."""

        def __init__(self, *, expandable: bool = False, limit: int | None = None) -> None:
            super().__init__(expandable=expandable, limit=limit)
            self._live = {}

    CachingAllocator = CompiledAllocator


def replay(events: Iterable[tuple[str, object, int]], *, expandable: bool = False) -> Allocator:
    """Replay ('alloc', key, bytes) / ('free', key, 0) events through a fresh allocator."""
    a = CachingAllocator(expandable=expandable)
    for op, key, size in events:
        if op == "alloc":
            a.malloc(key, size)
        else:
            a.free(key)
    return a
