"""Activation memory: the tensors autograd saves per layer, per token, read off the HF implementations.

Training keeps, per decoder layer, what each op's backward needs (PyTorch saves an input only when
the other operand requires a gradient, so a frozen base saves less). Inference keeps nothing between
layers; its peak is the largest temporary inside one layer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..models.families import falcon_shared_attention
from ..models.spec import ModelSpec
from . import encdec
from .dtypes import ELEMENT_BYTES
from .states import deepspeed_casts, lora_in_features, lora_inputs
from .terms import SavedActivations, Term
from .workload import KeptBySpec, Workload, size_free_key

FP32 = 4


@dataclass(frozen=True)
class LayerActivations:
    """Saved bytes per token of one layer (a weighted mean over dense/MoE and sliding/full layers)."""

    per_token: float
    attention_per_token: float  # part that depends on sequence length (eager scores), per token per key
    terms: tuple[tuple[str, float], ...]


# The Linears LoRA may target, by the tensor they read (the adapters on one tensor share it where nothing casts it)
ATTENTION_INPUT = ("q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query", "key", "value", "q_a_proj",
                   "kv_a_proj_with_mqa", "query_key_value")  # the attention norm's output
MLA_LATENT_INPUT = ("q_b_proj", "kv_b_proj")  # each its own latent's norm output
# the MLP norm's output (BERT's intermediate.dense: a second Linear named dense in a block goes by its path,
# states.lora_in_features)
MLP_INPUT = ("gate_proj", "up_proj", "gate_up_proj", "c_fc", "fc1", "dense_h_to_4h", "intermediate.dense")
# the activation's (or gate x up's) output (GPT-2's mlp.c_proj, BERT's output.dense)
MLP_HIDDEN = ("down_proj", "fc2", "dense_4h_to_h", "mlp.c_proj", "output.dense")

# axolotl's LoRA kernels (monkeypatch/lora_kernels.py apply_lora_kernel_patches at 067b021c): the projections each
# patches, all of which must carry LoRA
LORA_KERNEL_PROJECTIONS = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",),
                           "mlp": ("gate_proj", "up_proj", "down_proj")}


def lora_kernels_skipped(spec: ModelSpec, w: Workload) -> dict[str, str]:
    """The --lora-kernels axolotl does not apply to this model, each with why. It applies them on a Llama-like
    decoder (a gated MLP, no MLA), each where every projection it patches carries LoRA; the MLP's on a dense MLP only
    (an MoE block has no gate_proj of its own). Bias, dropout and DoRA no longer stop them (axolotl at 067b021c)."""
    asked = [k for k in w.lora_kernels.split(",") if k]
    if spec.mlp != "gated" or spec.mla is not None:
        return {k: "the model is not a Llama-like decoder" for k in asked}
    targets = lora_in_features(spec, w)
    skipped = {k: f"{k} needs LoRA on {', '.join(LORA_KERNEL_PROJECTIONS[k])}" for k in asked
               if not all(m in targets for m in LORA_KERNEL_PROJECTIONS[k])}
    if "mlp" in asked and spec.moe is not None:
        skipped["mlp"] = "mlp: an MoE block has no gate_proj of its own"
    return skipped


def lora_kernels_applied(spec: ModelSpec, w: Workload) -> frozenset[str]:
    """The --lora-kernels axolotl applies to this model (lora_kernels_skipped says which it does not, and why)."""
    skipped = lora_kernels_skipped(spec, w)
    return frozenset(k for k in w.lora_kernels.split(",") if k and k not in skipped)


KEPT_LAYERS = KeptBySpec(64)  # layer_saved's answers: a card solve's probes differ in the batch and the length only


def layer_saved(spec: ModelSpec, w: Workload) -> LayerActivations:
    """Bytes saved for backward per token in one transformer layer (no checkpointing). It reads neither the batch
    nor the length: kept per model and size_free_key.

    Sources: transformers' Llama/Qwen/Mistral/Gemma modeling (RMSNorm upcast to fp32, SDPA saving q, k, v,
    output and logsumexp, the contiguous transpose before o_proj, SiLU-gated MLP), peft's LoRA forward
    (lora_A keeps its input, a cast copy where the adapter dtype or autocast differs; lora_B lora_A's output:
    states.lora_inputs), and Korthikanti et al. 2022 (arXiv:2205.05198)
    for the LayerNorm/GELU/dropout terms of GPT-2 and BERT.
    """
    return KEPT_LAYERS.get(spec, size_free_key(w), lambda: _layer_saved(spec, w))


def _layer_saved(spec: ModelSpec, w: Workload) -> LayerActivations:
    c = ELEMENT_BYTES[w.compute_dtype]
    h, nh, hd, inter_size = spec.hidden_size, spec.num_heads, spec.head_dim, spec.intermediate_size
    full = w.base_trainable
    tg = lora_in_features(spec, w)
    r = w.lora_rank
    terms: list[tuple[str, float]] = []

    # --mixed-precision is torch.autocast over fp32 weights (layer_norm and softmax then run in fp32), except under
    # DeepSpeed ZeRO, whose engine casts the module itself to the 16-bit dtype and runs no autocast (engine.py
    # _cast_module_mixed_precision, module.half() before it; accelerate leaves native AMP off under DeepSpeed)
    autocast = w.mixed_precision and not deepspeed_casts(w)

    adapters = lora_inputs(w)

    # bitsandbytes < 0.43.2: each 4-bit linear keeps its input (counted below), which LoRA's adapters then share
    bnb_kept = w.bnb_saves_input and not full and spec.moe is None and spec.mla is None

    def lora(modules: tuple[str, ...], input_kept: bool = False) -> float:
        """What the adapters on `modules`, Linears that read one tensor, keep per token (states.LoraInputs)."""
        return adapters.saved([tg[m] for m in modules if m in tg], r, input_kept=input_kept)

    def lora_label(where: str, input_kept: bool) -> str:
        inputs = ("dropout outputs and masks" if adapters.dropout else f"{adapters.cast} casts" if adapters.copies
                  else "inputs kept by the layer" if input_kept else "uncast inputs, each once")
        return f"LoRA on {where} ({inputs}, lora_A outputs)"

    decoder = spec.mlp == "gated"
    kernels = lora_kernels_applied(spec, w)
    liger = liger_kernels(spec, w)
    drop = spec.dropout > 0 and w.training
    block = spec.block
    # Norms that keep their normalized tensor in fp32 (weight * x in fp32): Gemma 2/3's (1 + w), OLMo 2's
    # weight * x before the cast back. Their fp32 input and rsqrt are kept as in Llama's RMSNorm.
    fp32_norm = FP32 * h + FP32 + (FP32 * h if full else 0.0)
    if decoder:
        post_norms = spec.model_type in ("gemma2", "gemma3_text")  # and pre-feedforward: four norms a layer
        if "rms_norm" in liger:
            # Liger's RMSNorm (Gemma's too: offset 1, casting mode gemma) keeps its input and one fp32 rstd; the
            # output where a Linear reads it (the input and pre-feedforward norms), not the post norms' (the
            # residual add keeps nothing)
            norms = 2 * liger_rmsnorm_saved(h, c, full) + (2 * (c * h + FP32) if post_norms else 0.0)
        elif spec.model_type in ("gemma", "gemma2", "gemma3_text"):
            # GemmaRMSNorm computes in fp32 and multiplies by (1 + w) in fp32: the normalized tensor it keeps is
            # fp32. Input and pre-feedforward norms feed a Linear; Gemma 2/3's post norms feed the residual add.
            norms = 2 * (fp32_norm + (c * h if full else 0.0)) + (2 * fp32_norm if post_norms else 0.0)
        elif spec.model_type == "olmo2":
            # OLMo 2 normalizes each sublayer's output (no norm on its input): the Linears keep the residual stream
            norms = 2 * fp32_norm + (2 * c * h if full else 0.0)
        else:
            norms = 2 * rmsnorm_saved(h, c, full)
        terms.append(("Liger RMSNorm inputs, rstd and outputs" if "rms_norm" in liger
                      else "rmsnorm inputs (fp32) and outputs", norms))
        if block.qk_norm == "head":
            heads = spec.num_heads + spec.num_kv_heads  # q_norm / k_norm over each head's vector, before RoPE
            kept = FP32 if spec.model_type == "gemma3_text" else c  # Gemma's (1 + w) product is fp32
            if "rms_norm" in liger and spec.model_type == "gemma3_text":
                # apply_liger_kernel_to_gemma3_text patches the model's q_norm/k_norm too: each head's input in the
                # compute dtype and one fp32 rstd per head (RoPE after them keeps only cos and sin). Qwen3's patch
                # of a loaded model (the Trainer's use_liger_kernel) leaves them HF's.
                terms.append(("q/k norms (Liger: inputs and rstd)", c * heads * hd + FP32 * heads))
            else:
                terms.append(("q/k norms (fp32 inputs)",
                              FP32 * heads * (hd + 1) + (kept * heads * hd if full else 0.0)))
        elif block.qk_norm == "full":
            width = (spec.num_heads + spec.num_kv_heads) * hd  # OLMo 2: one RMSNorm over all of q, one over k
            terms.append(("q/k norms (fp32 inputs and products)", 2 * FP32 * width + 2 * FP32))
    else:
        # LayerNorm saves its input and mean/rstd (fp32 under autocast, which runs layer_norm in fp32); the
        # Linear after it saves the output in the compute dtype. Residual dropouts keep 1-byte masks (CUDA).
        # In a parallel block (GPT-NeoX, Falcon, Phi-2) the norms read the same input: it is kept once.
        ln_in = FP32 if autocast else c
        n = block.norms
        inputs = 1 if block.parallel else n
        terms.append(("layernorm inputs and outputs", inputs * ln_in * h + n * (8 + (c * h if full else 0.0))))
        if drop:
            terms.append(("residual dropout masks", 2 * h))

    # attention
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        latent = (m.q_lora_rank or 0) + m.kv_lora_rank
        terms.append(("MLA latents (q_a, kv_a) and their norms", latent * (c + FP32) + c * m.qk_rope_head_dim))
        q_bytes, k_bytes, v_bytes, out_bytes = c * nh * qk, c * nh * qk, c * nh * m.v_head_dim, c * nh * m.v_head_dim
    else:
        kv_heads = spec.num_kv_heads if w.attention == "sdpa" else nh  # eager repeats KV heads before matmul
        if spec.model_type == "falcon" and w.attention == "sdpa" and 1 < kv_heads < nh:
            # Falcon always hands SDPA its mask, so sdpa_attention_forward repeats K/V to every head (repeat_kv's
            # copies, which SDPA keeps) instead of enable_gqa (transformers 5.25 on; before, K/V came expanded)
            kv_heads = nh
        q_bytes, k_bytes, v_bytes, out_bytes = c * nh * hd, c * kv_heads * hd, c * kv_heads * hd, c * nh * hd
    math_sdpa = uses_math_sdpa(spec, w)
    if math_sdpa:
        # Falcon calls SDPA with its 4-D mask and K/V heads broadcast to the query heads, which no fused kernel
        # takes: PyTorch's math kernel runs, in fp32 for 16-bit inputs, keeping fp32 q, k, v (K/V expanded to every
        # head) and the fp32 softmax (counted with the scores below); the output projection keeps its input.
        terms.append(("attention q, k, v in fp32 (math SDPA kernel)", 3 * FP32 * nh * hd))
        if full:
            terms.append(("attention output (dense input)", out_bytes))
    else:
        terms.append(("attention q, k, v (as SDPA keeps them)", q_bytes + k_bytes + v_bytes))
    if block.fused_qkv and not math_sdpa:
        # v stays a view of the fused projection while q and k are rotated into new tensors: the whole
        # projection output is kept besides them (GPT-NeoX)
        terms.append(("fused q/k/v projection output (kept by v's view)", q_bytes + k_bytes))
    # The attention output is kept by SDPA's backward and is also o_proj's input: flash kernels write it
    # (b, s, heads, dim)-contiguous, so the transpose + contiguous before o_proj is free. Eager attention
    # keeps it only when o_proj trains. When q comes out of torch.cat (partial rotary: GPT-NeoX, Phi-2) it
    # is head-major, and so is the output: the contiguous copy before the output projection is a new tensor.
    o_name = "o_proj" if decoder else {"gpt2": "c_proj", "gpt_bigcode": "c_proj", "opt": "out_proj",
                                       "starcoder2": "o_proj"}.get(spec.model_type, "dense")
    if w.attention == "sdpa" and not math_sdpa:
        terms.append(("attention output (= o_proj input) + logsumexp", out_bytes + FP32 * nh))
        if spec.model_type in ("gpt_neox", "phi") and full:
            terms.append(("attention output, head-major copy (output projection input)", out_bytes))
    elif full and not math_sdpa:
        terms.append(("attention output (o_proj input)", out_bytes))
    # o_proj's input is kept already where SDPA's output is it, or where the 4-bit linears keep theirs
    o_kept = bnb_kept or (w.attention == "sdpa" and not math_sdpa and spec.model_type not in ("gpt_neox", "phi"))
    # with --lora-dropout each kernel also keeps dropout's output of its input (one for the group: a shared mask) and
    # dropout's bool mask (kernels/lora.py: X_drop made outside the autograd function, saved beside X)
    def dropped(features: float) -> float:
        return (c + 1) * features if w.lora_dropout else 0.0

    if "o" in kernels:  # LoRA_O saves its input: the attention output, which SDPA's backward keeps already
        terms.append(("LoRA on o_proj (axolotl's LoRA_O: its input)", (0.0 if o_kept else out_bytes)
                      + dropped(out_bytes / c)))
    elif o_name in tg:
        terms.append((lora_label(o_name, o_kept), lora((o_name,), o_kept)))
    qkv_lora = lora(ATTENTION_INPUT, bnb_kept) + sum(lora((m,)) for m in MLA_LATENT_INPUT)
    if "qkv" in kernels:  # LoRA_QKV saves the layer's normalized input once, no cast copy, no lora_A output
        terms.append(("LoRA on q/k/v (axolotl's LoRA_QKV: their shared input)", c * h + dropped(h)))
    elif qkv_lora:
        terms.append((lora_label("attention inputs", bnb_kept), qkv_lora))

    # MLP: dense or MoE, weighted by how many layers are which
    # GPT-2's gelu_new is written with elementwise ops, each keeping its input: x, tanh(.), 0.5x, 1 + tanh(.)
    act_saves = 4 if spec.activation in ("gelu_new", "gelu_fast") else 1

    glu = liger & {"swiglu", "geglu"}

    def dense_mlp(inter: int) -> float:
        if decoder and glu:
            # LigerSiLUMulFunction and LigerGELUMulFunction save the gate and up outputs only (the activation is
            # recomputed in backward); the product is down_proj's input, kept when down_proj trains
            return c * inter * 2 + (c * inter if full else 0.0)
        if decoder:
            # gate output (activation input), activation output and up output (kept by the mul), product (down input)
            return c * inter * (2 + act_saves) + (c * inter if full else 0.0)
        # GPT-2/BERT: fc output (GELU input, + gelu_new's intermediates), GELU output (fc2 input)
        return c * inter * act_saves + (c * inter if full else 0.0)

    # a parallel block with one norm (Phi-2, Falcon-7B) feeds its output to the attention and the MLP alike
    one_norm = block.parallel and block.norms == 1 and any(m in tg for m in ATTENTION_INPUT)
    # fc2 reads ReLU's output (OPT), which ReLU keeps for its backward; GELU keeps its input instead
    relu_kept = not decoder and spec.activation == "relu"
    # c_proj is the MLP's output projection where the attention's is named otherwise (StarCoder2's o_proj)
    hidden = MLP_HIDDEN + (("c_proj",) if o_name != "c_proj" else ())
    mlp_lora = lora(MLP_INPUT, bnb_kept or one_norm) + lora(hidden, bnb_kept or relu_kept)
    if spec.moe is not None:
        moe = spec.moe
        k, E = moe.experts_per_token, moe.num_experts
        if glu:
            # Liger's experts (transformers 5: LigerExperts, ops/fused_moe.py LigerFusedMoEFunction) keep each routed
            # token's gate/up output, its fp32 routing weight and three int32 indices, and the layer's input once
            # (the norm's output, counted there when the weights train); post-activation and outputs recomputed
            routed = k * (2 * c * moe.expert_intermediate_size + FP32 + 3 * 4) + (0.0 if full else c * h)
        else:
            routed = k * (c * h + dense_mlp(moe.expert_intermediate_size) + c * h)
        shared = dense_mlp(moe.shared_intermediate_size) if moe.shared_intermediate_size else 0.0
        router = (c + FP32) * E
        moe_bytes = routed + shared + router
        dense_bytes = dense_mlp(inter_size)
        frac = moe.moe_layers / spec.num_layers
        terms.append((f"MoE MLP: router, {k} of {E} experts per token " + (
            "(Liger's fused experts: gate/up, weights, indices)" if glu else "(token copies, gate/up/act/product)"),
            frac * moe_bytes))
        if frac < 1:
            terms.append(("dense MLP layers", (1 - frac) * dense_bytes))
    elif "mlp" in kernels:
        # LoRA_MLP saves its input and the gate and up outputs (base + LoRA); the activation, the product and every
        # lora_A output are recomputed or freed
        terms.append(("MLP input (axolotl's LoRA_MLP)", c * h + dropped(h)))  # apart: reserved._tensors
        terms.append(("MLP gate and up outputs (axolotl's LoRA_MLP)", 2 * c * inter_size))
        mlp_lora = 0.0
    else:
        name = (f"MLP gate/up (Liger {'GEGLU' if 'geglu' in glu else 'SwiGLU'})/product" if glu
                else "MLP gate/up/activation/product")
        terms.append((name if decoder else "MLP fc output and GELU", dense_mlp(inter_size)))
    if mlp_lora:
        terms.append((lora_label("MLP inputs", bnb_kept), mlp_lora))

    if bnb_kept:
        # bitsandbytes < 0.43.2: MatMul4Bit keeps each 4-bit linear's input (ctx.tensors = (A, B), bitsandbytes#1270)
        # where a frozen 16-bit linear keeps none: the attention and MLP norms' outputs (q/k/v's and gate/up's or
        # fc's input), the MLP's last input (gate x up product, or the activation's output), and o_proj's input
        # unless SDPA already keeps it (its output is o_proj's input)
        kept_o = w.attention == "sdpa" and not math_sdpa
        terms.append(("4-bit linears' inputs (bitsandbytes < 0.43.2 keeps them)",
                      c * (2 * h + inter_size) + (0.0 if kept_o else c * h)))

    attention_scores = 0.0
    if math_sdpa:
        attention_scores = nh * FP32
    elif w.attention == "eager":
        if decoder:
            # softmax saves its fp32 output; the 16-bit probabilities feed the matmul with V (HF eager attention);
            # Gemma 2's logit soft-capping keeps a tanh output too.
            # (none when the queries are fp32: a k-bit-prepared base without autocast, .to(query.dtype) is no copy)
            attention_scores = nh * (FP32 + (c if c < FP32 else 0) + (c if spec.model_type == "gemma2" else 0))
            soft_in = c  # softmax(x, dtype=float32) reads the 16-bit scores
        elif spec.model_type == "opt":
            # OPT's eager attention upcasts its softmax itself, in every dtype and with or without autocast:
            # softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype) (transformers 5.x modeling_opt.py; before
            # its move to the shared attention functions only in fp16, transformers#17437). Saved: the fp32 output,
            # its copy in the compute dtype (the matmul with V's input; none in fp32), attention dropout's mask on
            # that copy.
            attention_scores = nh * (FP32 + (c if c != FP32 else 0) + ((c + 1) if drop else 0))
            soft_in = c  # the scores, in the compute dtype
        else:
            # GPT-2/BERT: softmax's output (fp32 under autocast, which lists softmax as fp32; in a 16-bit module
            # with no autocast, DeepSpeed's cast, nn.functional.softmax(scores, dim=-1) runs in 16 bits), kept by
            # its backward; the matmul with V keeps its input in the compute dtype; dropout (CUDA's native_dropout)
            # keeps its 1-byte mask. Under autocast that input is a 16-bit copy: BERT's of dropout's fp32 output
            # (freed once cast), GPT-2's dropout output of the .type(value.dtype) copy it makes first (freed once
            # dropped out), so 4 + 2 + 1 either way; without autocast dropout's output is the matmul's input.
            soft = FP32 if autocast else c
            attention_scores = nh * (soft + (c if soft != c or drop else 0) + (1 if drop else 0))
            soft_in = soft  # autocast hands softmax an fp32 copy of the scores
        if w.softmax_saves_input:  # PyTorch < 1.11: SoftmaxBackward kept `self` too (pytorch/pytorch#64000)
            attention_scores += nh * soft_in
    return LayerActivations(sum(t for _, t in terms), attention_scores, tuple(terms))


def uses_math_sdpa(spec: ModelSpec, w: Workload) -> bool:
    """Falcon with multi-query attention before transformers 5.25 hands SDPA a mask and one K/V head for all query
    heads, which only the math kernel takes: it materializes the scores (in fp32 for 16-bit inputs), like eager
    attention. From 5.25 Falcon runs the shared sdpa_attention_forward, which repeats K/V to every query head
    (repeat_kv) since the mask is never None: the fused kernels take that (CPU flash, CUDA memory-efficient)."""
    return (spec.model_type == "falcon" and w.attention == "sdpa" and spec.num_kv_heads < spec.num_heads
            and not falcon_shared_attention())


def rmsnorm_saved(h: int, c: float, trains: bool) -> float:
    """Bytes per token an HF RMSNorm keeps for backward.

    The fp32 upcast of its input (pow and the mul by rsqrt) and the rsqrt itself always; when weights
    train, also the normalized 16-bit tensor (kept by `weight * x`) and the output (kept by the next Linear).
    """
    return FP32 * h + FP32 + (2 * c * h if trains else 0.0)


def liger_rmsnorm_saved(h: int, c: float, trains: bool) -> float:
    """Bytes per token Liger's RMSNorm keeps for backward (liger_kernel/ops/rms_norm.py LigerRMSNormFunction:
    save_for_backward(X, W, RSTD)): its input in the compute dtype and one fp32 rstd per row (casting mode llama),
    the weight being a parameter; when weights train, also the output (kept by the next Linear)."""
    return c * h + FP32 + (c * h if trains else 0.0)


# The model types whose Liger patches are modelled (liger_kernel/transformers/monkey_patch.py at ead96b6,
# apply_liger_kernel_to_<model type>), with the name of their gated-MLP kernel: SiLU's swiglu (the MoE ones: the
# fused experts of transformers 5), Gemma's geglu (GELU, tanh approximation)
LIGER_GLU = {"llama": "swiglu", "mistral": "swiglu", "qwen2": "swiglu", "qwen3": "swiglu", "mixtral": "swiglu",
             "qwen3_moe": "swiglu", "gemma": "geglu", "gemma2": "geglu", "gemma3_text": "geglu"}
LIGER_MODEL_TYPES = tuple(LIGER_GLU)


def liger_kernels(spec: ModelSpec, w: Workload) -> frozenset[str]:
    """The Liger layer kernels of --liger-kernels (rope changes nothing saved: its backward needs only cos and sin,
    as HF's rotation's multiplications do), refused for a model whose Liger patches are not modelled."""
    names = frozenset(k for k in w.liger_kernels.split(",") if k)
    if not names:
        return names
    glu = LIGER_GLU.get(spec.model_type)
    if glu is None or spec.mla is not None or spec.mlp != "gated" or (
            spec.moe is not None and spec.moe.shared_intermediate_size):
        raise InputError(f"--liger-kernels is modelled for {', '.join(LIGER_MODEL_TYPES)} models, not {spec.name} "
                         f"({spec.model_type}); drop it for an estimate without Liger's layer kernels (an upper "
                         "bound)")
    wrong = sorted(names & {"swiglu", "geglu"} - {glu})
    if wrong:
        raise InputError(f"--liger-kernels {wrong[0]}: {spec.name}'s gated MLP is Liger's {glu} "
                         f"(apply_liger_kernel_to_{spec.model_type}); write {glu}")
    return names


def training_activations(spec: ModelSpec, w: Workload, *, formula: bool = True) -> SavedActivations:
    """Bytes saved over all layers at the end of forward, bytes of one layer, and the formula, per card (`formula`
    False: the bytes only, the formula left empty)."""
    if spec.encdec is not None:
        if w.grad_checkpointing and (w.checkpoint_ops or w.checkpoint_every > 1):
            raise InputError("selective checkpointing (--checkpoint-every, --checkpoint-ops) is modelled for decoders; "
                             f"{spec.name} is an encoder-decoder: drop the option (--grad-checkpointing checkpoints "
                             "every layer)")
        return encdec.training_activations(spec, w)
    saved, one_layer = _saved(spec, w, w.batch * w.seq_len)
    if not formula:
        return SavedActivations(saved, one_layer, "")
    tokens = w.batch * w.seq_len
    layer = layer_saved(spec, w)
    c = ELEMENT_BYTES[w.compute_dtype]
    generic = f"{spec.generic}; " if spec.generic else ""
    if w.grad_checkpointing and w.checkpoint_ops:
        kept = op_checkpoint_saved(spec, w)
        return SavedActivations(saved, one_layer, generic + (
            f"op-level selective checkpointing: L x b x s x ({c:g} x h input + {kept.per_token:,.0f} B kept ops) = "
            f"{spec.num_layers} x {tokens} x ({c:g} x {spec.hidden_size} + {kept.per_token:,.0f}), + final norm; "
            "kept: " + "; ".join(f"{n} {v:,.0f}" for n, v in kept.terms) + "; the rest of one layer is recomputed in "
            "backward (torchtitan parallelize_llama.py _apply_ac_to_transformer_block, its _save_list policy)"))
    if w.grad_checkpointing and w.checkpoint_every > 1:
        n, L = checkpointed_layers(spec, w), spec.num_layers
        return SavedActivations(saved, one_layer, generic + (
            f"every {w.checkpoint_every}th layer checkpointed ({n} of {L}): {n} x b x s x h x {c:g} B (their inputs) "
            f"+ {L - n} x b x s x {layer.per_token + layer.attention_per_token * w.seq_len:,.0f} "
            f"B/token (the others' saved tensors) = {n} x {tokens} x {spec.hidden_size} x {c:g} + {L - n} x {tokens}, "
            "+ final norm; one layer is recomputed in backward (torchtitan/torchtune checkpoint_wrapper: the blocks "
            "counted from 1, those whose count % K == 0 wrapped)"))
    if w.grad_checkpointing:
        return SavedActivations(saved, one_layer, generic + (
            f"checkpointing: L x b x s x h x {c:g} B (each layer's input) = {spec.num_layers} x {tokens} x "
            f"{spec.hidden_size} x {c:g}, + final norm; one layer is recomputed in backward"))
    return SavedActivations(saved, one_layer, (
        generic + f"L x b x s x {layer.per_token:,.0f} B/token/layer + final norm"
        + (f" + eager scores {layer.attention_per_token:g} B x s" if layer.attention_per_token else "")
        + f" = {spec.num_layers} x {tokens} tokens; terms: " + "; ".join(f"{n} {v:,.0f}" for n, v in layer.terms if v)))


def _saved(spec: ModelSpec, w: Workload, tokens: int) -> tuple[int, int]:
    """(bytes saved over all layers at the end of forward, of one layer) of a decoder at `tokens` (batch x length):
    what training_activations counts."""
    layer = layer_saved(spec, w)
    per_token = layer.per_token + layer.attention_per_token * w.seq_len
    c = ELEMENT_BYTES[w.compute_dtype]
    # after the blocks: the final norm (its output is the LM head's input)
    h = spec.hidden_size
    if spec.mlp == "gated" and "rms_norm" in liger_kernels(spec, w):
        final_per_token = liger_rmsnorm_saved(h, c, w.base_trainable)
    elif spec.model_type in ("gemma", "gemma2", "gemma3_text", "olmo2"):  # the fp32 normalized tensor, and the LM
        # head's 16-bit input
        final_per_token = FP32 * h + FP32 + ((FP32 + c) * h if w.base_trainable else 0)
    elif spec.mlp == "gated":
        final_per_token = rmsnorm_saved(h, c, w.base_trainable)
    else:
        final_per_token = c * h + 8 + (c * h if w.base_trainable else 0)
    # Falcon hands SDPA a b x 1 x s x s mask, kept once
    mask = spec.model_type == "falcon" and w.attention == "sdpa" and not uses_math_sdpa(spec, w)
    L, checkpointing = spec.num_layers, w.grad_checkpointing
    one_layer = tokens * per_token
    final = tokens * final_per_token
    if mask:
        final += tokens * w.seq_len * c
    if checkpointing:
        return int(checkpoint_kept(spec, w, tokens, one_layer, L) + final), int(one_layer)
    return int(L * one_layer + final), int(one_layer)


def checkpointed_layers(spec: ModelSpec, w: Workload) -> int:
    """Layers whose forward runs under a checkpoint: every one with --grad-checkpointing (and --checkpoint-ops), every
    K-th with --checkpoint-every K, none without. torchtitan (parallelize_llama.py _apply_ac_to_transformer_block) and
    torchtune (training/_activation_checkpointing.py checkpoint_wrapper) count the blocks from 1 and wrap those whose
    count % K == 0: L // K of L."""
    if not w.grad_checkpointing:
        return 0
    n = spec.num_layers // w.checkpoint_every
    if n == 0:
        raise InputError(f"--checkpoint-every {w.checkpoint_every} checkpoints none of {spec.name}'s "
                         f"{spec.num_layers} layers: give at most {spec.num_layers}, or drop --grad-checkpointing")
    return n


