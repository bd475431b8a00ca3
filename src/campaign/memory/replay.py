"""The allocator replay's machinery, shared by the training and the inference replays (memory/reserved.py): a caching
allocator with handles, the estimate's items split into the tensors they are made of, and the weights loaded
tensor by tensor as the load phase counts them."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..models.spec import ModelSpec
from .allocator import Allocator, CachingAllocator, PythonAllocator
from .dtypes import QUANTIZED
from .states import is_router
from .workload import Workload


@dataclass(frozen=True)
class Overhead:
    """The replay's result: its own peak allocated and peak reserved, and their difference (the overhead)."""

    bytes: int
    peak_allocated: int
    peak_reserved: int
    segments: int
    released: int = 0  # bytes of cached segments released to stay within the limit (0: none, or no limit)
    model: str = "compiled"  # the allocator model that replayed: compiled (memory/_allocator.c) or python


# The compiled model counts bytes in 64 bits: a workload near that (an absurd --batch) goes to the Python one
COMPILED_BYTES = 1 << 56


def allocator_for(phases) -> type[Allocator]:
    """The allocator model for these phases: the compiled one, unless a phase comes near 64-bit sizes."""
    return CachingAllocator if max((p.bytes for p in phases), default=0) < COMPILED_BYTES else PythonAllocator


class Replay:
    """A caching allocator with handles: alloc(size) -> handle, free(handle, ...)."""

    def __init__(self, expandable: bool, limit: int | None = None, *,
                 model: type[Allocator] = CachingAllocator) -> None:
        self.use(model(expandable=expandable, limit=limit))

    @classmethod
    def over(cls, a: Allocator) -> Replay:
        """A replay through `a` (a fork), without making an allocator first."""
        r = cls.__new__(cls)
        r.use(a)
        return r

    def use(self, a: Allocator) -> None:
        """Replay on through `a` (a fresh allocator, or a fork)."""
        self.a = a
        self._take, self._take_each, self._give_each, self._pass_each = a.take, a.take_each, a.give_each, a.pass_each

    def alloc(self, size: int | float) -> Any:
        return self._take(int(size)) if size >= 1 else None

    def alloc_each(self, sizes: list[int]) -> list:
        """[alloc(size) for size in sizes] (whole bytes), in one call where each is at least 1 B."""
        if sizes and min(sizes) >= 1:
            return self._take_each(sizes)
        return [self.alloc(size) for size in sizes]

    def pass_each(self, sizes: list[int] | list[float]) -> None:
        """free(alloc(size)) for each size, in order: tensors made and dropped at once."""
        self._pass_each([int(size) for size in sizes if size >= 1])

    def free(self, *handles: Any) -> None:
        """Give back each handle that is not None (alloc's None: nothing taken)."""
        self._give_each(handles)


