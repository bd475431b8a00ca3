"""The cross-entropy over the vocabulary when it is not computed over the whole logits at once (Workload.loss):
what the forward allocates at the loss, what backward starts with, and the logits' gradients.

- chunked: torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py,
  num_output_chunks=8). The model returns its logits as 8 chunks in the compute dtype (TransformerDecoder with
  num_output_chunks, all of them made); the loss upcasts one chunk at a time (`logits.float()`) and runs
  cross_entropy on it, whose log_softmax saves its fp32 output: those are saved for every chunk. Backward runs
  chunk by chunk: one chunk's fp32 gradients (into and out of log_softmax) at a time.
- logsoftmax: the sequences' log-probabilities as torchtune's DPO recipes take them (rlhf.get_batch_log_probs at
  bd2a0fc): the model returns fp32 logits (its output projection upcast), divided by the temperature (a copy) and
  passed through one log_softmax over the whole vocabulary, whose fp32 output is saved; the recipe then deletes the
  logits. The reference forward (no grad) makes the same three tensors; the LoRA recipes keep its fp32 logits
  through backward (lora_dpo_*.py never delete them), the full recipe deletes them, and takes chosen's and
  rejected's log-probabilities in two calls (full_dpo_distributed.py concatenated_forward: half the copy and the
  output at a time). Backward holds the saved output and the gradients into and out of log_softmax at once.
- linear: torchtune's LinearCrossEntropyLoss (torchtune/modules/loss/cross_entropy_loss.py at bd2a0fc,
  num_output_chunks=8), the default loss of its current recipes. The model skips its output projection and returns
  the hidden states; the loss keeps the positions it scores (index_select: a copy, saved for the projection's
  weight gradient, so only where the head trains) and runs the projection on one of 8 chunks at a time, upcasts
  that chunk's logits (`logits.float()`) and takes cross_entropy, whose log_softmax saves its fp32 output: every
  chunk's is kept until backward, no vocabulary-sized tensor of the compute dtype stays. Backward runs chunk by
  chunk, as chunked's.
- fused: Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py, which TRL's and the HF
  Trainer's use_liger_kernel patch in): the LM head's matmul and the loss run chunk by chunk in forward, each
  chunk's logits (compute dtype, chunk_size = next power of 2 of ceil(b x s / ceil(V / h))) overwritten by their
  gradient, and the gradient of the hidden states (b x s x h) kept for backward. No vocabulary-sized tensor stays.
  When the LM head trains (full fine-tuning), forward also makes its weight's gradient,
  `grad_weight = torch.zeros_like(weight)` (V x h in the weight's dtype), summed chunk by chunk and held until the
  head's backward, which hands it on as the head's .grad: it is alive from the loss to the start of backward.
- cce: Apple's Cut Cross-Entropy (cut_cross_entropy cce.py and cce_backward.py at 100a077, impl "cce", which
  axolotl's CutCrossEntropyPlugin patches in): the LM head's matmul and the log-sum-exp run block by block in the
  kernel, so no logits exist in memory. Forward keeps per position the fp32 log-sum-exp, the scored positions'
  int64 offsets (utils._build_flat_valids: nonzero's int32 copy summed over its two columns) and, while it runs, the
  target's logit, and per vocabulary row the fp32 average logit that orders the gradient filter (filter_eps "auto");
  it saves the head's input (e), its weight (c), the log-sum-exp, the offsets and the average logit. Backward
  allocates the hidden states' gradient (zeros_like(e)), the head weight's gradient when the head trains
  (zeros_like(c), its .grad), and the vocabulary order (int32 per row). With a frozen head the saved input is one
  tensor more than a frozen Linear keeps. Both must be 16-bit (workload._check_cce).
- logps: the sequences' log-probabilities as TRL's preference and RL trainers take them (trl/trainer/utils.py
  selective_log_softmax, DPO's _compute_loss): 16-bit logits go through log_softmax one row (sequence) at a time,
  each row's output in the logits' dtype saved for backward, so forward holds the logits and every row's output (2 x
  the logits' bytes); fp32 logits go through logsumexp row by row, which saves views of the logits (1 x, and one
  row's temporary). The logits are iterated row by row (unbind), so backward gathers every row's gradient before
  stacking them: the rows' gradients and the stacked one (2 x), the saved outputs freed row by row before.
"""
from __future__ import annotations

from math import ceil

from ..models.spec import ModelSpec
from .constants import FP32_BYTES, LOG_SOFTMAX_OUTPUT_BYTES, LOGITS_GRAD_BYTES
from .dtypes import ELEMENT_BYTES
from .states import deepspeed_casts
from .terms import Term
from .workload import Workload