def checkpoint_kept(spec: ModelSpec, w: Workload, tokens: int, one_layer: float, layers: int) -> float:
    """Bytes the first `layers` decoder layers keep for backward under checkpointing, at `tokens` (batch x length),
    `one_layer` the bytes one layer saves without it: a checkpointed layer keeps its input (torch.utils.checkpoint,
    non-reentrant: the function's inputs, for its recompute), with --checkpoint-ops also the outputs its policy saves
    (op_checkpoint_saved); a layer left out of --checkpoint-every keeps everything it saves."""
    c, h = ELEMENT_BYTES[w.compute_dtype], spec.hidden_size
    if w.checkpoint_ops:
        return layers * tokens * (c * h + op_checkpoint_saved(spec, w).per_token)
    n = layers // w.checkpoint_every  # the checkpointed among the first `layers` (count % K == 0)
    return n * tokens * c * h + (layers - n) * one_layer


# torchtitan's op-level policy (torchtitan/parallelisms/parallelize_llama.py, read at 004b3148, not at the benchmark
# row's 31a17bfd; `_save_list`): the outputs of these ops are saved, every other op of the layer recomputed; of
# aten.mm, only the odd-numbered calls of each forward (its meta counter: "Saves output of all compute ops, except
# every second mm"). A Linear with a bias runs aten.addmm: neither counted
# nor saved. The SDPA ops are CUDA's (the CPU kernel, _scaled_dot_product_flash_attention_for_cpu, is not listed).
_LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # in forward order


