"""Trace real steps on fake tensors: build the model from its config, run it under PyTorch's FakeTensorMode and
a storage-lifetime tracker, and report the peak per phase by category. No GPU, no weights, no memory beyond bookkeeping.

A light storage tracker (campaign.memory.tracker) counts every storage's lifetime. What runs is the real
transformers (and peft) code, so the saved tensors, temporaries, optimizer states and
gradients are the ones a real step makes. Limits, stated in the result's notes: the fake device is the CPU
(CPU SDPA and autocast policies), and 4-bit/8-bit kernels cannot run on fake tensors, so a quantized base is
traced in bf16 and its weight bytes are replaced by the format's layout.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..models.meta import building
from ..models.spec import ModelSpec
from .breakdown import Item, MemoryEstimate, Phase
from .build import (
    ATTENTION_DROPOUT,
    encode_and_fill,
    encoder_decoder_cache,
    extend,
    extend_encoder_decoder,
    finish,
    instantiate,
    model_config,
    optimizer_for,
    prefill,
    prefill_chunk,
    quiet_transformers,
    step_inputs,
    torch_dtype,
    workload_class_and_config,
)
from .constants import CUDA_CONTEXT_BYTES, TORCHAO_STEP_BYTES
from .dtypes import ELEMENT_BYTES, QUANTIZED
from .estimate import finish_estimate
from .states import is_router, weight_bytes
from .workload import Workload

TRACE_STEPS = 2  # optimizer states exist from the second step on


def trace_memory(model: str | Path | ModelSpec, workload: Workload, *, reserve: str | float = "10%",
                 context_bytes: int = CUDA_CONTEXT_BYTES, fragmentation: float | None = None,
                 progress: Callable[[str], None] | None = None) -> MemoryEstimate:
    """Peak memory per phase, traced on fake tensors; same shape as estimate_memory (method 'traced').

    Args:
        model: catalog name, model dir, config.json or cached repo id, or a ModelSpec (as everywhere).
        workload: from make_workload; adamw-8bit and multi-card sharding are not traceable here.
        fragmentation: a flat share of the transient bytes as the allocator overhead (as estimate_memory's),
            instead of the replay of the traced allocations through the caching-allocator model (None).
        progress: called with the name of each phase as it starts.
    Raises:
        MissingDependencyError: without the torch extra. InputError: an untraceable workload.
        ConfigError: an architecture transformers cannot build.
    """
    try:
        import torch
        import transformers
        from torch._subclasses.fake_tensor import FakeTensorMode

        from .tracker import StorageTracker
    except ImportError:
        raise MissingDependencyError("torch and transformers", "torch") from None
    w = workload
    if w.optimizer in ("adamw-8bit", "adamw-32bit", *TORCHAO_STEP_BYTES):
        raise InputError(f"{w.optimizer} cannot be traced (bitsandbytes' and torchao's quantized states do not run "
                         "on fake tensors); "
                         "use campaign memory, or trace with --optimizer adamw")
    if w.gpus > 1 and w.shard not in ("fsdp", "zero3"):
        what = {"none": "DDP (--shard none)", "tp": "tensor parallel"}.get(w.shard, w.shard)
        raise InputError(f"tracing {what} over {w.gpus} cards is not supported; trace --shard fsdp (or zero3, "
                         "traced as FSDP full sharding), or use campaign memory for DDP, ZeRO-1/2 and tensor parallel")
    cfg, spec, _ = model_config(model)
    notes: list[str] = ["traced on fake CPU tensors: CPU SDPA picks its flash kernel (saves output and logsumexp, "
                        "like flash/memory-efficient attention on a GPU)"]
    base_dtype = torch_dtype(torch, w)
    if w.attention == "sdpa" and w.training and any(cfg.get(k) for k in ATTENTION_DROPOUT):
        notes.append("attention dropout traced as 0: GPU flash/memory-efficient SDPA keeps no dropout mask, while "
                     "the CPU kernel would materialize the probabilities")
    if w.dtype in QUANTIZED:
        notes.append(f"{w.dtype} base traced in bf16 (quantized kernels cannot run on fake tensors); its weight "
                     "bytes are replaced by the format's layout")
    if w.mixed_precision:
        notes.append("autocast traced with the CPU policy (bf16); CUDA's policy keeps a few more ops in fp32")

    tell = progress or (lambda _phase: None)
    phases: list[Phase] = []
    mesh = _fake_mesh(w.gpus) if w.gpus > 1 else None
    if mesh is not None:
        notes.append(f"FSDP2 full sharding over {w.gpus} fake ranks (fake process group): per-card figures"
                     + ("; ZeRO-3 shards the same way, and DeepSpeed's own buffers are not traced"
                        if w.shard == "zero3" else ""))
    if w.kv_dtype and not w.training and w.cache_dtype != w.compute_dtype:
        notes.append(f"KV cache traced in {w.compute_dtype} and scaled to {w.cache_dtype} bytes (the cache's own "
                     "quantize kernels do not run on fake tensors)")
    if spec.encdec is not None:
        notes.append(f"encoder-decoder: encoder over {w.seq_len} tokens, decoder over as many (the decoder length "
                     "campaign assumes)")
    with FakeTensorMode(), quiet_transformers(), _as_on_cuda(torch, notes):
        tell("build")
        net = _build(torch, transformers, cfg, base_dtype, w)
        _reads_token_ids(net, spec)
        if mesh is not None:
            _shard(torch, net, mesh, w)
        trains = w.training and w.method != "frozen"
        optimizer = optimizer_for(torch, w, [p for p in net.parameters() if p.requires_grad]) if trains else None
        tracker = StorageTracker(expandable=w.expandable_segments)
        tracker.modules_at_peak = {}
        for t in [*net.parameters(), *net.buffers()]:
            tracker.register(t, "weights")
        tracker.track_gradients(net.parameters())
        ids = torch.randint(0, spec.vocab_size, (w.batch, w.seq_len))
        inputs = step_inputs(torch, spec.architecture, cfg, ids, spec.vocab_size, encdec=spec.encdec is not None)
        with tracker:
            tracker.phase("activations")
            phases.append(_phase(tracker, "load", "weights on the card"))
            if w.training and optimizer is not None:
                for step in range(TRACE_STEPS):
                    last = step == TRACE_STEPS - 1
                    for micro in range(w.grad_accumulation):  # the last micro-batch's phases are kept: from the
                        # second on, the gradients summed so far are alive through its forward and backward
                        at = f"step {step + 1}" + (f", micro-batch {micro + 1}" if w.grad_accumulation > 1 else "")
                        if hasattr(net, "set_requires_gradient_sync"):  # FSDP2, as the Trainer runs it: the earlier
                            # micro-batches under accelerator.no_sync keep whole gradients, the last reduce-scatters;
                            # every one with --sync-each-batch (torchtune)
                            net.set_requires_gradient_sync(w.sync_each_batch or micro == w.grad_accumulation - 1)
                        tracker.phase("activations")
                        tell(f"forward ({at})")
                        with _autocast(torch, w):
                            out = net(**inputs, use_cache=False)
                        fwd = _phase(tracker, "forward", "peak of the forward, loss included")
                        tracker.phase("temporaries")
                        tell(f"backward ({at})")
                        out.loss.backward()
                        del out
                        bwd = _phase(tracker, "backward", "peak of the backward")
                        for p in net.parameters():  # FSDP assigns .grad itself, past the accumulate hooks
                            if p.grad is not None:
                                tracker.register(p.grad, "gradients")
                    tracker.phase("temporaries")
                    tell(f"optimizer step (step {step + 1})")
                    optimizer.step()
                    st = _phase(tracker, "optimizer step", "peak inside optimizer.step()")
                    for state in optimizer.state.values():
                        for key, value in state.items():
                            if not isinstance(value, torch.Tensor):
                                continue
                            if key == "step" and not optimizer.defaults.get("fused"):
                                tracker.forget(value)  # torch keeps step counters on the host unless fused
                            else:
                                tracker.register(value, "optimizer states")
                    optimizer.zero_grad(set_to_none=not w.grads_kept)
                    if last:
                        phases += [fwd, bwd, st]
            elif w.training:  # frozen: the loss without autograd
                tell("forward")
                with torch.no_grad(), _autocast(torch, w):
                    net(**inputs, use_cache=False)
                phases.append(_phase(tracker, "forward", "a forward and its loss, without autograd"))
            elif spec.encoder:  # inference of an encoder: one forward over the batch, no cache
                tell("forward")
                with torch.no_grad():
                    net(input_ids=ids)
                phases.append(_phase(tracker, "forward", "an encoder's forward over the batch (no KV cache)"))
            elif spec.encdec is not None:
                with torch.no_grad():
                    phases += _trace_encoder_decoder(transformers, net, tracker, ids, w, tell)
            else:
                with torch.no_grad():
                    phases += _trace_inference(transformers, net, tracker, ids, w, tell)
    peak_name = max(phases, key=lambda p: p.bytes).name
    top = tuple(sorted(((m, b) for m, b in tracker.modules_at_peak.get(peak_name, {}).items() if b > 0),
                       key=lambda r: -r[1])[:8])
    raw_peak = max(p.bytes for p in phases)
    phases = [_as_stored(p, spec, w) for p in phases]
    if mesh is not None:
        import torch.distributed as dist

        dist.destroy_process_group()
    # the allocator replay saw bf16 linears and a compute-dtype cache: shift it by what the formats save at the peak
    reserved = tracker.allocator.peak_reserved - (raw_peak - max(p.bytes for p in phases))
    return finish_estimate(spec, w, tuple(phases), reserve=reserve, context_bytes=context_bytes,
                           fragmentation=fragmentation, method="traced", notes=tuple(notes), top_modules=top,
                           simulated_reserved=reserved if fragmentation is None else None)


def _reads_token_ids(net: Any, spec: ModelSpec) -> None:
    """Refuse a model whose main input is not token ids (Whisper's input_features; transformers' own
    `main_input_name`): the step fed here is token ids."""
    name = getattr(net, "main_input_name", "input_ids")
    if name != "input_ids":
        raise InputError(f"{spec.name}: its forward reads {name} (features, not token ids), and campaign trace MODEL "
                         "feeds token ids; trace your own step with a real batch: campaign trace FILE.py:FACTORY")


def _fake_mesh(world: int) -> Any:
    """A device mesh over a fake process group: collectives return at once with tensors of the right shape."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore  # the fake backend's store

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    return init_device_mesh("cpu", (world,))


def _shard(torch: Any, net: Any, mesh: Any, w: Workload) -> None:
    """FSDP2: each transformer block is a unit (transformers' _no_split_modules), the input and output embeddings
    each one of their own with --fsdp-embedding-units, then the root; every unit reshards after its forward unless
    --no-reshard-after-forward (the root never does: FSDP2's own rule)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    blocks: set[str] = set()
    for module in net.modules():
        blocks.update(getattr(module, "_no_split_modules", None) or [])
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if w.mixed_precision \
        else MixedPrecisionPolicy()
    reshard = w.reshard_after_forward
    for module in list(net.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    embed, head = net.get_input_embeddings(), net.get_output_embeddings()
    if w.fsdp_embedding_units and embed is not None and head is not None and head.weight is not embed.weight:
        for module in (embed, head):  # a tied head is one weight: left in the root, as the estimate leaves it
            fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(net, mesh=mesh, mp_policy=policy)


def _build(torch: Any, transformers: Any, cfg: dict[str, Any], dtype: Any, w: Workload) -> Any:
    """Built on the meta device (dtype conversions of fake parameters are not supported), then every parameter
    and buffer is replaced by a fake CPU tensor of the same shape and dtype, ties preserved. Under sdpa, attention
    dropout is set to 0: GPU flash kernels keep no dropout mask, while the CPU kernel would materialize the
    probabilities."""
    cls, config = workload_class_and_config(transformers, cfg, w, no_attention_dropout=w.attention == "sdpa")
    with _no_fake(), torch.device("meta"), building(cls):
        net = instantiate(cls, config, dtype, w)
    _fakeify(torch, net)
    return finish(net, w)


class _no_fake:
    """Leave the active FakeTensorMode for a block (meta construction), re-entering it afterwards."""

    def __enter__(self) -> None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        self.ctx = unset_fake_temporarily()
        self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.ctx.__exit__(*exc)


def _fakeify(torch: Any, net: Any) -> None:
    """Swap meta parameters and buffers for fake CPU tensors (inside the active FakeTensorMode)."""
    memo: dict[int, Any] = {}
    for module in net.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), requires_grad=p.requires_grad)
            module._parameters[name] = memo[id(p)]
        for name, b in list(module._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = torch.zeros(b.shape, dtype=b.dtype)
            module._buffers[name] = memo[id(b)]


class _autocast:
    """torch.autocast on the fake device when mixed precision is asked, else nothing."""

    def __init__(self, torch: Any, w: Workload) -> None:
        self.ctx = torch.autocast("cpu", dtype=torch.bfloat16) if w.mixed_precision else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


_LABELS = {"weights": "weights", "optimizer states": "optimizer", "gradients": "gradients",
           "activations": "activations", "temporaries": "temporaries", "kv": "kv"}


def _phase(tracker: Any, name: str, moment: str, kv_bytes: int = 0) -> Phase:
    """The tracker's current phase peak as items by category (KV cache split out when given)."""
    _total, categories, modules = tracker.snapshot()
    tracker.modules_at_peak[name] = modules
    items = []
    for label, value in categories.items():
        if label == "activations" and kv_bytes:
            items.append(Item("KV cache", kv_bytes, "traced: the cache tensors at the end of the phase", "kv",
                              "transformers DynamicCache"))
            value -= kv_bytes
            label = "temporaries"
        items.append(Item(label, int(value), f"traced: live {label} at the phase peak", _LABELS.get(label, label),
                          "storage tracker on fake tensors"))
    return Phase(name, tuple(items), moment)


def _trace_inference(transformers: Any, net: Any, tracker: Any, ids: Any, w: Workload,
                     tell: Callable[[str], None]) -> list[Phase]:
    """Prefill the context in chunks into a DynamicCache, then decode one token."""
    cache = transformers.DynamicCache(config=net.config)
    chunk = prefill_chunk(w)
    tracker.phase("activations")
    tell("prefill")
    prefill(net, ids, cache, chunk)
    filled = _phase(tracker, "prefill", f"prefill in chunks of {chunk} tokens per sequence, cache filled",
                     _cache_bytes(cache))
    tracker.phase("activations")
    tell("decode")
    extend(net, ids[:, -1:], cache)
    decode = _phase(tracker, "decode", "one token with the cache full", _cache_bytes(cache))
    return [filled, decode]


def _trace_encoder_decoder(transformers: Any, net: Any, tracker: Any, ids: Any, w: Workload,
                           tell: Callable[[str], None]) -> list[Phase]:
    """Generation of an encoder-decoder: the encoder over the prompt, the decoder's caches filled (cross-attention
    K/V at its first step, self-attention K/V up to seq_len - 1 tokens), then one token with both caches full and
    the encoder outputs kept (generate keeps them for the whole generation)."""
    cache = encoder_decoder_cache(transformers, net)
    chunk = prefill_chunk(w)
    tracker.phase("activations")
    tell("prefill")
    encoded = encode_and_fill(net, ids, cache, chunk)
    filled = _phase(tracker, "prefill", f"encoder over the prompt, then the decoder's caches filled in chunks of "
                    f"{chunk} tokens per sequence", _cache_bytes(cache))
    tracker.phase("activations")
    tell("decode")
    extend_encoder_decoder(net, ids[:, -1:], encoded, cache)
    decode = _phase(tracker, "decode", "one token with both caches full and the encoder outputs kept",
                    _cache_bytes(cache))
    del encoded
    return [filled, decode]


def _cache_bytes(cache: Any) -> int:
    """The cache's storages as the tracker counts them (each rounded to the allocator's block); an encoder-decoder's
    cache counts its self-attention and cross-attention K/V."""
    from .tracker import rounded

    caches = [cache.self_attention_cache, cache.cross_attention_cache] if hasattr(cache, "cross_attention_cache") \
        else [cache]
    return sum(rounded(t.untyped_storage().nbytes()) for c in caches for layer in c.layers
               for t in (layer.keys, layer.values) if t is not None)


@contextmanager
def _as_on_cuda(torch: Any, notes: list[str]) -> Iterator[None]:
    """SDPA as a CUDA card dispatches it where the CPU would not: an additive mask that needs a gradient or comes
    with attention dropout (T5's relative position bias, dropout_rate) sends the CPU to its math kernel, which keeps
    the b x heads x s x s probabilities in fp32, while a GPU runs the memory-efficient kernel (flash takes no mask;
    memory-efficient takes an additive bias, returns its gradient and draws dropout from a seed). Those calls run
    aten's memory-efficient op, whose fake kernel gives the tensors CUDA's would, as CUDA's dispatcher calls it
    (the bias broadcast to batch x heads). Every other call goes to PyTorch's own choice. Dropout in training runs
    the fused native_dropout a GPU runs (a 1-byte mask), not the CPU's multiply by a noise tensor of the input's
    dtype (a mask of 2 or 4 bytes per element)."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention
    said: list[bool] = []

    def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
        cpu_math = (attn_mask is not None and attn_mask.is_floating_point() and torch.is_grad_enabled()
                    and (attn_mask.requires_grad or dropout_p > 0))
        if not cpu_math or enable_gqa or query.shape[1] != key.shape[1] or query.dim() != 4:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        if not said:
            said.append(True)
            notes.append("an attention mask with a gradient or with attention dropout (T5's position bias) is traced "
                         "through SDPA's memory-efficient kernel, as a GPU runs it (the CPU would run its math "
                         "kernel and keep fp32 probabilities)")
        bias = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        needs_grad = any(t.requires_grad for t in (query, key, value, attn_mask))
        return efficient(query, key, value, bias, needs_grad, dropout_p, is_causal, scale=scale)[0]

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or not 0 < p < 1 or inplace or not torch.is_grad_enabled():
            return original_dropout(input, p, training, inplace)
        return torch.native_dropout(input, p, True)[0]

    original_dropout = functional.dropout
    functional.scaled_dot_product_attention, functional.dropout = sdpa, dropout
    try:
        yield
    finally:
        functional.scaled_dot_product_attention, functional.dropout = original, original_dropout


def _as_stored(phase: Phase, spec: Any, w: Workload) -> Phase:
    """What fake tensors cannot run, put back in the workload's formats: the quantized Linear weights (their bf16
    bytes replaced by the format's data + metadata, per card under sharding) and a KV cache narrower than the
    compute dtype (fp8, int8: bytes scaled by the element sizes)."""
    items: list[Item] = []
    for item in phase.items:
        if item.name == "weights" and w.dtype in QUANTIZED:
            shards = w.gpus if w.gpus > 1 and w.shard in ("fsdp", "zero3") else 1
            bf16_linear = sum(g.params for g in spec.groups
                              if g.role == "linear" and g.in_blocks and not is_router(g)) * ELEMENT_BYTES["bf16"]
            wb = weight_bytes(spec, w)
            per_card = f" / {shards} cards" if shards > 1 else ""
            items.append(Item("weights (traced, quantized linears excluded)", item.bytes - bf16_linear // shards,
                              "traced parameters minus the bf16 bytes of the Linear layers a quantizer converts"
                              + per_card, "weights", "storage tracker on fake tensors"))
            items.append(Item(f"weights, {w.dtype} linear layers", (wb.quantized + wb.quant_overhead) // shards,
                              "format layout: packed data + scales/zeros" + per_card, "weights", "format layout"))
        elif item.name == "KV cache" and w.cache_dtype != w.compute_dtype:
            cache, compute = ELEMENT_BYTES[w.cache_dtype], ELEMENT_BYTES[w.compute_dtype]
            items.append(Item("KV cache", int(item.bytes * cache / compute),
                              f"traced in {w.compute_dtype}, scaled to {w.cache_dtype}: x {cache:g} / {compute:g} B",
                              item.category, item.source))
        else:
            items.append(item)
    return Phase(phase.name, tuple(items), phase.moment)
