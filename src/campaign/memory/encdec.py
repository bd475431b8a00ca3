"""Activation memory of an encoder-decoder (T5, T5 v1.1, Flan-T5): what autograd saves in a training step, and the
transients of generation, read off transformers' modeling_t5.py as a GPU runs it.

Inputs: the encoder reads `seq_len` tokens and the decoder as many (labels of the same length): campaign assumes a
decoder as long as the encoder's input. A GPU runs T5's attention in SDPA's memory-efficient kernel (its additive
position-bias mask rules out flash; memory-efficient takes the bias, returns its gradient and draws dropout from a
seed), which keeps q, k, v, the output and the logsumexp (fp32, rows padded to 32) and no probabilities.
"""
from __future__ import annotations

from ..models.spec import ModelSpec
from .dtypes import ELEMENT_BYTES
from .kv import estimate_kv
from .states import lora_in_features, lora_inputs
from .terms import SavedActivations, Term
from .workload import Workload

FP32 = 4
INDEX = 8  # int64 indices: token ids and relative-position buckets kept by the embeddings' backward
LSE_ROWS = 32  # the memory-efficient kernel pads its logsumexp's query rows to a multiple of 32


def _rows(s: int) -> int:
    return -(-s // LSE_ROWS) * LSE_ROWS


def training_activations(spec: ModelSpec, w: Workload) -> SavedActivations:
    """Bytes saved over both stacks at the end of forward, bytes of the largest layer, and the formula, of a T5 step.

    Per token of a stack, each sublayer's T5LayerNorm keeps its fp32 upcast (pow), the 16-bit input and the fp32
    rsqrt (x * rsqrt reads the 16-bit input), and when weights train the normalized tensor (weight * x) and its
    output (the next Linear's input). Attention keeps q, k, v and the output (= o's input, written
    (b, s, heads, d)-contiguous); every layer makes its own contiguous copy of the position bias (heads x s x s, the
    mask SDPA keeps), and the decoder's causal where() keeps a bool s x s mask beside it. Cross-attention projects
    the encoder output to K and V in every decoder layer (2 x heads x d_kv per encoder token per layer). Dropout
    (dropout_rate) keeps a 1-byte mask after every sublayer, inside the FFN and on the embeddings and final norms.
    """
    c = ELEMENT_BYTES[w.compute_dtype]
    h, inter_size, nh, inner = spec.hidden_size, spec.intermediate_size, spec.num_heads, spec.num_heads * spec.head_dim
    Le, Ld = spec.encdec.encoder_layers, spec.encdec.decoder_layers  # type: ignore[union-attr]
    b, s = w.batch, w.seq_len
    se = sd = s  # the decoder as long as the encoder's input
    Te, Td = b * se, b * sd
    full = w.base_trainable
    drop = spec.dropout > 0
    tg = lora_in_features(spec, w)
    adapters = lora_inputs(w)

    def lora(*modules: str, input_kept: bool = False) -> float:
        """What the adapters on `modules`, Linears that read one tensor, keep per token (states.LoraInputs)."""
        return adapters.saved([tg[m] for m in modules if m in tg], w.lora_rank, input_kept=input_kept)

    # T5LayerNorm: fp32 upcast + rsqrt, the 16-bit input (the upcast is the input itself in fp32), and with
    # trainable weights the normalized tensor and the output (kept by the Linear after it)
    norm = FP32 * h + FP32 + (c * h if c != FP32 else 0) + (2 * c * h if full else 0)
    mask = 1 if drop else 0
    gated = spec.mlp == "gated"
    acts = 4 if spec.activation in ("gelu_new", "gelu_fast") else 1  # gelu_new keeps x, tanh, 0.5x, 1 + tanh
    ffn = c * inter_size * (acts + (2 if gated else 0))  # activation saves (+ gelu output and wi_1 output, gated)
    if drop:
        ffn += inter_size + (c * inter_size if full else 0)  # dropout mask, and its output (wo's input)
    elif gated and full:
        ffn += c * inter_size                                # the product is wo's input
    # wo reads ReLU's output, which ReLU keeps for its backward (no dropout between them, no gate after it)
    ffn += lora("wi", "wi_0", "wi_1") + lora("wo", input_kept=not gated and not drop and spec.activation == "relu")
    attn_tok = 4 * c * inner + lora("q", "k", "v") + lora("o", input_kept=True)  # q, k, v, output (o's input)
    lse = FP32 * nh * _rows(s) * b                      # per attention call, per stack's own length
    bias = nh * s * s * c                               # each layer's contiguous copy of the position bias

    enc_tok = 2 * norm + attn_tok + 2 * h * mask + ffn
    enc_layer = Te * enc_tok + lse + bias
    # decoder: three norms; self-attention as the encoder's; cross-attention keeps q and the output per decoder
    # token and its own K and V of the encoder output per encoder token
    dec_tok = 3 * norm + attn_tok + 2 * c * inner + lora("q") + lora("o", input_kept=True) + 3 * h * mask + ffn
    cross_kv = Te * (2 * c * inner + lora("k", "v", input_kept=True))  # they read the encoder output, kept once
    dec_layer = Td * dec_tok + cross_kv + 2 * lse + bias + sd * sd
    # once per step: token ids and position buckets (embedding backward, when they train), the embedding
    # dropouts' masks, the final norms and dropouts, the encoder output (every cross-attention K/V reads it), the
    # LM head's input, and the cross-attention's zero position bias (heads x s_dec x s_enc, shared by its layers)
    final_norm = FP32 * h + FP32 + (c * h if c != FP32 else 0) + (c * h if full else 0)
    once = (Te + Td) * (2 * mask * h + final_norm) + Te * c * h + (Td * c * h if full else 0) + nh * sd * se * c
    if full:
        once += (Te + Td) * INDEX + (se * se + sd * sd) * INDEX
    if w.grad_checkpointing:
        saved = (Le * Te + Ld * Td) * c * h + once
        formula = (f"checkpointing: each T5Block's input, (L_enc x b x s_enc + L_dec x b x s_dec) x h x {c:g} B = "
                   f"({Le} x {Te} + {Ld} x {Td}) x {h} x {c:g}, + encoder output, final norms, biases; one layer "
                   "is recomputed in backward")
        return SavedActivations(int(saved), int(max(enc_layer, dec_layer)), formula)
    saved = Le * enc_layer + Ld * dec_layer + once
    formula = (f"encoder {Le} x ({Te} tokens x {enc_tok:,.0f} B + position-bias copy heads x s^2 x {c:g} + "
               f"logsumexp) + decoder {Ld} x ({Td} tokens x {dec_tok:,.0f} B + cross-attention K/V of the encoder "
               f"output {Te} x 2 x {inner} x {c:g} + causal bias and mask + 2 logsumexp) + embeddings, final norms, "
               f"encoder output; decoder length = seq_len {s}; terms per token: T5LayerNorm {norm:,.0f}, attention "
               f"q/k/v/output {attn_tok:,.0f}, FFN {ffn:,.0f}" + (f", dropout masks {mask * h} per sublayer" if drop
                                                                  else ""))
    return SavedActivations(int(saved), int(max(enc_layer, dec_layer)), formula)


def logits_bytes(spec: ModelSpec, w: Workload) -> Term:
    """T5's loss is CrossEntropyLoss on the compute-dtype logits (no fp32 upcast): training keeps the logits
    (returned) and the log_softmax output; generation computes the last position's logits at each step."""
    c = ELEMENT_BYTES[w.compute_dtype]
    V = spec.vocab_size
    if not w.training:
        return Term(int(w.batch * V * c),
                    f"one decoder position per sequence (generate): b x V x {c:g} B = {w.batch} x {V}")
    positions = w.batch * w.seq_len
    return Term(int(positions * V * 2 * c), f"b x s_dec x V x 2 x {c:g} B (logits + log_softmax, CrossEntropyLoss in "
                                            f"the compute dtype) = {positions} x {V}")


def inference_temporaries(spec: ModelSpec, w: Workload, tokens: int, *, decode: bool) -> Term:
    """Transients of generation besides the caches (T5ForConditionalGeneration.generate, no grad).

    Always: the encoder output generate keeps for the whole generation (b x s_enc x h). Prefill: the larger of
    the encoder pass over the whole prompt (bidirectional: one forward, before any cache exists, so the cache the
    phase counts is subtracted) and a decoder chunk of `tokens` positions with the caches filled: at its FFN the
    d_ff-wide tensors (relu: wi's output and the activation's; gated: the activation's output, wi_1's output and
    their product; gelu_new: x, 0.5 x, 1 + tanh(.) and their product), four hidden-wide tensors (the stack's embedded
    input, the block's input, the cross-attention sublayer's output, the norm's output), and the self-attention position
    bias (chunk x s x heads, computed in the first layer and kept by the stack) and cross-attention's zero bias of the
    same size. Decode: one token.
    """
    c = ELEMENT_BYTES[w.compute_dtype]
    h, inter_size, nh = spec.hidden_size, spec.intermediate_size, spec.num_heads
    b, s = w.batch, w.seq_len
    kept = b * s * h * c
    # gelu_new's elementwise chain holds x, 0.5 x, 1 + tanh(.) and their product at once
    k = 4 if spec.activation in ("gelu_new", "gelu_fast") else 3 if spec.mlp == "gated" else 2
    if decode:  # one token's own tensors are negligible beside the encoder output
        return Term(int(kept), f"encoder output kept by generate: b x s_enc x h x {c:g} B = {b} x {s} x {h} x {c:g}")
    cache = estimate_kv(spec, seq_len=s, batch=b, dtype=w.cache_dtype).bytes
    rows = max(1, tokens // max(1, b))
    chunk = tokens * c * (k * inter_size + 4 * h) + 2 * nh * rows * s * c
    # the encoder pass: its FFN (3 hidden-wide tensors, no cross-attention), the (s, s, heads) bias values kept by
    # the stack and one layer's contiguous copy of them
    encoder = b * s * c * (k * inter_size + 3 * h) + 2 * nh * s * s * c - cache
    where = "the encoder over the prompt (before the cache exists)" if encoder > chunk else \
        f"a decoder chunk of {tokens} tokens"
    formula = (f"encoder output kept by generate: b x s_enc x h x {c:g} B = {b} x {s} x {h} x {c:g}; + {where}: "
               f"tokens x ({k} x d_ff + 4 x h) x {c:g} B + self- and cross-attention position biases "
               f"(2 x heads x rows x s x {c:g} B)")
    return Term(int(kept + max(encoder, chunk)), formula)