def op_checkpoint_saved(spec: ModelSpec, w: Workload) -> LayerActivations:
    """Bytes per token one layer keeps under torchtitan's op-level selective checkpointing, besides its input: the
    outputs of the odd-numbered bias-free matmuls in forward order (q, v, gate, down in a Llama layer), and the
    attention kernel's outputs (the output and its fp32 logsumexp). Modelled for full fine-tuning of dense
    Llama-shaped layers with SDPA (torchtitan's Llama; LoRA's extra matmuls would shift the count); else refused."""
    linears = {g.module for g in spec.groups if g.in_blocks and g.role == "linear"}
    biased = {g.module for g in spec.groups if g.in_blocks and g.role == "bias"}
    shaped = spec.mlp == "gated" and spec.moe is None and spec.mla is None and set(_LLAMA_LINEARS) <= linears
    if not shaped or w.attention != "sdpa" or uses_math_sdpa(spec, w) or w.method != "full":
        why = ("with --method full" if w.method != "full" else "with --attention sdpa" if w.attention != "sdpa"
               else f"for dense Llama-shaped layers (q/k/v/o, gate/up/down projections), which {spec.name}'s are not")
        raise InputError(f"--checkpoint-ops (torchtitan's op-level policy) is modelled {why}; use --checkpoint-every K "
                         "or --grad-checkpointing alone")
    c = ELEMENT_BYTES[w.compute_dtype]
    h, hd = spec.hidden_size, spec.head_dim
    width = {"q_proj": spec.num_heads * hd, "k_proj": spec.num_kv_heads * hd,
             "v_proj": spec.num_kv_heads * hd, "o_proj": h, "gate_proj": spec.intermediate_size,
             "up_proj": spec.intermediate_size, "down_proj": h}
    terms: list[tuple[str, float]] = []
    count = 0
    for name in _LLAMA_LINEARS:
        if name in biased:
            continue  # addmm
        count += 1
        if count % 2 == 1:
            terms.append((f"{name} output (mm #{count})", c * width[name]))
    terms.append(("attention output + logsumexp (SDPA)", c * spec.num_heads * hd + FP32 * spec.num_heads))
    return LayerActivations(sum(t for _, t in terms), 0.0, tuple(terms))


