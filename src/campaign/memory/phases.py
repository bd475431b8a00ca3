"""The phases of a step and the tensors alive at each one's peak: the formulas of the analytic estimate.

Training: load, forward (activations and logits), backward (the larger of its start and its end), optimizer step;
inference: load, prefill and decode with the KV cache, or one forward for an encoder. Each item names its formula
and its source; memory/estimate.py adds the allocator, the context and the reserve.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..models.spec import ModelSpec
from .activations import (
    checkpoint_kept,
    eager_backward_scores,
    inference_temporaries,
    logits_bytes,
    training_activations,
)
from .breakdown import Item, Phase
from .constants import (
    ADAFACTOR_STEP_COPIES,
    DDP_BUCKET_COPIES,
    FP32_BYTES,
    LOG_SOFTMAX_OUTPUT_BYTES,
    LOGITS_GRAD_BYTES,
    SOFTCAP_SAVED_COPIES,
    TORCHAO_STEP_BYTES,
)
from .deepspeed import grad_bytes, head_params, setup_phase, zero3_step_numel, zero_buffers
from .dtypes import ELEMENT_BYTES, QUANTIZED, format_note
from .kv import estimate_kv, validate_tensor_parallel
from .loss import backward_loss, forward_loss, logit_positions
from .offload import FSDP, PARTITION, fsdp_offloaded, offloaded, params_offloaded, zero3_card_params
from .states import (
    adapter_dtype,
    deepspeed_casts,
    is_router,
    optimizer_bytes,
    state_bytes_per_element,
    trainable_params,
    weight_bytes,
)
from .terms import Term
from .workload import KeptBySpec, Workload, size_free_key


def _comm_buckets(spec: ModelSpec, w: Workload, Pt: int, grad_bytes: int) -> list[Item]:
    """Per-card buffers of multi-card DDP training: its gradient buckets (DeepSpeed's own: memory/deepspeed.py)."""
    if w.gpus <= 1 or not Pt:
        return []
    if w.shard == "none":
        if w.grad_as_bucket_view:
            return []
        return [Item("DDP gradient buckets", DDP_BUCKET_COPIES * grad_bytes,
                     "a flat copy of every gradient for the all-reduce (gradient_as_bucket_view=False, DDP's default; "
                     "--grad-as-bucket-view makes the gradients views into it)", "gradients",
                     "PyTorch DDP docs: gradient_as_bucket_view")]
    return []


def _div(n: int | float, parts: int) -> int:
    return int(-(-int(n) // parts))


def _weights_items(spec: ModelSpec, w: Workload) -> list[Item]:
    """Base weights on one card: quantized part, its metadata, what stays 16-bit; sharded when asked."""
    wb = weight_bytes(spec, w)
    n = w.gpus if w.shard in ("zero3", "fsdp", "tp") else 1
    split = f" / {n} cards ({w.shard})" if n > 1 else ""
    items = []
    if params_offloaded(w):  # the parameters in host RAM (memory/offload.py): gathered to the card as they are used
        persistent = zero3_card_params(spec, w) if w.shard == "zero3" else 0
        if persistent:
            c = grad_bytes(w)
            items.append(Item("weights (persistent parameters' partition)", _div(persistent * c, n),
                              f"{persistent:,} elements in tensors of at most stage3_param_persistence_threshold x "
                              f"{c:g} B{split}; the other partitions in host RAM (--offload-params cpu)", "weights",
                              f"{PARTITION} _partition_param: a ds_persist parameter's partition made on the card"))
        return items + [Item("buffers", nbytes, what, "weights", "transformers module buffers")
                        for what, nbytes in spec.buffers]
    if w.dtype in QUANTIZED:
        items.append(Item(f"weights, {w.dtype} linear layers", _div(wb.quantized, n),
                          f"{format_note(w.dtype, w.group_size, w.double_quant)}: data{split}", "weights",
                          "format layout"))
        items.append(Item("quantization scales/zeros", _div(wb.quant_overhead, n),
                          f"metadata of {format_note(w.dtype, w.group_size, w.double_quant)}{split}", "weights",
                          "format layout"))
        kept = ", ".join(wb.dense_names[:6]) + ("..." if len(wb.dense_names) > 6 else "")
        if w.kbit_fp32:
            items.append(Item("weights kept fp32 (k-bit preparation)", _div(wb.dense, n),
                              f"embeddings, LM head, norms, biases, routers cast to fp32 ({kept}){split}", "weights",
                              "peft prepare_model_for_kbit_training: every fp16/bf16 parameter but Params4bit to fp32"))
        else:
            items.append(Item("weights kept 16-bit", _div(wb.dense, n),
                              f"embeddings, LM head, norms, biases, routers in bf16 ({kept}){split}", "weights",
                              "not converted by the quantizer"))
    else:
        amp = w.mixed_precision and w.base_trainable and w.shard not in ("zero1", "zero2", "zero3")
        dt = "fp32" if amp else w.dtype
        cast = deepspeed_casts(w) and dt == "fp32"  # the DeepSpeed engine casts an fp32 load to its 16-bit dtype
        dt = "bf16" if cast else dt
        label = "weights (fp32, AMP master)" if amp else "weights"
        items.append(Item(label, _div(wb.total, n), f"params x {ELEMENT_BYTES[dt]:g} B ("
                          f"{'16-bit: ZeRO casts the fp32 load' if cast else dt}) = "
                          f"{spec.inventory_params:,} x {ELEMENT_BYTES[dt]:g}{split}", "weights", "config inventory"))
    for what, nbytes in spec.buffers:  # registered buffers the model keeps beside its parameters (not sharded)
        items.append(Item("buffers", nbytes, what, "weights", "transformers module buffers"))
    return items


@dataclass(frozen=True)
class _StepItems:
    """What training_phases reads that neither the batch nor the length changes: the items alive through the step
    (weights, adapters, master weights, gradients, optimizer states, DeepSpeed's buffers), the load, optimizer-step
    and setup phases, and the logits' per-token rates. Worked out once per model and workload but its batch and
    length (KEPT_STEP_ITEMS), not once per probe of a card solve."""

    Pt: int
    states: list[Item]
    persist: list[Item]
    kept: list[Item]
    fwd_only: list[Item]
    ds: Any  # deepspeed.zero_buffers' buffers
    grads: Item
    grad_s: float
    grad_div: int
    end_grads: list[Item]
    load: Phase
    step: Phase
    setup: Phase | None
    head: int  # the head's parameters whose gradients a checkpointed backward holds as it recomputes (_recompute_items)
    # FSDP units of their own (own_units): the output gathered for its backward with its gradient (start of backward),
    # the token embedding for its own (end of backward)
    head_unit: tuple[Item, ...] = ()
    embed_unit: tuple[Item, ...] = ()
    # fwd_only as the turn from forward to backward holds it (the loss, the start of backward): under FSDP with more
    # than one card the blocks are resharded by then: the root unit and one block gathered (_turn_gathered).
    # None: fwd_only
    fwd_turn: tuple[Item, ...] | None = None
    # fwd_only as the end of backward holds it, where it differs (FSDP without resharding after forward: each block
    # resharded after its backward, the root unit and the prefetched block left). None: fwd_only
    fwd_end: tuple[Item, ...] | None = None


KEPT_STEP_ITEMS = KeptBySpec(64)


def step_items(spec: ModelSpec, w: Workload) -> _StepItems:
    """The step's batch-free items (_StepItems), kept per model and workload but its batch and length."""
    found: _StepItems = KEPT_STEP_ITEMS.get(spec, size_free_key(w), lambda: _step_items(spec, w))
    return found


def training_phases(spec: ModelSpec, w: Workload) -> tuple[Phase, ...]:
    """A training step's phases (load, forward, backward, optimizer step), each with the tensors alive at its peak;
    a step with no trainable parameters is a load and a forward without autograd. ZeRO-3 over a model built without
    zero.Init has a setup phase after the load (memory/deepspeed.py setup_phase)."""
    base = step_items(spec, w)
    Pt, states, persist, kept, fwd_only, ds = base.Pt, base.states, base.persist, base.kept, base.fwd_only, base.ds
    turn = list(base.fwd_turn) if base.fwd_turn is not None else fwd_only
    grad_s, grad_div = base.grad_s, base.grad_div
    load = base.load
    saved = training_activations(spec, w)
    offload = offloaded_inputs(spec, w)
    activations = Item("activations", saved.bytes - offload.bytes, saved.formula + (
        f"; {offload.formula}" if offload.bytes else ""), "activations", "saved tensors, per layer" + (
        "; torchtune OffloadActivations" if offload.bytes else ""))
    lg, lg_formula = logits_bytes(spec, w)
    c = ELEMENT_BYTES[w.logits_dtype]
    V, tokens = spec.vocab_size, w.batch * w.seq_len
    # ForCausalLMLoss upcasts to fp32 before the loss; an MLM head's loss and T5's CrossEntropyLoss do not
    causal = not spec.encoder and spec.encdec is None
    softcap = SOFTCAP_SAVED_COPIES if spec.model_type == "gemma2" else 0  # Gemma 2 soft-caps its final logits
    # the model output holds the logits through backward (fp32 under transformers <= 4.45: logits.float() in forward)
    # when the loop keeps it in scope; the HF Trainer's compute_loss returns the loss only, and no backward saves the
    # logits (log_softmax keeps its output, the upcast and lm_head's matmul nothing of them): freed before backward
    held = (FP32_BYTES if w.hf_loss == "float-logits" else c) if w.logits_held else 0
    saved_per = held + c * softcap + LOG_SOFTMAX_OUTPUT_BYTES
    logits_saved = int(tokens * V * saved_per) if causal else lg
    kept_logits = f"{held:g} logits" if held else "logits freed (--no-logits-held)"
    saved_formula = (f"b x s x V x ({kept_logits}{f' + {c:g} soft-cap tanh output' if softcap else ''} + "
                     f"{LOG_SOFTMAX_OUTPUT_BYTES} fp32 log_softmax output) = {tokens} x {V} x {saved_per:g}"
                     if causal else lg_formula)
    logits = Item("logits and loss", lg, lg_formula, "logits", "transformers ForCausalLMLoss")
    chunked = w.loss != "full" and causal and bool(lg)
    if chunked:  # named apart from "logits and loss": the allocator replay (reserved.py) replays the whole chain
        fwd_loss = forward_loss(spec, w, c)
        logits = Item(f"{w.loss} loss over the vocabulary", fwd_loss.bytes, fwd_loss.formula, "logits",
                      LOSS_SOURCE[w.loss])
    if Pt == 0:  # a loss evaluated without autograd: one layer's temporaries, then the logits and the loss
        tmp = inference_temporaries(spec, w, tokens)
        transient = (Item("logits and loss (no grad)", lg, lg_formula, "logits", "transformers ForCausalLMLoss")
                     if lg > tmp.bytes
                     else Item("forward temporaries (no grad)", tmp.bytes, tmp.formula, "temporaries"))
        forward = Phase("forward", tuple(states + [transient]), "no trainable parameters: a forward without autograd")
        return load, forward
    # GRPO (--completion-tokens) takes the reference's log-probs with the generation, not in the loss: no reference
    # forward beside the trained model's (its logits, c x the completions' positions, below the forward's 2 c)
    reference = _reference_forward(spec, w, tokens, V, c) if w.reference != "none" and causal and lg and \
        w.completion_tokens is None else []
    forward = Phase("forward", tuple(states + persist + kept + turn + list(ds.gathered_turn)
                                     + [activations, logits] + reference),
                    "end of forward, during the loss (optimizer states exist from step 2)")
    bwd_start = list(states + persist + kept + turn + list(ds.gathered_turn) + list(ds.backward) + [activations]
                     + list(base.head_unit))
    if chunked:
        kept_term, grad_term = backward_loss(spec, w, c, held)
        bwd_start += [Item(f"{w.loss} loss: saved for backward", kept_term.bytes, kept_term.formula, "logits",
                           LOSS_SOURCE[w.loss])]
        if grad_term.bytes:  # CCE makes no logits: its gradients are the hidden states' and the head's
            what = "hidden and head gradients" if w.loss == "cce" else "logits gradients"
            bwd_start.append(Item(f"{w.loss} loss: {what}", grad_term.bytes, grad_term.formula, "logits",
                                  LOSS_SOURCE[w.loss]))
    elif lg:
        grad_per = LOGITS_GRAD_BYTES if causal else 2 * c
        bwd_start += [Item("logits (saved for backward)", logits_saved, saved_formula,
                           "logits", "transformers ForCausalLMLoss"),
                      Item("logits gradients", int(tokens * V * grad_per),
                           f"grads into and out of log_softmax: b x s x V x {grad_per:g} B "
                           f"({'fp32, causal LM' if causal else '2 x compute bytes, MLM'})", "logits", "autograd")]
    bwd_transient = saved.one_layer if w.grad_checkpointing else 0
    end_only = list(base.fwd_end) if base.fwd_end is not None else fwd_only
    bwd_end = list(states + persist + end_only + list(ds.gathered_end) + list(ds.backward) + base.end_grads
                   + list(base.embed_unit))
    layer_grads = _layer_grad_temporaries(spec, w)
    bwd_end.append(Item("backward temporaries", layer_grads + bwd_transient,
                        "activation gradients of one layer"
                        + (" + its recomputed activations" if bwd_transient else ""),
                        "temporaries", "autograd"))
    moments = [Phase("backward", tuple(bwd_start), "start of backward: all activations, logits gradients"),
               Phase("backward", tuple(bwd_end), "end of backward: all gradients, activations freed")]
    scores = eager_backward_scores(spec, w)
    score_grads = [Item("eager attention backward (score gradients)", scores.bytes, scores.formula, "temporaries",
                        "transformers eager_attention_forward; autograd softmax backward")] if scores.bytes else []
    if w.grad_checkpointing and spec.encdec is None:
        moments.append(Phase("backward", tuple(
            states + persist + kept + fwd_only + list(ds.gathered_turn) + list(ds.backward)
            + _recompute_items(spec, w, saved.one_layer, layer_grads, grad_s / grad_div, base.head) + score_grads),
            "the last layer recomputed: every layer's checkpointed input, that layer's activations and activation "
            "gradients"))
    elif score_grads:
        moments.append(Phase("backward", tuple(
            states + persist + kept + fwd_only + list(ds.gathered_turn) + list(ds.backward) + [activations]
            + score_grads), "the last layer's eager attention backward: every layer's activations, its score "
            "gradients"))
    backward = max(moments, key=lambda p: p.bytes)  # the first of equals: start, end, recompute
    setup = base.setup
    before = (load, setup) if setup else (load,)
    # generation runs at an optimizer step's start, every steps_per_generation micro-batches (the accumulation's by
    # default): no summed gradients then; ZeRO-3's flat partition and gradients zero_grad keeps stay
    # generation runs the model's forward: under FSDP its blocks gathered as in a training forward
    gathered = [i for i in fwd_only if i.name == "all-gathered parameters"]
    generation = _generation(spec, w, states + persist + [k for k in kept if "summed" not in k.name] + gathered)
    return before + generation + (forward, backward, base.step)


GENERATE = "TRL GRPOTrainer._generate_and_score_completions: unwrapped_model.generate under torch.no_grad"


def generation_workload(w: Workload) -> Workload:
    """The generation a GRPO step runs before it trains (--rollouts): HF generate over the rollouts, each prompt
    (--seq-len less --completion-tokens) prefilled at once and the completion decoded into a dynamic cache, in the
    trained model's compute dtype (fp32 when autocast runs over fp32 weights: generate runs outside autocast)."""
    from dataclasses import replace

    completion = min(w.completion_tokens or 1, w.seq_len - 1)
    amp = w.mixed_precision and w.base_trainable and w.shard not in ("zero1", "zero2", "zero3", "fsdp")
    return replace(w, mode="infer", method="frozen", batch=w.rollouts, kv_cache="dynamic", new_tokens=completion,
                   prefill_chunk=max(1, w.rollouts * (w.seq_len - completion)), dtype="fp32" if amp else w.dtype,
                   mixed_precision=False if amp else w.mixed_precision, reference="none", loss="full",
                   liger_kernels="", grad_checkpointing=False, checkpoint_every=1, checkpoint_ops=False,
                   activation_offloading=False, optimizer="none", rollouts=0, completion_tokens=None,
                   shard="none", gpus=1)


def _generation(spec: ModelSpec, w: Workload, held: list[Item]) -> tuple[Phase, ...]:
    """The generation phase of a GRPO step (--rollouts), at the larger of its prefill and its last decode step:
    what the training holds between steps (`held`: weights, adapters, optimizer states, the reference model; FSDP's
    gathered blocks), the
    rollouts' cache and generate's temporaries and logits (inference_phases of generation_workload), and under
    ZeRO-3 the whole model gathered (TRL's ds3_gather_for_generation, on by default)."""
    if not w.rollouts or not w.training:
        return ()
    if spec.encoder or spec.encdec is not None:
        raise InputError("--rollouts generates with a decoder-only model; this one is not: drop --rollouts")
    gen = generation_workload(w)
    _, prefill, decode = inference_phases(spec, gen)
    skip = len(_weights_items(spec, gen))  # the weights: counted once, as the training holds them
    extra: list[Item] = []
    if w.shard == "zero3" and w.gpus > 1:
        c = ELEMENT_BYTES[w.compute_dtype]
        extra.append(Item("parameters gathered for generation", int(spec.inventory_params * c),
                          f"the whole model, {spec.inventory_params:,} x {c:g} B (ds3_gather_for_generation)",
                          "temporaries", "TRL unwrap_model_for_generation: GatheredParameters(model.parameters())"))
    moments = [Phase("generation", tuple(held + extra + list(p.items[skip:])),
                     f"generating {w.rollouts} rollouts: {p.moment}") for p in (prefill, decode)]
    return (max(moments, key=lambda p: p.bytes),)


REFERENCE = ("TRL DPOTrainer: ref_model = create_model_from_path(the model's id, **model_init_kwargs), prepared by "
             "prepare_deepspeed (sharded under ZeRO-3, else stage 0: whole) or prepare_fsdp (sharded)")


def _reference_model(weights: list[Item], w: Workload) -> Item:
    """The frozen reference model a preference trainer keeps (--reference copy): the trained model's weights again,
    loaded with the same arguments, so in the same dtype and format; sharded under ZeRO-3 and FSDP as they are, whole
    under ZeRO-1/2 (TRL's prepare_deepspeed runs the reference at stage 0), as `weights` (_weights_items) counts
    them."""
    total = sum(i.bytes for i in weights)
    shown = " + ".join(f"{i.bytes:,}" for i in weights) if len(weights) > 1 else f"{total:,}"
    return Item("reference model (frozen copy)", total,
                f"the trained model's weights again, frozen: {shown} B" + (
                    " (whole on each card: TRL runs the reference at ZeRO stage 0)" if w.shard in ("zero1", "zero2")
                    and w.gpus > 1 else ""), "weights", REFERENCE)


def _reference_forward(spec: ModelSpec, w: Workload, tokens: int, V: int, c: float) -> list[Item]:
    """The reference forward, run without autograd after the trained model's log-probs (TRL's DPO _compute_loss),
    beside everything the forward holds: its logits (none with a fused loss, which runs the reference chunk by chunk
    too), and under FSDP or ZeRO-3 over several cards its blocks gathered one at a time, with the next prefetched.
    A copy or the LoRA model with its adapters disabled (TRL's use_adapter(model, None)): the same forward."""
    items = []
    if w.loss == "logsoftmax":  # torchtune's DPO: fp32 logits, their /temperature copy, log_softmax's output
        # the LoRA recipes (adapters-off) take all rows' log-probs in one call, the full one (a frozen copy) chosen's
        # and rejected's in two: half the copy and the output at a time
        per = 3 * FP32_BYTES if w.reference == "adapters-off" else 2 * FP32_BYTES
        items.append(Item("reference forward's logits (no grad)", int(tokens * V * per),
                          f"b x s x V x (4 fp32 logits + {per - 4:g} their /temperature copy and log_softmax output"
                          f"{'' if w.reference == 'adapters-off' else ', one half of the rows at a time'}) = {tokens} "
                          f"x {V} x {per:g}; made after the trained model's log-probs", "logits",
                          "torchtune rlhf.get_batch_log_probs under torch.no_grad() (lora_dpo_*.py: one call; "
                          "full_dpo_distributed.py: chosen and rejected apart)"))
    elif w.loss != "fused":
        positions = logit_positions(w)
        row = positions // w.batch
        items.append(Item("reference forward's logits (no grad)", int((positions + row) * V * c),
                          f"(the logits' positions + one row's log_softmax output) x V x {c:g} B = ({positions} + "
                          f"{row}) x {V} x {c:g}; made after the trained model's log-probs, the reference's own "
                          "activations freed layer by layer", "logits",
                          "TRL DPOTrainer._compute_loss: torch.no_grad(): self.ref_model(**inputs), then "
                          "selective_log_softmax"))
    if w.shard in ("fsdp", "zero3") and w.gpus > 1 and not params_offloaded(w):
        block = _largest_layer_params(spec)
        items.append(Item("reference forward's gathered blocks", int(2 * block * ELEMENT_BYTES[w.compute_dtype]),
                          f"2 x one block, current + prefetched: 2 x {block:,} x {ELEMENT_BYTES[w.compute_dtype]:g} B",
                          "temporaries", REFERENCE))
    return items


LOSS_SOURCE = {"chunked": "torchtune CEWithChunkedOutputLoss (8 chunks)",
               "linear": "torchtune LinearCrossEntropyLoss (8 chunks, the projection in the loss)",
               "logsoftmax": "torchtune rlhf.get_batch_log_probs (its DPO recipes)",
               "logps": "TRL selective_log_softmax (trl/trainer/utils.py), DPOTrainer._compute_loss",
               "fused": "Liger fused_linear_cross_entropy (TRL / HF Trainer use_liger_kernel)",
               "cce": "Cut Cross-Entropy (cut_cross_entropy cce.py, cce_backward.py; axolotl CutCrossEntropyPlugin)"}


def _step_items(spec: ModelSpec, w: Workload) -> _StepItems:
    """training_phases' batch-free part (_StepItems)."""
    P = spec.inventory_params
    Pt = trainable_params(spec, w)
    s = state_bytes_per_element(w)
    N = w.gpus
    zero = w.shard in ("zero1", "zero2", "zero3")
    weights = _weights_items(spec, w)
    extra: list[Item] = []  # persistent items beside the weights
    fwd_only: list[Item] = []  # alive in forward and backward
    if w.adapters and not params_offloaded(w):  # offloaded with the parameters: host RAM (memory/offload.py)
        ad = adapter_dtype(w)
        a = ELEMENT_BYTES[ad]
        n = N if w.shard in ("fsdp", "zero3") else 1  # sharded with the module they sit in
        extra.append(Item(f"LoRA adapter weights ({ad})", _div(a * Pt, n),
                          f"r x (in + out) per target x {a:g} B = {Pt:,} x {a:g} (rank {w.lora_rank}, targets "
                          f"{','.join(w.lora_targets)})" + (f" / {n} cards ({w.shard})" if n > 1 else ""), "weights",
                          "DeepSpeed engine _cast_module_mixed_precision: every floating parameter in the 16-bit dtype"
                          if deepspeed_casts(w) else
                          "peft >= 0.12 autocast_adapter_dtype: bf16/fp16 adapters upcast to fp32 (peft#1706)"
                          if ad == "fp32" and w.peft_autocast and w.dtype in ("bf16", "fp16") else
                          "peft: adapters in the base weights' dtype (before 0.12, or autocast_adapter_dtype=False)"
                          if ad != "fp32" else "peft"))
    if w.reference == "copy" and w.training:
        extra.append(_reference_model(weights, w))
    off = offloaded(w)  # ZeRO-Offload: master, states and fp32 gradient partition in host RAM (memory/offload.py)
    if w.mixed_precision and (w.base_trainable or (zero and Pt)) and not (off and zero):
        if zero and w.zero_bf16_master:
            # stage 1/2 clone the bit16 partition in the master dtype; stage 3 at DeepSpeed's HEAD aliases a master
            # of the parameters' dtype, but DeepSpeedExamples' published bf16 run (bf16_master_weight, 4 x H100,
            # 16.17 GiB allocated) holds one such partition more than parameters, gradients and moments: counted
            div = N if w.gpus > 1 else 1
            extra.append(Item("bf16 master weights", _div(2 * Pt, div),
                              f"2 B x trainable params{f' / {N} cards' if div > 1 else ''} (bf16_master_weights_"
                              "and_grads)", "optimizer", "deepspeed/runtime/zero/stage_1_and_2.py: bit16 partition "
                              ".clone().to(master_weights_and_grads_dtype); stage3.py _create_fp32_partitions"))
        elif zero:
            div = N if w.gpus > 1 else 1
            extra.append(Item("fp32 master weights", _div(4 * Pt, div),
                              f"4 B x trainable params{f' / {N} cards' if div > 1 else ''} (ZeRO keeps them with the "
                              "optimizer)", "optimizer", "ZeRO paper, sec. 3"))
        else:
            block_params = _largest_layer_params(spec)
            copies = 2 * (block_params * 2 if w.shard == "fsdp" and N > 1 else P)
            fwd_only.append(Item("16-bit working copies (autocast)", copies,
                                 "2 B x params cast for matmuls, kept for backward" if w.shard != "fsdp" or N == 1
                                 else "2 B x params of the gathered unit and the prefetched one", "weights",
                                 "torch.autocast weight cache"))
    apart = own_units(spec, w)  # (token embedding, output) parameters wrapped apart from the root (0, 0: not)
    turn_gathered: Item | None = None  # the gathered parameters at the turn from forward to backward (FSDP)
    if w.shard == "fsdp" and N > 1 and w.dtype in QUANTIZED:
        # a quantized base all-gathers its storage as it is (bitsandbytes' quant_storage: the packed 4-bit data in a
        # 16-bit-typed tensor, so that FSDP can flatten it), not a 16-bit copy
        wb = weight_bytes(spec, w)
        block_dense = 2 * sum(g.params for g in spec.groups if g.in_blocks and (g.role != "linear" or is_router(g)))
        per_block = (wb.quantized + wb.quant_overhead + block_dense) // max(1, spec.num_layers)
        root = (sum(g.params for g in spec.groups if not g.in_blocks) - sum(apart)) * 2
        fwd_only.append(Item("all-gathered parameters", 2 * per_block + root,
                             f"(2 x one block as stored, current + prefetched: {per_block:,} B of "
                             f"{format_note(w.dtype, w.group_size, w.double_quant)} data, scales and 16-bit norms, "
                             f"+ the root unit in 16-bit{ROOT_APART if any(apart) else ''}: {root:,} B)", "temporaries",
                             "FSDP2 fully_shard per block + root; bitsandbytes bnb_4bit_quant_storage"
                             + (f"; {CUSTOM_SHARDED}" if any(apart) else "")))
        turn_gathered = _turn_gathered(root, per_block, f"in 16-bit{ROOT_APART if any(apart) else ''}")
    elif w.shard == "fsdp" and N > 1:
        block_params = _largest_layer_params(spec)
        root = sum(g.params for g in spec.groups if not g.in_blocks) - sum(apart)
        fwd_only.append(Item("all-gathered parameters", int((2 * block_params + root) * ELEMENT_BYTES[w.compute_dtype]),
                             "(2 x one block, current + prefetched, + the root unit: "
                             + (f"final norm{ROOT_APART}" if any(apart) else "embeddings, head, final norm") +
                             ", kept gathered between forward and backward) x compute bytes (MixedPrecisionPolicy with "
                             "16-bit params under --mixed-precision)", "temporaries",
                             "FSDP2 fully_shard per block + root" + (f"; {CUSTOM_SHARDED}" if any(apart) else "")))
        turn_gathered = _turn_gathered(int(root * ELEMENT_BYTES[w.compute_dtype]),
                                       int(block_params * ELEMENT_BYTES[w.compute_dtype]),
                                       (f"final norm{ROOT_APART}" if any(apart) else "embeddings, head, final norm"))
    grad_div = N if w.shard in ("zero2", "zero3", "fsdp") else 1
    grad_s = 2 if zero and w.mixed_precision else s
    grads = Item("gradients", _div(grad_s * Pt, grad_div),
                 f"trainable params x {grad_s:g} B = {Pt:,} x {grad_s:g}" + (f" / {N} cards" if grad_div > 1 else ""),
                 "gradients", "one gradient per trainable parameter")
    fsdp_off = fsdp_offloaded(w)
    if fsdp_off:  # the sharded gradients live on the CPU: the card holds a unit's whole gradients until its reduce
        grad_div = 1  # unsharded (the head's, in a checkpointed backward, too)
        unit, what = _unit_trainable(spec, w, Pt, apart[1])
        grads = Item("gradients of the units being reduced (unsharded)", int(grad_s * unit),
                     f"{what}: {unit:,} x {grad_s:g} B, before their reduce-scatter; the shards then copied to the CPU",
                     "gradients", FSDP)
    card_grads = [] if off and w.shard == "zero3" else [grads]  # ZeRO-3 offload: the partition in host RAM
    opt_div = N if w.shard in ("zero1", "zero2", "zero3", "fsdp") else 1
    states_term = Term(0, "in host RAM (CPU offload)") if off else optimizer_bytes(spec, w, Pt)
    optimizer = Item("optimizer states", _div(states_term.bytes, opt_div),
                     states_term.formula + (f" / {N} cards" if opt_div > 1 else ""), "optimizer", w.optimizer)
    states = weights + extra
    ds = zero_buffers(spec, w, Pt)
    persist = [x for x in (optimizer,) if x.bytes] + _comm_buckets(spec, w, Pt, grads.bytes) + list(ds.always)
    load = Phase("load", tuple(_load_items(spec, w) + states), "weights on the card")
    # zero_grad() without set_to_none leaves the gradients allocated (zeroed) through the next forward and backward,
    # and gradient accumulation keeps the sum of the micro-batches' gradients through the next micro-batch's; DeepSpeed
    # ZeRO-3 holds its gradient partition in one flat buffer made at the optimizer's init
    # gradients held unsharded between micro-batches, unless reduce-scattered every one (--sync-each-batch)
    whole = w.grad_accumulation > 1 and w.shard == "fsdp" and N > 1 and not w.sync_each_batch
    c = ELEMENT_BYTES[w.compute_dtype]
    kept: list[Item]
    if w.shard == "zero3" and off:
        kept = []  # grad_partitions_flat_buffer on the CPU under offload_optimizer (memory/offload.py)
    elif fsdp_off and not whole:
        kept = []  # summed or kept in the sharded gradients, on the CPU
    elif w.shard == "zero3":
        kept = [Item("gradients (ZeRO-3 flat partition)", grads.bytes, grads.formula + "; one buffer from the "
                     "optimizer's init, alive through every phase", "gradients",
                     "deepspeed/runtime/zero/stage3.py: grad_partitions_flat_buffer = torch.zeros(partition numel)")]
    elif w.grads_kept:
        kept = [Item("gradients (kept by zero_grad)", grads.bytes, grads.formula + "; zeroed, not freed, between steps",
                     "gradients", "zero_grad(set_to_none=False): PyTorch < 2.0's default (pytorch/pytorch#92731)")]
    elif whole:
        # the Trainer runs micro-batches 1..K-1 under accelerator.no_sync: FSDP then keeps each gradient whole, in the
        # compute dtype, and reduce-scatters only in the last micro-batch's backward
        kept = [Item("gradients (summed whole, not yet reduce-scattered)", int(c * Pt),
                     f"trainable params x {c:g} B = {Pt:,} x {c:g}, unsharded: the earlier micro-batches' gradients, "
                     f"alive through micro-batches 2-{w.grad_accumulation}", "gradients",
                     "transformers trainer.py _inner_training_loop: accelerator.no_sync on micro-batches 1..K-1; "
                     "accelerate Accelerator.no_sync -> FSDP2 set_requires_gradient_sync(False) (torch "
                     "_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed); accelerate's sync_each_batch keeps "
                     "them sharded")]
    elif w.grad_accumulation > 1:
        kept = [Item("gradients (summed over micro-batches)", grads.bytes, grads.formula + f"; the sum of the earlier "
                     f"micro-batches' gradients, alive through micro-batches 2-{w.grad_accumulation}", "gradients",
                     "autograd AccumulateGrad adds into .grad; zero_grad() only after optimizer.step() "
                     "(transformers trainer.py _inner_training_loop, gradient_accumulation_steps); ZeRO-2 keeps the "
                     "averaged partition (stage_1_and_2.py independent_gradient_partition_epilogue)")]
    else:
        kept = []
    end_grads = card_grads
    if whole and kept[0].bytes > grads.bytes:
        end_grads = kept  # micro-batches 1..K-1 end holding the whole gradients, the last one the shards
    elif w.grad_accumulation > 1 and w.shard == "zero2":  # the micro-batch's new partition beside the summed one, until
        # the epilogue adds it in (stage_1_and_2.py copy_grads_in_partition: torch.empty(total_size) each micro-step,
        # independent_gradient_partition_epilogue: accumulated_grad.add_(new_avg_grad))
        end_grads = kept + [grads]
    flat = zero3_step_numel(spec, w, Pt)  # ZeRO-3 steps one sub-group's flat fp32 partition at a time
    step_tmp = Term(0, "the step runs on the CPU (CPU offload)") if off else _step_temporaries(spec, w, flat or Pt,
                                                                                                 flat=bool(flat))
    step_items = [Item("optimizer temporaries", step_tmp.bytes if flat else _div(step_tmp.bytes, opt_div),
                       step_tmp.formula, "temporaries", "torch.optim" + (
                           "; deepspeed/runtime/zero/stage3.py _optimizer_step (one sub-group per optimizer.step())"
                           if flat else ""))] if step_tmp.bytes else []
    in_step = [] if off and w.shard in ("zero3", "fsdp") else [grads]  # stepped on the CPU from host RAM
    step = Phase("optimizer step", tuple(states + in_step + persist + step_items),
                 "the optimizer steps on the CPU: what stays on the card" if in_step == [] else
                 "inside optimizer.step(), gradients still alive")
    if ds.step and not off:  # DeepSpeed: the fp32 copy is made from a flattened 16-bit copy, then (stages 1-2)
        # the 16-bit gradients and the flat copy are freed before the optimizer runs: the larger of the two moments
        fp32 = [i for i in ds.step if i.category != "temporaries"]
        copy = Phase("optimizer step", tuple(states + [grads] + persist + list(ds.step)),
                     "ZeRO's optimizer step, as it copies the gradient partition to fp32")
        run = Phase("optimizer step",
                    tuple(states + ([grads] if w.shard == "zero3" else []) + persist + fp32 + step_items),
                    "ZeRO's optimizer step, as the optimizer runs on the fp32 gradient copy")
        step = max(copy, run, key=lambda p: p.bytes)
    held = w.method == "full" and not zero and not w.grads_held  # ZeRO and held gradients: counted whole elsewhere
    if w.optimizer_in_backward and Pt:
        # torchtune's optimizer_in_bwd (training.register_optim_in_bwd_hooks): one optimizer per parameter, stepped
        # in its post-accumulate-grad hook, which then frees the gradient; at most one parameter's gradient is alive
        largest = _largest_trainable(spec, w)
        one = Item("gradient of one parameter (stepped in backward)", int(grad_s * largest),
                   f"the largest trainable tensor's: {largest:,} x {grad_s:g} B; each freed after its step",
                   "gradients", "torchtune optimizer_in_bwd: register_post_accumulate_grad_hook, step then zero_grad")
        one_tmp = _step_temporaries(spec, w, largest)
        step = Phase("optimizer step", tuple(states + persist + [one] + (
            [Item("optimizer temporaries", one_tmp.bytes, one_tmp.formula + " (one parameter's)", "temporaries",
                  "torch.optim")] if one_tmp.bytes else [])),
                     "in backward, one parameter at a time: its gradient and its step's temporaries")
        end_grads, held = [one], False
    head_unit, embed_unit = _own_unit_items(spec, w, apart, grad_s if w.method == "full" else 0, fsdp_off)
    fwd_turn = None if turn_gathered is None else tuple(
        turn_gathered if i.name == "all-gathered parameters" else i for i in fwd_only)
    fwd_end = None
    if turn_gathered is not None and not w.reshard_after_forward:  # every unit stays gathered from its forward to its
        # backward: the whole model at the end of forward and the turn; resharded unit by unit in backward
        kept_gathered = _kept_gathered(spec, w)
        fwd_end = tuple(fwd_only)
        fwd_only = [kept_gathered if i.name == "all-gathered parameters" else i for i in fwd_only]
        fwd_turn = tuple(fwd_only)
    return _StepItems(Pt, states, persist, kept, fwd_only, ds, grads, grad_s, grad_div, end_grads, load, step,
                      setup_phase(spec, w), head_params(spec) - apart[1] if held else 0, head_unit, embed_unit,
                      fwd_turn, fwd_end)


def _kept_gathered(spec: ModelSpec, w: Workload) -> Item:
    """FSDP2 with reshard_after_forward=False: each unit keeps its all-gathered parameters from its forward until its
    backward, so at the end of forward every unit is gathered: the whole model as FSDP gathers it (16-bit compute
    copies; a quantized base as stored)."""
    if w.dtype in QUANTIZED:
        wb = weight_bytes(spec, w)
        whole, how = wb.total, f"as stored ({format_note(w.dtype, w.group_size, w.double_quant)})"
    else:
        c = ELEMENT_BYTES[w.compute_dtype]
        whole, how = int(spec.inventory_params * c), f"{spec.inventory_params:,} x {c:g} B"
    return Item("all-gathered parameters", whole, f"every unit kept gathered from its forward to its backward "
                f"(reshard_after_forward=False): the whole model, {how}", "temporaries",
                "FSDP2 fully_shard(reshard_after_forward=False): post_forward_mesh_info None, no reshard until "
                "post-backward")


def _turn_gathered(root: int, block: int, what: str) -> Item:
    """FSDP2's gathered parameters at the turn from forward to backward (the loss, the start of backward): the root
    unit's `root` bytes and one block's `block`, not two. torchtune's shard_model (training/_distributed.py, at
    30b8519e and since) calls fully_shard on each block with reshard_after_forward=True (the distributed recipes'
    cfg.get("fsdp_reshard_after_forward", True)), so each block frees its unsharded parameters in its post-forward
    hook; FSDP2's lazy init sets post_forward_mesh_info = None on the
    root alone ("for the root, do not reshard after forward"), and the root's post-forward frees the last deferred
    all-gather result (all_gather_state; torch before that flush kept it to the next unshard, and torchtitan keeps
    the last block gathered). The one block counted: at the start of backward the root's (or the output unit's)
    pre-backward hook prefetches the last block (_backward_prefetch) while the head's backward runs; the recompute
    and the end of backward keep the 2 blocks, current + prefetched."""
    return Item("all-gathered parameters", root + block, f"the root unit ({what}, kept gathered between forward and "
                f"backward): {root:,} B + one block (the last, prefetched for backward): {block:,} B; the others "
                "resharded after their forward (reshard_after_forward=True)", "temporaries",
                "FSDP2 fully_shard: blocks reshard after forward, the root does not; pre_backward prefetch")


def inference_phases(spec: ModelSpec, w: Workload) -> tuple[Phase, ...]:
    """An inference's phases: load, prefill and decode with the KV cache (an encoder: load and one forward)."""
    tp = w.gpus if w.shard == "tp" else 1
    validate_tensor_parallel(spec, tp)
    weights = _weights_items(spec, w)
    if spec.encoder:  # one bidirectional forward over the batch: no cache, nothing generated
        tmp = inference_temporaries(spec, w, w.batch * w.seq_len)
        lg, lg_formula = logits_bytes(spec, w)
        transient = (Item("scores over the vocabulary", lg, lg_formula, "logits", "transformers MLM head")
                     if lg > tmp.bytes
                     else Item("forward temporaries", _div(tmp.bytes, tp), tmp.formula, "temporaries"))
        return (Phase("load", tuple(_load_items(spec, w) + weights), "weights on the card"),
                Phase("forward", tuple(weights + [transient]), "an encoder's forward over the batch (no KV cache)"))
    kv = estimate_kv(spec, seq_len=w.seq_len, batch=w.batch, dtype=w.cache_dtype, tp=tp)
    kv_item = Item("KV cache", kv.bytes, f"{kv.bytes_per_token:,.0f} B/token x {w.seq_len} tokens x {w.batch} "
                   f"sequences ({kv.kind}, {kv.dtype})" + (" with window caps" if kv.layers_sliding else "")
                   + (": decoder self-attention, + cross-attention K/V of the encoder output "
                      f"{kv.cross_attention_bytes:,}"
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


def _unit_trainable(spec: ModelSpec, w: Workload, Pt: int, head_apart: int = 0) -> tuple[int, str]:
    """FSDP with CPU offload: the trainable parameters whose unsharded gradients the card holds at once, and how
    they were counted: a full fine-tune's root unit (embeddings, head, final norm: the head's gradient made first,
    reduce-scattered last with the root) and one block's (an upper bound: the block's are reduced before the
    embedding's are made); adapters, one block's share. `head_apart`: the output's parameters when it is a unit of
    its own (own_units), reduce-scattered after its own backward, at the start of backward (not counted here)."""
    if w.method == "full":
        root = sum(g.params for g in spec.groups if not g.in_blocks) - head_apart
        block = _largest_layer_params(spec)
        return min(Pt, root + block), (f"the root unit's ({root:,}{', the output apart' if head_apart else ''}) and "
                                       f"one block's ({block:,}) trainable parameters")
    per = -(-Pt // max(1, spec.num_layers))
    return per, f"one block's adapters (trainable params / {spec.num_layers} layers)"


ROOT_APART = " (the token embedding and the output are FSDP units of their own)"
CUSTOM_SHARDED = ("torchtune training.shard_model: fully_shard(m) per custom_sharded_layers name, "
                  "reshard_after_forward=True")


def own_units(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """(token embedding, output projection) parameters wrapped as FSDP units of their own (--fsdp-embedding-units,
    torchtune's custom_sharded_layers: ['tok_embeddings', 'output']), else (0, 0). torchtune's shard_model
    (training/_distributed.py) calls fully_shard on each module a shard condition names, with the recipe's
    reshard_after_forward (True by default), then on the root: those modules leave the root unit, which stays
    gathered from forward to backward (FSDP2 gives the root no reshard after forward), and are gathered only for
    their own forward and backward. A head tied to the embedding is one weight (torchtune's TiedLinear calls it
    without the embedding module's hooks): not modelled, (0, 0), the root estimate kept (an upper bound)."""
    if not (w.fsdp_embedding_units and w.shard == "fsdp" and w.gpus > 1 and w.training):
        return 0, 0
    inside = [k for k, g in enumerate(spec.groups) if g.in_blocks]
    if not inside:
        return 0, 0
    before, after = spec.groups[:inside[0]], spec.groups[inside[-1] + 1:]
    token = next((g.params for g in before if g.role == "embedding"), 0)
    head = sum(g.params for g in after if g.role == "embedding")
    return (token, head) if token and head else (0, 0)


def _own_unit_items(spec: ModelSpec, w: Workload, apart: tuple[int, int], grad_s: float,
                    grads_counted: bool) -> tuple[tuple[Item, ...], tuple[Item, ...]]:
    """The output's unit at the start of backward (gathered again, with its unsharded gradient when it trains:
    `grad_s` bytes per element, 0 for adapters) and the token embedding's at the end (gathered; its gradient too,
    unless `grads_counted`: the CPU-offload unit gradients already hold it)."""
    E, H = apart
    if not H:
        return (), ()
    c = ELEMENT_BYTES[w.compute_dtype]
    # without resharding after forward it is still gathered from its forward: in the whole model counted (fwd_turn)
    head = [Item("output projection gathered for its backward", int(H * c), f"{H:,} x {c:g} B (its own FSDP unit: "
                 "resharded after forward, gathered again by its pre-backward hook)", "temporaries", CUSTOM_SHARDED)
            ] if w.reshard_after_forward else []
    if grad_s:
        head.append(Item("gradient of the output projection (unsharded)", int(H * grad_s),
                         f"{H:,} x {grad_s:g} B, reduce-scattered after its own backward", "gradients", CUSTOM_SHARDED))
    embed = [Item("token embedding gathered for its backward", int(E * c), f"{E:,} x {c:g} B (its own FSDP unit, the "
                  "last backward of the step)", "temporaries", CUSTOM_SHARDED)]
    if grad_s and not grads_counted:
        embed.append(Item("gradient of the token embedding (unsharded)", int(E * grad_s),
                          f"{E:,} x {grad_s:g} B, before its reduce-scatter", "gradients", CUSTOM_SHARDED))
    return tuple(head), tuple(embed)


def _largest_layer_params(spec: ModelSpec) -> int:
    """Parameters in one transformer block (the FSDP wrapping unit)."""
    block = sum(g.params for g in spec.groups if g.in_blocks)
    return block // max(1, spec.num_layers)


def _recompute_items(spec: ModelSpec, w: Workload, one_layer: int, layer_grads: int,
                     grad_bytes: float, head: int) -> list[Item]:
    """What a checkpointed backward adds as it recomputes the last layer, its first: the input each layer's
    checkpoint kept (the last one's is the recompute's input, the others wait their turn), that layer's activations
    saved again by the recompute, and the activation gradients of its backward. The logits path and the final norm
    are freed by then (their backward ran); the head's gradients exist (full fine-tuning: `head` parameters, of
    `grad_bytes` each on this card), except under ZeRO, whose flat partition (stage 3, kept) or buckets hold them,
    and with --grads-kept, where every gradient is counted as kept (`head` is 0 then: _StepItems.head).

    Sources: torch.utils.checkpoint (use_reentrant=False): the forward keeps only the inputs of the checkpointed
    function, and the first unpack of a saved tensor in backward reruns the whole function, saving everything again
    (_checkpoint_hook / _recomputation_hook); transformers' GradientCheckpointingLayer (modeling_layers.py) checkpoints
    each decoder layer's forward, the hidden states its input."""
    c = ELEMENT_BYTES[w.compute_dtype]  # fp32 on a k-bit-prepared base (Workload.compute_dtype)
    L, tokens, h = spec.num_layers, w.batch * w.seq_len, spec.hidden_size
    if w.activation_offloading and L > 2:  # the layer recomputed and the next one's input, brought back ahead
        inputs = Item("checkpointed layer inputs (on the card)", int(2 * tokens * h * c),
                      f"2 x b x s x h x {c:g} B (the layer recomputed, the next one prefetched; the other {L - 2} on "
                      "the CPU)", "activations", "torchtune OffloadActivations (use_streams: one layer prefetched)")
    elif w.checkpoint_ops or w.checkpoint_every > 1:
        # selective: the layers up to the last checkpointed one still hold what they kept (the later ones, left out
        # of --checkpoint-every, have run their backward and freed theirs)
        upto = L if w.checkpoint_ops else w.checkpoint_every * (L // w.checkpoint_every)
        inputs = Item("checkpointed layers' kept tensors", int(checkpoint_kept(spec, w, tokens, one_layer, upto)),
                      (f"{upto} layers x b x s x (h x {c:g} B input + the outputs the op policy saves)"
                       if w.checkpoint_ops else f"layers 1..{upto}: {upto // w.checkpoint_every} checkpointed inputs "
                       f"(b x s x h x {c:g} B) + {upto - upto // w.checkpoint_every} layers' saved tensors"),
                      "activations", "torch.utils.checkpoint selective checkpointing (torchtitan/torchtune)")
    else:
        inputs = Item("checkpointed layer inputs", int(L * tokens * h * c),
                      f"L x b x s x h x {c:g} B = {L} x {tokens} x {h} x {c:g}", "activations",
                      "torch.utils.checkpoint (non-reentrant): each layer's input, kept for its recompute")
    items = [inputs,
             Item("backward temporaries", layer_grads + one_layer,
                  "the last layer's recomputed activations + its activation gradients", "temporaries",
                  "torch.utils.checkpoint recompute; autograd")]
    if head:
        items.append(Item("gradients of the head", int(head * grad_bytes),
                          f"final norm and LM head (the tied embedding's when tied): {head:,} x {grad_bytes:g} B",
                          "gradients", "autograd: accumulated as their backward runs, before the layers'"))
    return items


def offloaded_inputs(spec: ModelSpec, w: Workload) -> Term:
    """Activation offloading (torchtune's enable_activation_offloading, with checkpointing): each checkpointed layer's
    saved input goes to the CPU as the next layer runs, so at the end of forward all but the last layer's are off
    the card (training/_activation_offloading.py OffloadActivations: a saved tensor is copied to pinned CPU memory
    and its GPU storage freed once the copy stream is done). The host RAM they need is these bytes."""
    if not (w.activation_offloading and w.grad_checkpointing and w.training) or spec.encdec is not None:
        return Term(0, "")
    c = ELEMENT_BYTES[w.compute_dtype]
    L, tokens, h = spec.num_layers, w.batch * w.seq_len, spec.hidden_size
    off = max(0, L - 1) * tokens * h * c
    return Term(int(off), f"minus {max(0, L - 1)} layers' inputs offloaded to the CPU: (L - 1) x b x s x h x {c:g} B "
                          f"= {off / 2**30:,.2f} GiB of host RAM")


def _layer_grad_temporaries(spec: ModelSpec, w: Workload) -> int:
    """Activation gradients alive while one layer's backward runs: the MLP's widest tensors."""
    c = ELEMENT_BYTES[w.compute_dtype]
    inter = spec.intermediate_size
    if spec.moe is not None:
        inter = spec.moe.expert_intermediate_size * spec.moe.experts_per_token
    return int(w.batch * w.seq_len * c * (2 * inter + 2 * spec.hidden_size))


def _step_temporaries(spec: ModelSpec, w: Workload, Pt: int, *, flat: bool = False) -> Term:
    """What optimizer.step() allocates beside the states (a Term of 0 bytes when nothing). `flat`: the optimizer
    steps one flat tensor of `Pt` elements (a ZeRO-3 sub-group: deepspeed.zero3_step_numel)."""
    s = state_bytes_per_element(w)
    one = " (one ZeRO-3 sub-group's flat fp32 partition at a time)" if flat else ""
    if w.optimizer == "adamw":
        if w.optimizer_impl == "foreach":
            return Term(int(s * Pt), f"foreach AdamW (the CUDA default since torch 2.0): one state-sized temporary, "
                                     f"sqrt(exp_avg_sq) = {s:g} B x {Pt:,}{one}")
        largest = Pt if flat else _largest_trainable(spec, w)
        if w.optimizer_impl == "loop":
            return Term(int(s * largest), f"for-loop AdamW: one temporary the size of the largest tensor ({largest:,})")
        return Term(0, "")

    if w.optimizer in TORCHAO_STEP_BYTES:
        # torchao's low-bit AdamW steps one tensor at a time (torch.compile(single_param_adam)): its states dequantized
        # and requantized (constants.TORCHAO_STEP_BYTES)
        largest = Pt if flat else _largest_trainable(spec, w)
        b = TORCHAO_STEP_BYTES[w.optimizer]
        return Term(int(b * largest), f"{w.optimizer} (torchao), one tensor at a time: the largest's two states "
                                      f"dequantized and requantized = {b} B x {largest:,} (inductor's buffers on the "
                                      f"CPU; a GPU's fused kernels keep no more)")
    if w.optimizer == "adafactor":
        # torch.optim.Adafactor: var_estimate = row_var @ col_var per tensor (constants.ADAFACTOR_STEP_COPIES)
        if w.optimizer_impl == "foreach":
            return Term(int(ADAFACTOR_STEP_COPIES * s * Pt), f"foreach Adafactor (the CUDA default): one var_estimate "
                                                             f"per tensor, all at once = {s:g} B x {Pt:,}{one}")
        largest = Pt if flat else _largest_trainable(spec, w)
        return Term(int(ADAFACTOR_STEP_COPIES * s * largest), f"for-loop Adafactor: one var_estimate the size of the "
                                                              f"largest tensor ({largest:,}) x {s:g} B")
    return Term(0, "")


def _largest_trainable(spec: ModelSpec, w: Workload) -> int:
    if w.method == "full":
        return max(g.numel for g in spec.groups)
    return max((w.lora_rank * max(g.shape) for g in spec.groups if g.role == "linear"), default=0)
