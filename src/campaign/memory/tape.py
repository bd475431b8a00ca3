"""A training step's replay recorded once and run for many batches: a card solve replays hundreds of batches of one
workload (reserved.BatchOverheads), and in Python each replay spends most of its time calling the allocator model.

The step's replay (reserved._replay_step) runs once against a Tape instead of an allocator, with the step's tokens a
symbol (Tokens): each size it hands the allocator is recorded as worked out from the tokens (tokens x an int, or
that times a float, truncated) or as the bytes past the blocks (FINAL), each block as a slot. The allocator model then
runs the recorded operations in one call for any batch (run_tape: the compiled model's, or PythonAllocator's), with
the same results as the replay itself, which tests/memory/test_tape.py checks against it.

The step's own comparisons of a size with 1 B (which tensors it makes at all) are the tape's guards: each holds for a
range of token counts (sizes grow with them), and the tape serves only the counts within all of them (Recorded.serves).
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .allocator import EMPTY, FINAL_BYTES, GIVE, TAKE, TAKE_IF_ANY, TIMES, TIMES_FLOAT, VALUE, PythonAllocator
from .replay import Replay


@dataclass(frozen=True)
class Tokens:
    """The step's tokens times `k` (an int), then times `f` (a float) when given: the value is truncated to whole
    bytes where it is taken, as Python's int() truncates the same product. `at`: the tokens of the recording, at
    which a comparison is decided (and recorded as a guard)."""

    at: int
    k: int = 1
    f: float | None = None
    tape: Tape | None = None

    def __mul__(self, x: Any) -> Tokens:
        if isinstance(x, bool) or not isinstance(x, int | float) or self.f is not None:
            raise TypeError(f"tape: tokens x {x!r} (a size the tape cannot record)")
        if isinstance(x, int):
            return Tokens(self.at, self.k * x, None, self.tape)
        if x.is_integer() and abs(x) < 2 ** 53:  # an int-valued float (ELEMENT_BYTES' 2.0): the same as the
            # replay's float product while that is below 2^53 (exact); the tape serves only those token counts
            k = self.k * int(x)
            if self.tape is not None and k:
                self.tape.high = min(self.tape.high, (1 << 53) // abs(k))
            return Tokens(self.at, k, None, self.tape)
        return Tokens(self.at, self.k, x, self.tape)

    __rmul__ = __mul__

    def value(self, tokens: int) -> int | float:
        """The size at `tokens`, as the replay works it out (before its int())."""
        return tokens * self.k if self.f is None else tokens * self.k * self.f

    def __ge__(self, other: Any) -> bool:
        if not isinstance(other, int | float) or self.tape is None:
            raise TypeError(f"tape: tokens >= {other!r}")
        result = self.value(self.at) >= other
        self.tape.guard(self, other, result)
        return result


class Final:
    """The bytes the activations hold past the blocks (reserved._final_bytes): worked out per batch by the caller."""


FINAL = Final()


def whole(size: Any) -> Any:
    """int(size), or a recorded size as it is (truncated where it is taken)."""
    return size if isinstance(size, Tokens | Final) else int(size)


class Tape:
    """An allocator stand-in that records what the replay takes and gives; handles are slot numbers."""

    def __init__(self) -> None:
        self.codes: list[int] = []  # 3 a operation (run_tape's what, how, value)
        self.floats: list[float] = []  # 1 a operation: TIMES_FLOAT's factor
        self.slots = 0
        self.low, self.high = 0, 1 << 62  # the token counts every guard holds for: low <= tokens < high

    def guard(self, size: Tokens, threshold: int | float, result: bool) -> None:
        """The replay decided `size >= threshold` at the recording: the tape serves the token counts that decide
        it the same way (the size grows with the tokens: the first count where it holds splits them)."""
        lo, hi = 0, 1 << 62
        while lo < hi:  # the least token count at which it holds
            mid = (lo + hi) // 2
            if size.value(mid) >= threshold:
                hi = mid
            else:
                lo = mid + 1
        if result:
            self.low = max(self.low, lo)
        else:
            self.high = min(self.high, lo)

    def _take(self, what: int, size: Any) -> int:
        if isinstance(size, Final):
            self.codes += (what, FINAL_BYTES, 0)
            self.floats.append(0.0)
        elif isinstance(size, Tokens):
            self.codes += (what, TIMES if size.f is None else TIMES_FLOAT, size.k)
            self.floats.append(size.f or 0.0)
        else:
            self.codes += (what, VALUE, int(size))
            self.floats.append(0.0)
        self.slots += 1
        return self.slots - 1

    def take(self, size: Any) -> int:
        return self._take(TAKE, size)

    def take_if_any(self, size: Any) -> int | None:
        """Replay.alloc's take: none under 1 B (a recorded size decides it when the tape runs)."""
        if isinstance(size, Tokens | Final):
            return self._take(TAKE_IF_ANY, size)
        return self._take(TAKE, int(size)) if size >= 1 else None

    def give(self, slot: int) -> None:
        self.codes += (GIVE, VALUE, slot)
        self.floats.append(0.0)

    # the bulk calls (a replay hands them hundreds of sizes) record whole sizes in slices, not one call each

    def take_each(self, sizes: Sequence[Any]) -> list:
        if not all(type(size) is int for size in sizes):
            return [self.take(size) for size in sizes]
        n, first = len(sizes), self.slots
        codes = [TAKE, VALUE, 0] * n
        codes[2::3] = sizes
        self.codes += codes
        self.floats += [0.0] * n
        self.slots += n
        return list(range(first, first + n))

    def give_each(self, slots: Sequence[int | None]) -> None:
        given = [slot for slot in slots if slot is not None]
        codes = [GIVE, VALUE, 0] * len(given)
        codes[2::3] = given
        self.codes += codes
        self.floats += [0.0] * len(given)

    def pass_each(self, sizes: Sequence[Any]) -> None:
        if not all(type(size) is int for size in sizes):
            for size in sizes:
                self.give(self.take(size))
            return
        n, first = len(sizes), self.slots
        codes = [TAKE, VALUE, 0, GIVE, VALUE, 0] * n
        codes[2::6] = sizes
        codes[5::6] = range(first, first + n)
        self.codes += codes
        self.floats += [0.0] * (2 * n)
        self.slots += n

    forward_layers = PythonAllocator.forward_layers  # in terms of take_each, give_each and pass_each
    backward_layers = PythonAllocator.backward_layers

    def empty_cache(self) -> None:
        self.codes += (EMPTY, VALUE, 0)
        self.floats.append(0.0)

    def compiled(self) -> Recorded:
        return Recorded(array("q", self.codes).tobytes(), array("d", self.floats).tobytes(), self.low, self.high)


@dataclass(frozen=True)
class Recorded:
    """A recorded step: run_tape's operations, and the token counts it serves (low <= tokens < high)."""

    ops: bytes
    factors: bytes
    low: int
    high: int

    def serves(self, tokens: int) -> bool:
        return self.low <= tokens < self.high


class TapeReplay(Replay):
    """A Replay whose allocator is a Tape: sizes may be recorded ones (Tokens, FINAL)."""

    def __init__(self) -> None:  # no allocator model to make
        self.use(Tape())  # type: ignore[arg-type]

    def alloc(self, size: Any) -> Any:
        return self.a.take_if_any(size)  # type: ignore[attr-defined]

    def pass_each(self, sizes: Any) -> None:
        self.a.pass_each([whole(size) for size in sizes if size >= 1])