def eager_backward_scores(spec: ModelSpec, w: Workload) -> Term:
    """Score-sized tensors one decoder layer's eager attention backward holds beyond what its forward saved.

    transformers' eager_attention_forward saves softmax(scores, dtype=float32)'s output P (4 B) and its copy in the
    query's dtype (c B; none when the queries are fp32, a k-bit-prepared base without autocast). Backward: the matmul
    with V gives dP (c), its .to() an fp32 dP (4), _softmax_backward_data dScores (c), the scaling dScores x scale.
    Without checkpointing autograd frees each saved tensor and gradient once used: at most 8 + c B per score at
    once, against 4 + c saved. A checkpointed layer's recomputed tensors are held by the checkpoint until its
    backward is done, and the gradient chain is alive with them: dP, its fp32 copy and dScores for 16-bit queries
    (c + 4 + c), dP, dScores and the scaled dScores for fp32 ones (3 x 4) -- the figures FitCheck's T4 archive
    measured (eager rows with checkpointing, TinyLlama and SmolLM2 at 2048-4096 tokens).
    """
    if w.attention != "eager" or spec.mlp != "gated" or spec.encdec is not None or not w.training:
        return Term(0, "")
    c = ELEMENT_BYTES[w.compute_dtype]
    if w.grad_checkpointing:
        extra = 3 * FP32 if c >= FP32 else c + FP32 + c
        held = "the recomputed probabilities held by the checkpoint, beside dP, its fp32 copy and dScores"
    else:
        extra = 2 * FP32 + c - (FP32 + (c if c < FP32 else 0))
        held = "fp32 dP and dScores beside the saved probabilities"
    keys = w.seq_len
    per = spec.num_heads * keys * extra
    return Term(int(w.batch * w.seq_len * per), f"b x s x heads x keys x {extra:g} B ({held}) = {w.batch} x "
                                                f"{w.seq_len} x {spec.num_heads} x {keys:,.0f} x {extra:g}")


