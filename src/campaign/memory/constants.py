"""Every constant of the memory estimate, each with its source, or the word "assumed" where none is published.

A figure a user rents a card on rests on these; when one is only assumed, `campaign explain` (estimate vs a
measured run) is how to replace it with a measured one, and the overridable ones (`fragmentation`,
`context_bytes`) reach every place that uses them (estimate, card fit, KV budget).
Constants still elsewhere: memory/activations.py (the per-tensor terms of saved activations, read off the
transformers implementations), memory/explain.py (RUN_TO_RUN, the margin's 5 points), memory/tracker.py
(its 512-byte rounding, = MIN_BLOCK here).
"""
from __future__ import annotations

MiB = 2**20

# --- PyTorch's CUDA caching allocator: c10/cuda/CUDACachingAllocator.cpp (the same values since PyTorch 1.x;
# CUDAAllocatorConfig can change them, defaults here) ------------------------------------------------------------
MIN_BLOCK = 512              # kMinBlockSize: every request rounds up to 512 B
SMALL_SIZE = 1 * MiB         # kSmallSize: the largest "small" request
SMALL_BUFFER = 2 * MiB       # kSmallBuffer: small requests are packed into 2 MiB segments
LARGE_BUFFER = 20 * MiB      # kLargeBuffer: requests of 1-10 MiB get a 20 MiB segment
MIN_LARGE_ALLOC = 10 * MiB   # kMinLargeAlloc: from 10 MiB, a segment of the request's own size...
ROUND_LARGE = 2 * MiB        # kRoundLarge: ...rounded up to 2 MiB
# A large tensor living for the whole run gets its own 2 MiB-rounded segment: its unusable tail averages half a
# rounding step if sizes are spread evenly (assumed), and only tensors over kSmallSize are concerned.
# (Remainders over 1 MiB are split off and reused, so the tail is 0 to 1 MiB: 0.5 MiB on average.)
LARGE_TENSOR = SMALL_SIZE
LARGE_TENSOR_WASTE = MiB // 2

# --- Outside PyTorch's allocator ------------------------------------------------------------------------------------
# CUDA context + cuBLAS/cuDNN handles and workspaces with lazy module loading (CUDA_MODULE_LOADING=LAZY, PyTorch's
# default since 1.13). Published: pytorch/pytorch#86509 measured the bare context at 287,047,680 B lazy
# (666,632,192 B eager); the handles and cuBLAS workspaces come on top. 500 MiB is assumed for the whole.
CUDA_CONTEXT_BYTES = 500 * MiB

# --- Allocator overhead on transient tensors ----------------------------------------------------------------------
# Share of the largest transient working set (activations, logits, temporaries, a growing cache) the caching
# allocator holds beyond what is allocated (block splitting, freed blocks that do not fit the next request).
# Assumed: no published figure covers all workloads; `campaign explain` measures it (allocator fragmentation =
# peak reserved - peak allocated) and benchmarks/memory_reference.py compares the sums with published peaks.
FRAGMENTATION = 0.10

# --- Element sizes the frameworks choose -----------------------------------------------------------------------------
FP32_BYTES = 4
ADAPTER_BYTES = FP32_BYTES   # peft creates LoRA weights in fp32 on a 16-bit base (autocast_adapter_dtype=True)
BNB_8BIT_BLOCK = 256         # bitsandbytes 8-bit optimizers: blockwise quantization, one fp32 absmax per 256
NF4_BLOCK = 64               # bitsandbytes 4-bit: one absmax per 64 weights (QLoRA paper, Dettmers et al. 2023,
NF4_DOUBLE_QUANT_BLOCK = 256  # sec. 3); double quantization: the absmax in 8 bits, one fp32 scale per 256 of them

# --- The loss over the vocabulary (transformers' ForCausalLMLoss: logits.float(), then cross_entropy) -------------
# At the start of backward the logits (compute dtype, held by the model output) and log_softmax's fp32 output
# (kept for its backward) are alive; the fp32 upcast was only log_softmax's input and is freed.
LOG_SOFTMAX_OUTPUT_BYTES = FP32_BYTES
# Gradients: log_softmax's backward holds the fp32 gradient into it and the one it returns at once.
LOGITS_GRAD_BYTES = 2 * FP32_BYTES
# Gemma 2's final logit soft-capping (logits / cap -> tanh -> * cap) keeps tanh's output, in the compute dtype,
# for tanh's backward (transformers Gemma2ForCausalLM.forward, config.final_logit_softcapping).
SOFTCAP_SAVED_COPIES = 1

# --- Optimizer step temporaries ---------------------------------------------------------------------------------
# torch.optim.Adafactor (what `trace` and `measure` run; torch/optim/_adafactor.py): per factored tensor
# var_estimate = row_var @ col_var, then clamp_, rsqrt_ and mul_(grad) in place: one temporary the size of the
# tensor in the gradient's dtype. The foreach implementation (torch's default for CUDA tensors) builds them for
# every tensor of the group at once; the for-loop one, one at a time.
ADAFACTOR_STEP_COPIES = 1
