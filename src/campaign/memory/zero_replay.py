"""DeepSpeed ZeRO's buffers in the allocator replay (memory/reserved.py), each allocated and freed where DeepSpeed
does it; their sizes are memory/deepspeed.py's items (zero_buffers), read whichever moment of a phase holds them.

Where (DeepSpeed master, deepspeed/runtime/...):
  - init, stages 1-2 (zero/stage_1_and_2.py __init__): empty_cache(), then the trainable 16-bit parameters
    flattened into one buffer (flatten_dense_tensors_aligned), the parameters made views of it
    (_update_model_bit16_weights): each original tensor freed; the fp32 master partition, one flat tensor
    (single_partition_of_fp32_groups: .clone().float()).
  - init, stage 3 (zero/stage3.py __init__): the trainable partitions moved into one contiguous buffer
    (_create_fp16_partitions_with_defragmentation: defragment, zero/utils.py), then _setup_for_real_optimizer: the fp32
    partitions one flat tensor per sub-group (_create_fp32_partitions), a gradient buffer of the largest sub-group in
    fp32 made and dropped by initialize_optimizer_states, the reduce bucket (ipg bucket.buffer = torch.empty(
    reduce_bucket_size)), the gradient partition (grad_partitions_flat_buffer = torch.zeros(partition numel)); the
    persistent parameters are gathered at their first fetch and never released (ds_persist).
  - forward and backward, stage 3 (zero/partitioned_param_coordinator.py fetch_sub_module / release_sub_module):
    each module's parameters all-gathered whole before it runs, with the next ones in the step's trace prefetched up
    to stage3_prefetch_bucket_size; released after it ran, unless used again within stage3_max_reuse_distance (the
    head and the last blocks at the turn, memory/deepspeed.py _gathered); every gradient made whole by autograd,
    copied into the reduce bucket and dropped (reduce_partition_and_remove_grads); all released at the step
    (step: _partition_all_parameters).
  - backward, stages 1-2: the reduce bucket made at the first gradient (setup_buckets, two with overlap_comm) and
    dropped at the end of backward (independent_gradient_partition_epilogue: _release_ipg_buffers).
  - optimizer step, per sub-group (stage3.py _prepare_fp32_grad_for_sub_group; stage_1_and_2.py step): the 16-bit
    gradients flattened (self.flatten), cast to fp32 (.to(fp32 dtype)), the flat copy dropped (stages 1-2 then drop
    the 16-bit gradients: free_grad_in_param_list), the optimizer steps (Adam makes its states at the first step), the
    fp32 copy dropped (_release_sub_group; stage 1-2: single_grad_partition deleted).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from ..models.spec import ModelSpec
from .deepspeed import _units, grad_bytes, zero_buffers, zero_settings
from .replay import Replay, per_layer, split_bytes
from .states import trainable_params
from .workload import KeptBySpec, Workload, size_free_key


@dataclass(frozen=True)
class ZeroPlan:
    """What the replay allocates for DeepSpeed: sizes in bytes (elements for `subgroups`)."""

    stage: int
    g: float                       # bytes per element of the 16-bit (bit16) groups
    subgroups: tuple[int, ...]     # elements of this card's partition per optimizer sub-group
    reduce: tuple[int, ...]        # the reduce bucket's buffers (one, two with overlap_comm), bytes
    fp32_copy: bool                # the optimizer steps an fp32 copy of the gradients
    persistent: tuple[int, ...]    # stage 3: bytes of each persistent parameter beyond its share
    units: dict                    # stage 3: per module ("embed", block index, "head") its gathered tensors, bytes
    kept: frozenset                # stage 3: the modules left gathered at the turn from forward to backward
    prefetch: int                  # stage 3: bytes prefetched ahead of the module that runs (the item's)


_PLANS = KeptBySpec(64)


def zero_plan(spec: ModelSpec, w: Workload) -> ZeroPlan | None:
    """What the replay allocates for DeepSpeed under `w` (None: no ZeRO, or nothing trainable). Neither the batch
    nor the length changes it: kept per model and workload for the probes of a solve."""
    return _PLANS.get(spec, size_free_key(w), lambda: _work_out_plan(spec, w))


def _work_out_plan(spec: ModelSpec, w: Workload) -> ZeroPlan | None:
    z = zero_settings(spec, w)
    Pt = trainable_params(spec, w)
    if z is None or not Pt:
        return None
    ds = zero_buffers(spec, w, Pt)
    items = {i.name: i.bytes for i in (*ds.always, *ds.backward, *ds.gathered_turn, *ds.step)}
    g = grad_bytes(w)
    part = -(-Pt // w.gpus)
    size = min(part, z.sub_group_size) if z.stage == 3 else part
    subgroups = (size,) * (part // size) + ((part % size,) if part % size else ())
    bucket = items.get("ZeRO reduce bucket", 0)
    copies = 2 if bucket and z.overlap_comm and z.stage < 3 else 1
    reduce = (bucket // copies,) * copies if bucket else ()
    if z.stage < 3:
        return ZeroPlan(z.stage, g, subgroups, reduce, "ZeRO fp32 gradient copy" in items, (), {}, frozenset(), 0)
    threshold = z.persistence_threshold
    small = [n for grp in spec.groups if grp.numel <= threshold for n in [grp.numel] * grp.count]
    persistent = tuple(s for s in split_bytes(items.get("ZeRO-3 persistent parameters", 0), small) if s >= 1)
    layers, _ = per_layer(spec, [grp for grp in spec.groups if grp.in_blocks and grp.numel > threshold])
    inside = [k for k, grp in enumerate(spec.groups) if grp.in_blocks]
    first, last = (inside[0], inside[-1]) if inside else (len(spec.groups), len(spec.groups))
    before, after = spec.groups[:first], spec.groups[last + 1:]
    E, B, H, tied = _units(spec, threshold)
    token = next((grp for grp in before if grp.role == "embedding"), None) if tied else None
    units: dict = {index: [int(n * g) for n in layer] for index, layer in enumerate(layers)}
    units["embed"] = [int(grp.numel * g) for grp in before if grp.numel > threshold and grp is not token
                      for _ in range(grp.count)]
    units["head"] = [int(grp.numel * g) for grp in [*after, *([token] if token else [])] if grp.numel > threshold
                     for _ in range(grp.count)]
    # memory/deepspeed.py _gathered: block L-m is used again after 2 m blocks + 2 heads, the embedding after all
    L, R = spec.num_layers, z.reuse_distance
    kept_blocks = 0 if 2 * H >= R or not B else min(L, -(-(R - 2 * H) // (2 * B)))
    kept = {"head", *range(L - kept_blocks, L)} | ({"embed"} if E and 2 * L * B + 2 * H < R else set())
    return ZeroPlan(3, g, subgroups, reduce, "ZeRO fp32 gradient copy" in items, persistent, units,
                    frozenset(kept), items.get("ZeRO-3 prefetch bucket", 0))


def flatten(r: Replay, handles: list, total: int, stage: int) -> None:
    """The trainable 16-bit tensors moved into one flat buffer: stages 1-2 empty the cache, make the buffer and free
    the originals (stage_1_and_2.py __init__: empty_cache(), flatten_dense_tensors_aligned,
    _update_model_bit16_weights); stage 3 frees its partitions first (copied to the host), empties the cache, then makes
    the buffer (zero/utils.py defragment). `total`: the bytes of the tensors."""
    if stage == 3:
        r.free(*handles)
        r.a.empty_cache()
        r.alloc(total)
    else:
        r.a.empty_cache()
        r.alloc(total)
        r.free(*handles)


def init(r: Replay, plan: ZeroPlan, trainable: list, trainable_bytes: int, master: int) -> None:
    """What DeepSpeed's optimizer allocates at its init, from the trainable 16-bit tensors' handles and bytes (the
    parameters under stages 1-2, their partitions under stage 3) and the fp32 master item's bytes."""
    flatten(r, trainable, trainable_bytes, plan.stage)
    for size in split_bytes(master, list(plan.subgroups)):  # one flat fp32 partition per sub-group
        r.alloc(size)
    if plan.stage < 3:
        return
    r.free(r.alloc(4 * max(plan.subgroups)))  # initialize_optimizer_states: gradient_buffer, dropped at return
    for size in plan.reduce:
        r.alloc(size)
    r.alloc(plan.g * sum(plan.subgroups))  # grad_partitions_flat_buffer
    for size in plan.persistent:
        r.alloc(size)