def logits_bytes(spec: ModelSpec, w: Workload) -> Term:
    """Logits and the loss: b x s x V in compute dtype, plus the fp32 upcast and log_softmax output (training).

    transformers' ForCausalLMLoss upcasts logits to fp32 before cross-entropy; log_softmax saves its fp32
    output. Encoders (MLM) compute the loss in the compute dtype. Generation keeps only the last position.
    """
    if spec.encdec is not None:
        return encdec.logits_bytes(spec, w)
    c = ELEMENT_BYTES[w.logits_dtype]  # 16-bit under autocast on a k-bit-prepared fp32 head
    V = spec.vocab_size
    encoder = spec.encoder
    if encoder and not spec.architecture.endswith(("ForMaskedLM", "ForPreTraining")):
        return Term(0, "no vocabulary-sized output (a task head)")
    if encoder and not w.training:
        positions = w.batch * w.seq_len
        return Term(int(positions * V * c), f"scores over the vocabulary at every position: b x s x V x {c:g} B")
    if not w.training:
        positions = w.batch
        return Term(int(positions * V * (c + FP32)), f"last position only (generate): b x V x ({c:g} + 4 fp32 copy) = "
                                                     f"{w.batch} x {V}")
    positions = w.batch * w.seq_len
    if encoder:
        return Term(int(positions * V * 2 * c), f"b x s x V x 2 x {c:g} B (logits + log_softmax) = {positions} x {V}")
    softcap = c if spec.model_type == "gemma2" else 0  # final logit soft-capping keeps tanh's output
    if w.hf_loss == "float-logits":
        # transformers <= 4.45: logits = logits.float() in the model's forward (the bf16 ones dropped, the fp32 ones
        # returned), then shift_logits = logits[..., :-1, :].contiguous(): two fp32 copies, then log_softmax's output
        per = 3 * FP32 + softcap
        what = "4 fp32 logits (the output, logits.float()) + 4 shifted copy (shift_logits.contiguous())"
    elif w.hf_loss == "shift-copy":
        # transformers 4.46-4.48 ForCausalLMLoss: logits.float(), then shift_logits.contiguous() (transformers#35646)
        per = c + 3 * FP32 + softcap
        what = f"{c:g} + 4 fp32 upcast + 4 shifted copy (shift_logits.contiguous())"
    elif c < FP32:
        per = c + 2 * FP32 + softcap
        what = f"{c:g} + 4 fp32 upcast"
    else:  # fp32 logits (fp32 training, a k-bit-prepared fp32 head): logits.float() returns them, no copy
        per = FP32 + FP32 + softcap
        what = "4 fp32 logits (logits.float() is no copy)"
    return Term(int(positions * V * per), f"b x s x V x ({what} + 4 log_softmax"
                                          f"{f' + {softcap:g} soft-cap' if softcap else ''}) B = {positions} x {V} "
                                          f"x {per:g}")


