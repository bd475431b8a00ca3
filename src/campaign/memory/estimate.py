"""The analytic memory estimate: a breakdown per phase whose items sum to the headline figures.

Headline figures (per card): peak_allocated_bytes (tensors alive at the peak), peak_reserved_bytes (what
PyTorch's caching allocator holds), device_bytes (plus the CUDA context: what nvidia-smi shows) and
required_bytes (plus the explicit reserve). `items` are the peak phase's items plus those three overheads,
so sum(items) == required_bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..models.spec import ModelSpec
from ..results import Record
from ..units import parse_size
from .activations import inference_temporaries, logits_bytes, training_activations
from .constants import (ADAFACTOR_STEP_COPIES, ADAPTER_BYTES, CUDA_CONTEXT_BYTES, DDP_BUCKET_COPIES,
                        LOG_SOFTMAX_OUTPUT_BYTES, LOGITS_GRAD_BYTES, NCCL_BUFFSIZE, NCCL_CHANNELS, NCCL_COMM_EXTRA,
                        NCCL_PEERS_PER_CHANNEL, SOFTCAP_SAVED_COPIES, ZERO3_PREFETCH_BUCKET, ZERO_ALLGATHER_BUCKET,
                        ZERO_REDUCE_BUCKET)
from .dtypes import ELEMENT_BYTES, QUANTIZED, format_note
from .kv import check_tensor_parallel, estimate_kv
from .states import (optimizer_bytes, state_bytes_per_element, trainable_params, weight_bytes)
from .terms import Term
from .workload import Workload

from .constants import FRAGMENTATION as FRAGMENTATION  # re-exported: trace's default share

SCHEMA = "campaign.memory/1"
_TRANSIENT = ("activations", "logits", "temporaries", "kv")


@dataclass(frozen=True)
class Item:
    """One term of the breakdown: bytes, the formula in words and where it comes from."""

    name: str
    bytes: int
    formula: str
    category: str
    source: str = "formula"


@dataclass(frozen=True)
class Phase:
    """Tensors alive at the peak moment of one phase."""

    name: str
    items: tuple[Item, ...]
    moment: str = ""

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    def to_dict(self) -> dict[str, Any]:  # by hand: the phase's total (derived from its items) before them
        return {"name": self.name, "bytes": self.bytes, "moment": self.moment,
                "items": [asdict(i) for i in self.items]}


@dataclass(frozen=True)
class Fit(Record):
    """Does the workload fit one card, with what headroom, and what is the most it could take."""

    card: str
    memory_bytes: int
    verdict: str  # fits | tight | does not fit
    headroom_bytes: int
    max_batch: int | None = None
    max_seq_len: int | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    """The analytic estimate of one workload on one card of `workload.gpus`; all bytes are per card."""

    model: str
    workload: Workload
    params: int
    trainable_params: int
    phases: tuple[Phase, ...]
    peak_phase: str
    items: tuple[Item, ...]
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_bytes: int
    required_bytes: int
    reserve_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    method: str = "formula"
    top_modules: tuple[tuple[str, int], ...] = ()
    schema: str = SCHEMA

    def verdict(self, memory_bytes: int) -> str:
        """fits / tight (inside the reserve) / does not fit, for a card of `memory_bytes`."""
        if self.required_bytes <= memory_bytes:
            return "fits"
        if self.device_bytes <= memory_bytes:
            return "tight"
        return "does not fit"

    def to_dict(self) -> dict[str, Any]:
        # written by hand, not results.Result: the headline figures come before the long item and phase lists (the
        # fields' order puts them after), and top_modules read as {module, peak_bytes}
        return {
            "schema": self.schema, "model": self.model, "method": self.method,
            "workload": self.workload.to_dict(), "params": self.params, "trainable_params": self.trainable_params,
            "peak_phase": self.peak_phase, "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes, "device_bytes": self.device_bytes,
            "required_bytes": self.required_bytes, "reserve_bytes": self.reserve_bytes,
            "items": [asdict(i) for i in self.items], "phases": [p.to_dict() for p in self.phases],
            "notes": list(self.notes),
            "top_modules": [{"module": m, "peak_bytes": b} for m, b in self.top_modules],
        }


    @classmethod
    def from_dict(cls, data: Any, where: str = "the estimate") -> MemoryEstimate:
        """The estimate `to_dict` wrote (campaign memory --json, campaign trace --json), checked field by field:
        one-line errors for what is not one."""
        from dataclasses import fields as dataclass_fields

        from ..validate import JsonObject

        d = JsonObject(data, where, fix="write it with campaign memory --json or campaign trace --json")
        if d.raw("schema", None) != SCHEMA:
            d.fail(f"not a campaign memory estimate (schema {d.raw('schema', None)!r})")

        def items(o: JsonObject) -> tuple[Item, ...]:
            return tuple(Item(i.str("name"), i.count("bytes"), i.str("formula", ""), i.str("category", ""),
                              i.str("source", "formula")) for i in o.items("items"))

        def phase(p: JsonObject) -> Phase:
            declared, read = p.count("bytes"), Phase(p.str("name"), items(p), p.str("moment", ""))
            if declared != read.bytes:
                p.fail(f"phase {read.name!r} says {declared:,} bytes, its items sum to {read.bytes:,}")
            return read

        known = {f.name for f in dataclass_fields(Workload)}
        raw_workload = {k: v for k, v in d.obj("workload").data.items() if k in known}
        try:
            workload = Workload(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw_workload.items()})
        except TypeError as e:
            d.fail(f"field 'workload' is not a workload ({e})")
        return cls(model=d.str("model"), workload=workload, params=d.count("params"),
                   trainable_params=d.count("trainable_params"),
                   phases=tuple(phase(p) for p in d.items("phases")),
                   peak_phase=d.str("peak_phase"), items=items(d),
                   peak_allocated_bytes=d.count("peak_allocated_bytes"),
                   peak_reserved_bytes=d.count("peak_reserved_bytes"), device_bytes=d.count("device_bytes"),
                   required_bytes=d.count("required_bytes"), reserve_bytes=d.count("reserve_bytes"),
                   notes=tuple(str(n) for n in d.list("notes", [])), method=d.str("method", "formula"),
                   top_modules=tuple((t.str("module"), t.count("peak_bytes")) for t in d.items("top_modules"))
                   if "top_modules" in d else ())


def load_estimate(path: str | Path) -> MemoryEstimate:
    """A saved estimate (campaign memory --json or campaign trace --json), checked field by field."""
    from ..io import load_json

    return MemoryEstimate.from_dict(load_json(path, "an estimate (campaign memory --json or campaign trace --json)"),
                                    where=str(path))


def parse_reserve(reserve: str | float | int) -> tuple[float, int]:
    """'10%' or 0.1 -> (fraction of device bytes, 0); '4GiB' -> (0, bytes)."""
    if isinstance(reserve, (int, float)) and not isinstance(reserve, bool):
        if not 0 <= reserve < 1:
            raise InputError(f"reserve {reserve!r} as a number is a fraction in [0, 1); write e.g. 0.1, '10%' or '4GiB'")
        return float(reserve), 0
    text = str(reserve).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise InputError(f"reserve {reserve!r} is not a percentage; write e.g. '10%' or '4GiB'") from None
        if not 0 <= pct < 100:
            raise InputError(f"reserve {reserve!r} must be between 0% and 100%")
        return pct / 100, 0
    try:
        value = float(text)
    except ValueError:
        return 0.0, parse_size(text, what="reserve")
    return parse_reserve(value)


def parse_share(value: str | float, *, what: str = "fragmentation") -> float:
    """'10%' or 0.1 -> 0.1: a share in [0, 1)."""
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{what} {value!r} is not a share; write e.g. '10%' or 0.1") from None
    if not 0 <= share < 1:
        raise InputError(f"{what} {value!r} must be a share between 0 and 1 (0% to 100%)")
    return share


def model_spec(model: str | Path | ModelSpec) -> ModelSpec:
    """The ModelSpec of what every memory call takes as `model`: a catalog name, a model dir, a config.json, a
    cached repo id (see campaign.models.load_spec), or a ModelSpec already read."""
    if isinstance(model, ModelSpec):
        return model
    from ..models.resolve import load_spec

    return load_spec(str(model))


def estimate_memory(model: str | Path | ModelSpec, workload: Workload, *, reserve: str | float = "10%",
                    context_bytes: int = CUDA_CONTEXT_BYTES, fragmentation: float | None = None,
                    card_bytes: int | None = None) -> MemoryEstimate:
    """Estimate per-card GPU memory of a workload, phase by phase.

    Args:
        model: a catalog name, model dir, config.json or cached repo id, or a ModelSpec (see model_spec).
        workload: a validated Workload (see make_workload).
        reserve: explicit safety margin, a fraction of device bytes ('10%') or a size ('4GiB').
        context_bytes: CUDA/ROCm context and library handles outside PyTorch's allocator.
        fragmentation: a flat share of the transient bytes as the allocator overhead, instead of replaying the
            step's tensors through the caching-allocator model (the default, None).
        card_bytes: the memory of the card the step runs on: the replay runs against what the allocator may
            reserve there (allocator_limit), releasing its cached free segments before it would pass it, as
            PyTorch's allocator does when cudaMalloc fails. None: a card with room to spare (nothing released).
    """
    spec, w = model_spec(model), workload
    phases = _training_phases(spec, w) if w.training else _inference_phases(spec, w)
    return finish_estimate(spec, w, phases, reserve=reserve, context_bytes=context_bytes,
                           fragmentation=fragmentation, method="formula", card_bytes=card_bytes)


def allocator_limit(card_bytes: int, *, reserve: str | float, context_bytes: int, other_bytes: int = 0) -> int:
    """The most PyTorch's allocator may reserve on a card of `card_bytes` for the step to fit it: the largest
    reserved whose device figure (reserved + context + `other_bytes` outside the allocator) plus the reserve is
    at most the card. Negative when not even the context and the reserve fit."""
    fraction, absolute = parse_reserve(reserve)
    if absolute or not fraction:
        device = card_bytes - absolute
    else:  # the reserve is round(device x fraction): the largest device with device + reserve <= card
        device = int(card_bytes / (1 + fraction))
        while device + int(round(device * fraction)) > card_bytes:
            device -= 1
        while device + 1 + int(round((device + 1) * fraction)) <= card_bytes:
            device += 1
    return device - context_bytes - other_bytes


def finish_estimate(spec: ModelSpec, w: Workload, phases: tuple[Phase, ...], *, reserve: str | float,
                    context_bytes: int, fragmentation: float | None, method: str, notes: tuple[str, ...] = (),
                    top_modules: tuple[tuple[str, int], ...] = (),
                    simulated_reserved: int | None = None, card_bytes: int | None = None) -> MemoryEstimate:
    """Headline figures from per-phase allocations: the allocator model, the context and the reserve.

    Shared by the analytic estimate and the trace, so both give the same JSON shape. `notes` are the method's
    own (the trace's limits); the workload's and the model's notes follow them.
    """
    peak = max(phases, key=lambda p: p.bytes)
    allocated = peak.bytes
    pages = " with expandable segments (one segment per pool, grown in 2 MiB / 20 MiB pages)" \
        if w.expandable_segments else ""
    if simulated_reserved is not None:
        frag = max(0, simulated_reserved - allocated)
        frag_formula = ("the traced allocations replayed through a model of the caching allocator (512 B blocks, "
                        "2 MiB small / 20 MiB large segments, best fit, splitting, merging)")
        frag_source = "simulated CUDACachingAllocator"
    elif fragmentation is not None:
        # Freed activation blocks stay cached and are reused later, so the share applies to the largest transient
        # working set of any phase, not only the peak phase's.
        transient = max(sum(i.bytes for i in p.items if i.category in _TRANSIENT) for p in phases)
        frag = int(fragmentation * transient)
        frag_formula = f"{fragmentation:.0%} of transient tensors ({transient:,} B)"
        frag_source = "given share"
    else:
        from .reserved import inference_overhead, training_overhead

        limit = None if card_bytes is None else allocator_limit(
            card_bytes, reserve=reserve, context_bytes=context_bytes, other_bytes=sum(i.bytes for i in _nccl_items(w)))
        replay = (training_overhead if w.training else inference_overhead)(
            spec, w, phases, expandable=w.expandable_segments, limit=limit)
        frag = replay.bytes
        if limit is not None and replay.peak_reserved <= limit and allocated <= limit:
            # the allocator stayed within the card by releasing cached segments: so does the figure (the replay's
            # own allocated figure may differ from the estimate's by a few blocks)
            frag = min(frag, limit - allocated)
        released = "" if not replay.released else (
            f", its cached free segments released before it would pass the {limit:,} B the card leaves it"
            if limit is not None else  # a dynamic cache without a card: released where it would pass its peak
            ", its cached free segments released before it would grow past the peak allocated (the cache's "
            "shorter copies)")
        frag_formula = (f"the step's tensors (weights, states, per-layer activations, logits, temporaries"
                        f"{', the cache as it grows' if w.kv_cache == 'dynamic' else ''}) replayed through the "
                        f"caching allocator's rules{pages}{released}: peak reserved {replay.peak_reserved:,} - peak "
                        f"allocated {replay.peak_allocated:,} B")
        frag_source = "CUDACachingAllocator rules (memory/reserved.py)"
    reserved = allocated + frag
    comm = _nccl_items(w)
    device = reserved + context_bytes + sum(i.bytes for i in comm)
    fraction, absolute = parse_reserve(reserve)
    reserve_bytes = absolute or int(round(device * fraction))
    items = peak.items + (
        Item("allocator overhead (reserved - allocated)", frag, frag_formula, "overhead", frag_source),
        Item("CUDA context and libraries", context_bytes, "fixed: context, cuBLAS/cuDNN handles, kernels (lazy loading)",
             "overhead", "assumed 500 MiB (bare lazy context: 274 MiB, pytorch/pytorch#86509)"
             if context_bytes == CUDA_CONTEXT_BYTES else "given"),
        *comm,
        Item("reserve", reserve_bytes, f"{fraction:.0%} of device bytes" if not absolute else "explicit size",
             "reserve", "your safety margin"),
    )
    return MemoryEstimate(
        model=spec.name, workload=w, params=spec.inventory_params, trainable_params=trainable_params(spec, w),
        phases=phases, peak_phase=peak.name, items=items, peak_allocated_bytes=allocated,
        peak_reserved_bytes=reserved, device_bytes=device, required_bytes=device + reserve_bytes,
        reserve_bytes=reserve_bytes, notes=tuple(notes) + _notes(spec, w, peak), method=method,
        top_modules=top_modules,
    )


def _nccl_items(w: Workload) -> tuple[Item, ...]:
    """NCCL's device buffers on each card when several cards communicate (outside PyTorch's allocator)."""
    if w.gpus <= 1:
        return ()
    nbytes = NCCL_CHANNELS * NCCL_PEERS_PER_CHANNEL * NCCL_BUFFSIZE + NCCL_COMM_EXTRA
    return (Item("NCCL communication buffers", nbytes,
                 f"{NCCL_CHANNELS} channels (assumed) x {NCCL_PEERS_PER_CHANNEL} peers x NCCL_BUFFSIZE "
                 f"{NCCL_BUFFSIZE // 2**20} MiB + {NCCL_COMM_EXTRA // 2**20} MiB of the communicator's own (assumed)",
                 "overhead", "NCCL user guide: NCCL_BUFFSIZE default 4 MiB"),)


def _comm_buckets(spec: ModelSpec, w: Workload, Pt: int, grad_bytes: int) -> list[Item]:
    """Per-card buffers of multi-card training: DDP's gradient buckets, DeepSpeed ZeRO's reduce/all-gather buckets."""
    if w.gpus <= 1 or not Pt:
        return []
    if w.shard == "none":
        if w.grad_as_bucket_view:
            return []
        return [Item("DDP gradient buckets", DDP_BUCKET_COPIES * grad_bytes,
                     "a flat copy of every gradient for the all-reduce (gradient_as_bucket_view=False, DDP's default; "
                     "--grad-as-bucket-view makes the gradients views into it)", "gradients",
                     "PyTorch DDP docs: gradient_as_bucket_view")]
    if w.shard not in ("zero1", "zero2", "zero3"):
        return []
    g = 2 if w.mixed_precision or w.dtype in ("bf16", "fp16") else ELEMENT_BYTES[w.dtype]
    items = [Item("ZeRO reduce bucket", int(min(ZERO_REDUCE_BUCKET, Pt) * g),
                  f"reduce_bucket_size min(5e8, trainable) elements x {g:g} B", "gradients",
                  "DeepSpeed config default reduce_bucket_size 5e8")]
    if w.shard == "zero3":
        items.append(Item("ZeRO-3 prefetch bucket", int(min(ZERO3_PREFETCH_BUCKET, Pt) * g),
                          f"stage3_prefetch_bucket_size min(5e7, trainable) elements x {g:g} B", "temporaries",
                          "DeepSpeed config default stage3_prefetch_bucket_size 5e7"))
    else:
        items.append(Item("ZeRO all-gather bucket", int(min(ZERO_ALLGATHER_BUCKET, Pt) * g),
                          f"allgather_bucket_size min(5e8, trainable) elements x {g:g} B", "temporaries",
                          "DeepSpeed config default allgather_bucket_size 5e8"))
    return items


def _div(n: int | float, parts: int) -> int:
    return int(-(-int(n) // parts))


def _weights_items(spec: ModelSpec, w: Workload) -> list[Item]:
    """Base weights on one card: quantized part, its metadata, what stays 16-bit; sharded when asked."""
    wb = weight_bytes(spec, w)
    n = w.gpus if w.shard in ("zero3", "fsdp", "tp") else 1
    split = f" / {n} cards ({w.shard})" if n > 1 else ""
    items = []
    if w.dtype in QUANTIZED:
        items.append(Item(f"weights, {w.dtype} linear layers", _div(wb.quantized, n),
                          f"{format_note(w.dtype, w.group_size, w.double_quant)}: data{split}", "weights", "format layout"))
        items.append(Item("quantization scales/zeros", _div(wb.quant_overhead, n),
                          f"metadata of {format_note(w.dtype, w.group_size, w.double_quant)}{split}", "weights", "format layout"))
        kept = ", ".join(wb.dense_names[:6]) + ("..." if len(wb.dense_names) > 6 else "")
        items.append(Item("weights kept 16-bit", _div(wb.dense, n),
                          f"embeddings, LM head, norms, biases, routers in bf16 ({kept}){split}", "weights",
                          "not converted by the quantizer"))
    else:
        amp = w.mixed_precision and w.base_trainable and w.shard not in ("zero1", "zero2", "zero3")
        dt = "fp32" if amp else w.dtype
        label = "weights (fp32, AMP master)" if amp else "weights"
        items.append(Item(label, _div(wb.total, n), f"params x {ELEMENT_BYTES[dt]:g} B ({dt}) = "
                          f"{spec.inventory_params:,} x {ELEMENT_BYTES[dt]:g}{split}", "weights", "config inventory"))
    for what, nbytes in spec.buffers:  # registered buffers the model keeps beside its parameters (not sharded)
        items.append(Item("buffers", nbytes, what, "weights", "transformers module buffers"))
    return items


def _training_phases(spec: ModelSpec, w: Workload) -> tuple[Phase, ...]:
    P = spec.inventory_params
    Pt = trainable_params(spec, w)
    s = state_bytes_per_element(w)
    N = w.gpus
    zero = w.shard in ("zero1", "zero2", "zero3")
    weights = _weights_items(spec, w)
    extra: list[Item] = []  # persistent items beside the weights
    fwd_only: list[Item] = []  # alive in forward and backward
    if w.adapters:
        extra.append(Item("LoRA adapter weights (fp32)", ADAPTER_BYTES * Pt,
                          f"r x (in + out) per target x {ADAPTER_BYTES} B = {Pt:,} x {ADAPTER_BYTES} (rank {w.lora_rank}, "
                          f"targets {','.join(w.lora_targets)})", "weights", "peft"))
    if w.mixed_precision and w.base_trainable:
        if zero:
            div = N if w.gpus > 1 else 1
            extra.append(Item("fp32 master weights", _div(4 * Pt, div),
                              f"4 B x trainable params{f' / {N} cards' if div > 1 else ''} (ZeRO keeps them with the "
                              "optimizer)", "optimizer", "ZeRO paper, sec. 3"))
        else:
            unit = _largest_layer_params(spec)
            copies = 2 * (unit * 2 if w.shard == "fsdp" and N > 1 else P)
            fwd_only.append(Item("16-bit working copies (autocast)", copies,
                                 "2 B x params cast for matmuls, kept for backward" if w.shard != "fsdp" or N == 1
                                 else "2 B x params of the gathered unit and the prefetched one", "weights",
                                 "torch.autocast weight cache"))
    if w.shard in ("zero3", "fsdp") and N > 1:
        unit = _largest_layer_params(spec)
        root = sum(g.params for g in spec.groups if not g.in_blocks)
        fwd_only.append(Item("all-gathered parameters", (2 * unit + root) * ELEMENT_BYTES[w.compute_dtype],
                             "(2 x one block, current + prefetched, + the root unit: embeddings, head, final norm, "
                             "kept gathered between forward and backward) x compute bytes (MixedPrecisionPolicy with 16-bit "
                             "params under --mixed-precision)", "temporaries",
                             "FSDP2 fully_shard per block + root"))
    grad_div = N if w.shard in ("zero2", "zero3", "fsdp") else 1
    grad_s = 2 if zero and w.mixed_precision else s
    grads = Item("gradients", _div(grad_s * Pt, grad_div),
                 f"trainable params x {grad_s:g} B = {Pt:,} x {grad_s:g}" + (f" / {N} cards" if grad_div > 1 else ""),
                 "gradients", "one gradient per trainable parameter")
    opt_div = N if w.shard in ("zero1", "zero2", "zero3", "fsdp") else 1
    states_term = optimizer_bytes(spec, w, Pt)
    optimizer = Item("optimizer states", _div(states_term.bytes, opt_div),
                     states_term.formula + (f" / {N} cards" if opt_div > 1 else ""), "optimizer", w.optimizer)
    saved = training_activations(spec, w)
    activations = Item("activations", saved.bytes, saved.formula, "activations", "saved tensors, per layer")
    lg, lg_formula = logits_bytes(spec, w)
    c = ELEMENT_BYTES[w.compute_dtype]
    V, tokens = spec.vocab_size, w.batch * w.seq_len
    # ForCausalLMLoss upcasts to fp32 before the loss; an MLM head's loss and T5's CrossEntropyLoss do not
    causal = not spec.encoder and spec.encdec is None
    softcap = SOFTCAP_SAVED_COPIES if spec.model_type == "gemma2" else 0  # Gemma 2 soft-caps its final logits
    saved_per = c * (1 + softcap) + LOG_SOFTMAX_OUTPUT_BYTES
    logits_saved = int(tokens * V * saved_per) if causal else lg
    saved_formula = (f"b x s x V x ({c:g} logits{f' + {c:g} soft-cap tanh output' if softcap else ''} + "
                     f"{LOG_SOFTMAX_OUTPUT_BYTES} fp32 log_softmax output) = {tokens} x {V} x {saved_per:g}"
                     if causal else lg_formula)
    logits = Item("logits and loss", lg, lg_formula, "logits", "transformers ForCausalLMLoss")
    states = weights + extra
    persist = [x for x in (optimizer,) if x.bytes] + _comm_buckets(spec, w, Pt, grads.bytes)
    load = Phase("load", tuple(_load_items(spec, w) + states), "weights on the card")
    if Pt == 0:  # a loss evaluated without autograd: one layer's temporaries, then the logits and the loss
        tmp = inference_temporaries(spec, w, tokens)
        transient = (Item("logits and loss (no grad)", lg, lg_formula, "logits", "transformers ForCausalLMLoss")
                     if lg > tmp.bytes else Item("forward temporaries (no grad)", tmp.bytes, tmp.formula, "temporaries"))
        forward = Phase("forward", tuple(states + [transient]), "no trainable parameters: a forward without autograd")
        return load, forward
    # zero_grad() without set_to_none leaves the gradients allocated (zeroed) through the next forward and backward
    kept = [Item("gradients (kept by zero_grad)", grads.bytes, grads.formula + "; zeroed, not freed, between steps",
                 "gradients", "zero_grad(set_to_none=False): PyTorch < 2.0's default (pytorch/pytorch#92731)")] \
        if w.grads_kept else []
    forward = Phase("forward", tuple(states + persist + kept + fwd_only + [activations, logits]),
                    "end of forward, during the loss (optimizer states exist from step 2)")
    bwd_start = list(states + persist + kept + fwd_only + [activations])
    if lg:
        grad_per = LOGITS_GRAD_BYTES if causal else 2 * c
        bwd_start += [Item("logits (saved for backward)", logits_saved, saved_formula,
                           "logits", "transformers ForCausalLMLoss"),
                      Item("logits gradients", int(tokens * V * grad_per),
                           f"grads into and out of log_softmax: b x s x V x {grad_per:g} B "
                           f"({'fp32, causal LM' if causal else '2 x compute bytes, MLM'})", "logits", "autograd")]
    bwd_transient = saved.one_layer if w.grad_checkpointing else 0
    bwd_end = list(states + persist + fwd_only + [grads])
    layer_grads = _layer_grad_temporaries(spec, w)
    bwd_end.append(Item("backward temporaries", layer_grads + bwd_transient,
                        "activation gradients of one layer" + (" + its recomputed activations" if bwd_transient else ""),
                        "temporaries", "autograd"))
    start_b, end_b = sum(i.bytes for i in bwd_start), sum(i.bytes for i in bwd_end)
    backward = (Phase("backward", tuple(bwd_start), "start of backward: all activations, logits gradients")
                if start_b >= end_b else
                Phase("backward", tuple(bwd_end), "end of backward: all gradients, activations freed"))
    step_tmp = _step_temporaries(spec, w, Pt)
    step = Phase("optimizer step", tuple(states + [grads] + persist + (
        [Item("optimizer temporaries", _div(step_tmp.bytes, opt_div), step_tmp.formula, "temporaries", "torch.optim")]
        if step_tmp.bytes else [])), "inside optimizer.step(), gradients still alive")
    return load, forward, backward, step


def _inference_phases(spec: ModelSpec, w: Workload) -> tuple[Phase, ...]:
    tp = w.gpus if w.shard == "tp" else 1
    check_tensor_parallel(spec, tp)
    weights = _weights_items(spec, w)
    if spec.encoder:  # one bidirectional forward over the batch: no cache, nothing generated
        tmp = inference_temporaries(spec, w, w.batch * w.seq_len)
        lg, lg_formula = logits_bytes(spec, w)
        transient = (Item("scores over the vocabulary", lg, lg_formula, "logits", "transformers MLM head")
                     if lg > tmp.bytes else Item("forward temporaries", _div(tmp.bytes, tp), tmp.formula, "temporaries"))
        return (Phase("load", tuple(_load_items(spec, w) + weights), "weights on the card"),
                Phase("forward", tuple(weights + [transient]), "an encoder's forward over the batch (no KV cache)"))
    kv = estimate_kv(spec, seq_len=w.seq_len, batch=w.batch, dtype=w.cache_dtype, tp=tp)
    kv_item = Item("KV cache", kv.bytes, f"{kv.bytes_per_token:,.0f} B/token x {w.seq_len} tokens x {w.batch} "
                   f"sequences ({kv.kind}, {kv.dtype})" + (" with window caps" if kv.layers_sliding else "")
                   + (f": decoder self-attention, + cross-attention K/V of the encoder output {kv.cross_attention_bytes:,}"
                      f" B (the same rate x {w.seq_len} encoder tokens x {w.batch}, computed once per sequence)"
                      if kv.cross_attention_bytes else ""), "kv", "campaign kv")
    lg, lg_formula = logits_bytes(spec, w)
    logits = Item("logits", lg, lg_formula, "logits", "transformers generate")
    pre_tmp = inference_temporaries(spec, w, min(w.batch * w.seq_len, w.prefill_chunk))
    dec_tmp = inference_temporaries(spec, w, w.batch, decode=True)
    split = f" / {tp} cards" if tp > 1 else ""
    load = Phase("load", tuple(_load_items(spec, w) + weights), "weights on the card")
    prefill = Phase("prefill", tuple(weights + [kv_item, Item("prefill temporaries", _div(pre_tmp.bytes, tp),
                                                              pre_tmp.formula + split, "temporaries"), logits]),
                    f"prefill in chunks of {min(w.batch * w.seq_len, w.prefill_chunk):,} tokens, cache filled")
    growth = []
    if w.kv_cache == "dynamic":  # DynamicCache.update: torch.cat makes the longer layer tensor while the old is alive
        # only self-attention grows; an encoder-decoder's cross-attention K/V is made once (num_layers: the decoder's)
        one = (kv.bytes - kv.cross_attention_bytes) // (2 * max(1, spec.num_layers))
        growth = [Item("cache copy in torch.cat (one layer's K or V)", one,
                       f"self-attention KV cache / (2 x {spec.num_layers} layers): the old tensor alive while the "
                       "longer one is made",
                       "kv", "transformers DynamicCache.update")]
    decode = Phase("decode", tuple(weights + [kv_item, *growth, Item("decode temporaries", _div(dec_tmp.bytes, tp),
                                                                     dec_tmp.formula + split, "temporaries"), logits]),
                   "last token, cache full" + (" (grown by torch.cat each step)" if growth else ""))
    return load, prefill, decode


def _load_items(spec: ModelSpec, w: Workload) -> list[Item]:
    """Quantizing on load brings each tensor in 16-bit before converting it."""
    if w.dtype in QUANTIZED:
        return [Item("load temporaries", weight_bytes(spec, w).largest_quantized_16bit,
                     "largest quantized tensor, in 16-bit before conversion", "temporaries", "quantize on load")]
    return []


def _largest_layer_params(spec: ModelSpec) -> int:
    """Parameters in one transformer block (the FSDP wrapping unit)."""
    block = sum(g.params for g in spec.groups if g.in_blocks)
    return block // max(1, spec.num_layers)


def _layer_grad_temporaries(spec: ModelSpec, w: Workload) -> int:
    """Activation gradients alive while one layer's backward runs: the MLP's widest tensors."""
    c = ELEMENT_BYTES[w.compute_dtype]
    inter = spec.intermediate_size
    if spec.moe is not None:
        inter = spec.moe.expert_intermediate_size * spec.moe.experts_per_token
    return int(w.batch * w.seq_len * c * (2 * inter + 2 * spec.hidden_size))


def _step_temporaries(spec: ModelSpec, w: Workload, Pt: int) -> Term:
    """What optimizer.step() allocates beside the states (a Term of 0 bytes when nothing)."""
    s = state_bytes_per_element(w)
    if w.optimizer == "adamw":
        if w.optimizer_impl == "foreach":
            return Term(int(s * Pt), f"foreach AdamW (the CUDA default since torch 2.0): one state-sized temporary, "
                                     f"sqrt(exp_avg_sq) = {s:g} B x {Pt:,}")
        largest = _largest_trainable(spec, w)
        if w.optimizer_impl == "loop":
            return Term(int(s * largest), f"for-loop AdamW: one temporary the size of the largest tensor ({largest:,})")
        return Term(0, "")

    if w.optimizer == "adafactor":
        # torch.optim.Adafactor: var_estimate = row_var @ col_var per tensor (constants.ADAFACTOR_STEP_COPIES)
        if w.optimizer_impl == "foreach":
            return Term(int(ADAFACTOR_STEP_COPIES * s * Pt), f"foreach Adafactor (the CUDA default): one var_estimate "
                                                             f"per tensor, all at once = {s:g} B x {Pt:,}")
        largest = _largest_trainable(spec, w)
        return Term(int(ADAFACTOR_STEP_COPIES * s * largest), f"for-loop Adafactor: one var_estimate the size of the "
                                                              f"largest tensor ({largest:,}) x {s:g} B")
    return Term(0, "")


def _largest_trainable(spec: ModelSpec, w: Workload) -> int:
    if w.method == "full":
        return max(g.numel for g in spec.groups)
    return max((w.lora_rank * max(g.shape) for g in spec.groups if g.role == "linear"), default=0)


def _notes(spec: ModelSpec, w: Workload, peak: Phase) -> tuple[str, ...]:
    notes = list(w.notes) + list(spec.notes)
    if w.seq_len > spec.max_position:
        notes.append(f"{w.seq_len:,} tokens is past the model's max_position_embeddings ({spec.max_position:,})")
    dom = max(peak.items, key=lambda i: i.bytes)
    notes.append(f"largest term at the peak ({peak.name}): {dom.name}")
    if w.dtype in QUANTIZED:
        notes.append("quantized weights: embeddings and the LM head stay 16-bit; for small models they dominate")
    if w.training and spec.vocab_size >= 100_000 and w.method != "frozen":
        notes.append(f"vocabulary of {spec.vocab_size:,}: the fp32 loss over logits is large; chunked or fused "
                     "cross-entropy (Liger, torchtune) removes most of it")
    if w.training and not w.grad_checkpointing and w.method != "frozen":
        notes.append("--grad-checkpointing would keep one tensor per layer instead of all activations "
                     "(about a third more compute: each layer's forward runs twice)")
    if w.training and w.gpus > 1 and w.shard == "none":
        notes.append(f"DDP over {w.gpus} cards: each holds a full replica"
                     + ("" if w.grad_as_bucket_view else " and a gradient-sized bucket copy (--grad-as-bucket-view "
                        "removes it)") + "; ZeRO/FSDP shards the state")
    if w.attention == "eager":
        notes.append("eager attention materializes b x heads x s x s scores; sdpa (flash) does not")
    if w.expandable_segments:
        notes.append("allocator: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): segments "
                     "grow in pages, little fragmentation")
    else:
        notes.append("allocator: PyTorch's default (no expandable segments); --expandable-segments models "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    notes.append("GiB = 2**30 bytes, GB = 10**9: an '80 GB' card holds about 80 GiB of chips, and the driver reports "
                 "a little less (H100 80GB: 79.65 GiB); campaign cards lists what each one reports")
    return tuple(notes)
