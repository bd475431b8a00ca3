"""Every constant of the memory estimate, each with its source, or the word "assumed" where none is published.

A figure a user rents a card on rests on these; when one is only assumed, `campaign explain` (estimate vs a
measured run) is how to replace it with a measured one, and the overridable ones (`fragmentation`,
`context_bytes`) reach every place that uses them (estimate, card fit, KV budget).
Constants still elsewhere: memory/activations.py (the per-tensor terms of saved activations, read off the
transformers implementations) and memory/reserved.py's order in which a step allocates its tensors (code, not a
number). The 512-byte rounding of `trace`'s tracker and `measure`'s CPU counter is MIN_BLOCK below.
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
# With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) one segment per pool grows in pages:
# `segment_size = pool->is_small ? kSmallBuffer : kLargeBuffer` (try_allocate_expandable_segment; the page sizes
# are the two buffers above). Reserved - allocated is not a constant here: memory/reserved.py replays the step's
# tensors through memory/allocator.py, which follows these rules.

# --- Outside PyTorch's allocator ------------------------------------------------------------------------------------
# CUDA context + cuBLAS/cuDNN handles and workspaces with lazy module loading (CUDA_MODULE_LOADING=LAZY, PyTorch's
# default since 1.13). Published: pytorch/pytorch#86509 measured the bare context at 287,047,680 B lazy
# (666,632,192 B eager); the handles and cuBLAS workspaces come on top. 500 MiB is assumed for the whole.
CUDA_CONTEXT_BYTES = 500 * MiB

# --- A flat allocator overhead, only when asked -------------------------------------------------------------------
# `--fragmentation 10%` (memory, trace, kv) replaces the replayed overhead by a share of the largest transient working
# set. No command applies a share by default (memory and kv replay the estimate's tensors, trace its traced
# allocations); this is the value the API re-exports as an example share. Assumed.
FRAGMENTATION = 0.10

# --- Multi-card communication buffers -------------------------------------------------------------------------------
# NCCL, outside PyTorch's allocator (cudaMalloc by the communicator): NCCL_BUFFSIZE, "the size of the buffer used by
# NCCL when communicating data between pairs of GPUs", default 4194304 (4 MiB) (NCCL user guide, Environment
# Variables, NCCL_BUFFSIZE). A ring or tree channel connects each rank to 2 peers, each connection with its buffer.
NCCL_BUFFSIZE = 4 * MiB
NCCL_PEERS_PER_CHANNEL = 2
# Channels per communicator: NCCL picks them from the topology (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS); 16 on
# NVLink machines is assumed. The communicator's own device allocations (work FIFOs, proxy and protocol LL/LL128
# buffers) are assumed at 64 MiB more.
NCCL_CHANNELS = 16
NCCL_COMM_EXTRA = 64 * MiB
# DeepSpeed ZeRO: the defaults of deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig, read at deepspeedai/DeepSpeed
# edaa722; the same values in the docs' "ZeRO Optimizations" config-json section), in parameter elements:
ZERO_REDUCE_BUCKET = 500_000_000        # reduce_bucket_size: int = Field(pp_int(5e8)): "Number of elements reduced/
#                                         allreduced at a time"; stage_1_and_2.py setup_buckets allocates it whole,
#                                         torch.empty(int(self.reduce_bucket_size), dtype=self.dtype), at the first
#                                         gradient of each backward (a second one with overlap_comm); stage3.py
#                                         allocates torch.empty(self.reduce_bucket_size, dtype) once, at the
#                                         optimizer's init.
ZERO_ALLGATHER_BUCKET = 500_000_000     # allgather_bucket_size: Field(pp_int(5e8)): only how many shards the stage 1-2
#                                         all-gather is cut into (runtime/utils.py all_gather_dp_groups narrows the flat
#                                         partitions: no buffer of its own)
ZERO_CONTIGUOUS_GRADIENTS = True        # contiguous_gradients: bool = True
# overlap_comm: Optional[bool] = None, then the validator overlap_comm_valid: `self.overlap_comm = self.stage ==
# ZeroStageEnum.weights` (on for stage 3, off for stages 1-2). Stage 1-2 keep a second reduce buffer when it is on.
ZERO_SUB_GROUP_SIZE = 1_000_000_000     # sub_group_size: Field(pp_int(1e9)): stage 3 steps the optimizer one sub-group
#                                         of its partition at a time (stage3.py _prepare_fp32_grad_for_sub_group)
ZERO3_PREFETCH_BUCKET = 50_000_000      # prefetch_bucket_size (alias stage3_prefetch_bucket_size): Field(pp_int(5e7))
ZERO3_MAX_LIVE_PARAMETERS = 1_000_000_000  # max_live_parameters (stage3_max_live_parameters): Field(pp_int(1e9)); the
#                                         coordinator caps prefetches at it (partitioned_param_coordinator.py:
#                                         min(max_n_available_params - n_available_params, prefetch_bucket_sz))
ZERO3_MAX_REUSE_DISTANCE = 1_000_000_000  # max_reuse_distance (stage3_max_reuse_distance): Field(pp_int(1e9)): "Do not
#                                         release a parameter if it will be reused within this threshold of parameters"
ZERO3_PERSISTENCE_THRESHOLD = 100_000   # param_persistence_threshold (stage3_param_persistence_threshold):
#                                         Field(pp_int(1e5)): "Do not partition parameters smaller than this threshold"
# "auto" in an HF Trainer / accelerate DeepSpeed config: transformers integrations/deepspeed.py
# (HfTrainerDeepSpeedConfig.trainer_config_finalize) fills reduce_bucket_size = hidden_size * hidden_size,
# stage3_prefetch_bucket_size = 0.9 * hidden_size * hidden_size, stage3_param_persistence_threshold = 10 * hidden_size.
ZERO_AUTO_PREFETCH_SHARE = 0.9
ZERO_AUTO_PERSISTENCE_HIDDEN = 10
# DDP (torch.nn.parallel.DistributedDataParallel): the Reducer copies gradients into flat all-reduce buckets that
# cover every trainable parameter; "gradient_as_bucket_view (bool) - When set to True, gradients will be views
# pointing to different offsets of allreduce communication buckets. This can reduce peak memory usage, where the
# saved memory size will be equal to the total gradients size." (PyTorch docs, DistributedDataParallel)
DDP_BUCKET_COPIES = 1
# Its buckets: "bucket_cap_mb - DistributedDataParallel will bucket parameters into multiple buckets so that
# gradient reduction of each bucket can potentially overlap with backward computation. bucket_cap_mb controls the
# bucket size in MebiBytes (MiB). If None, a default size of 25 MiB will be used." (PyTorch docs)
DDP_BUCKET_CAP = 25 * MiB

# --- The replay's resolution ------------------------------------------------------------------------------------
# A dynamic KV cache's growth is replayed for at most this many decode steps (longer generations in strides of
# several tokens): the allocator's pattern repeats, and each step is one replayed torch.cat per layer. Assumed.
DECODE_REPLAY_STEPS = 256

# --- Element sizes the frameworks choose -----------------------------------------------------------------------------
FP32_BYTES = 4
# peft >= 0.12.0: get_peft_model(autocast_adapter_dtype=True) casts bf16/fp16 adapter weights to fp32 (peft#1706,
# huggingface/peft ae1ae20, tuners_utils.py _cast_adapter_dtype). Before 0.12.0 (and with autocast_adapter_dtype=False:
# --no-peft-autocast) they took the base weights' dtype when it is floating (lora/layer.py update_layer:
# self.to(weight.device, dtype=weight.dtype)); a quantized base's storage is not floating: fp32.
ADAPTER_BYTES = FP32_BYTES
BNB_8BIT_BLOCK = 256         # bitsandbytes 8-bit optimizers: blockwise quantization, one fp32 absmax per 256
TORCHAO_4BIT_BLOCK = 128     # torchao AdamW4bit: 4-bit states, one fp32 scale per block of 128 (subclass_4bit.py)
# torchao's low-bit AdamW steps (torch.compile(single_param_adam), one tensor at a time) as inductor compiles torchao
# 0.18 on the CPU, in bytes per element of the tensor stepping (the buffers of its output code,
# benchmarks/torchao_lowbit_step.py); a GPU's fused kernels can only keep less. AdamW4bit: for each state an fp32
# dequantized copy, int64 codes and packed uint8 codes, 2 x (4 + 8 + 0.5); AdamW8bit: each state's fp32 copy, 2 x 4
TORCHAO_STEP_BYTES = {"adamw-4bit": 25, "adamw-8bit-ao": 8}
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

# --- explain: the margin and what counts as the same workload -----------------------------------------------------
# Added to the largest measured excess: batches vary in length and the allocator's state varies between runs.
# Assumed (no published run-to-run spread of peak memory was found to derive it from).
RUN_TO_RUN = 0.05
# A measured phase more than this many times the estimate (or less than its inverse) is another workload, not an
# estimation error: the formula's published gaps stay within tens of percent (benchmarks/memory_reference.py, the
# worst figure 0.76). Assumed as the boundary.
PLAUSIBLE_RATIO = 3.0