def inference_temporaries(spec: ModelSpec, w: Workload, tokens: int, *, decode: bool = False) -> Term:
    """Largest transient inside one layer when `tokens` positions (over all sequences) go through at once; an
    encoder-decoder's generation adds the encoder pass (prefill) and the encoder output it keeps."""
    if spec.encdec is not None and not w.training:
        return encdec.inference_temporaries(spec, w, tokens, decode=decode)
    c = ELEMENT_BYTES[w.compute_dtype]
    h, inter_size = spec.hidden_size, spec.intermediate_size
    if spec.moe is not None:
        inter_size = max(spec.moe.expert_intermediate_size * spec.moe.experts_per_token,
                         spec.moe.shared_intermediate_size)
    # gated: gate, up and their product alive together; plain: the fc output, the activation's output and one
    # intermediate of the fused activation kernel; gelu_new's elementwise chain (x^3, 0.044715 x^3 + x, tanh,
    # 1 + tanh, 0.5 x) keeps two more I-sized temporaries alive at its peak
    k = 5 if spec.mlp == "plain" and spec.activation in ("gelu_new", "gelu_fast") else 3
    mlp = tokens * c * (k * inter_size + 2 * h)
    formula = (f"{spec.generic}; " if spec.generic else "") + (
        f"MLP of one layer: tokens x ({k} x I + 2 x h) x {c:g} B = {tokens} x ({k} x {inter_size} + 2 x {h})")
    if w.attention == "eager" or uses_math_sdpa(spec, w):
        # a chunk of `tokens` query rows attends to up to the whole context; the math SDPA kernel works in fp32
        per = 2 * FP32 if w.attention == "sdpa" else FP32 + c
        scores = spec.num_heads * tokens * w.seq_len * per
        if w.attention == "sdpa":  # and fp32 copies: q and the output per query, K and V (expanded to every
            # head) over the whole context of each sequence
            width = FP32 * spec.num_heads * spec.head_dim
            scores += 2 * width * tokens + 2 * width * w.seq_len * w.batch
        if scores > mlp:
            kind = "math SDPA kernel scores (fp32)" if w.attention == "sdpa" else "eager attention scores"
            return Term(int(scores), f"{kind}: b x heads x s x keys x {per:g} B" + (
                " + fp32 q and output per query, K and V per key" if w.attention == "sdpa" else ""))
    return Term(int(mlp), formula)
