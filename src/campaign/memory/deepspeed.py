"""DeepSpeed ZeRO's own buffers (--shard zero1/zero2/zero3), each read off DeepSpeed's source with its default
(memory/constants.py cites the file and the field): the reduce bucket, the fp32 gradient copy made at the optimizer
step, and under stage 3 the gradient partition kept from the optimizer's init, the parameters left gathered between
their forward and their backward use, the prefetch, and the parameters too small to partition.

`zero_buffers(spec, w, Pt)` returns them by where in the step they are alive; memory/phases.py places them.
`setup_phase(spec, w)`: a ZeRO-3 model built whole (no zero.Init) and moved whole to each card before partitioning.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..models.spec import ModelSpec
from .breakdown import Item, Phase
from .constants import (
    FP32_BYTES,
    ZERO3_MAX_LIVE_PARAMETERS,
    ZERO3_MAX_REUSE_DISTANCE,
    ZERO3_PERSISTENCE_THRESHOLD,
    ZERO3_PREFETCH_BUCKET,
    ZERO_AUTO_PERSISTENCE_HIDDEN,
    ZERO_AUTO_PREFETCH_SHARE,
    ZERO_REDUCE_BUCKET,
    ZERO_SUB_GROUP_SIZE,
)
from .dtypes import ELEMENT_BYTES, QUANTIZED
from .states import weight_bytes
from .workload import Workload

STAGE1_2 = "deepspeed/runtime/zero/stage_1_and_2.py"
STAGE3 = "deepspeed/runtime/zero/stage3.py"
COORDINATOR = "deepspeed/runtime/zero/partitioned_param_coordinator.py"
ENGINE = "deepspeed/runtime/engine.py"


@dataclass(frozen=True)
class ZeroSettings:
    """The zero_optimization values a run uses, in elements, each with how it was set (default, auto, given)."""

    stage: int
    reduce_bucket: int
    overlap_comm: bool
    contiguous_gradients: bool
    sub_group_size: int
    prefetch_bucket: int
    max_live: int
    reuse_distance: int
    persistence_threshold: int
    said: dict[str, str] = field(default_factory=dict)


def _value(given: int | str | None, default: int, auto: float | None, key: str, said: dict[str, str]) -> int:
    if given is None:
        said[key] = f"DeepSpeed default {default:.0e}".replace("e+0", "e")
        return default
    if given == "auto":
        assert auto is not None  # make_workload refuses 'auto' where transformers fills none
        said[key] = f"auto: {int(auto):,} from the hidden size (HF Trainer)"
        return int(auto)
    said[key] = "given"
    return int(given)


def _sub_group_size(spec: ModelSpec, w: Workload, said: dict[str, str]) -> int:
    """sub_group_size; 0 (which DeepSpeed accepts, ge=0, and axolotl's zero3 configs give) closes a sub-group after
    every parameter (stage3.py _create_fp16_sub_groups: local size >= 0 at once): the largest sub-group is then the
    largest parameter's partition."""
    if w.zero_sub_group_size in (0, "0"):
        said["sub_group_size"] = "0: a sub-group per parameter, the largest parameter's partition"
        return max(1, _ceil_div(max(grp.numel for grp in spec.groups), w.gpus))
    return _value(w.zero_sub_group_size, ZERO_SUB_GROUP_SIZE, None, "sub_group_size", said)


def zero_settings(spec: ModelSpec, w: Workload) -> ZeroSettings | None:
    """The run's ZeRO settings, or None when the step is not a DeepSpeed ZeRO training step."""
    if not w.training or w.shard not in ("zero1", "zero2", "zero3"):
        return None
    h = spec.hidden_size
    said: dict[str, str] = {}
    stage = int(w.shard[-1])
    return ZeroSettings(
        stage=stage,
        reduce_bucket=_value(w.zero_reduce_bucket, ZERO_REDUCE_BUCKET, h * h, "reduce_bucket_size", said),
        overlap_comm=stage == 3 if w.zero_overlap_comm is None else w.zero_overlap_comm,
        contiguous_gradients=w.zero_contiguous_gradients,
        sub_group_size=_sub_group_size(spec, w, said),
        prefetch_bucket=_value(w.zero_prefetch_bucket, ZERO3_PREFETCH_BUCKET, ZERO_AUTO_PREFETCH_SHARE * h * h,
                               "stage3_prefetch_bucket_size", said),
        max_live=_value(w.zero_max_live_params, ZERO3_MAX_LIVE_PARAMETERS, None, "stage3_max_live_parameters", said),
        reuse_distance=_value(w.zero_reuse_distance, ZERO3_MAX_REUSE_DISTANCE, None, "stage3_max_reuse_distance", said),
        persistence_threshold=_value(w.zero_persistence_threshold, ZERO3_PERSISTENCE_THRESHOLD,
                                     ZERO_AUTO_PERSISTENCE_HIDDEN * h, "stage3_param_persistence_threshold", said),
        said=said)


@dataclass(frozen=True)
class ZeroBuffers:
    """DeepSpeed's items by when they are alive: `always` from the optimizer's init (every phase of the step),
    `backward` (stages 1-2: the reduce buffers of each backward), `gathered_turn` (stage 3: end of forward and start
    of backward), `gathered_end` (stage 3: end of backward), `step` (inside optimizer.step())."""

    always: tuple[Item, ...] = ()
    backward: tuple[Item, ...] = ()
    gathered_turn: tuple[Item, ...] = ()
    gathered_end: tuple[Item, ...] = ()
    step: tuple[Item, ...] = ()


def grad_bytes(w: Workload) -> float:
    """Bytes per element of the 16-bit (or fp32) parameters and gradients DeepSpeed reduces: its bit16 groups."""
    return 2 if w.mixed_precision or w.dtype in ("bf16", "fp16") else ELEMENT_BYTES[w.dtype]


def _ceil_div(n: int, parts: int) -> int:
    return -(-n // parts)


def zero_buffers(spec: ModelSpec, w: Workload, Pt: int) -> ZeroBuffers:
    """DeepSpeed's own buffers per card for `Pt` trainable parameters (nothing outside a ZeRO training step)."""
    z = zero_settings(spec, w)
    if z is None or not Pt:
        return ZeroBuffers()
    g, N = grad_bytes(w), w.gpus
    part = _ceil_div(Pt, N)
    said = z.said
    reduce = []
    if z.contiguous_gradients:
        copies = 2 if z.overlap_comm and z.stage < 3 else 1
        where = (f"{STAGE1_2} setup_buckets: torch.empty(reduce_bucket_size) at the first gradient of each backward"
                 + (", a second with overlap_comm" if copies == 2 else "")) if z.stage < 3 else \
            f"{STAGE3} __init__: torch.empty(reduce_bucket_size), kept from the optimizer's init"
        reduce.append(Item("ZeRO reduce bucket", int(copies * z.reduce_bucket * g),
                           f"{copies} x reduce_bucket_size {z.reduce_bucket:,} ({said['reduce_bucket_size']}) x {g:g} B"
                           + (" (overlap_comm: double buffer)" if copies == 2 else ""), "gradients", where))
    step = []
    sub = min(part, z.sub_group_size) if z.stage == 3 else part
    per = f" per sub-group (sub_group_size {z.sub_group_size:,}, {said['sub_group_size']})" if z.stage == 3 else ""
    # bf16_master_weights_and_grads: the partition's gradient is already in the master dtype, no fp32 copy
    fp32_master = w.mixed_precision and g < FP32_BYTES and not w.zero_bf16_master
    if fp32_master:
        step.append(Item("ZeRO fp32 gradient copy", FP32_BYTES * sub,
                         f"the card's gradient partition in fp32 for the optimizer: {sub:,} x {FP32_BYTES} B{per}",
                         "gradients", (f"{STAGE3} _prepare_fp32_grad_for_sub_group" if z.stage == 3 else
                                       f"{STAGE1_2} step") + ": flatten(averaged_gradients).to(fp32 master dtype)"))
    step.append(Item("ZeRO flattened gradient partition", int(g * sub),
                     f"flatten() of the partition's gradients before the copy: {sub:,} x {g:g} B{per} (freed after it)",
                     "temporaries", (STAGE3 if z.stage == 3 else STAGE1_2) + ": self.flatten(averaged_gradients)"))
    if z.stage < 3:
        return ZeroBuffers(backward=tuple(reduce), step=tuple(step))
    always = list(reduce)
    persistent = persistent_params(spec, z.persistence_threshold)
    c = g  # the gathered parameters are the bit16 groups
    if persistent and N > 1:
        always.append(Item("ZeRO-3 persistent parameters", int(persistent * c) - _ceil_div(int(persistent * c), N),
                           f"{persistent:,} elements in tensors of at most stage3_param_persistence_threshold "
                           f"{z.persistence_threshold:,} ({said['stage3_param_persistence_threshold']}) x {c:g} B, "
                           f"whole on each card (its 1/{N} share is in the weights)", "weights",
                           "deepspeed/runtime/zero/partition_parameters.py: ds_numel <= param_persistence_threshold -> "
                           "ds_persist"))
    turn, end = _gathered(spec, z, c)
    return ZeroBuffers(always=tuple(always), gathered_turn=turn, gathered_end=end, step=tuple(step))


def zero3_step_numel(spec: ModelSpec, w: Workload, Pt: int) -> int:
    """ZeRO-3 (optimizer on the card): the elements of the one tensor the optimizer steps at a time, the largest
    sub-group's flat fp32 partition (0 elsewhere). stage3.py step() loops over the sub-groups; _optimizer_step sets
    param_groups[group]['params'] = [fp32_partitioned_groups_flat[sub_group]], calls optimizer.step(), then sets it
    back to []: the optimizer's temporaries (foreach AdamW's sqrt(exp_avg_sq)) are one sub-group's, freed before the
    next."""
    z = zero_settings(spec, w)
    if z is None or z.stage != 3 or not Pt:
        return 0
    return min(_ceil_div(Pt, w.gpus), z.sub_group_size)


def persistent_params(spec: ModelSpec, threshold: int) -> int:
    """Elements in tensors of at most `threshold` (stage3_param_persistence_threshold): whole on every card."""
    return sum(g.params for g in spec.groups if g.numel <= threshold)



def head_params(spec: ModelSpec) -> int:
    """Parameters of the modules after the blocks (final norm, LM head; the token embedding when the head is tied
    to it): those whose backward runs before the blocks'."""
    return _units(spec, -1)[2]


def _units(spec: ModelSpec, threshold: int) -> tuple[int, int, int, bool]:
    """(embedding, one block, head) parameters that ZeRO-3 partitions (persistent ones apart), and whether the head
    is the token embedding (tied): the modules in the order a step uses them, at the granularity of a block. The
    groups before the blocks are the embedding, those after them the head (the final norm, lm_head); a head without
    an embedding of its own uses the first embedding's weight."""
    inside = [k for k, g in enumerate(spec.groups) if g.in_blocks]
    first, last = (inside[0], inside[-1]) if inside else (len(spec.groups), len(spec.groups))
    before, after = spec.groups[:first], spec.groups[last + 1:]
    big = [g for g in spec.groups if g.numel > threshold]
    block = sum(g.params for g in big if g.in_blocks) // max(1, spec.num_layers)
    tied = not any(g.role == "embedding" for g in after)
    token = next((g for g in before if g.role == "embedding"), None) if tied else None
    head = sum(g.params for g in after if g.numel > threshold) + (token.params if token and token.numel > threshold
                                                                   else 0)
    embed = sum(g.params for g in before if g.numel > threshold and g is not token)
    return embed, block, head, tied


def _gathered(spec: ModelSpec, z: ZeroSettings, c: float) -> tuple[tuple[Item, ...], tuple[Item, ...]]:
    """The parameters ZeRO-3 holds gathered at the turn from forward to backward, and at the end of backward.

    The coordinator releases a module's parameters after use unless they are used again within
    stage3_max_reuse_distance elements of parameters (__params_to_release walks the step's module order from the
    current one). A step runs embedding, blocks 1..L, head forward, then head, blocks L..1, embedding backward: block
    L-m is used again after 2 x m blocks + 2 x head, so it stays gathered while 2 m B + 2 H < reuse distance; the head
    is used again at once; the embedding (untied) after 2 L B + 2 H. Beyond that, the prefetch of the next modules:
    min(stage3_prefetch_bucket_size, stage3_max_live_parameters - those gathered).
    """
    E, B, H, tied = _units(spec, z.persistence_threshold)
    L, R = spec.num_layers, z.reuse_distance
    kept_blocks = 0 if 2 * H >= R or not B else min(L, -(-(R - 2 * H) // (2 * B)))
    embed_kept = bool(E) and 2 * L * B + 2 * H < R
    gathered = H + kept_blocks * B + (E if embed_kept else 0)
    left = L * B + (0 if embed_kept else E) - kept_blocks * B
    prefetch = max(0, min(z.prefetch_bucket, z.max_live - gathered, left))
    said = z.said
    turn = [Item("all-gathered parameters", int(gathered * c),
                 f"({'tied embedding/head' if tied else 'head'} {H:,} + {kept_blocks} of {L} blocks x {B:,}"
                 + (f" + embedding {E:,}" if embed_kept else "") + f") x {c:g} B: used again within "
                 f"stage3_max_reuse_distance {R:,} ({said['stage3_max_reuse_distance']}), not released",
                 "temporaries", f"{COORDINATOR} __params_to_release")]
    if prefetch:
        turn.append(Item("ZeRO-3 prefetch bucket", int(prefetch * c),
                         f"min(stage3_prefetch_bucket_size {z.prefetch_bucket:,} "
                         f"({said['stage3_prefetch_bucket_size']}), stage3_max_live_parameters {z.max_live:,} "
                         f"({said['stage3_max_live_parameters']}) - gathered, not yet gathered) x {c:g} B",
                         "temporaries", f"{COORDINATOR} fetch_sub_module: prefetch"))
    last = max(B, E)
    end = (Item("all-gathered parameters", int(last * c),
                f"the module whose backward runs last (one block or the embedding, {last:,}) x {c:g} B",
                "temporaries", f"{COORDINATOR} fetch_sub_module"),)
    return tuple(turn), end


def uses_zero_init(w: Workload) -> bool:
    """Whether a ZeRO-3 model is built under deepspeed.zero.Init (partitioned as it is made): --zero-init, else as
    transformers does: from_pretrained enters zero.Init when is_deepspeed_zero3_enabled() and the model is not
    quantized (modeling_utils.py get_init_context, transformers 5.24), which holds once TrainingArguments with a ZeRO-3
    config exist (training_args.py __post_init__ makes the HfTrainerDeepSpeedConfig that set_hf_deepspeed_config
    keeps)."""
    if w.zero_init is not None:
        return w.zero_init
    return w.dtype not in QUANTIZED


def setup_phase(spec: ModelSpec, w: Workload) -> Phase | None:
    """ZeRO-3 over a model built whole (no zero.Init): deepspeed.initialize moves it whole to each card, then
    partitions it parameter by parameter (each full tensor freed once its partition is made): the whole model per
    card is the setup's peak. None when there is no such phase (stages 1-2 hold the whole model anyway)."""
    if not w.training or w.shard != "zero3" or w.gpus <= 1 or uses_zero_init(w):
        return None
    c = grad_bytes(w)
    if w.dtype in QUANTIZED:
        whole = weight_bytes(spec, w).total
        formula = "the quantized model as loaded, whole"
    else:
        whole = int(spec.inventory_params * c)
        formula = f"params x {c:g} B = {spec.inventory_params:,} x {c:g}, whole (cast to the 16-bit dtype first)"
    items = [Item("weights, whole before partitioning", whole, formula + "; no zero.Init (--no-zero-init)", "weights",
                  f"{ENGINE} _configure_distributed_model: module.to(device) when no parameter has a ds_id; then "
                  "partition_parameters.py _convert_to_zero_parameters, parameter by parameter")]
    items += [Item("buffers", nbytes, what, "weights", "transformers module buffers") for what, nbytes in spec.buffers]
    return Phase("setup", tuple(items), "deepspeed.initialize: the model moved whole to the card, before partitioning")