class Coordinator:
    """Stage 3's gathered parameters over one step: the trace is the modules in the order the step uses them
    (embedding, blocks, head forward; head, blocks in reverse, embedding backward)."""

    def __init__(self, r: Replay, plan: ZeroPlan, layers: int) -> None:
        self.r, self.plan = r, plan
        blocks = list(range(layers))
        self.trace = ["embed", *blocks, "head", "head", *reversed(blocks), "embed"]
        self.turn = len(blocks) + 2  # the first position of backward
        self.pos = -1
        self.held: dict = {}  # module -> handles of its tensors gathered so far
        self.pre: dict = {}  # module -> bytes of its tensors prefetched before it runs
        self.ahead = 0  # their sum

    def fetch(self, unit) -> None:
        """Run the next module of the trace: its tensors gathered (what the prefetch did not), then the tensors of
        the modules after it prefetched until the bucket's bytes are ahead (fetch_sub_module: `while
        numel_prefetching < prefetch_bucket_sz`)."""
        self.pos += 1
        self.ahead -= self.pre.pop(unit, 0)
        units, prefetch = self.plan.units, self.plan.prefetch
        got = self.held.setdefault(unit, [])
        got += self.r.alloc_each(units.get(unit, [])[len(got):])
        if self.ahead >= prefetch:  # nothing is prefetched
            return
        for later in islice(self.trace, self.pos + 1, None):
            have = self.held.setdefault(later, [])
            rest = units.get(later, [])[len(have):]
            count = 0
            for size in rest:  # the tensors prefetched while the bytes ahead are under the bucket's
                if self.ahead >= prefetch:
                    break
                self.ahead += size
                count += 1
            if count:
                have += self.r.alloc_each(rest[:count])
                self.pre[later] = self.pre.get(later, 0) + sum(rest[:count])
            if count < len(rest):
                return

    def release(self, unit) -> None:
        """After the module ran: released, unless used again within the reuse distance (forward only)."""
        if self.pos < self.turn and unit in self.plan.kept:
            return
        self.r.free(*self.held.pop(unit, []))

    def release_all(self) -> None:
        for handles in self.held.values():
            self.r.free(*handles)
        self.held.clear()
        self.pre.clear()
        self.ahead = 0


def step(r: Replay, plan: ZeroPlan, grads: list, states: list[list[int]] | None, temporaries) -> None:
    """The optimizer step, one sub-group at a time: the 16-bit gradients flattened and cast to fp32, the flat copy
    dropped (stages 1-2: the 16-bit gradients too), the optimizer's states (the first step: `states`, the bytes of
    each state tensor per sub-group) and temporaries (`temporaries(subgroup elements)` -> handles), then the fp32
    copy dropped (without one, the flat 16-bit copy is what the optimizer reads)."""
    for index, size in enumerate(plan.subgroups):
        flat = r.alloc(plan.g * size)
        fp32 = r.alloc(4 * size) if plan.fp32_copy else None
        if fp32 is not None:
            r.free(flat)
            flat = None
        if plan.stage < 3 and index == 0:
            r.free(*grads)
            grads.clear()
        for state in states[index] if states else ():
            r.alloc(state)
        r.free(*temporaries(size))
        r.free(fp32, flat)