CCE_FORWARD_PER_TOKEN = 16  # CCE's forward: fp32 lse + fp32 target logit (neg_dot) + int64 valids
CCE_SAVED_PER_TOKEN = 12  # saved for backward: lse and valids
TORCHTUNE_LOSS_CHUNKS = 8  # num_output_chunks=8: CEWithChunkedOutputLoss's and LinearCrossEntropyLoss's default


def logit_positions(w: Workload) -> int:
    """The positions whose logits the loss takes: every token, or with --completion-tokens C the completion's only,
    C + 1 per sequence (TRL's GRPO calls the model with logits_to_keep = C + 1 and drops the last)."""
    if w.completion_tokens is not None:
        return w.batch * min(w.completion_tokens + 1, w.seq_len)
    return w.batch * w.seq_len


def liger_chunk_tokens(spec: ModelSpec, tokens: int) -> int:
    """Liger's chunk: next_power_of_2(cdiv(BT, cdiv(V, H))) tokens (fused_linear_cross_entropy_forward)."""
    per = ceil(tokens / ceil(spec.vocab_size / spec.hidden_size))
    return min(tokens, 1 << max(0, (per - 1).bit_length()))


def head_weight_grad(spec: ModelSpec, w: Workload) -> Term:
    """The LM head's weight gradient a fused loss makes itself when the head trains (Liger's
    fused_linear_cross_entropy_forward: grad_weight = torch.zeros_like(weight) if weight.requires_grad, in forward;
    CCE's cce_backward_kernel: dc = torch.zeros_like(c), in backward; the bias too, which causal LM heads lack): V x h
    in the weight's dtype, fp32 under autocast over fp32 weights."""
    if not w.base_trainable:
        return Term(0, "")
    b = FP32_BYTES if w.mixed_precision and not deepspeed_casts(w) else ELEMENT_BYTES[w.compute_dtype]
    V, h = spec.vocab_size, spec.hidden_size
    return Term(V * h * int(b), f" + the head's grad_weight V x h x {b:g} B = {V} x {h} x {b:g}")


