"""Reserved - allocated from the allocation pattern: the tensors the analytic estimate counts, allocated and freed in
the order a step makes them, replayed through the caching-allocator model (memory/allocator.py) that `trace` uses.

No share is fitted: the overhead is what the allocator's rules (512 B blocks, 2 MiB small / 20 MiB large segments,
2 MiB rounding above 10 MiB, best fit, splitting, merging; cached segments returned to the driver only when a new
one would pass the card's memory: release_cached_blocks, which frees the wholly free ones) make of these sizes.
The pattern covers the process from its start, as published max_memory_reserved figures do: the load (quantized
weights pass through 16-bit; a ZeRO-3 model built without zero.Init whole first, then partitioned: the setup phase,
replay.replay_load), DeepSpeed's init (memory/zero_replay.py), then two training steps (so that the optimizer states
and the cached blocks of step 1 are there). Per step: per layer the saved activations (checkpointing: the layer's input
kept, its activations made and freed), the logits chain (logits, fp32 upcast, log_softmax output; in backward the fp32
gradients, the cast back; the logits themselves stay until the backward ends, held by the model output as in
`out = model(...); out.loss.backward(); del out`, the step `trace` runs), per layer in reverse the recomputed
activations, the activation gradients and the parameter gradients, the optimizer states (step 1) and its
temporaries, and zero_grad(set_to_none=True); with `grads_kept` (set_to_none=False, PyTorch < 2.0's default) the
gradients stay, and step 2's backward adds each new gradient into them in place (AccumulateGrad: a gradient-sized
temporary, then freed); with gradient accumulation step 2 stands for micro-batches 2..K, which do the same. Under
DeepSpeed ZeRO its buffers come and go where DeepSpeed makes them (zero_replay.py: the reduce bucket, ZeRO-3's
gathered parameters module by module, the flat and fp32 gradient copies of the step).
Inference: weights, the KV cache (preallocated, or grown by torch.cat per token for HF's DynamicCache), per chunk and
per layer the MLP temporaries, and the logits.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..models.spec import ModelSpec
from . import zero_replay
from .activations import FP32, KEPT_LAYERS, layer_saved
from .allocator import Allocator, CachingAllocator
from .constants import DDP_BUCKET_CAP, DECODE_REPLAY_STEPS, TORCHAO_STEP_BYTES
from .dtypes import ELEMENT_BYTES
from .loss import logit_positions
from .phases import KEPT_STEP_ITEMS, step_items
from .replay import (
    Overhead,
    Replay,
    allocator_for,
    item_bytes,
    overhead_of,
    per_layer,
    replay_load,
    replay_weights,
    split_bytes,
    tensor_numels,
)
from .states import lora_groups, state_bytes_per_element
from .workload import KeptBySpec, Workload, size_free_key
from .zero_replay import zero_plan


def _leading(spec: ModelSpec) -> int:
    """How many of per_layer's tensors outside the blocks come before the first block (the embeddings): the
    groups are in module order, as model.parameters() gives them."""
    L = max(1, spec.num_layers)
    count = 0
    for g in spec.groups:
        if g.in_blocks and g.count % L == 0:
            return count
        if g.expert and spec.moe is not None and g.count % spec.moe.num_experts == 0:
            count += g.count // spec.moe.num_experts
        else:
            count += g.count
    return count


def _trainable_layers(spec: ModelSpec, w: Workload) -> tuple[list[list[int]], list[int]]:
    """Trainable tensors' element counts per block and outside: every parameter (full), or LoRA's A and B."""
    if w.method == "full":
        return per_layer(spec, list(spec.groups))
    L = max(1, spec.num_layers)
    layers: list[list[int]] = [[] for _ in range(L)]
    rest: list[int] = []
    for g in lora_groups(spec, w):
        pair = [w.lora_rank * g.shape[1], g.shape[0] * w.lora_rank]
        if g.count % L == 0:
            for layer in layers:
                layer.extend(pair * (g.count // L))
        else:
            rest.extend(pair * g.count)
    return layers, rest


def _tensors(per_token: float, *widths: float) -> list[float]:
    """A term of layer_saved (bytes per token) as the tensors it is made of: k tensors of one width when it is k
    times a tensor of the MLP's or the hidden width (the gated MLP's gate, up, activation and product are one term
    of 4 x intermediate), else one tensor."""
    for width in widths:
        if width and per_token > width and per_token % width == 0:
            return [width] * int(per_token // width)
    return [per_token]


def training_overhead(spec: ModelSpec, w: Workload, phases, *, expandable: bool = False,
                      limit: int | None = None) -> Overhead:
    """Replay two training steps made of the estimate's tensors (see the module docstring). `limit`: the bytes the
    allocator may reserve (a card's memory left to it): a segment that would pass it first releases the cached
    segments that are wholly free, as the allocator does when cudaMalloc fails; None: a card with room to spare."""
    layer, plan = layer_saved(spec, w), _step_sizes(spec, w, phases)
    c = ELEMENT_BYTES[w.compute_dtype]
    inter = spec.intermediate_size
    if spec.moe is not None:  # the MLP's width a token passes through: the experts it is routed to
        inter = spec.moe.expert_intermediate_size * spec.moe.experts_per_token
    keys_per_token = layer.attention_per_token * w.seq_len
    # bytes per token of each tensor a block saves (activations.layer_saved's terms, _tensors)
    pieces = [piece for _, t in layer.terms if t for piece in _tensors(t, c * inter, c * spec.hidden_size)] + (
        [keys_per_token] if keys_per_token else [])
    r = _after_prefix(spec, w, phases, plan.trainable, expandable, limit)
    tokens, acts = w.batch * w.seq_len, item_bytes(phases, "activations", "activations")
    # what the activations hold past the blocks' saved tensors: the final norm's
    blocks = tokens * c * spec.hidden_size if w.grad_checkpointing else sum([tokens * piece for piece in pieces])
    final = max(0, acts - max(1, spec.num_layers) * int(blocks))
    logits = bool(spec.vocab_size and item_bytes(phases, "logits and loss", "logits"))
    _replay_step(r, spec, w, plan, tokens, final, logits, inter, pieces,
                 item_bytes(phases, "reference forward's logits (no grad)", "logits"))
    return overhead_of(r)


_PREFIXES = KeptBySpec(16)  # the allocator after _prefix, by what it reads


def clear_kept() -> None:
    """Forget every replay and size kept in this process: the next estimate replays as a new process would."""
    _PREFIXES.clear()
    _WEIGHTS.clear()
    _STEP_SIZES.clear()
    zero_replay._PLANS.clear()
    KEPT_LAYERS.clear()
    KEPT_STEP_ITEMS.clear()


REFERENCE = "reference model (frozen copy)"  # --reference copy (phases.py _reference_model)
ADAPTERS = "LoRA adapter weights"  # f"LoRA adapter weights ({dtype})": the adapters in the run's dtype (phases.py)


def _prefix(r: Replay, spec: ModelSpec, w: Workload, phases, trainable: list[int]) -> None:
    """What the process holds before the first forward, whatever the batch and length: the weights as it came to
    hold them (with a setup phase, the whole model first: replay.replay_load), the LoRA adapters, DDP's buckets, the
    fp32 master weights, and DeepSpeed's init (memory/zero_replay.py). No handle is kept: none is freed later."""
    weights = replay_load(r, spec, w, phases)
    for size in split_bytes(item_bytes(phases, REFERENCE, "weights"), tensor_numels(spec, list(spec.groups))):
        r.alloc(size)  # the reference model, loaded tensor by tensor after the trained one (TRL's DPOTrainer)
    adapter_bytes = item_bytes(phases, ADAPTERS, "weights")
    adapters = [r.alloc(size) for size in split_bytes(adapter_bytes, trainable)]
    buckets = item_bytes(phases, "DDP gradient buckets")
    while buckets > 0:  # DDP's flat buckets of bucket_cap_mb = 25 MiB (its default)
        r.alloc(min(buckets, DDP_BUCKET_CAP))
        buckets -= DDP_BUCKET_CAP
    master = item_bytes(phases, "fp32 master weights") + item_bytes(phases, "bf16 master weights")
    zero = zero_plan(spec, w)
    if zero is not None:
        full = w.method == "full"  # the optimizer's groups: every parameter, or the adapters
        zero_replay.init(r, zero, weights if full else adapters, item_bytes(phases, "weights") if full else
                         adapter_bytes, master)
        return
    for size in split_bytes(master, trainable):
        r.alloc(size)


def _prefix_kept(spec: ModelSpec, w: Workload, phases, trainable: list[int], expandable: bool) -> Allocator | None:
    """The allocator after _prefix with room to spare, kept per model and workload but its batch and length (a
    solve's probes replay it once); None with expandable segments or the Python model."""
    if expandable or allocator_for(phases) is not CachingAllocator:
        return None
    before = tuple(p for p in phases if p.name in ("load", "setup"))
    key = (size_free_key(w), before, item_bytes(phases, ADAPTERS, "weights"), item_bytes(phases, REFERENCE), *(
        item_bytes(phases, name) for name in ("DDP gradient buckets", "fp32 master weights", "bf16 master weights")))

    def replayed() -> Allocator:
        r = Replay(expandable, None)
        _prefix(r, spec, w, phases, trainable)
        return r.a

    kept: Allocator = _PREFIXES.get(spec, key, replayed)
    return kept


def _after_prefix(spec: ModelSpec, w: Workload, phases, trainable: list[int], expandable: bool,
                  limit: int | None) -> Replay:
    """A replay past _prefix: the kept allocator forked, or the prefix replayed afresh (none kept, or a limit below
    its peak reserved)."""
    kept = _prefix_kept(spec, w, phases, trainable, expandable)
    if kept is None or (limit is not None and kept.peak_reserved > limit):
        r = Replay(expandable, limit, model=allocator_for(phases))
        _prefix(r, spec, w, phases, trainable)
        return r
    return Replay.over(kept.fork(limit=limit))


@dataclass(frozen=True)
class _StepSizes:
    """What a training step's replay allocates that neither the batch nor the length changes: the trainable
    tensors, the forward's 16-bit copies, the gradients, the optimizer states and temporaries, DeepSpeed's plan.
    Worked out once per model, workload and these items' bytes (_step_sizes), not once per probe of a solve."""

    trainable: list[int]
    extra_layers: list[list[int]]  # per block: its 16-bit copies / gathered parameters kept for backward
    extra_rest: list[int]
    grads_by_layer: list[list[int]]  # sizes of at least 1 B
    grads_rest: list[int]
    state_sizes: list[int]
    zero: zero_replay.ZeroPlan | None
    zero_states: list[list[int]] | None
    step_tmp: int  # the optimizer's temporaries, all of them
    foreach_tmp: list[int]  # the foreach optimizer's temporaries, one per tensor
    loop_tmp: list[int]  # the for-loop optimizer's: one tensor-sized temporary at a time


_STEP_SIZES = KeptBySpec(64)


def _step_sizes(spec: ModelSpec, w: Workload, phases) -> _StepSizes:
    """_StepSizes of this step, kept by what it reads (the spec, the workload but its batch and length, the items'
    bytes)."""
    zero = zero_plan(spec, w)
    z3 = zero is not None and zero.stage == 3  # ZeRO-3 gathers its parameters module by module: Coordinator
    extra_bytes = sum(i.bytes for p in phases if p.name == "forward" for i in p.items
                      if i.name == "16-bit working copies (autocast)" or (i.name == "all-gathered parameters"
                                                                          and not z3))
    totals = (extra_bytes, _gradient_bytes(spec, w),
              item_bytes(phases, "optimizer states", "optimizer"),
              item_bytes(phases, "optimizer temporaries", "temporaries"))
    return _STEP_SIZES.get(spec, (size_free_key(w), totals), lambda: _work_out_step_sizes(spec, w, zero, *totals))


def _gradient_bytes(spec: ModelSpec, w: Workload) -> int:
    """The bytes of the gradients a step's replay makes: those held between steps or micro-batches where some are,
    else one per trainable parameter; from the step's batch-free items, not the peak phase (which can hold fewer)."""
    base = step_items(spec, w)
    return base.kept[0].bytes if base.kept else base.grads.bytes


def _work_out_step_sizes(spec: ModelSpec, w: Workload, zero: zero_replay.ZeroPlan | None, extra_bytes: int,
                         grads_total: int, states_total: int, step_tmp: int) -> _StepSizes:
    t_layers, t_rest = _trainable_layers(spec, w) if w.training and w.method != "frozen" else ([], [])
    trainable = [n for layer in t_layers for n in layer] + t_rest
    w_layers, w_rest = per_layer(spec, list(spec.groups))
    extra_sizes = list(split_bytes(extra_bytes, [n for layer in w_layers for n in layer] + w_rest))
    extra_layers, pos = [], 0
    for wl in w_layers:
        extra_layers.append(extra_sizes[pos:pos + len(wl)])
        pos += len(wl)
    extra_rest = extra_sizes[pos:]
    grad_sizes = list(split_bytes(grads_total, trainable))
    k = 1 if w.optimizer == "sgd" else 2
    # the optimizer makes its states in parameter order: the tensors before the blocks (embeddings) come first
    lead = _leading(spec) if w.method == "full" else 0
    in_order = t_rest[:lead] + [n for layer in t_layers for n in layer] + t_rest[lead:]
    state_sizes = [s for s in split_bytes(states_total, [n for n in in_order for _ in range(k)]) if s >= 1]
    if zero is not None and zero.stage == 3:  # each gradient made whole by autograd, copied into the reduce bucket
        # and dropped: the partition is the flat buffer from init (zero_replay.init)
        grad_sizes = [int(n * zero.g) for n in trainable]
    zero_states = None
    if zero is not None:  # the optimizer steps one flat fp32 partition per sub-group: its states are flat too
        flat = list(split_bytes(states_total, [n for n in zero.subgroups for _ in range(k)]))
        zero_states = [flat[i * k:(i + 1) * k] for i in range(len(zero.subgroups))]
    grads_by_layer: list[list[int]] = []
    pos = 0
    for tl in t_layers:
        grads_by_layer.append([s for s in grad_sizes[pos:pos + len(tl)] if s >= 1])  # sizes of at least 1 B
        pos += len(tl)
    foreach_tmp = [s for s in split_bytes(step_tmp, in_order) if s >= 1]
    # for-loop: one tensor-sized temporary at a time (torchao's low-bit AdamW, one compiled step per tensor, too)
    per = TORCHAO_STEP_BYTES.get(w.optimizer) or state_bytes_per_element(w)
    loop_tmp = [int(numel * per) for numel in in_order]
    return _StepSizes(trainable, extra_layers, extra_rest, grads_by_layer, grad_sizes[pos:], state_sizes,
                      zero, zero_states, step_tmp, foreach_tmp, loop_tmp)


def _replay_step(r: Replay, spec: ModelSpec, w: Workload, plan: _StepSizes, tokens: int, final: int, lg: bool,
                 inter: int, pieces: list[float], reference: int = 0) -> None:
    """The replay of the module docstring through `r` (past the prefix: _after_prefix), at `tokens` (the batch's
    tokens); training_overhead works out the rest: the final norm's bytes, whether there are logits (`lg`), the
    MLP's width and the per-token sizes of a block's saved tensors."""
    L = max(1, spec.num_layers)
    c = ELEMENT_BYTES[w.compute_dtype]
    h, V = spec.hidden_size, spec.vocab_size
    zero = plan.zero
    causal = not spec.encoder
    if not plan.trainable:  # a loss without autograd: one layer's temporaries at a time, then the logits
        for _ in range(L):
            keys = [r.alloc(tokens * c * inter) for _ in range(3)] + [r.alloc(tokens * c * h) for _ in range(2)]
            r.free(*keys)
        if lg:
            logits = r.alloc(tokens * V * c)
            up = r.alloc(tokens * V * FP32) if causal else None
            ls = r.alloc(tokens * V * (FP32 if causal else c))
            r.free(up, ls, logits)
        return
    terms = [tokens * piece for piece in pieces]  # per layer: the saved tensors of one layer
    z3 = zero is not None and zero.stage == 3  # ZeRO-3 gathers its parameters module by module: Coordinator
    extra_layers, extra_rest = plan.extra_layers, plan.extra_rest
    step_tmp = plan.step_tmp
    state_sizes, zero_states = plan.state_sizes, plan.zero_states
    grads_by_layer, grads_rest = plan.grads_by_layer, plan.grads_rest
    take_each, give_each = r.a.take_each, r.a.give_each
    sizes = [int(t) for t in terms if t >= 1]
    checkpoint = int(tokens * c * h)
    layer_tmp = [int(t) for t in [tokens * c * inter] * 2 + [tokens * c * h] * 2 if t >= 1]
    # per block, what its forward keeps for backward, in the order it is made: its 16-bit copies, then its input
    # (checkpointing) or its saved tensors; and what its backward makes first: the recomputed tensors, then the
    # activation gradients (each list one allocator call)
    kept_sizes = [[size for size in extra + ([checkpoint] if w.grad_checkpointing else sizes) if size >= 1]
                  for extra in extra_layers]
    passed = sizes if w.grad_checkpointing else []  # computed without keeping: freed at once
    recomputed_count = len(sizes) if w.grad_checkpointing else 0
    backward_sizes = (sizes if w.grad_checkpointing else []) + layer_tmp
    for step in range(2):
        # step 1's gradients are still there: zeroed (grads_kept), or summed so far (gradient accumulation: the
        # second step stands for micro-batches 2..K, which add into them)
        accumulate = w.grads_held and step > 0 and zero is None
        co = zero_replay.Coordinator(r, zero, L) if z3 and zero is not None else None
        if co:
            co.fetch("embed")
            co.release("embed")
        extra = r.alloc_each(extra_rest)  # 16-bit copies / gathered params outside the blocks
        if co is None:  # the blocks in one call of the allocator (forward_layers, backward_layers below)
            saved = r.a.forward_layers(kept_sizes, passed)
        else:  # ZeRO-3 gathers each block's parameters before it and frees them after
            saved = []
            for index in range(L):  # the hot loops call the allocator directly, on sizes of at least 1 B
                co.fetch(index)
                saved.append(take_each(kept_sizes[index]))
                give_each(take_each(passed))
                co.release(index)
        fin = r.alloc(final)
        logits = up = ls = None
        if co:
            co.fetch("head")
        if lg:
            logits = r.alloc(tokens * V * c)
            up = r.alloc(tokens * V * FP32) if causal else None
            ls = r.alloc(tokens * V * (FP32 if causal else c))
            r.free(up)
            _reference_forward(r, reference, w)
            if co:  # the turn to backward: the head is used again at once (kept), then runs its backward
                co.release("head")
                co.fetch("head")
            g1 = r.alloc(tokens * V * (FP32 if causal else c))  # nll_loss backward
            g2 = r.alloc(tokens * V * (FP32 if causal else c))  # log_softmax backward
            r.free(g1, ls)
            g3 = r.alloc(tokens * V * c) if causal else None  # .float()'s backward: back to the logits' dtype
            r.free(g2)
            bucket = [r.alloc(size) for size in zero.reduce] if zero and zero.stage < 3 else []  # first gradient
            gh = r.alloc(tokens * h * c)  # LM head backward: the hidden states' gradient
            r.free(g3)  # the logits stay: the model output holds them until the step drops it, after backward
        else:
            _reference_forward(r, reference, w)
            if co:
                co.release("head")
                co.fetch("head")
            bucket = [r.alloc(size) for size in zero.reduce] if zero and zero.stage < 3 else []
            gh = r.alloc(tokens * h * c)
        if co:
            co.release("head")
        r.free(fin)
        # per block from the last: the recomputed tensors and the activation gradients made, the block's gradients
        # (AccumulateGrad adds a new one in place to the kept one, then frees it: accumulation, ZeRO-3), then freed:
        # the activation gradients, the recomputed tensors, what the forward kept
        grads: list[list | None] = []
        if co is None:
            grads += r.a.backward_layers(saved, backward_sizes, recomputed_count, grads_by_layer, not accumulate)
        else:
            for index in reversed(range(L)):
                co.fetch(index)
                made = take_each(backward_sizes)
                if index < len(grads_by_layer):
                    r.pass_each(grads_by_layer[index])  # ZeRO-3: each gradient copied into the bucket and dropped
                give_each(made[recomputed_count:] + made[:recomputed_count] + saved[index])
                co.release(index)
        r.free(gh)
        if co:
            co.fetch("embed")
        if accumulate or z3:
            r.pass_each(grads_rest)
        else:
            grads += [r.alloc(s) for s in grads_rest]
        if co:
            co.release("embed")
            co.release_all()  # the step's _partition_all_parameters
        if zero is not None and zero.stage < 3:
            r.free(*bucket)  # independent_gradient_partition_epilogue: _release_ipg_buffers
        r.free(logits)  # `del out` after loss.backward()
        r.free(*extra)
        last = step == 1  # frees after the last allocation change no peak: not replayed
        if zero is not None:
            total = max(zero.subgroups)  # the temporaries item is the largest sub-group's (ZeRO-3 steps one at a time;
            # stages 1-2 have one): each sub-group's in proportion
            zero_replay.step(r, zero, grads, zero_states if step == 0 else None,
                             lambda size, total=total: [r.alloc(step_tmp * size // total)] if step_tmp else [])
            continue
        if step == 0:
            take_each(state_sizes)
        if step_tmp and w.optimizer_impl == "foreach" and w.optimizer not in TORCHAO_STEP_BYTES:
            temporaries = take_each(plan.foreach_tmp)
            if not last:
                r.free(*temporaries)
        elif step_tmp:  # for-loop: one tensor-sized temporary at a time
            r.pass_each(plan.loop_tmp)
        if not last and not w.grads_held:
            r.free(*grads)  # zero_grad(set_to_none=True); without it the gradients are zeroed and stay


def _reference_forward(r: Replay, reference: int, w: Workload) -> None:
    """The reference forward's logits and one row's log_softmax output (`reference` bytes in all), made and dropped
    before backward (phases.py _reference_forward); nothing without a reference model."""
    if reference:
        positions = logit_positions(w)
        row = reference * (positions // w.batch) // (positions + positions // w.batch)
        logits = r.alloc(reference - row)
        r.free(r.alloc(row), logits)


_WEIGHTS = KeptBySpec(16)  # the allocator after an inference's weights, by what their replay read


def _weights_loaded(spec: ModelSpec, w: Workload, phases, expandable: bool, limit: int | None) -> Replay:
    """An inference's replay with its weights loaded: the kept load forked, or replayed (expandable segments, the
    Python model, a limit below its peak reserved)."""
    model = allocator_for(phases)

    def loaded(limit: int | None) -> Replay:
        r = Replay(expandable, limit=limit, model=model)
        replay_weights(r, spec, w, phases)
        return r

    if expandable or model is not CachingAllocator:
        return loaded(limit)
    load = next(p for p in phases if p.name == "load")
    kept = _WEIGHTS.get(spec, (size_free_key(w), load), lambda: loaded(None).a)
    if limit is not None and kept.peak_reserved > limit:
        return loaded(limit)
    return Replay.over(kept.fork(limit=limit))


def inference_overhead(spec: ModelSpec, w: Workload, phases, *, expandable: bool = False,
                       limit: int | None = None) -> Overhead:
    """Replay an inference: weights, the cache, prefill chunks (per layer the MLP temporaries), decode steps. A
    dynamic cache's longer copies never fit the blocks the shorter ones freed, so reserved would grow until
    cudaMalloc fails: the replay releases the free segments wherever it would pass the peak allocated."""
    peak = max(p.bytes for p in phases)
    if w.kv_cache == "dynamic":
        limit = peak if limit is None else min(peak, limit)
    r = _weights_loaded(spec, w, phases, expandable, limit)
    L = max(1, spec.num_layers)
    c = ELEMENT_BYTES[w.compute_dtype]
    h, V = spec.hidden_size, spec.vocab_size
    inter = spec.intermediate_size
    if spec.moe is not None:
        inter = max(spec.moe.expert_intermediate_size * spec.moe.experts_per_token, spec.moe.shared_intermediate_size)
    kv = item_bytes(phases, "KV cache", "kv")
    dynamic = w.kv_cache == "dynamic"
    generated = (w.new_tokens or 1) if dynamic else 1
    prompt = max(1, w.seq_len - generated) if dynamic else w.seq_len
    per_token = kv / (2 * L * w.seq_len) if w.seq_len else 0  # one of K or V, one layer, one token (all sequences)
    cache: list[list | None] = []
    if kv and not dynamic:  # preallocated for the whole context: a static cache, vLLM's pool
        cache = [r.alloc(kv // (2 * L)) for _ in range(2 * L)]
    lengths = [0] * (2 * L)

    def grow(index: int, tokens: int) -> None:
        """DynamicCache.update: torch.cat makes the longer tensor while the old one is alive, then frees it."""
        lengths[index] += tokens
        new = r.alloc(per_token * lengths[index])
        r.free(cache[index])
        cache[index] = new

    def layer_pass(tokens: int, index: int) -> None:
        tmp = [r.alloc(tokens * c * inter) for _ in range(3)] + [r.alloc(tokens * c * h) for _ in range(2)]
        if dynamic and kv:
            grow(2 * index, tokens // w.batch)
            grow(2 * index + 1, tokens // w.batch)
        r.free(*tmp)

    def forward(tokens: int) -> None:
        """layer_pass over every layer; where the cache does not grow, in one allocator call (forward_layers)."""
        if dynamic and kv:
            for index in range(L):
                layer_pass(tokens, index)
            return
        sizes = [int(size) for size in [tokens * c * inter] * 3 + [tokens * c * h] * 2 if size >= 1]
        r.a.forward_layers([[]] * L, sizes)

    if dynamic:
        cache = [None] * (2 * L)
    if spec.encoder:
        forward(w.batch * w.seq_len)
        lg = item_bytes(phases, "scores over the vocabulary", "logits")
        r.free(r.alloc(lg))
        return overhead_of(r)
    chunk = max(w.batch, min(w.batch * prompt, w.prefill_chunk) // w.batch * w.batch)
    done, before = 0, None
    while done < w.batch * prompt:
        step = min(chunk, w.batch * prompt - done)
        forward(step)
        done += step
        if not dynamic:  # a chunk frees all it takes: once one leaves the allocator as it found it, so does the next
            after = r.a.state()
            if after == before:
                done += (w.batch * prompt - done) // chunk * chunk
            before = after
    r.free(r.alloc(w.batch * V * c), r.alloc(w.batch * V * FP32))  # last position's logits and fp32 copy
    stride = max(1, -(-(generated - 1) // DECODE_REPLAY_STEPS)) if dynamic else 1
    left = generated - 1 if dynamic else 1
    while left > 0:
        tokens = min(stride, left)
        forward(w.batch * tokens)
        r.free(r.alloc(w.batch * V * c), r.alloc(w.batch * V * FP32))
        left -= tokens
    return overhead_of(r)