def split_bytes(total: int, numels: list[int]) -> Iterator[int]:
    """`total` bytes over tensors in proportion to their element counts."""
    n = sum(numels)
    if n <= 0 or total <= 0:
        return iter(())
    return (total * k // n for k in numels)


def per_layer(spec: ModelSpec, groups: list) -> tuple[list[list[int]], list[int]]:
    """Tensor element counts of `groups`, per transformer block (in order) and outside the blocks."""
    L = max(1, spec.num_layers)
    layers: list[list[int]] = [[] for _ in range(L)]
    rest: list[int] = []
    for g in groups:
        numel = g.numel
        if g.in_blocks and g.count % L == 0:
            per = g.count // L
            tensors = [numel * per] if g.expert else [numel] * per
            for layer in layers:  # routed experts: one stacked tensor per layer (transformers' grouped experts)
                layer.extend(tensors)
        elif g.expert and spec.moe is not None and g.count % spec.moe.num_experts == 0:
            rest.extend([numel * spec.moe.num_experts] * (g.count // spec.moe.num_experts))  # stacked per layer
        else:
            rest.extend([numel] * g.count)
    return layers, rest


def tensor_numels(spec: ModelSpec, groups: list) -> list[int]:
    """Every tensor's element count of `groups` (routed experts stacked per layer)."""
    layers, rest = per_layer(spec, groups)
    return [n for layer in layers for n in layer] + rest


def item_bytes(phases, name: str, category: str | None = None) -> int:
    for p in phases:
        for i in p.items:
            if i.name == name or (category is not None and i.category == category and i.name.startswith(name)):
                return i.bytes
    return 0


def replay_weights(r: Replay, spec: ModelSpec, w: Workload, phases, *, buffers: bool = True) -> list:
    """Weights as the load phase counts them, tensor by tensor; quantized ones pass through 16-bit. Returns the
    handles of the dense weights (every parameter tensor; none for a quantized model). `buffers`: the model's
    buffers too."""
    load = next(p for p in phases if p.name == "load")
    quantized = [g for g in spec.groups if w.dtype in QUANTIZED and g.role == "linear" and g.in_blocks
                 and not is_router(g)]
    dense = [g for g in spec.groups if g not in quantized]
    shards = w.gpus if w.shard in ("zero3", "fsdp", "tp") else 1
    handles: list = []
    for item in load.items:
        if item.category != "weights":
            continue
        if item.name.startswith("weights, ") and quantized:
            numels = tensor_numels(spec, quantized)
            meta = split_bytes(item_bytes(phases, "quantization scales/zeros"), numels)
            for numel, size, extra in zip(numels, split_bytes(item.bytes, numels), meta, strict=False):
                tmp = r.alloc(2 * numel // shards)  # loaded in 16-bit, then quantized
                r.alloc(size)
                r.alloc(extra)
                r.free(tmp)
        elif item.name == "quantization scales/zeros":
            continue
        elif item.name == "buffers":
            if buffers:
                r.alloc(item.bytes)
        elif item.name == "weights kept 16-bit":
            for size in split_bytes(item.bytes, tensor_numels(spec, dense)):
                r.alloc(size)
        elif item.name.startswith("weights"):
            handles = [r.alloc(size) for size in split_bytes(item.bytes, tensor_numels(spec, list(spec.groups)))]
    return handles


def replay_load(r: Replay, spec: ModelSpec, w: Workload, phases) -> list:
    """The weights as the process comes to hold them, from the start: the load (replay_weights), or with a setup
    phase (ZeRO-3 over a model built without zero.Init: memory/deepspeed.py setup_phase) the model whole on the card
    first, every tensor as deepspeed.initialize's module.to(device) makes it (engine.py _configure_distributed_model),
    then partitioned tensor by tensor: the partition made, the whole tensor freed (partition_parameters.py
    _partition_param: torch.empty(partition_size), copy, free_param). The freed whole tensors stay cached: the
    allocator gives them back to the driver only when a segment would pass the card (release_cached_blocks).
    Returns replay_weights' handles: the dense partitions (the weights the load phase counts)."""
    setup = next((p for p in phases if p.name == "setup"), None)
    if setup is None:
        return replay_weights(r, spec, w, phases)
    numels = tensor_numels(spec, list(spec.groups))
    whole = [r.alloc(size) for size in split_bytes(item_bytes([setup], "weights, whole before partitioning"),
                                                   numels)]
    for size in (i.bytes for i in setup.items if i.name == "buffers"):
        r.alloc(size)
    load = next(p for p in phases if p.name == "load")
    dense = next((i.bytes for i in load.items if i.name == "weights"), None)
    if dense is None:  # quantized: partitioned as the load counts it, then the whole tensors freed
        handles = replay_weights(r, spec, w, phases, buffers=False)
        r.free(*whole)
        return handles
    handles = []
    for size, tensor in zip(split_bytes(dense, numels), whole, strict=False):
        handles.append(r.alloc(size))
        r.free(tensor)
    return handles


def overhead_of(r: Replay) -> Overhead:
    a = r.a
    return Overhead(max(0, a.peak_reserved - a.peak_allocated), a.peak_allocated, a.peak_reserved, a.segments,
                    a.released, "python" if isinstance(a, PythonAllocator) else "compiled")
