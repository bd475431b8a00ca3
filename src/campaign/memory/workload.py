"""Workload: what is done with the model (inference or training, method, dtypes, batch, sharding)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from ..errors import InputError
from .constants import TORCHAO_STEP_BYTES
from .dtypes import HALF, QUANTIZED, WEIGHT_ONLY, checkpoint_format, parse_dtype

Mode = Literal["train", "infer"]
METHODS = ("full", "lora", "qlora", "frozen")
OPTIMIZERS = ("adamw", "adamw-8bit", "adamw-8bit-ao", "adamw-4bit", "adamw-32bit", "adafactor", "sgd", "none")
OPTIMIZER_IMPLS = ("foreach", "fused", "loop")
SHARDS = ("none", "zero1", "zero2", "zero3", "fsdp", "tp")
ATTENTION = ("sdpa", "eager")
KV_CACHES = ("static", "dynamic")
HF_LOSSES = ("current", "shift-copy", "float-logits")
LOSSES = ("full", "chunked", "linear", "fused", "cce", "logps", "logsoftmax")
REFERENCES = ("none", "copy", "adapters-off")
LIGER_KERNELS = ("rope", "rms_norm", "swiglu", "geglu")  # Liger's keywords (geglu: Gemma's gated MLP)
LORA_KERNELS = ("qkv", "o", "mlp")  # axolotl's lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel
DEVICE_MAPS = ("none", "auto", "balanced", "balanced_low_0")
# peft's target_modules given as one string: a regular expression over whole module paths (re.fullmatch on
# model.layers.0.self_attn.q_proj: peft/tuners/tuners_utils.py check_target_module_exists), kept as the one target
# "re:PATTERN" (recipe_read.modules, --lora-targets re:PATTERN; states.regex_targets matches it)
LORA_REGEX = "re:"


@dataclass(frozen=True)
class Workload:
    """A training step or an inference pass, fully specified.

    `batch` x `seq_len` is the micro-batch per card for training; for inference `batch` is the number
    of concurrent sequences and `seq_len` the context each reaches (prompt + generated tokens).
    `prefill_chunk` caps the tokens one prefill forward processes (vLLM's chunked prefill; HF generate
    prefills the whole batch at once: set it to batch x seq_len). `expandable_segments`: PyTorch's allocator with
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (default off, as PyTorch's). `grad_as_bucket_view`: DDP's
    gradient_as_bucket_view=True (gradients are views into the all-reduce buckets; default off, as DDP's). `kv_cache`:
    static (preallocated for the whole context: a static cache, vLLM's pool) or dynamic (HF's DynamicCache, grown by
    torch.cat each step over `new_tokens` generated tokens). `grads_kept`: zero_grad() without set_to_none (PyTorch's
    default before 2.0, pytorch/pytorch#92731; HF's Trainer called model.zero_grad()): the gradients stay allocated
    from one step to the next, through the forward and the backward. `softmax_saves_input`: PyTorch before 1.11, whose
    softmax kept its input for backward besides its output (pytorch/pytorch#64000, fixed by #65242).
    `grad_accumulation`: micro-batches per optimizer step (the HF Trainer's gradient_accumulation_steps): `.grad` keeps
    the sum of the micro-batches' gradients until optimizer.step() and zero_grad() after it, so from the second
    micro-batch on the gradients are allocated through the forward and the backward, as with `grads_kept`.
    `bnb_saves_input`: bitsandbytes before 0.43.2, whose 4-bit matmul (MatMul4Bit) kept each quantized linear's input
    for backward (`ctx.tensors = (A, B)`, removed by bitsandbytes#1270). `dtype` is how base weights are stored;
    `mixed_precision` keeps fp32 master weights, gradients and optimizer states with 16-bit compute (PyTorch AMP, or
    ZeRO's bf16 params + fp32 master).
    """

    # Each field's metadata is its command-line option (cli/workload.py generates the options from it): `flag`,
    # `help`, `group` (which commands take it: cli/workload.py's GROUPS), and where the command line differs from
    # the field: `cli_default` (None: derived, e.g. the optimizer from the mode), `cli_type` and `aliases` (other
    # options read into the same field).
    mode: Mode = field(default="train", metadata={
        "flag": "--train/--infer", "param": "train", "group": "step", "cli_default": None, "cli_type": "bool",
        "help": "Training step (default) or inference."})
    method: str = field(default="full", metadata={
        "flag": "--method", "group": "step", "help": "full | lora | qlora | frozen."})
    dtype: str = field(default="bf16", metadata={
        "flag": "--dtype", "group": "step", "cli_default": None,
        "help": "Weight storage: fp32, bf16, fp16, fp8, int8, nf4, int4, gptq, awq (default: bf16, nf4 for --method "
                "qlora; for inference, a quantized checkpoint's own format)."})
    kv_dtype: str | None = field(default=None, metadata={
        "flag": "--kv-dtype", "group": "formats", "help": "KV cache dtype (default: compute dtype)."})
    group_size: int = field(default=128, metadata={
        "flag": "--group-size", "group": "formats", "help": "Group size of int4/gptq/awq scales."})
    double_quant: bool = field(default=True, metadata={
        "flag": "--double-quant/--no-double-quant", "group": "formats", "cli_default": None,
        "help": "nf4: quantize the absmax scales too (default: on for QLoRA; a bitsandbytes checkpoint's own "
                "bnb_4bit_use_double_quant, off in transformers, for inference)."})
    batch: int = field(default=1, metadata={
        "flag": "--batch", "group": "step", "cli_default": None,
        "help": "Micro-batch per card (training) or concurrent sequences (inference)."})
    seq_len: int = field(default=2048, metadata={
        "flag": "--seq-len", "group": "step", "cli_default": None, "help": "Tokens per sequence (training).",
        "aliases": (("context", "--context", "Tokens per sequence, prompt + output (inference)."),
                    ("sequences", "--sequences", "Concurrent sequences (inference; same as --batch)."))})
    optimizer: str = field(default="adamw", metadata={
        "flag": "--optimizer", "group": "step", "cli_default": None,
        "help": "adamw | adamw-8bit (bitsandbytes') | adamw-8bit-ao (torchao's AdamW8bit: the same states, a "
                "compiled step per tensor) | adamw-4bit (torchao's AdamW4bit: 4-bit states, an fp32 scale per 128) | "
                "adamw-32bit (bitsandbytes' 32-bit AdamW, paged or not: fp32 states whatever "
                "the parameters' dtype) | adafactor | sgd | none."})
    optimizer_impl: str = field(default="foreach", metadata={
        "flag": "--optimizer-impl", "group": "step",
        "help": "foreach (default) | fused | loop: foreach keeps a state-sized temporary in the step."})
    mixed_precision: bool = field(default=False, metadata={
        "flag": "--mixed-precision", "group": "step",
        "help": "Autocast: 16-bit compute; fp32 master weights, grads and states for what trains."})
    grad_checkpointing: bool = field(default=False, metadata={
        "flag": "--grad-checkpointing", "group": "step",
        "help": "Recompute activations in backward (one tensor kept per layer)."})
    # Selective checkpointing refines --grad-checkpointing (a switch that recipes and scripts already pass) rather than
    # giving it values: the two ways torchtitan and torchtune select, by layer and by op, each a flag of its own
    checkpoint_every: int = field(default=1, metadata={
        "flag": "--checkpoint-every", "group": "loop",
        "help": "With --grad-checkpointing: checkpoint only every K-th layer (torchtitan selective_ac_option K, "
                "torchtune ac_mode selective + ac_option K); the others keep all their activations. Default 1."})
    checkpoint_ops: bool = field(default=False, metadata={
        "flag": "--checkpoint-ops", "group": "loop",
        "help": "With --grad-checkpointing: per-op selective checkpointing (torchtitan selective_ac_option op): "
                "each layer also keeps its attention output and every other matmul's output."})
    attention: str = field(default="sdpa", metadata={
        "flag": "--attention", "group": "step", "help": "sdpa (flash-style) | eager (materialized scores)."})
    loss: str = field(default="full", metadata={
        "flag": "--loss", "group": "loop",
        "help": "The cross-entropy over the vocabulary: full (the whole logits, their fp32 upcast and gradients at "
                "once; default) | chunked (torchtune's CEWithChunkedOutputLoss: upcast and gradients one of 8 chunks "
                "at a time) | linear (torchtune's LinearCrossEntropyLoss: the output projection, its upcast and "
                "gradients one chunk at a time, every chunk's fp32 log_softmax kept) | fused (Liger's fused linear "
                "cross-entropy, TRL use_liger_kernel: no vocabulary-sized "
                "tensor kept) | cce (Apple's Cut Cross-Entropy, axolotl's CutCrossEntropyPlugin: no logits in memory "
                "at all) | logps (the sequences' log-probabilities of TRL's DPO, ORPO and GRPO: log_softmax row "
                "by row in the logits' dtype, no fp32 copy) | logsoftmax (torchtune's DPO recipes: fp32 logits, one "
                "log_softmax over them all; the LoRA recipes keep the reference's logits through backward)."})
    liger_kernels: str = field(default="", metadata={
        "flag": "--liger-kernels", "group": "loop",
        "help": "Liger's layer kernels, comma-separated: rms_norm (no fp32 copy of each norm's input kept), swiglu "
                "or, for Gemma, geglu (the MLP keeps gate and up only; Mixtral's and Qwen3-MoE's fused experts), "
                "rope (nothing saved changes); Llama, Mistral, Qwen2/3, Gemma 1-3, Mixtral, Qwen3-MoE. TRL's "
                "use_liger_kernel: --liger-kernels rope,rms_norm,swiglu --loss fused."})
    lora_kernels: str = field(default="", metadata={
        "flag": "--lora-kernels", "group": "loop",
        "help": "axolotl's fused LoRA functions, comma-separated: qkv (lora_qkv_kernel: q, k and v's adapters keep "
                "only their shared input), o (lora_o_kernel: o_proj's adapter keeps the attention output SDPA "
                "keeps), mlp (lora_mlp_kernel: the MLP keeps its input, gate and up only); with --lora-dropout each "
                "also keeps its dropped-out input and mask. Each applies where all of its projections carry LoRA, "
                "on Llama-like models (mlp: dense ones). axolotl turns all three on for LoRA and QLoRA unless told."})
    optimizer_in_backward: bool = field(default=False, metadata={
        "flag": "--optimizer-in-backward", "group": "loop",
        "help": "Each parameter stepped as its gradient is made (torchtune's optimizer_in_bwd): the gradients are "
                "never all alive."})
    activation_offloading: bool = field(default=False, metadata={
        "flag": "--activation-offloading", "group": "loop",
        "help": "With --grad-checkpointing: each layer's checkpointed input moved to the CPU (torchtune's "
                "enable_activation_offloading); host RAM holds them."})
    reference: str = field(default="none", metadata={
        "flag": "--reference", "group": "loop",
        "help": "The reference model of a preference trainer (DPO), whose forward runs after the trained model's at "
                "each step: none (default; ORPO, SimPO, precompute_ref_log_probs) | copy (a frozen copy of the "
                "weights, TRL's DPO without PEFT: loaded and sharded as the trained ones, whole on each card under "
                "ZeRO-1/2) | adapters-off (LoRA: the trained model with its adapters disabled, TRL's DPO with PEFT: "
                "no copy). --batch counts sequences: a DPO pair is 2."})
    rollouts: int = field(default=0, metadata={
        "flag": "--rollouts", "group": "loop",
        "help": "Sequences the trained model generates on this card before it trains on them (TRL's GRPO and RLOO "
                "without vLLM: generate without grad, per_device_train_batch_size x steps_per_generation): a "
                "generation phase with their cache of --seq-len, beside the optimizer states. 0: none (default)."})
    completion_tokens: int | None = field(default=None, metadata={
        "flag": "--completion-tokens", "group": "loop",
        "help": "The tokens generated after each prompt (GRPO's max_completion_length; --seq-len is prompt + "
                "completion): generation grows its cache over them, and the loss's logits cover them only "
                "(logits_to_keep). With --loss logps."})
    vllm_share: float = field(default=0.0, metadata={
        "flag": "--vllm-share", "group": "loop",
        "help": "A vLLM engine colocated on each card to generate (TRL's vllm_mode colocate): it holds this share of "
                "the card (vllm_gpu_memory_utilization) beside the training, which is fitted to the rest. 0: none "
                "(default)."})
    lora_rank: int = field(default=16, metadata={"flag": "--lora-rank", "group": "step", "help": "LoRA rank r."})
    lora_dropout: float = field(default=0.0, metadata={
        "flag": "--lora-dropout", "group": "step",
        "help": "peft's lora_dropout: above 0 each adapter keeps its own dropped-out input and a 1-byte mask (a GPU's "
                "native_dropout) instead of sharing the layer's input."})
    lora_targets: tuple[str, ...] = field(default=("all-linear",), metadata={
        "flag": "--lora-targets", "group": "step", "cli_default": "all-linear", "cli_type": "str",
        "help": "Comma-separated module names, all-linear, or re:PATTERN: peft's target_modules as one string, a "
                "regular expression matched against whole module paths (model.layers.0.self_attn.q_proj)."})
    gpus: int = field(default=1, metadata={"flag": "--gpus", "group": "parallel", "help": "Number of cards."})
    shard: str = field(default="none", metadata={
        "flag": "--shard", "group": "parallel", "help": "none (DDP) | zero1 | zero2 | zero3 | fsdp | tp (inference)."})
    fsdp_embedding_units: bool = field(default=False, metadata={
        "flag": "--fsdp-embedding-units", "group": "parallel",
        "help": "FSDP: the token embedding and the output projection each an FSDP unit of its own (torchtune's "
                "custom_sharded_layers: [tok_embeddings, output]), gathered only while used, not with the root."})
    reshard_after_forward: bool = field(default=True, metadata={
        "flag": "--reshard-after-forward/--no-reshard-after-forward", "group": "parallel",
        "help": "FSDP: each block frees its gathered parameters after its forward (default, FSDP2's and torchtune's); "
                "--no-reshard-after-forward keeps them gathered until its backward (torchtune's "
                "fsdp_reshard_after_forward: False): the whole model unsharded at the turn to backward."})
    prefill_chunk: int = field(default=8192, metadata={
        "flag": "--prefill-chunk", "group": "step",
        "help": "Tokens per prefill forward (vLLM chunked prefill; HF generate: batch x context)."})
    expandable_segments: bool = field(default=False, metadata={
        "flag": "--expandable-segments", "group": "allocator",
        "help": "PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (default off, as "
                "PyTorch's): segments grow in pages, little fragmentation."})
    grad_as_bucket_view: bool = field(default=False, metadata={
        "flag": "--grad-as-bucket-view", "group": "ddp",
        "help": "DDP with gradient_as_bucket_view=True: no gradient-sized bucket copy (default off, as DDP's)."})
    kv_cache: str = field(default="static", metadata={
        "flag": "--kv-cache", "group": "generation",
        "help": "static (preallocated for the whole context: a static cache, vLLM) | dynamic (HF generate's "
                "DynamicCache, grown by torch.cat)."})
    new_tokens: int | None = field(default=None, metadata={
        "flag": "--new-tokens", "group": "generation",
        "help": "Tokens generated (dynamic cache): the context is prompt + new tokens."})
    grads_kept: bool = field(default=False, metadata={
        "flag": "--grads-kept", "group": "allocator",
        "help": "zero_grad() without set_to_none (PyTorch's default before 2.0): gradients stay allocated through "
                "forward and backward."})
    grad_accumulation: int = field(default=1, metadata={
        "flag": "--grad-accumulation", "group": "allocator",
        "help": "Micro-batches per optimizer step (the Trainer's gradient_accumulation_steps); --batch is the "
                "micro-batch. From the second on, the gradients summed so far stay allocated through forward and "
                "backward."})
    sync_each_batch: bool = field(default=False, metadata={
        "flag": "--sync-each-batch/--no-sync-each-batch", "group": "allocator",
        "help": "FSDP with --grad-accumulation: reduce-scatter the gradients every micro-batch, so they stay sharded "
                "between micro-batches (accelerate's sync_each_batch; torchtune's recipes, which never call no_sync). "
                "Off: the HF Trainer's no_sync keeps them whole until the last micro-batch."})
    softmax_saves_input: bool = field(default=False, metadata={
        "flag": "--softmax-saves-input", "group": "legacy",
        "help": "PyTorch before 1.11: softmax keeps its input for backward too (eager attention scores)."})
    bnb_saves_input: bool = field(default=False, metadata={
        "flag": "--bnb-saves-input", "group": "legacy",
        "help": "bitsandbytes before 0.43.2: each 4-bit linear keeps its input for backward (QLoRA activations)."})
    peft_autocast: bool = field(default=True, metadata={
        "flag": "--peft-autocast/--no-peft-autocast", "group": "legacy",
        "help": "peft's autocast_adapter_dtype (default on since peft 0.12: LoRA weights in fp32 on a bf16/fp16 "
                "base); --no-peft-autocast: in the base's dtype, as peft before 0.12 or autocast_adapter_dtype=False "
                "(on a quantized base the compute dtype: torchtune's QLoRA, TRL 0.22 on)."})
    kbit_upcast: bool = field(default=True, metadata={
        "flag": "--kbit-upcast/--no-kbit-upcast", "group": "step",
        "help": "QLoRA on a bitsandbytes base (nf4, int8): peft's prepare_model_for_kbit_training, which TRL before "
                "0.22 and the HF QLoRA examples call (default): embeddings, LM head and norms cast to fp32, so the "
                "residual stream (and without --mixed-precision the logits and the layers) run in fp32; "
                "--no-kbit-upcast: a stack that does not call it or casts them back (torchtune, fms-acceleration, "
                "axolotl on Llama-like models, FSDP/ZeRO-3 QLoRA)."})
    hf_loss: str = field(default="current", metadata={
        "flag": "--hf-loss", "group": "legacy",
        "help": "transformers' causal-LM loss path: current (4.49 on: the labels shifted, the fp32 upcast inside "
                "the loss only) | shift-copy (4.46-4.48: ForCausalLMLoss also copies the shifted fp32 logits, "
                "shift_logits.contiguous(), removed by transformers#35646) | float-logits (4.45 and before: the model "
                "returns its logits upcast, logits.float() in forward, and the loss copies them shifted)."})
    logits_held: bool = field(default=True, metadata={
        "flag": "--logits-held/--no-logits-held", "group": "step",
        "help": "The training loop keeps the model output (its logits) through backward, as a loop that calls "
                "loss.backward() with `outputs` in scope; --no-logits-held: the HF Trainer, whose compute_loss returns "
                "the loss only, so the logits are freed before backward."})
    # DeepSpeed ZeRO's own buffers (--shard zero1/zero2/zero3; memory/deepspeed.py): None = DeepSpeed's default
    # (memory/constants.py), "auto" = the HF Trainer's hidden-size rule; element counts, as in a ds_config.
    zero_reduce_bucket: int | str | None = field(default=None, metadata={
        "flag": "--zero-reduce-bucket", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed reduce_bucket_size, elements (default 5e8; auto: hidden_size^2 as the HF Trainer fills "
                "it)."})
    zero_overlap_comm: bool | None = field(default=None, metadata={
        "flag": "--zero-overlap-comm/--no-zero-overlap-comm", "group": "deepspeed",
        "help": "DeepSpeed overlap_comm (default: on for zero3, off for zero1/zero2; on keeps a second reduce "
                "bucket in zero1/zero2)."})
    zero_contiguous_gradients: bool = field(default=True, metadata={
        "flag": "--zero-contiguous-gradients/--no-zero-contiguous-gradients", "group": "deepspeed",
        "help": "DeepSpeed contiguous_gradients (default on: gradients copied into the reduce bucket)."})
    zero_sub_group_size: int | str | None = field(default=None, metadata={
        "flag": "--zero-sub-group-size", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed sub_group_size, elements (default 1e9): zero3 steps its partition in sub-groups."})
    zero_prefetch_bucket: int | str | None = field(default=None, metadata={
        "flag": "--zero-prefetch-bucket", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed stage3_prefetch_bucket_size, elements (default 5e7; auto: 0.9 x hidden_size^2)."})
    zero_max_live_params: int | str | None = field(default=None, metadata={
        "flag": "--zero-max-live-params", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed stage3_max_live_parameters, elements (default 1e9)."})
    zero_reuse_distance: int | str | None = field(default=None, metadata={
        "flag": "--zero-reuse-distance", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed stage3_max_reuse_distance, elements (default 1e9): gathered parameters used again "
                "within it stay gathered."})
    zero_persistence_threshold: int | str | None = field(default=None, metadata={
        "flag": "--zero-persistence-threshold", "group": "deepspeed", "cli_type": "str",
        "help": "DeepSpeed stage3_param_persistence_threshold, elements (default 1e5; auto: 10 x hidden_size): "
                "smaller parameters stay whole on every card."})
    zero_init: bool | None = field(default=None, metadata={
        "flag": "--zero-init/--no-zero-init", "group": "deepspeed",
        "help": "zero3: the model built under deepspeed.zero.Init, partitioned as it is made (default, as "
                "from_pretrained does once TrainingArguments with a ZeRO-3 config exist; not for a quantized base). "
                "--no-zero-init: built whole first, moved whole to each card by deepspeed.initialize."})
    zero_bf16_master: bool = field(default=False, metadata={
        "flag": "--zero-bf16-master", "group": "deepspeed",
        "help": "DeepSpeed's bf16 block with bf16_master_weights_and_grads and bf16_optimizer_states (zero1/zero2/"
                "zero3, bf16): the master weights, the gradient partition the optimizer steps and the Adam moments "
                "in bf16 (2 B each, not 4)."})
    offload_optimizer: str = field(default="none", metadata={
        "flag": "--offload-optimizer", "group": "deepspeed",
        "help": "none (default) | cpu: ZeRO-Offload (zero1/zero2/zero3, DeepSpeed offload_optimizer device cpu): "
                "fp32 master weights, optimizer states and the gradient partition in host RAM, stepped on the CPU; "
                "check host RAM with --host-memory."})
    offload_params: str = field(default="none", metadata={
        "flag": "--offload-params", "group": "loop",
        "help": "none (default) | cpu: parameters in host RAM, gathered to the card module by module: with zero3, "
                "DeepSpeed offload_param device cpu (ZeRO-Infinity); with fsdp, CPUOffload(offload_params=True), "
                "which also puts gradients and optimizer states in host RAM and steps on the CPU; check host RAM "
                "with --host-memory."})
    device_map: str = field(default="none", metadata={
        "flag": "--device-map", "group": "generation",
        "help": "none (default) | auto | balanced | balanced_low_0: inference loaded with transformers' "
                "from_pretrained(device_map=...) over --gpus cards (the balanced split: whole layers in "
                "order, card by card; balanced_low_0 leaves card 0 only what the others cannot hold), one peak per "
                "card; needs --card."})
    balance: str = field(default="transformers", metadata={
        "flag": "--balance", "group": "generation",
        "help": "With --device-map: whose balancing caps each card: transformers (transformers 5's own "
                "get_balanced_memory: a buffer of 1.25 x the largest layer or leaf module; default) | accelerate "
                "(transformers 4, accelerate's: 1.25 x the first layer or the mean leaf module)."})
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def training(self) -> bool:
        return self.mode == "train"

    @property
    def kbit_fp32(self) -> bool:
        """peft's prepare_model_for_kbit_training ran: a trained bitsandbytes base (nf4, int8) whose other floating
        parameters it cast to fp32 (peft utils/other.py: every fp16/bf16 parameter but Params4bit). Not where
        DeepSpeed casts them back to 16-bit (states.deepspeed_casts), nor for a QLoRA sharded over cards by FSDP or
        ZeRO-3, for which TRL skips the call (sft_trainer.py: is_sharded_qlora)."""
        return (self.kbit_upcast and self.mode == "train" and self.method in ("lora", "qlora")
                and self.dtype in ("nf4", "int8") and not (self.gpus > 1 and self.shard in ("fsdp", "zero3"))
                and not (self.mixed_precision and self.shard in ("zero1", "zero2", "zero3")))

    @property
    def compute_dtype(self) -> str:
        """Dtype of activations: fp32 for plain fp32 training/inference, and on a k-bit-prepared base (its fp32
        embeddings make the hidden states fp32, and bitsandbytes' linears return their input's dtype, under autocast
        too: Linear4bit.forward's out.to(inp_dtype)); else the 16-bit compute dtype."""
        if (self.dtype == "fp32" and not self.mixed_precision) or self.kbit_fp32:
            return "fp32"
        return "fp16" if self.dtype == "fp16" else "bf16"

    @property
    def logits_dtype(self) -> str:
        """Dtype of the LM head's output: the compute dtype, except on a k-bit-prepared base under autocast, whose
        fp32 head (a plain Linear, on autocast's list) gives 16-bit logits."""
        if self.kbit_fp32 and self.mixed_precision:
            return "fp16" if self.dtype == "fp16" else "bf16"
        return self.compute_dtype

    @property
    def cache_dtype(self) -> str:
        """KV cache dtype: --kv-dtype, else the compute dtype."""
        return self.kv_dtype or self.compute_dtype

    @property
    def base_trainable(self) -> bool:
        """Whether the base model's weights receive gradients."""
        return self.training and self.method == "full"

    @property
    def grads_held(self) -> bool:
        """Whether the gradients are allocated through the forward and the backward: kept by zero_grad() without
        set_to_none, or summed over micro-batches (gradient accumulation, from the second micro-batch on)."""
        return self.grads_kept or self.grad_accumulation > 1

    @property
    def adapters(self) -> bool:
        return self.method in ("lora", "qlora")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def size_free_key(w: Workload) -> tuple:
    """Every field of `w` but its batch and its length, as (name, value) pairs: the key of what the allocator
    replay keeps between the probes of a card solve, which differ only in those two. Kept on the workload (one
    probe asks it several times), and carried to its copies that differ in those two only (resized)."""
    key = w.__dict__.get("_size_free_key")
    if key is None:
        key = tuple((f.name, getattr(w, f.name)) for f in fields(w) if f.name not in ("batch", "seq_len"))
        object.__setattr__(w, "_size_free_key", key)
    return key


def resized(w: Workload, field_name: str, n: int) -> Workload:
    """`w` with its batch or its seq_len set to `n` (a card solve's probe): a copy, which keeps w's size_free_key
    (every other field is w's), without replace()'s rebuilding of every field."""
    if field_name not in ("batch", "seq_len"):
        raise ValueError(f"resized changes batch or seq_len, not {field_name}")
    size_free_key(w)  # worked out once, on `w`: each copy carries it
    new = copy.copy(w)
    object.__setattr__(new, field_name, n)
    return new


class KeptBySpec:
    """Values worked out once per model and key (a size_free_key and what else they read), for the probes of a card
    solve: each kept beside its spec, which is checked (the key holds the spec's id only, which a later spec may
    reuse); at most `most`, all forgotten when full; a key that cannot be hashed is worked out each time."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.values: dict[tuple, tuple[Any, Any]] = {}

    def get(self, spec: Any, key: tuple, make: Callable[[], Any]) -> Any:
        key = (id(spec), key)
        try:
            found = self.values.get(key)
        except TypeError:
            return make()
        if found is not None and found[0] is spec:
            return found[1]
        if len(self.values) >= self.most:
            self.values.clear()
        value = make()
        self.values[key] = (spec, value)
        return value

    def clear(self) -> None:
        self.values.clear()


def weights_format(spec: Any, dtype: str | None, group_size: int = 128, *, inference: bool) -> tuple[str | None, int]:
    """(weight dtype, group size) by the one rule memory, trace, explain and kv share: `dtype` when given; else, for
    inference, a quantized checkpoint's own format (its quantization_config: fp8 for DeepSeek-V3); else None,
    which make_workload reads as bf16 (nf4 for QLoRA). Training dequantizes: full fine-tuning cannot update fp8.
    `spec` may be None (nothing known of the checkpoint).
    """
    if dtype is not None:
        return dtype, group_size
    where = f"{getattr(spec, 'source', 'config.json')}: quantization_config"
    native = checkpoint_format(getattr(spec, "checkpoint_quant", None), where) if inference else None
    if native is None:
        return None, group_size
    return native[0], native[1] if group_size == 128 else group_size


ZERO_ELEMENTS = ("zero_reduce_bucket", "zero_prefetch_bucket", "zero_persistence_threshold", "zero_sub_group_size",
                 "zero_max_live_params", "zero_reuse_distance")


def zero_elements(value: Any, name: str) -> int | str | None:
    """A DeepSpeed size in elements as a ds_config writes it (500000000, 5e8, "5e8", "auto"): a whole number >= 0,
    "auto", or None (DeepSpeed's default); one-line error otherwise."""
    if value is None or value == "auto":
        return value
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if not (0 <= number < float("inf") and number == int(number)):  # nan, inf (1e400, Infinity) refused here
        raise InputError(f"{name.replace('_', '-')} must be a whole number of elements (5e8, 500000000) or auto, "
                         f"got {value!r}")
    return int(number)


def _kernel_names(text: Any, flag: str, known: tuple[str, ...]) -> set[str]:
    """The names of a comma list option (--liger-kernels, --lora-kernels), or a one-line refusal of a non-string."""
    if not isinstance(text, str):
        raise InputError(f"{flag} must be a comma-separated list of {', '.join(known)}, got {text!r}")
    return {t.strip() for t in text.split(",") if t.strip()}


def parse_liger_kernels(text: Any) -> str:
    """--liger-kernels as a canonical comma list (Liger's order, each once; "" for none), or a one-line refusal."""
    names = _kernel_names(text, "liger-kernels", LIGER_KERNELS)
    if "fused_linear_cross_entropy" in names:
        raise InputError("--liger-kernels fused_linear_cross_entropy: Liger's fused cross-entropy is --loss fused; "
                         "drop it from --liger-kernels and add --loss fused")
    unknown = sorted(names - set(LIGER_KERNELS))
    if unknown:
        raise InputError(f"--liger-kernels {','.join(unknown)} is not a Liger kernel campaign models; choose among "
                         f"{', '.join(LIGER_KERNELS)}")
    return ",".join(k for k in LIGER_KERNELS if k in names)


def parse_lora_kernels(text: Any) -> str:
    """--lora-kernels as a canonical comma list (qkv, o, mlp; "" for none), or a one-line refusal."""
    names = _kernel_names(text, "lora-kernels", LORA_KERNELS)
    unknown = sorted(names - set(LORA_KERNELS))
    if unknown:
        raise InputError(f"--lora-kernels {','.join(unknown)} is not one of axolotl's LoRA kernels; choose among "
                         f"{', '.join(LORA_KERNELS)} (lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel)")
    return ",".join(k for k in LORA_KERNELS if k in names)


def make_workload(**kwargs: Any) -> Workload:
    """Validate and normalize a Workload from loose values (CLI or notebook); one-line errors on bad input."""
    w = Workload(**{k: v for k, v in kwargs.items() if v is not None})
    if w.mode not in ("train", "infer"):
        raise InputError(f"mode {w.mode!r} is not 'train' or 'infer'")
    if w.method not in METHODS:
        raise InputError(f"method {w.method!r} is unknown; choose one of {', '.join(METHODS)}")
    if w.optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer {w.optimizer!r} is unknown; choose one of {', '.join(OPTIMIZERS)}")
    if w.optimizer_impl not in OPTIMIZER_IMPLS:
        raise InputError(f"optimizer implementation {w.optimizer_impl!r} is unknown; choose foreach (the CUDA default "
                         "since torch 2.0), fused or loop")
    if w.shard not in SHARDS:
        raise InputError(f"shard {w.shard!r} is unknown; choose one of {', '.join(SHARDS)}")
    if w.attention not in ATTENTION:
        raise InputError(f"attention {w.attention!r} is unknown; "
                         "choose sdpa (flash-style) or eager (materialized scores)")
    if w.kv_cache not in KV_CACHES:
        raise InputError(f"kv cache {w.kv_cache!r} is unknown; choose static (preallocated) or dynamic (HF generate's "
                         "DynamicCache)")
    if w.hf_loss not in HF_LOSSES:
        raise InputError(f"hf-loss {w.hf_loss!r} is unknown; choose current (transformers 4.49 on), shift-copy "
                         "(4.46-4.48) or float-logits (4.45 and before)")
    if w.loss not in LOSSES:
        raise InputError(f"loss {w.loss!r} is unknown; choose full, chunked (torchtune's CEWithChunkedOutputLoss), "
                         "linear (torchtune's LinearCrossEntropyLoss), fused (Liger's fused linear cross-entropy), "
                         "cce (Cut Cross-Entropy), logps (TRL's per-sequence log-probabilities) or logsoftmax "
                         "(torchtune's DPO)")
    liger = parse_liger_kernels(w.liger_kernels)
    lora_kernels = parse_lora_kernels(w.lora_kernels)
    if lora_kernels and not (w.mode == "train" and w.method in ("lora", "qlora")):
        raise InputError(f"--lora-kernels {lora_kernels} patches the forward of trained LoRA layers; give --method "
                         "lora or qlora (training), or drop it")
    if lora_kernels and w.bnb_saves_input:
        raise InputError("--lora-kernels with --bnb-saves-input: axolotl's kernels run their own matmuls, no "
                         "bitsandbytes MatMul4Bit keeps the inputs; drop --bnb-saves-input")
    if liger and w.mode != "train":
        raise InputError(f"--liger-kernels {liger} changes what training saves for backward; drop it for inference")
    if isinstance(w.checkpoint_every, bool) or not isinstance(w.checkpoint_every, int) or w.checkpoint_every <= 0:
        raise InputError(f"checkpoint-every must be a positive number of layers (2: every second layer "
                         f"checkpointed), got {w.checkpoint_every!r}")
    if (w.checkpoint_every != 1 or w.checkpoint_ops) and not w.grad_checkpointing and w.mode == "train":
        flag = "--checkpoint-ops" if w.checkpoint_ops else "--checkpoint-every"
        raise InputError(f"{flag} selects what --grad-checkpointing recomputes: add --grad-checkpointing, or drop "
                         f"{flag}")
    if w.checkpoint_ops and w.checkpoint_every != 1:
        raise InputError("--checkpoint-ops and --checkpoint-every are two selective modes (torchtitan's "
                         "selective_ac_option is op or a layer count): give one")
    if w.activation_offloading and (w.checkpoint_every != 1 or w.checkpoint_ops) and w.mode == "train":
        raise InputError("--activation-offloading is modelled with every layer checkpointed: drop --checkpoint-every / "
                         "--checkpoint-ops, or --activation-offloading")
    if w.activation_offloading and not w.grad_checkpointing and w.mode == "train":
        raise InputError("--activation-offloading moves each checkpointed layer's input to the CPU: add "
                         "--grad-checkpointing (torchtune offloads with activation checkpointing on)")
    if w.offload_optimizer not in ("none", "cpu"):
        raise InputError(f"offload-optimizer {w.offload_optimizer!r} is not modelled; give cpu (ZeRO-Offload) or none"
                         + (" (nvme offload is not modelled: estimate with cpu or none)"
                            if w.offload_optimizer == "nvme" else ""))
    if w.offload_optimizer == "cpu" and w.mode == "train" and w.shard not in ("zero1", "zero2", "zero3"):
        raise InputError(f"--offload-optimizer cpu is DeepSpeed ZeRO-Offload, modelled with --shard zero1, zero2 or "
                         f"zero3 (got --shard {w.shard}); add --shard zero2"
                         + (", or --offload-params cpu (FSDP offloads the parameters, gradients and states together)"
                            if w.shard == "fsdp" else "") + ", or drop --offload-optimizer")
    if w.offload_optimizer == "cpu" and w.mode == "train" and not w.mixed_precision:
        raise InputError("--offload-optimizer cpu is modelled with bf16/fp16 training (DeepSpeed's fp32 master on the "
                         "CPU): add --mixed-precision, or drop --offload-optimizer")
    if w.zero_bf16_master and w.mode == "train" and (
            w.shard not in ("zero1", "zero2", "zero3") or not w.mixed_precision or w.dtype == "fp16"):
        raise InputError("--zero-bf16-master is DeepSpeed's bf16 master weights and optimizer states, for bf16 "
                         "training under ZeRO: give it with --shard zero1, zero2 or zero3 and --mixed-precision "
                         "(DeepSpeed's bf16 enabled), or drop it")
    if w.zero_bf16_master and w.offload_optimizer == "cpu":
        raise InputError("--zero-bf16-master with --offload-optimizer cpu (bf16 moments in DeepSpeedCPUAdam on the "
                         "host) is not modelled: drop one of them (without --zero-bf16-master the host holds fp32 "
                         "master and states: an upper bound)")
    if w.offload_params not in ("none", "cpu"):
        raise InputError(f"offload-params {w.offload_params!r} is not modelled; give cpu (ZeRO-3's offload_param, "
                         "FSDP's CPUOffload) or none" + (" (nvme offload is not modelled: estimate with cpu or none)"
                                                         if w.offload_params == "nvme" else ""))
    if w.offload_params == "cpu" and w.mode == "train" and w.shard not in ("zero3", "fsdp"):
        raise InputError(f"--offload-params cpu keeps the parameters in host RAM, which only sharded parameters can: "
                         f"modelled with --shard zero3 (DeepSpeed offload_param) or fsdp (FSDP CPUOffload), got "
                         f"--shard {w.shard}; add --shard zero3 or fsdp, or drop --offload-params")
    if w.offload_params == "cpu" and w.mode == "train" and w.shard == "zero3" and not w.mixed_precision:
        raise InputError("--offload-params cpu with --shard zero3 is modelled with bf16/fp16 training (DeepSpeed's "
                         "16-bit partitions on the CPU): add --mixed-precision, or drop --offload-params")
    if w.offload_params == "cpu" and w.mode == "train" and w.shard == "fsdp" and w.optimizer_in_backward:
        raise InputError("--offload-params cpu with --shard fsdp steps the optimizer on the CPU after backward; drop "
                         "--optimizer-in-backward or it")
    if w.reference not in REFERENCES:
        raise InputError(f"reference {w.reference!r} is unknown; choose none, copy (a frozen copy of the weights) or "
                         "adapters-off (LoRA's base with the adapters disabled)")
    if w.reference != "none" and w.mode != "train":
        raise InputError("--reference is the reference model a preference trainer (DPO) runs beside the trained "
                         "model; drop it for inference")
    if w.reference != "none" and w.method == "frozen":
        raise InputError("--reference beside a model that does not train is a second frozen model: estimate the "
                         "inference of each, or give --method full/lora")
    if w.reference == "adapters-off" and w.method not in ("lora", "qlora"):
        raise InputError(f"--reference adapters-off runs the reference as the LoRA model with its adapters disabled; "
                         f"with --method {w.method} give --reference copy (a frozen copy of the weights)")
    if w.reference != "none" and w.loss == "cce":
        raise InputError("--loss cce with --reference: Cut Cross-Entropy's patch runs only when the model is given "
                         "labels, which a preference trainer's log-probabilities are not (TRL's DPO calls the model "
                         "without them); give --loss logps")
    if isinstance(w.lora_dropout, bool) or not isinstance(w.lora_dropout, (int, float)) or \
            not 0 <= w.lora_dropout < 1:
        raise InputError(f"lora-dropout must be a probability in [0, 1) (peft's lora_dropout, e.g. 0.05), got "
                         f"{w.lora_dropout!r}")
    if isinstance(w.rollouts, bool) or not isinstance(w.rollouts, int) or w.rollouts < 0:
        raise InputError(f"rollouts must be a whole number of sequences (0: none), got {w.rollouts!r}")
    if w.rollouts and w.mode != "train":
        raise InputError("--rollouts is the generation a GRPO step runs before it trains; for inference give "
                         "--infer with --sequences")
    if w.completion_tokens is not None:
        c = w.completion_tokens
        if isinstance(c, bool) or not isinstance(c, int) or not 0 < c < w.seq_len:
            raise InputError(f"completion-tokens must be a positive number below --seq-len ({w.seq_len}: prompt + "
                             f"completion), got {c!r}")
        if w.loss not in ("logps", "fused") and w.mode == "train":
            raise InputError("--completion-tokens is modelled with --loss logps (TRL's GRPO and RLOO take the "
                             "completions' log-probabilities) or fused (Liger's GRPO loss): add --loss logps")
        if w.mode != "train":
            raise InputError("--completion-tokens is the completions a GRPO step trains on; for inference give "
                             "--context (prompt + generated) and --new-tokens")
    share = w.vllm_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
        raise InputError(f"vllm-share must be a share of the card in [0, 1) (vllm_gpu_memory_utilization, e.g. 0.3), "
                         f"got {share!r}")
    if share and w.mode != "train":
        raise InputError("--vllm-share is the vLLM engine colocated with training; for vLLM alone give --infer with "
                         "--sequences and --context")
    if share and w.rollouts:
        raise InputError("--vllm-share: the colocated vLLM engine generates, not the trained model: drop --rollouts "
                         "(--rollouts 0 where a config file counted them)")
    if w.rollouts and w.method == "frozen":
        raise InputError("--rollouts generates with the model a GRPO step trains: give --method full/lora, or --infer "
                         "with --sequences to estimate generation alone")
    if w.rollouts and w.batch > w.rollouts and w.mode == "train":
        raise InputError(f"--batch {w.batch} is more than the {w.rollouts} rollouts a step trains on (TRL's "
                         "per-card rollouts: per_device_train_batch_size x steps_per_generation): lower --batch or "
                         "raise --rollouts")
    if not w.reshard_after_forward and w.mode != "train":
        raise InputError("--no-reshard-after-forward is FSDP's for training; drop it for inference")
    if w.rollouts and w.completion_tokens is None:
        raise InputError("--rollouts generates completions: give --completion-tokens N (max_completion_length; "
                         "--seq-len is prompt + completion)")
    if w.optimizer_in_backward and w.grad_accumulation > 1:
        raise InputError("--optimizer-in-backward steps each parameter as its gradient is made, so gradients cannot "
                         "be summed over micro-batches (torchtune refuses it too): drop --grad-accumulation or it")
    if w.optimizer_in_backward and w.shard != "none" and w.gpus > 1:
        raise InputError("--optimizer-in-backward is modelled on unsharded runs; estimate it without --shard, or "
                         "without the option (an upper bound)")
    if not w.reshard_after_forward and w.mode == "train" and w.shard != "fsdp":
        raise InputError(f"--no-reshard-after-forward is FSDP's reshard_after_forward=False: add --shard fsdp, or drop "
                         f"the option (got --shard {w.shard})")
    if w.fsdp_embedding_units and w.mode == "train" and w.shard != "fsdp":
        raise InputError(f"--fsdp-embedding-units wraps the embedding and the output as FSDP units of their own: "
                         f"add --shard fsdp, or drop the option (got --shard {w.shard})")
    if w.kv_cache == "dynamic" and (w.mode != "infer"):
        raise InputError("--kv-cache dynamic is for inference (HF generate); drop it, or add --infer")
    if w.kv_cache == "dynamic" and w.new_tokens is None:
        raise InputError("--kv-cache dynamic grows the cache over the generated tokens: give --new-tokens N "
                         "(the context is prompt + N)")
    if w.new_tokens is not None and (isinstance(w.new_tokens, bool) or not isinstance(w.new_tokens, int)
                                     or not 0 < w.new_tokens < w.seq_len):
        raise InputError(f"new-tokens must be a positive integer below the context ({w.seq_len}), got {w.new_tokens!r}")
    for name in ("batch", "seq_len", "gpus", "lora_rank", "group_size", "prefill_chunk", "grad_accumulation"):
        value = getattr(w, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
    notes = list(w.notes)
    given = kwargs.get("dtype") is not None
    dtype = parse_dtype(w.dtype)
    kv = parse_dtype(w.kv_dtype, what="kv dtype") if w.kv_dtype else None
    if kv in WEIGHT_ONLY:
        raise InputError(f"kv dtype {w.kv_dtype!r} is a weight format; KV caches use fp32, bf16, fp16, fp8 or int8")
    method, mode, optimizer = w.method, w.mode, w.optimizer
    if mode == "infer":
        offload = [f"--{n.replace('_', '-')}" for n in ("offload_optimizer", "offload_params")
                   if getattr(w, n) != "none"]
        if offload:
            notes.append(f"{', '.join(offload)}: training offload, not modelled for inference (the estimate keeps "
                         "the weights on the card: an upper bound)")
        if method not in ("full", "frozen"):
            notes.append(f"inference with a {method} adapter: the adapter's few weights are ignored")
        method, optimizer = "frozen", "none"
    if method == "frozen":
        optimizer = "none"  # nothing is trained: a loss evaluated without autograd
    grads_kept = w.grads_kept and mode == "train" and method != "frozen"
    if w.grads_kept and not grads_kept:
        notes.append("--grads-kept: nothing trains, so no gradient is kept")
    accumulation = w.grad_accumulation if mode == "train" and method != "frozen" else 1
    if w.grad_accumulation > 1 and accumulation == 1:
        notes.append(f"--grad-accumulation {w.grad_accumulation}: nothing trains, so no gradient is summed")
    if method == "qlora" and (dtype in HALF or dtype == "fp32"):
        if given:  # a contradiction, not a default to override in silence
            raise InputError(f"--method qlora trains adapters on a 4-bit base; --dtype {w.dtype} contradicts it: drop "
                             f"--dtype (nf4, QLoRA's format), give nf4, int4, gptq or awq, or use --method lora for a "
                             f"{dtype} base")
        dtype = "nf4"  # QLoRA's own format when none is given
    kbit = replace(w, dtype=dtype, method=method, mode=mode).kbit_fp32
    if kbit:
        notes.append("k-bit base prepared as peft's prepare_model_for_kbit_training leaves it (TRL, axolotl and the "
                     "HF QLoRA examples call it): embeddings, LM head and norms in fp32, the hidden states fp32"
                     + (" (16-bit logits under autocast)" if w.mixed_precision else ", the logits fp32")
                     + "; --no-kbit-upcast for a stack that does not (torchtune, fms-acceleration)")
    bnb_saves_input = w.bnb_saves_input and mode == "train" and method != "frozen" and dtype == "nf4"
    if w.bnb_saves_input and not bnb_saves_input:
        notes.append("--bnb-saves-input: only a trained nf4 (bitsandbytes 4-bit) base keeps its linears' inputs")
    if mode == "train" and method == "full" and dtype in QUANTIZED:
        raise InputError(f"full fine-tuning cannot update {dtype} weights; use --method qlora, or a bf16/fp32 dtype")
    if w.mixed_precision and dtype in QUANTIZED:
        notes.append("mixed precision applies to trainable weights only; the quantized base stays as it is")
    if w.mixed_precision and dtype == "fp32":
        notes.append("mixed precision: the DeepSpeed engine casts the fp32 load to 16-bit and keeps an fp32 master"
                     if w.shard in ("zero1", "zero2", "zero3") else
                     "mixed precision: fp32 weights with 16-bit autocast compute")
    if mode == "train" and w.shard == "tp":
        raise InputError("shard 'tp' (tensor parallel) is for inference; for training use zero1, zero2, zero3 or fsdp")
    if w.balance not in ("transformers", "accelerate"):
        raise InputError(f"balance {w.balance!r} is unknown; choose transformers (transformers 5) or accelerate "
                         "(transformers 4)")
    if w.device_map not in DEVICE_MAPS:
        raise InputError(f"device-map {w.device_map!r} is not modelled; choose none, auto (= balanced), balanced or "
                         "balanced_low_0")
    if w.device_map != "none" and mode == "train":
        raise InputError(f"--device-map {w.device_map} places a model for inference (from_pretrained); add --infer, "
                         "or drop --device-map (for training use --shard)")
    if w.device_map != "none" and w.shard != "none":
        raise InputError(f"--device-map {w.device_map} puts whole layers on each card; --shard {w.shard} splits each "
                         "layer (tensor parallel): give one of them")
    shard = w.shard
    if w.gpus == 1 and shard != "none":
        notes.append(f"{shard} over 1 GPU shards nothing")
    if w.gpus > 1 and shard == "none" and mode == "infer" and w.device_map == "none":
        shard = "tp"
        notes.append(f"inference over {w.gpus} GPUs: tensor parallel (weights and KV heads split)")
    targets = tuple(t.strip() for t in w.lora_targets if t.strip()) or ("all-linear",)
    zero: dict[str, Any] = {name: zero_elements(getattr(w, name), name) for name in ZERO_ELEMENTS}
    which = next((n for n in ZERO_ELEMENTS[3:] if zero[n] == "auto"), None)
    if which:  # transformers fills only the first three from the hidden size (memory/constants.py)
        raise InputError(f"{which.replace('_', '-')} 'auto': the HF Trainer fills only reduce_bucket_size, "
                         "stage3_prefetch_bucket_size and stage3_param_persistence_threshold from the hidden size; "
                         "give a number of elements")
    out = replace(w, **zero, dtype=dtype, kv_dtype=kv, method=method, optimizer=optimizer, shard=shard,
                  lora_targets=targets, liger_kernels=liger, lora_kernels=lora_kernels, grads_kept=grads_kept,
                  grad_accumulation=accumulation, bnb_saves_input=bnb_saves_input, kbit_upcast=kbit,
                  notes=tuple(notes))
    _check_cce(out)
    if out.lora_kernels and out.kbit_fp32:
        raise InputError(f"--lora-kernels {out.lora_kernels} on a k-bit base prepared by "
                         "prepare_model_for_kbit_training: axolotl, which runs these kernels, casts its norms, "
                         "embeddings and head back to 16 bits; add --no-kbit-upcast")
    if out.optimizer in TORCHAO_STEP_BYTES and out.shard in ("zero1", "zero2", "zero3") and out.training:
        raise InputError(f"--optimizer {out.optimizer} with --shard {out.shard}: DeepSpeed hands torchao's optimizer "
                         "one flat partition, whose quantized states and step campaign does not model; estimate with "
                         "--optimizer adamw (an upper bound for the states) or without ZeRO")
    return out


def _check_cce(w: Workload) -> None:
    """Cut Cross-Entropy's backward asserts a 16-bit head input and weight (cce_backward_kernel): a setup that gives
    it fp32 ones fails there, so it is refused with the change that makes it run."""
    if w.loss != "cce" or not w.training or w.method == "frozen":
        return
    if w.kbit_fp32:
        raise InputError("--loss cce on a k-bit base prepared by prepare_model_for_kbit_training: its fp32 embeddings "
                         "and LM head fail CCE's backward (bf16/fp16 only); add --no-kbit-upcast (axolotl casts them "
                         "back to the 16-bit dtype)")
    if w.compute_dtype == "fp32" or (w.mixed_precision and w.base_trainable
                                     and w.shard not in ("zero1", "zero2", "zero3")):
        raise InputError("--loss cce with fp32 weights or activations: CCE's backward takes a bf16/fp16 head and "
                         "hidden states only; load the model in bf16 (--dtype bf16, no --mixed-precision), as axolotl "
                         "does")