def forward_loss(spec: ModelSpec, w: Workload, c: float) -> Term:
    """Alive at the loss in forward (`c`: the logits' bytes per element)."""
    V, tokens, n = spec.vocab_size, w.batch * w.seq_len, TORCHTUNE_LOSS_CHUNKS
    if w.loss == "logps":
        tokens = logit_positions(w)
        if c < FP32_BYTES:
            return Term(int(tokens * V * 2 * c), f"b x s x V x ({c:g} logits + {c:g} every row's log_softmax output, "
                                                 f"saved) = {tokens} x {V} x {2 * c:g}")
        row = V * (tokens // w.batch) * c
        return Term(int(tokens * V * c + row), f"b x s x V x {c:g} logits (logsumexp saves views of them) + one "
                                               f"row's exp temporary s x V x {c:g} = {tokens} x {V} x {c:g} + {row}")
    if w.loss == "chunked":
        per = c + LOG_SOFTMAX_OUTPUT_BYTES + FP32_BYTES / n
        return Term(int(tokens * V * per), f"b x s x V x ({c:g} logits, every chunk + 4 fp32 log_softmax output, "
                                           f"every chunk + 4 / {n} one chunk's fp32 upcast) = {tokens} x {V} x {per:g}")
    if w.loss == "logsoftmax":
        if w.reference == "none":  # no reference forward: the policy's own peak, logits + their copy + the output
            return Term(int(tokens * V * 3 * FP32_BYTES), f"b x s x V x (4 fp32 logits + 4 their /temperature copy + 4 "
                                                          f"log_softmax output) = {tokens} x {V} x 12")
        return Term(int(tokens * V * LOG_SOFTMAX_OUTPUT_BYTES), f"b x s x V x 4 fp32 log_softmax output, saved (the "
                                                                f"logits deleted before the reference forward) = "
                                                                f"{tokens} x {V} x 4")
    if w.loss == "cce":
        return Term(int(tokens * CCE_FORWARD_PER_TOKEN + V * FP32_BYTES),
                    f"b x s x {CCE_FORWARD_PER_TOKEN} (fp32 log-sum-exp and target logit, int64 position offsets) + "
                    f"V x 4 (fp32 average logit, the gradient filter's order) = {tokens} x {CCE_FORWARD_PER_TOKEN} + "
                    f"{V} x 4; no logits")
    if w.loss == "linear":
        per = LOG_SOFTMAX_OUTPUT_BYTES + (c + FP32_BYTES) / n
        hidden = tokens * spec.hidden_size * c if w.base_trainable else 0  # F.linear keeps it for the weight's grad
        return Term(int(tokens * V * per + hidden),
                    f"b x s x V x (4 fp32 log_softmax output, every chunk + ({c:g} + 4) / {n} one chunk's projection "
                    f"and its fp32 upcast) + the scored positions' hidden states b x s x h x {c:g} = {tokens} x {V} x "
                    f"{per:g} + {int(hidden)}")
    tokens = logit_positions(w)  # the fused loss's hidden states: every position, or the completions' (GRPO)
    chunk = liger_chunk_tokens(spec, tokens)
    h = spec.hidden_size
    gw = head_weight_grad(spec, w)
    return Term(int(chunk * V * c + tokens * h * c) + gw.bytes,
                f"one chunk's logits, {chunk} tokens x V x {c:g} B + the hidden states' gradient b x s x h x {c:g} B "
                f"= {chunk} x {V} x {c:g} + {tokens} x {h} x {c:g}{gw.formula}")


def backward_loss(spec: ModelSpec, w: Workload, c: float, held: float) -> tuple[Term, Term]:
    """(saved for backward, gradients) at the start of backward; `held`: bytes per element of the logits the loop
    keeps (the model output), 0 when it frees them."""
    V, tokens, n = spec.vocab_size, w.batch * w.seq_len, TORCHTUNE_LOSS_CHUNKS
    if w.loss == "logps":
        tokens = logit_positions(w)
        saved = Term(int(tokens * V * held), f"b x s x V x {held:g} logits held" if held else
                     "the logits freed (--no-logits-held); every row's saved output freed as its backward runs")
        return saved, Term(int(tokens * V * 2 * c), f"every row's gradient, then stacked (unbind's backward): "
                                                    f"b x s x V x 2 x {c:g} B = {tokens} x {V} x {2 * c:g}")
    if w.loss == "logsoftmax":
        kept = w.reference == "adapters-off"  # torchtune's LoRA DPO recipes keep the reference's logits
        saved = Term(int(tokens * V * (LOG_SOFTMAX_OUTPUT_BYTES + (FP32_BYTES if kept else 0))),
                     f"b x s x V x (4 fp32 log_softmax output{' + 4 the reference forward fp32 logits' if kept else ''}"
                     f") = {tokens} x {V} x {LOG_SOFTMAX_OUTPUT_BYTES + (FP32_BYTES if kept else 0)}")
        return saved, Term(int(tokens * V * LOGITS_GRAD_BYTES), f"the grads into and out of log_softmax: b x s x V x "
                                                               f"{LOGITS_GRAD_BYTES} B = {tokens} x {V} x "
                                                               f"{LOGITS_GRAD_BYTES}")
    if w.loss == "linear":
        hidden = tokens * spec.hidden_size * c if w.base_trainable else 0
        saved = Term(int(tokens * V * LOG_SOFTMAX_OUTPUT_BYTES + hidden),
                     f"b x s x V x 4 fp32 log_softmax output of every chunk + the scored positions' hidden states "
                     f"b x s x h x {c:g} = {tokens} x {V} x 4 + {int(hidden)}")
        grads = Term(int(tokens * V * LOGITS_GRAD_BYTES / n),
                     f"one chunk's grads into and out of log_softmax: b x s x V x {LOGITS_GRAD_BYTES} B / {n} chunks")
        return saved, grads
    if w.loss == "cce":
        h, hc = spec.hidden_size, ELEMENT_BYTES[w.compute_dtype]
        # the head's input: kept by CCE's save_for_backward(e, ...); a trained head's Linear would keep it too (in
        # the activations' final norm), a frozen one would not
        e = 0 if w.base_trainable else tokens * h * hc
        gw = head_weight_grad(spec, w)
        saved = Term(int(tokens * CCE_SAVED_PER_TOKEN + V * FP32_BYTES + e),
                     f"b x s x {CCE_SAVED_PER_TOKEN} (fp32 log-sum-exp, int64 position offsets) + V x 4 fp32 average "
                     "logit" + (
                         f" + the frozen head's input b x s x h x {hc:g} = {tokens} x {h} x {hc:g}" if e else ""))
        grads = Term(int(tokens * h * hc + V * FP32_BYTES) + gw.bytes,
                     f"the hidden states' gradient b x s x h x {hc:g} + the vocabulary order V x 4 = {tokens} x {h} "
                     f"x {hc:g} + {V} x 4{gw.formula}")
        return saved, grads
    if w.loss == "chunked":
        per = held + LOG_SOFTMAX_OUTPUT_BYTES
        saved = Term(int(tokens * V * per), f"b x s x V x ({held:g} logits held + 4 fp32 log_softmax output of every "
                                            f"chunk) = {tokens} x {V} x {per:g}")
        grads = Term(int(tokens * V * LOGITS_GRAD_BYTES / n),
                     f"one chunk's grads into and out of log_softmax: b x s x V x {LOGITS_GRAD_BYTES} B / {n} chunks")
        return saved, grads
    h = spec.hidden_size
    gw = head_weight_grad(spec, w)
    tokens = logit_positions(w)
    return (Term(int(tokens * h * c) + gw.bytes,
                 f"the hidden states' gradient made in forward: b x s x h x {c:g} B{gw.formula}"),
            Term(0, "made in forward"))
