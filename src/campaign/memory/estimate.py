"""The analytic memory estimate: the step's phases, then the headline figures every estimate shares (the
allocator's overhead, the CUDA context, NCCL's buffers and the reserve), so that the items sum to them.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..models.resolve import model_spec
from ..models.spec import ModelSpec
from . import reserved
from .breakdown import Item, MemoryEstimate, Phase
from .constants import CUDA_CONTEXT_BYTES, NCCL_BUFFSIZE, NCCL_CHANNELS, NCCL_COMM_EXTRA, NCCL_PEERS_PER_CHANNEL
from .dtypes import QUANTIZED
from .parsing import parse_reserve
from .phases import inference_phases, training_phases
from .states import regex_note, trainable_params
from .workload import Workload

_TRANSIENT = ("activations", "logits", "temporaries", "kv")


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
    spec.formulas_hold()
    if w.training and w.loss != "full" and (spec.encoder or spec.encdec is not None):
        kind = "an encoder" if spec.encoder else "an encoder-decoder"
        raise InputError(f"--loss {w.loss} is modelled for a decoder's causal-LM loss; {spec.name} is {kind} "
                         f"({spec.model_type}), whose loss is counted as transformers computes it: give --loss full "
                         "(or drop --loss)")
    phases = training_phases(spec, w) if w.training else inference_phases(spec, w)
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


GENERATION_REPLAY = ("the generation's tensors (weights, the rollouts' cache as it grows, temporaries, logits; its "
                     "overhead the larger of the step's two)")


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
    released_bytes, allocator_model, model_note = 0, "", tuple[str, ...]()
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
        limit = None if card_bytes is None else allocator_limit(
            card_bytes, reserve=reserve, context_bytes=context_bytes, other_bytes=sum(i.bytes for i in _nccl_items(w)))
        replay = (reserved.training_overhead if w.training else reserved.inference_overhead)(
            spec, w, phases, expandable=w.expandable_segments, limit=limit)
        frag, released_bytes, allocator_model = replay.bytes, replay.released, replay.model
        what = ""
        if replay.model == "python":  # memory/_allocator.c not built at install, or sizes past its 2^56 B
            model_note = ("the allocator replay ran on the Python model, not the compiled one: same results, slower",)
        if limit is not None and replay.peak_reserved <= limit and allocated <= limit:
            # the allocator stayed within the card by releasing cached segments: so does the figure (the replay's
            # own allocated figure may differ from the estimate's by a few blocks)
            frag = min(frag, limit - allocated)
        if w.training and w.rollouts:  # GRPO's generation grows its cache in segments of its own (dynamic cache):
            # the larger of the two replays' overheads, on the step's peak
            from .phases import generation_workload, inference_phases

            gen = generation_workload(w)
            generated = reserved.inference_overhead(spec, gen, inference_phases(spec, gen),
                                                    expandable=w.expandable_segments)
            if generated.bytes > frag:
                frag, replay, what = generated.bytes, generated, GENERATION_REPLAY  # the formula's figures
        released = "" if not replay.released else (
            f", its cached free segments released before it would pass the {limit:,} B the card leaves it"
            if limit is not None else  # a dynamic cache without a card: released where it would pass its peak
            ", its cached free segments released before it would grow past the peak allocated (the cache's "
            "shorter copies)")
        tensors = what or (f"the step's tensors (weights, states, per-layer activations, logits, temporaries"
                           f"{', the cache as it grows' if w.kv_cache == 'dynamic' else ''})")
        frag_formula = (f"{tensors} replayed through the caching allocator's rules{pages}{released}: peak reserved "
                        f"{replay.peak_reserved:,} - peak allocated {replay.peak_allocated:,} B")
        frag_source = "CUDACachingAllocator rules (memory/reserved.py)"
    reserved_bytes = allocated + frag
    comm = _nccl_items(w)
    device = reserved_bytes + context_bytes + sum(i.bytes for i in comm)
    fraction, absolute = parse_reserve(reserve)
    reserve_bytes = absolute or int(round(device * fraction))
    items = peak.items + (
        Item("allocator overhead (reserved - allocated)", frag, frag_formula, "overhead", frag_source),
        Item("CUDA context and libraries", context_bytes,
             "fixed: context, cuBLAS/cuDNN handles, kernels (lazy loading)", "overhead",
             "assumed 500 MiB (bare lazy context: 274 MiB, pytorch/pytorch#86509)"
             if context_bytes == CUDA_CONTEXT_BYTES else "given"),
        *comm,
        Item("reserve", reserve_bytes, f"{fraction:.0%} of device bytes" if not absolute else "explicit size",
             "reserve", "your safety margin"),
    )
    return MemoryEstimate(
        model=spec.name, workload=w, params=spec.inventory_params, trainable_params=trainable_params(spec, w),
        phases=phases, peak_phase=peak.name, items=items, peak_allocated_bytes=allocated,
        peak_reserved_bytes=reserved_bytes, device_bytes=device, required_bytes=device + reserve_bytes,
        reserve_bytes=reserve_bytes, notes=tuple(notes) + _notes(spec, w, peak) + model_note, method=method,
        top_modules=top_modules, released_bytes=released_bytes, allocator_model=allocator_model,
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


def _notes(spec: ModelSpec, w: Workload, peak: Phase) -> tuple[str, ...]:
    notes = list(w.notes) + list(spec.notes)
    if w.seq_len > spec.max_position:
        notes.append(f"{w.seq_len:,} tokens is past the model's max_position_embeddings ({spec.max_position:,})")
    dom = max(peak.items, key=lambda i: i.bytes)
    notes.append(f"largest term at the peak ({peak.name}): {dom.name}")
    if w.dtype in QUANTIZED:
        kept = "fp32 (the k-bit preparation)" if w.kbit_fp32 else "16-bit"
        notes.append(f"quantized weights: embeddings and the LM head stay {kept}; for small models they dominate")
    if w.training and spec.vocab_size >= 100_000 and w.method != "frozen" and w.loss == "full":
        notes.append(f"vocabulary of {spec.vocab_size:,}: the fp32 loss over logits is large; chunked or fused "
                     "cross-entropy (Liger, torchtune) removes most of it: --loss chunked or --loss fused")
    regex = regex_note(spec, w)
    if regex:
        notes.append(regex)
    if w.lora_kernels:
        from .activations import lora_kernels_skipped

        skipped = lora_kernels_skipped(spec, w)
        if skipped:
            notes.append(f"--lora-kernels {','.join(skipped)}: not applied, as axolotl skips it: "
                         + "; ".join(dict.fromkeys(skipped.values())))
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
    notes.append("GiB = 2**30 bytes, GB = 10**9: an '80 GB' card holds about 80 GiB of chips, and CUDA gives torch "
                 "a little less (H100 80GB: 79.20 GiB); campaign cards lists what each one reports")
    return tuple(notes)
