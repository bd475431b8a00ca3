"""Every key of the user's recipe accounted for: each key of each file read by `--config` is modelled (it changed
the workload: training_config.py marks it), changes no memory (this module's per-tool tables: logging, output
folders, seeds, learning rates...), is not modelled (it may move the peak: the estimate is then a bound and the
verdict "not verified"), or unknown to campaign (named, never refused, in a file that is otherwise that tool's).

Also peft's per-model-type default LoRA targets, for an adapter_config.json without target_modules.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..results import Record

USES = ("modelled", "no memory", "off", "not modelled", "unknown")


@dataclass(frozen=True)
class ConfigKey(Record):
    """One key of a recipe file: `file` and `key` (dotted inside sections), its value as written (shortened), its
    `use`: modelled | no memory | off (a not-modelled feature switched off) | not modelled | unknown, and `why`."""

    file: str
    key: str
    value: str
    use: str
    why: str = ""

    @property
    def unmodelled(self) -> bool:
        """The estimate does not count what this key does: a bound, not a verified figure."""
        return self.use in ("not modelled", "unknown")


# Keys that change no GPU memory of the training step, per tool. A name ending in "*" is a prefix.
_COMMON = ("output_dir", "seed", "run_name", "project", "learning_rate", "lr", "weight_decay", "warmup_steps",
           "warmup_ratio", "num_train_epochs", "epochs", "max_steps", "logging_*", "log_*", "save_*", "eval_*",
           "report_to", "wandb_*", "hub_*", "push_to_hub", "resume_from_checkpoint", "dataset_*", "data_*")
# FSDP's version (2, fully_shard per block, is what the estimate models) and backward prefetch
FSDP1 = ("FSDP's version (read where FSDP is on: 2 as modelled, 1 counted as FSDP2 with a note); here FSDP is "
         "off")
PREFETCH = "FSDP backward prefetch (one more layer gathered)"
# axolotl's fsdp_config keys that change no memory on the card, as written with and without the fsdp_ prefix
# (utils/schemas/fsdp.py; axolotl strips the prefix)
AXOLOTL_FSDP_NO_MEMORY = tuple(f"fsdp_config.{p}{k}" for k in (
    "sync_module_states", "cpu_ram_efficient_loading", "cpu_offload_pin_memory", "use_orig_params", "state_dict_type",
    "final_state_dict_type", "auto_wrap_policy", "transformer_layer_cls_to_wrap", "min_num_params",
    "limit_all_gathers") for p in ("", "fsdp_"))
NO_MEMORY: dict[str, tuple[str, ...]] = {
    # transformers TrainingArguments, TRL's configs (SFTConfig, DPOConfig, ModelConfig), fms-hf-tuning's arguments
    "TrainingArguments": _COMMON + (
        # the deprecated spelling of fsdp_config's transformer_layer_cls_to_wrap: FSDP units a decoder layer each,
        # as the estimate counts them
        "fsdp_transformer_layer_cls_to_wrap",
        "overwrite_output_dir", "do_train", "do_eval", "do_predict", "evaluation_strategy",
        "per_device_eval_batch_size", "per_gpu_eval_batch_size", "adam_beta1", "adam_beta2", "adam_epsilon",
        "max_grad_norm", "lr_scheduler_type",
        "lr_scheduler_kwargs", "log_level", "log_level_replica", "log_on_each_node", "disable_tqdm", "seed",
        "data_seed", "full_determinism", "local_rank", "ddp_backend", "ddp_timeout", "ddp_find_unused_parameters",
        "ddp_broadcast_buffers", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
        "dataloader_prefetch_factor", "dataloader_drop_last", "remove_unused_columns", "label_names",
        "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "ignore_data_skip", "tf32",
        "label_smoothing_factor", "group_by_length", "length_column_name", "include_tokens_per_second",
        "include_num_input_tokens_seen", "prediction_loss_only", "batch_eval_metrics", "use_cpu", "jit_mode_eval",
        "bf16_full_eval", "fp16_full_eval", "half_precision_backend", "fp16_opt_level", "fp16_backend",
        "skip_memory_metrics", "torchdynamo", "restore_callback_states_from_checkpoint",
        "average_tokens_across_devices",
        "accelerator_config", "optim_args", "model_init_kwargs", "packing", "padding_free", "completion_only_loss",
        "assistant_only_loss", "model_name_or_path", "tokenizer_name_or_path", "trust_remote_code", "revision",
        "training_data_path", "validation_data_path", "response_template", "chat_template", "lora_alpha",
        "lora_dropout", "lora_task_type", "task_type", "use_rslora", "use_flash_attn", "model_revision",
        "bnb_4bit_quant_type", "use_bnb_nested_quant", "bias", "loss_type", "max_prompt_length",
        "max_completion_length", "temperature", "packing_strategy", "eos_token", "pad_token",
        "split_batches", "dispatch_batches", "num_proc", "neftune_noise_alpha", "embedding_size_multiple_of",
        "prompt_tuning_init", "prompt_tuning_init_text", "num_virtual_tokens", "alora_invocation_string",
        # a TRL CLI file's (recipe_trl_cli.py): exported variables, the data
        "env", "datasets", "streaming", "test_split_size",
        # vLLM's settings beyond use_vllm (which is read or named): where it runs, how it is reached
        "vllm_mode", "vllm_tensor_parallel_size", "vllm_server_*", "vllm_model_impl", "vllm_guided_decoding_regex"),
    "axolotl": _COMMON + (
        "base_model", "base_model_config", "model_type", "tokenizer_type", "tokenizer_config", "trust_remote_code",
        "strict", "datasets", "test_datasets", "val_set_size", "chat_template", "special_tokens", "tokens",
        "lora_alpha", "lora_dropout", "lora_fan_in_fan_out", "peft_use_rslora", "lr_scheduler", "num_epochs",
        "evals_per_epoch", "saves_per_epoch", "train_on_inputs", "group_by_length", "early_stopping_patience",
        "local_rank", "debug", "pad_to_sequence_len", "sample_packing", "eval_sample_packing", "flash_attention",
        "sdp_attention", "xformers_attention", "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon",
        "cosine_min_lr_ratio", "hub_model_id", "tf32", "shuffle_merged_datasets", "default_system_message",
        "special_tokens", "is_llama_derived_model", "is_mistral_derived_model", "is_qwen_derived_model",
        "dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor", "ddp_timeout",
        "rl_beta", "orpo_alpha", "simpo_gamma", "cpo_alpha", "dpo_use_weighting", "dpo_label_smoothing",
        "eot_tokens", "loss_watchdog_*", "remove_unused_columns", "lora_model_dir",
        # logging and tracking (utils/schemas/integrations.py; integrations/swanlab/args.py: SwanLabPlugin's, which
        # logs from rank 0)
        "use_wandb", "use_tensorboard", "use_otel_metrics", "otel_*", "use_swanlab", "swanlab_*",
        # the learning-rate schedule (utils/schemas/training.py; jagged_restart_* restart the LR, and ReLoRA's merges
        # with relora, which is named)
        "cosine_constant_lr_ratio", "lr_quadratic_warmup", "jagged_restart_*",
        # loading the tokenizer and the checkpoint (utils/schemas/model.py, config.py; revision_of_model, alias
        # model_revision, in deprecated.py: which revision, the same shapes)
        "tokenizer_use_fast", "tokenizer_legacy", "tokenizer_use_mistral_common", "hf_use_auth_token",
        "revision_of_model", "model_revision",
        # the data's order and filtering, and the CPU-side buffer of a streamed one (utils/data/streaming.py): no row
        # longer than sequence_len, the tokens the estimate counts. pretrain_multipack_attn: whether packed
        # sequences see each other (position ids or the mask), the same tensors
        "min_sample_len", "sample_packing_sequentially", "curriculum_sampling", "streaming_multipack_buffer_size",
        "pretrain_multipack_attn",
        # run control: resuming, axolotl's own DDP flag (the model moved to the card, which the Trainer does anyway;
        # find_unused_parameters), the Ray launcher (its workers read as the cards: recipe_axolotl.py _placement), eval
        "auto_resume_from_checkpoints", "ddp", "ddp_find_unused_parameters", "use_ray", "ray_run_name",
        "evaluation_strategy", "do_causal_lm_eval",
        # batch_size (training.py): normalize_config derives the accumulation from it only where
        # gradient_accumulation_steps is written empty (its default is 1), read there; micro_batch_size alone is the
        # card's batch
        "batch_size",
        # the settings of a method whose switch is named when on (use_eaft, lisa_n_layers, relora, rl kto,
        # reward_model, attn_implementation flex_attention: its compile's options); the optimizer states that ReLoRA
        # prunes are zeroed in place
        "eaft_alpha", "eaft_k", "lisa_step_interval", "lisa_layers_attribute", "relora_prune_ratio",
        "relora_prune_method", "kto_desirable_weight", "kto_undesirable_weight", "center_rewards_coefficient",
        "flex_attn_compile_kwargs",
        # declared (deprecated.py) and read nowhere
        "flash_attn_rms_norm",
        # not axolotl's: its pydantic schema (AxolotlInputConfig, extra keys ignored) drops a key it does not declare
        # before anything reads it (utils/config validate_config); torch_dtype is then resolve_dtype's, from bf16,
        # bfloat16, fp16 and float16 (read)
        "eta_min", "adam_eps", "torch_dtype", "base_model_ignore_patterns", "gptq_disable_exllama", "test_value",
        "full_finetune",
        # transformers' AcceleratorConfig (core/builders/base.py _configure_accelerator_config): the last batch's
        # padding, the sampler's seed, the copy to the card
        "accelerator_config.even_batches", "accelerator_config.use_seedable_sampler",
        "accelerator_config.non_blocking", "accelerator_config.use_configured_state") + AXOLOTL_FSDP_NO_MEMORY,
    "torchtune": _COMMON + (
        "checkpointer", "shuffle", "max_steps_per_epoch", "log_every_n_steps", "log_peak_memory_stats",
        "metric_logger", "lr_scheduler", "device", "profiler", "save_adapter_weights_only", "clip_grad_norm",
        "tokenizer._component_", "tokenizer.path", "tokenizer.prompt_template", "tokenizer.merges_file",
        "model.lora_alpha", "model.lora_dropout", "optimizer.lr", "optimizer.weight_decay", "optimizer.betas",
        "optimizer.eps", "optimizer.amsgrad", "batch_size_val", "run_val_every_n_steps", "dataset_val",
        "cudnn_deterministic_mode", "output_dir", "low_cpu_ram",
        "dataset",  # packed or not: the estimate counts every sequence at max_seq_len, which packing fills
        # the inference configs (recipe_torchtune._inference): sampling, lm-eval's sample limit and chat template;
        # a distillation recipe's teacher weights' files and the loss's mix (the teacher itself is named)
        "temperature", "top_k", "limit", "apply_chat_template", "teacher_checkpointer", "kd_ratio",
        # the GRPO recipe's (recipes/dev/grpo_full_finetune_distributed.py): the path its checkpointers interpolate,
        # the run's name, its step count and repeats over one trajectory, the reward functions (on the host)
        "base_model_path", "name", "num_steps", "ppo_epochs", "reward_functions", "save_every_n_epochs",
        # the PPO recipe's (recipes/ppo_full_finetune_single_device.py): its models' checkpoint files, the sampling
        # and the rewards' shaping, all on the host (the models themselves are read or named)
        "value_checkpointer", "reward_checkpointer", "min_response_length", "penalise_no_eos", "reward_penalty",
        "stop_token_ids", "whiten_rewards", "gamma", "lmbda", "kl_coeff", "debug_logging_enabled",
        "debug_num_samples_per_step",
        # the tokenizer's files; the multi-dataset recipe's list of sources; a key no recipe at bd2a0fc reads
        # (memory_efficient_fsdp_wrap); how the generate recipe loads its sharded state dict and builds its masks
        # (FlexAttention, which keeps no scores, as SDPA)
        "tokenizer.vocab_path", "tokenizer.merges_path", "datasets", "memory_efficient_fsdp_wrap",
        "use_distributed_state_dict", "use_flex", "model.norm_eps", "policy_model.norm_eps"),
    # torchtitan's job TOML (recipe_torchtitan.py), tables flattened to table.key
    "torchtitan": ("job.*", "profiling.*", "metrics.*", "checkpoint.*", "lr_scheduler.*", "comm.*",
                   "memory_estimation.*", "fault_tolerance.*", "validation.*", "model.name", "model.flavor",
                   "model.tokenizer_path", "model.hf_assets_path", "model.print_after_conversion", "optimizer.lr",
                   "optimizer.eps", "optimizer.weight_decay", "optimizer.beta1", "optimizer.beta2", "training.dataset",
                   "training.dataset_path", "training.max_norm", "training.steps", "training.warmup_steps",
                   "training.gc_freq", "training.gc_debug", "training.seed", "training.deterministic",
                   "training.dataloader*", "training.mixed_precision_reduce", "experimental.custom_*",
                   "parallelism.disable_loss_parallel", "parallelism.enable_async_tensor_parallel",
                   "parallelism.pipeline_parallel_*", "parallelism.context_parallel_*", "parallelism.expert_*",
                   "training.enable_loss_parallel", "experimental.pipeline_parallel_*", "float8.*", "mx.*",
                   "activation_checkpoint.preserve_rng_state", "activation_checkpoint.determinism_check",
                   "activation_checkpoint.debug", "activation_checkpoint.early_stop",
                   "activation_checkpoint.visualize_memory_budget_pareto", "compile.backend", "compile.components"),
    # peft's LoraConfig as adapter_config.json writes it
    "peft": ("base_model_name_or_path", "revision", "task_type", "inference_mode", "lora_alpha", "lora_dropout",
             "fan_in_fan_out", "init_lora_weights", "alpha_pattern", "use_rslora", "auto_mapping", "peft_type",
             "megatron_config", "megatron_core", "loftq_config", "eva_config", "corda_config", "runtime_config",
             "layers_pattern", "peft_version"),
    "accelerate": ("compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "machine_rank",
                   "main_training_function", "main_process_ip", "main_process_port", "num_machines",
                   "rdzv_backend", "same_network", "tpu_*", "use_cpu", "gpu_ids", "ipex_config", "mpirun_config",
                   "fsdp_config.fsdp_auto_wrap_policy", "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                   "fsdp_config.fsdp_state_dict_type", "fsdp_config.fsdp_sync_module_states",
                   "fsdp_config.fsdp_use_orig_params", "fsdp_config.fsdp_cpu_ram_efficient_loading",
                   "fsdp_config.fsdp_min_num_params", "deepspeed_config.gradient_clipping",
                   "deepspeed_config.zero3_save_16bit_model", "deepspeed_config.deepspeed_multinode_launcher"),
}
# torch.compile: the estimate counts what eager PyTorch saves and allocates; a compiled graph fuses kernels and saves
# fewer tensors (its partitioner recomputes cheap ones), which the estimate does not model. The measured ratio: the
# eager estimate over the published peak of a compiled run (benchmarks/memory_reference.py, torchtune's README @
# 0031bfb0, Llama 3.1 8B QLoRA, batch 2 x 2048 packed, chunked loss, RTX 4090: 10.65 GiB against 7.4)
COMPILE_BOUND = ("torch.compile (fused kernels, fewer saved tensors): not modelled, the eager estimate is an upper "
                 "bound (measured 1.44x a compiled run's peak: torchtune's Llama 3.1 8B QLoRA README row)")
# TRL's preference and RL trainers (recipe_trainer.py reads a pair trainer's batch and reference model)
REFERENCE_UNSAID = ("a preference trainer's: whether it runs a reference model the file does not say (DPO and IPO "
                    "do, ORPO, CPO and SimPO do not): give --reference copy (full), adapters-off (LoRA) or none")
GENERATION = ("generation by the trained model (GRPO, RLOO): the completions per prompt, their KV cache and a "
              "reference model when beta > 0 are not modelled")
KTO = "KTO: a KL batch beside each batch and a reference model are not modelled"
# Keys that may change memory in a way the estimate does not model: named with what they do; the estimate is a
# bound (an upper bound where the key can only lower the peak). Off values (false, none, 1...) change nothing.
# LLaMA-Factory's train YAML (recipe_llamafactory.py): HF's TrainingArguments keys with LLaMA-Factory's own
# (src/llamafactory/hparams/*.py at ff6d4d12: ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments)
NO_MEMORY["LLaMA-Factory"] = NO_MEMORY["TrainingArguments"] + (
    "adapter_folder", "cache_dir", "use_fast_tokenizer", "split_special_tokens", "new_special_tokens_config",
    "init_special_tokens", "model_revision", "low_cpu_mem_usage", "infer_backend", "offload_folder", "use_kv_cache",
    "infer_dtype", "hf_hub_token", "ms_hub_token", "om_hub_token", "print_param_status", "quantization_device_map",
    "export_*", "vllm_*", "sglang_*", "template", "dataset", "eval_dataset", "media_dir", "train_on_prompt",
    "mask_history", "streaming", "buffer_size", "mix_strategy", "interleave_probs", "overwrite_cache",
    "preprocessing_batch_size", "preprocessing_num_workers", "max_samples", "eval_num_beams",
    "ignore_pad_token_for_loss", "val_size", "eval_on_each_dataset", "tool_format", "default_system",
    "enable_thinking", "preserve_thinking", "tokenized_path", "lora_alpha", "lora_dropout", "use_rslora", "pissa_*",
    "loraplus_*", "create_new_adapter", "pref_beta", "pref_ftx", "pref_bco_weight", "dpo_label_smoothing",
    "simpo_gamma", "ld_alpha", "use_swanlab", "swanlab_*", "compute_accuracy", "disable_shuffling",
    "early_stopping_steps", "plot_loss", "include_effective_tokens_per_second", "ray_*", "master_addr",
    "master_port", "enable_torch_profiler", "profile*", "do_sample", "top_p", "top_k", "num_beams", "max_length",
    "max_new_tokens", "repetition_penalty", "length_penalty", "skip_special_tokens", "predict_with_generate",
    "sortish_sampler", "generation_*", "adapter_name_or_path", "data_shared_file_system",
    # the settings of a method whose switch is named when on (finetuning_type, stage, use_galore, use_kt...)
    "freeze_trainable_*", "freeze_extra_modules", "oft_*", "module_dropout", "galore_*", "apollo_*", "badam_*",
    "eaft_alpha", "asft_alpha", "hyper_parallel_*", "megatron_bridge_args", "kt_*", "fp8_*", "reward_model*",
    "ppo_*", "kto_*")
# LLaMA-Factory's v1 engine (recipe_llamafactory_v1.py; src/llamafactory/v1/config/*_args.py at ff6d4d12): the
# schedule, logging, saving, the data files, the sampler of `llamafactory-cli chat`, the adapter's scale
NO_MEMORY["LLaMA-Factory v1"] = (
    "output_dir", "learning_rate", "num_train_epochs", "max_steps", "max_grad_norm", "seed", "full_determinism",
    "resume_from_checkpoint", "save_*", "logging_steps", "lr_scheduler_config", "lr_scheduler_config.*",
    "dist_timeout", "batching_workers", "train_dataset", "eval_dataset", "sample_backend", "max_new_tokens",
    "trust_remote_code", "custom_chat_template", "peft_config.export_*", "peft_config.infer_dtype",
    "peft_config.lora_alpha", "peft_config.use_rslora")
NOT_MODELLED: dict[str, dict[str, str]] = {
    "TrainingArguments": {
        "torch_compile": COMPILE_BOUND,
        # use_liger_kernel is modelled when set (recipe_trainer.py: --loss fused, --liger-kernels rope,rms_norm,swiglu)
        "use_liger_kernel": "Liger's kernels (modelled when true or false)",
        "liger_kernel_config": "Liger's kernels chosen one by one: read for rope, rms_norm, swiglu, geglu and "
                               "fused_linear_cross_entropy; another kernel (cross_entropy on, layer_norm...) is not "
                               "modelled",
        "gradient_checkpointing_kwargs": "how checkpointing runs (use_reentrant...)",
        "fsdp_config": "FSDP settings (prefetch, offload, wrap policy)", "torch_empty_cache_steps": "emptied cache",
        "eval_accumulation_steps": "evaluation outputs kept on the GPU", "auto_find_batch_size": "a batch search",
        "optim_target_modules": "optimizer target modules (GaLore...)",
        "layers_to_transform": "LoRA on some layers only: an upper bound",
        "fsdp_min_num_params": "FSDP wrap size", "torch_compile_mode": COMPILE_BOUND,
        "torch_compile_backend": COMPILE_BOUND, "ref_model_init_kwargs": "a reference model (DPO)",
        "precompute_ref_log_probs": "a reference model (DPO)", "sync_ref_model": "a reference model",
        "beta": REFERENCE_UNSAID,
        "num_generations": GENERATION, "generation_batch_size": GENERATION, "steps_per_generation": GENERATION,
        "desirable_weight": KTO, "undesirable_weight": KTO,
        "use_vllm": "a vLLM engine beside the trained model",
        "reward_funcs": "GRPO's reward functions: a reward model among them is not counted",
        "reward_model_name_or_path": "a reward model on the card",
        "accelerate_config": "an accelerate config (read when it is one of TRL's profiles or a file found)",
        "vllm_enable_sleep_mode": "vLLM's sleep mode, freeing its share during training: an upper bound",
        "vllm_gpu_memory_utilization": "a vLLM engine",
        "activation_offloading": "activations offloaded to the CPU: an upper bound",
        # fms-hf-tuning's fms-acceleration plugins
        "auto_gptq": "a GPTQ 4-bit base (fms-acceleration): the 16-bit estimate is an upper bound",
        "bnb_qlora": "a bitsandbytes 4-bit base (fms-acceleration): the 16-bit estimate is an upper bound",
        "fast_kernels": "fused cross-entropy, RoPE and RMSNorm kernels (fms-acceleration)",
        "fused_lora": "fused LoRA kernels (fms-acceleration)", "padding_free": "padding-free batches",
        "multipack": "multipack sampling",
    },
    "axolotl": {
        "torch_compile": COMPILE_BOUND,
        # liger_rope, liger_rms_norm, liger_glu_activation, liger_fused_linear_cross_entropy are modelled
        # (recipe_axolotl.py, recipe_trainer.py) for activations.LIGER_GLU's models: this is the rest, and those on
        # another model
        "liger_*": "Liger's kernels (modelled: liger_rope, liger_rms_norm, liger_glu_activation, "
                   "liger_fused_linear_cross_entropy on Llama, Mistral, Qwen2/3, Gemma 1-3, Mixtral, Qwen3-MoE)",
        "unsloth_*": "unsloth's kernels (fused cross-entropy, LoRA MLP/QKV/O)",
        "cut_cross_entropy": "Cut Cross-Entropy without axolotl's CutCrossEntropyPlugin in plugins (with it: modelled)",
        "fsdp": "FSDP sharding (read when set)", "fsdp_version": FSDP1,
        **{f"fsdp_config.{p}{k}": why for k, why in (("version", FSDP1), ("backward_prefetch", PREFETCH),
                                                     ("forward_prefetch", "FSDP forward prefetch"),
                                                     ("mixed_precision_policy", "FSDP's own mixed precision"))
           for p in ("", "fsdp_")},
        "gradient_checkpointing_kwargs": "checkpointing",
        "lora_modules_to_save": "fully trained modules", "peft_layers_to_transform": "LoRA on some layers only",
        "activation_offloading": "activations offloaded to the CPU: an upper bound",
        "plugins": "axolotl plugins (read: CutCrossEntropyPlugin, LigerPlugin, SwanLabPlugin)",
        "rl": "a preference or RL trainer (KTO, GRPO...; dpo, ipo, orpo and simpo are modelled)",
        "relora_steps": "ReLoRA", "lora_on_cpu": "LoRA on the CPU", "gpu_memory_limit": "a memory limit",
        "low_cpu_mem_usage": "loading", "sequence_parallel_degree": "sequence parallelism",
        "model_config": "overrides of the model's config (the published config's shapes counted)",
        "overrides_of_model_config": "overrides of the model's config (the published config's shapes counted)",
        "unfrozen_parameters": "only the parameters it matches trained: counted as a full fine-tune, an upper bound",
        "torch_compile_mode": COMPILE_BOUND,
        # kernels and layers swapped in (utils/schemas/model.py, config.py; loaders/patch_manager.py; the
        # KernelsPlugin's integrations/kernels/args.py, which turns use_kernels on)
        "use_kernels": "the kernels hub's layers swapped in (transformers' kernelize: MoE, norm, activation kernels)",
        "experts_implementation": "the MoE experts' implementation (grouped_mm, scattermoe...: what they keep)",
        "use_scattermoe": "ScatterMoE's experts kernel", "use_sonicmoe": "SonicMoE's experts kernel",
        "expert_backend": "the MoE experts' kernel", "moe_*": "the MoE experts' kernels (KernelsPlugin's settings)",
        "use_dsv4_kernels": "DeepSeek-V4's fused kernels", "dsv4_*": "DeepSeek-V4's fused kernels and weight formats",
        "use_glm_dsa_kernels": "GLM's fused sparse attention",
        "nvfp4_merge_aware*": "merge-aware fake-quantized NVFP4 experts",
        "fused_attn_kernel": "a fused q/k RMSNorm + RoPE kernel (Qwen3, Gemma 4)",
        "flash_attn_cross_entropy": "flash-attn's cross-entropy kernel in place of the model's loss",
        "flash_attn_fuse_mlp": "a fused SwiGLU MLP (xformers)", "flash_optimum": "BetterTransformer's layers",
        "tiled_mlp": "ALST's tiled MLP (the MLP a tile of the sequence at a time): an upper bound",
        # the weights' format (utils/schemas/model.py, config.py, peft.py, quantization.py; loaders/model.py)
        "quantize_moe_experts": "MoE expert weights quantized on load (bitsandbytes over the 3D expert parameters)",
        "gptq": "a GPTQ 4-bit base: the 16-bit estimate is an upper bound",
        "model_quantization_config": "a base loaded quantized (MXFP4, FP8; read: Mxfp4Config with dequantize true)",
        "model_quantization_config_kwargs": "the base's quantization (read: Mxfp4Config with dequantize true)",
        "use_onebitllms": "BitNet's 1.58-bit linears (onebitllms)",
        "qat": "quantization-aware training (torchao's fake-quantized weights and activations)",
        "fp8": "FP8 training (torchao's float8 linears keep other tensors)",
        "fp8_enable_fsdp_float8_all_gather": "FSDP's parameters all-gathered in FP8",
        "llmcompressor": "llm-compressor's sparse fine-tuning (sparsity masks)",
        "bnb_config_kwargs": "bitsandbytes settings beside axolotl's (read: NF4 with double quantization)",
        "resize_token_embeddings_to_32x": "the vocabulary resized to a multiple of 32 where tokens are added (up to "
                                          "31 more rows of embeddings and head)",
        # parallelism (utils/schemas/config.py; monkeypatch/accelerate/parallelism_config.py;
        # integrations/expert_parallel/args.py): a degree of 1 is off (AT_DEFAULT)
        "context_parallel_size": "context parallelism (each card a share of the sequence, ring attention)",
        "tensor_parallel_size": "tensor parallelism (DeepSpeed AutoTP, transformers' tp_plan)",
        "dp_replicate_size": "hybrid sharding (FSDP over a group of the cards, replicated across groups)",
        "dp_shard_size": "FSDP over dp_shard_size cards (read where it is --gpus's)",
        "expert_parallel_size": "expert parallelism (the experts sharded over the cards)",
        "expert_parallel_*": "expert parallelism (DeepEP's buffers)",
        "device_map": "transformers' device map of one process's model (axolotl's default: auto)",
        # another head, model, data path or trainer
        "reward_model": "a reward model (a sequence-classification head in place of the LM head)",
        "process_reward_model": "a process reward model (a token-classification head in place of the LM head)",
        "num_labels": "a classification head of num_labels outputs in place of the LM head",
        "cls_model_config": "the model built from another config class (a multimodal checkpoint's text model...): "
                            "the published config's shapes counted",
        "reinit_weights": "a model built from its config (random weights) in torch's default dtype, fp32",
        "freeze_mm_modules": "a multimodal model's towers frozen (the towers are not modelled)",
        "gemma4_hybrid_attn_impl": "Gemma 4's global layers under SDPA (head_dim 512: which kernel runs, what it "
                                   "keeps)",
        "vllm": "vLLM's settings (the generation engine of an rl trainer)",
        "processor_type": "a multimodal run (a processor's image or audio inputs, the towers' activations)",
        "skip_prepare_dataset": "the dataset left unprepared: rows neither dropped nor truncated at sequence_len "
                                "(the multimodal collator tokenizes each batch whole)",
        "trl": "TRL's settings of the rl trainer (generations, vLLM, a reference model...)",
        "ebft": "Energy-Based Fine-Tuning (generated samples, a frozen feature network)",
        "diffusion": "diffusion LM training (masked-token noise, its own loss)",
        "use_eaft": "EAFT's entropy-weighted loss (top-k entropies of the logits)",
        "peft": "peft's LoftQ initialization (each base weight quantized at load, the adapters from the residual)",
        "lora_target_parameters": "LoRA on parameters (MoE experts' weights): their adapters are not counted",
        "relora": "ReLoRA (the adapters merged into the base at each restart)",
        "relora_cpu_offload": "ReLoRA's merges on the CPU",
        "lisa_n_layers": "LISA (a few layers trained at a time): counted as a full fine-tune, an upper bound",
        "max_packed_sequence_len": "axolotl's removed packing length (its validator raises on a value)",
        # accelerate's settings (read: gradient_accumulation_kwargs' sync_each_batch, recipe_axolotl.py)
        "accelerator_config.gradient_accumulation_kwargs": "accelerate's accumulation settings (read: sync_each_batch, "
                                                            "adjust_scheduler, sync_with_dataloader)",
        "accelerator_config.split_batches": "the batch split across the cards",
        "accelerator_config.dispatch_batches": "one process fetching every card's batch",
    },
    "torchtune": {
        "compile": COMPILE_BOUND,
        "custom_sharded_layers": "layers sharded separately (modelled for [tok_embeddings, output] only)",
        "fsdp_reshard_after_forward": "FSDP resharding (read when true or false)",
        "tensor_parallel_dim": "tensor parallelism",
        "tensor_parallel_plan": "tensor parallelism", "data_parallel_shard_dim": "hybrid sharding",
        "data_parallel_replicate_dim": "hybrid sharding", "context_parallel_dim": "context parallelism",
        "model.quantize_base": "the base quantized (QLoRA)", "model.use_dora": "DoRA",
        "optimizer_in_bwd": "the optimizer step in backward (gradients freed layer by layer)",
        "enable_activation_offloading": "activations offloaded to the CPU: an upper bound",
        "loss": "the loss (chunked or fused cross-entropy)",
        # knowledge distillation (recipes/knowledge_distillation_*.py at bd2a0fc7): a frozen teacher beside the
        # student, its logits chunked through kd_loss
        "teacher_model": "a teacher model on the card and its logits (knowledge distillation): counted without it, "
                         "which is low",
        "kd_loss": "the distillation loss over the teacher's and the student's logits",
        # the async GRPO recipe (recipes/dev/async_grpo_full_finetune_distributed.py): Ray actors on cards of their
        # own, the training worker's settings nested under training (counted: the top-level model alone)
        "orchestration": "async GRPO's Ray actors (vLLM inference, reference and training workers on cards of their "
                         "own): not modelled, counted as the model alone",
        "inference": "async GRPO's vLLM inference workers (cards of their own)",
        "postprocessing": "async GRPO's reference-model workers (cards of their own)",
        "training": "async GRPO's training workers (their batch, checkpointing, optimizer and loss: not read)",
        "dataloader": "the multi-dataset recipe's loader (its collate_fn of image tiles: image inputs, not modelled)",
        # a builder's own arguments (torchtune.models.llama2.llama2 with its sizes): the model counted is the command
        # line's, whose shape campaign cannot match against them
        **{f"{m}.{k}": "the builder's shape (the model counted is the one on the command line: give one of this "
                       "shape)" for m in ("model", "policy_model") for k in (
                           "vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim",
                           "max_seq_len")},
        **{f"{m}.attn_dropout": "attention dropout (its masks kept for backward)" for m in ("model", "policy_model")},
        # quantization-aware training (recipes/qat_*.py): torchao's fake-quantized weights and activations
        "quantizer": "torchao's quantizer (QAT's fake-quantized weights and activations in training)",
        # Llama 3.2 Vision's builders (models/llama3_2_vision): the towers, images and their tiles
        "model.encoder_trainable": "a vision tower (not modelled)", "model.decoder_trainable": "a vision model's "
        "text decoder trained or frozen (the towers are not modelled)", "model.fusion_trainable": "a vision "
        "model's fusion layers (not modelled)", "model.image_size": "image inputs (not modelled)",
        "tokenizer.image_size": "image inputs (not modelled)", "tokenizer.max_num_tiles": "image tiles (not "
        "modelled)", "collate_fn": "a multimodal collator (image inputs, not modelled)",
    },
    "LLaMA-Factory v1": {
        "kernel_config.*": "a setting of LLaMA-Factory's kernels",
        "quant_config.*": "a quantized base (bitsandbytes and others, v1's quantization plugin)",
        "optim_config.*": "an optimizer plugin (the estimate keeps AdamW)",
        "init_config.*": "the model built on the meta device or from its config",
        "cp_size": "context parallelism (each card a share of the sequence)", "cp_mode": "context parallelism",
        "dp_size": "the data-parallel cards (read as --gpus's)", "mp_replicate_size": "hybrid sharding",
        "mp_shard_size": "FSDP over a group of the cards",
        "dist_config.ep_size": "expert parallelism (the fsdpturbo engine)",
        "dist_config.ep_dispatcher": "expert parallelism's token dispatcher (the fsdpturbo engine)",
        "batching_strategy": "padding-free or dynamic batches",
        "model_class": "a classification or multimodal head in place of the causal LM's",
        "flash_attn": "an attention implementation", "pref_loss": "a preference trainer (DPO, ORPO, SimPO)",
        "pref_beta": "a preference trainer (DPO, ORPO, SimPO)",
        "peft_config.adapter_name_or_path": "adapters loaded from a folder (their shapes not read)",
    },
    "torchtitan": {
        "training.compile": COMPILE_BOUND, "compile.enable": COMPILE_BOUND,
        "model.converters": "Float8 or MX training (converted linears keep other tensors)",
        "model.norm_type": "a fused RMSNorm kernel (saves less: an upper bound)",
        "float8.enable_float8_linear": "Float8 training (converted linears keep other tensors)",
        "quantize": "quantized training (converted linears keep other tensors)",
        "parallelism.tensor_parallel_degree": "tensor parallelism", "training.tensor_parallel_degree":
            "tensor parallelism", "parallelism.pipeline_parallel_degree": "pipeline parallelism",
        "experimental.pipeline_parallel_degree": "pipeline parallelism",
        "parallelism.context_parallel_degree": "context parallelism",
        "experimental.context_parallel_degree": "context parallelism",
        "parallelism.data_parallel_replicate_degree": "hybrid sharding (HSDP)",
        "training.data_parallel_replicate_degree": "hybrid sharding (HSDP)",
        "parallelism.expert_parallel_degree": "expert parallelism",
        "activation_checkpoint.memory_budget": "the compiler's memory-budget checkpointing",
        "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": "matmuls forced to recompute: an "
                                                                               "upper bound",
    },
    "peft": {
        "layers_to_transform": "LoRA on some layers only: an upper bound", "rank_pattern": "other ranks per module",
        "layer_replication": "replicated layers", "exclude_modules": "modules excluded: an upper bound",
        "target_parameters": "LoRA on parameters (MoE experts)", "trainable_token_indices": "trained token rows",
        "bias": "trained biases", "lora_bias": "a bias on lora_B", "use_qalora": "QA-LoRA",
    },
    "accelerate": {
        "dynamo_config": COMPILE_BOUND,
        "fsdp_config.fsdp_backward_prefetch": PREFETCH, "fsdp_config.fsdp_backward_prefetch_policy": PREFETCH,
        "fsdp_config.fsdp_forward_prefetch": "FSDP forward prefetch", "fsdp_config.fsdp_version": FSDP1,
        "fsdp_config.fsdp_reshard_after_forward": "FSDP1's sharding strategy by name (read when true or false)",
        "fsdp_config.fsdp_offload_params": "parameters offloaded to the CPU (read with distributed_type FSDP)",
        "megatron_lm_config": "Megatron-LM parallelism", "parallelism_config": "parallelism",
        "deepspeed_config.offload_optimizer_device": "optimizer offloaded (read without a deepspeed_config_file)",
        "deepspeed_config.offload_param_device": "parameters offloaded (read without a deepspeed_config_file)",
        "deepspeed_config.zero3_init_flag": "zero.Init off: a script that builds the model under accelerate alone "
                                            "loads it whole (TrainingArguments still load under zero.Init): give "
                                            "--zero-init or --no-zero-init",
    },
    "DeepSpeed": {},
}
# Megatron's arguments (LLaMA-Factory's Megatron trainers: mca, launched with USE_MCA=1, mcore_adapter's
# TrainingArguments; and Megatron Bridge, hparams/megatron_bridge_args.py): their parallelism, fusions, precision and
# recomputation, each a memory model of its own
MCA = ("Megatron's {} (LLaMA-Factory's Megatron trainers: mca with USE_MCA=1, Megatron Bridge with "
       "USE_MEGATRON_BRIDGE=1): not modelled, counted as the HF Trainer's run")
NOT_MODELLED["LLaMA-Factory"] = {
    **NOT_MODELLED["TrainingArguments"],
    **{k: MCA.format(what) for k, what in (
        ("tensor_model_parallel_size", "tensor parallelism"), ("pipeline_model_parallel_size", "pipeline stages"),
        ("expert_model_parallel_size", "expert parallelism"), ("context_parallel_size", "context parallelism"),
        ("virtual_pipeline_model_parallel_size", "interleaved pipeline stages"),
        ("sequence_parallel", "sequence parallelism"), ("use_distributed_optimizer", "distributed optimizer"),
        ("overlap_param_gather", "overlapped parameter gather"), ("overlap_grad_reduce", "overlapped reduce"),
        ("bias_activation_fusion", "fused bias and activation"), ("apply_rope_fusion", "fused RoPE"),
        ("moe_grouped_gemm", "grouped-GEMM experts"), ("moe_token_dispatcher_type", "token dispatcher"),
        ("recompute_granularity", "recomputation"), ("recompute_method", "recomputation"),
        ("recompute_num_layers", "recomputation"), ("masked_softmax_fusion", "fused softmax"),
        ("cross_entropy_loss_fusion", "fused cross-entropy"), ("use_packed_sequences", "packed sequences"),
        ("mixed_precision", "precision recipe"), ("extra_config", "extra configuration"),
        ("account_for_embedding_in_pipeline_split", "pipeline split"),
        ("account_for_loss_in_pipeline_split", "pipeline split"), ("calculate_per_token_loss", "loss averaging"),
        ("megatron_pretrained_checkpoint", "checkpoint"), ("export_hf_on_finish", "export"))},
    "enable_liger_kernel": "Liger's kernels (modelled on Llama, Mistral, Qwen2/3, Gemma 1-3, Mixtral, Qwen3-MoE)",
    "use_unsloth": "unsloth's kernels and loader", "upcast_layernorm": "norm weights in fp32",
    "upcast_lmhead_output": "an fp32 copy of the logits", "moe_aux_loss_coef": "router logits kept every layer",
    "rope_scaling": "RoPE scaling (read the longer cutoff_len)", "shift_attn": "shifted short attention (S2-Attn)",
    "mixture_of_depths": "mixture of depths", "use_v1_kernels": "LLaMA-Factory's v1 kernels",
    "train_from_scratch": "a model built from its config in torch's default dtype",
    "resize_vocab": "a resized vocabulary", "add_tokens": "added tokens (a resized vocabulary)",
    "add_special_tokens": "added tokens (a resized vocabulary)",
    "use_galore": "GaLore's low-rank optimizer states",
    "use_apollo": "APOLLO's optimizer states",
    "use_badam": "BAdam's block optimizer", "use_adam_mini": "Adam-mini's optimizer states",
    "use_muon": "Muon's optimizer states", "use_llama_pro": "LLaMA Pro's expanded blocks",
    "use_dft_loss": "a loss of its own", "use_eaft_loss": "a loss of its own",
    "use_asft_loss": "ASFT's reference model", "use_mca": "Megatron-Core",
    "use_megatron_bridge": "Megatron", "use_hyper_parallel": "HyperParallel",
    "use_kt": "KTransformers (experts on the CPU)",
    "fp8": "FP8 training", "ref_model_*": "the reference model's own settings",

    "image_*": "a multimodal model's image inputs", "video_*": "a multimodal model's video inputs",
    "crop_to_patches": "a multimodal model's image inputs", "use_audio_in_video": "audio inputs",
    "audio_sampling_rate": "audio inputs", "freeze_vision_tower": "a multimodal model's towers",
    "freeze_multi_modal_projector": "a multimodal model's towers", "freeze_language_model": "a multimodal model",
    "neat_packing": "neat packing's attention mask",
}
# The sections whose keys are accounted one by one (others stand as one key: a torchtune component, a dataset list)
SECTIONS = {"torchtitan": ("job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training",
                          "parallelism", "experimental", "checkpoint", "activation_checkpoint", "float8", "mx",
                          "compile", "comm", "memory_estimation", "fault_tolerance", "validation"),
            "torchtune": ("model", "policy_model", "tokenizer", "optimizer"),
            "accelerate": ("fsdp_config", "deepspeed_config"),
            "DeepSpeed": ("zero_optimization", "bf16", "bfloat16", "fp16"), "TrainingArguments": (),
            "axolotl": ("fsdp_config", "accelerator_config"),
            "peft": (), "LLaMA-Factory": (),
            "LLaMA-Factory v1": ("peft_config", "dist_config", "kernel_config", "quant_config", "optim_config",
                                 "lr_scheduler_config", "init_config")}
OFF: tuple[Any, ...] = (None, False, 0, "", "none", "None", "no", "NO", "false", "False", [], {})
# Keys whose false is the case the estimate does not settle (a ZeRO-3 model built whole by a script of its own)
FALSE_MATTERS = frozenset({"deepspeed_config.zero3_init_flag"})
# A not-modelled key at the tool's own default, which the estimate counts, is off too: a degree of parallelism of 1
# (axolotl: utils/config normalize_config, monkeypatch/accelerate/parallelism_config.py), and axolotl's device_map auto,
# its default for a run of one process (utils/config choose_device; under accelerate or several processes it sets
# its own). Matched by type as well as value: 1 is not true.
AT_DEFAULT: dict[str, dict[str, tuple[Any, ...]]] = {
    "LLaMA-Factory": {f"{k}_model_parallel_size": (1,) for k in ("tensor", "pipeline", "expert")} | {
        "context_parallel_size": (1,)},
    "LLaMA-Factory v1": {"cp_size": (1,), "mp_replicate_size": (1,), "batching_strategy": ("normal",),
                         "cp_mode": ("ulysses",), "model_class": ("llm",)},
    "axolotl": {"context_parallel_size": (1,), "tensor_parallel_size": (1,), "dp_replicate_size": (1,),
                "expert_parallel_size": (1,), "sequence_parallel_degree": (1,), "device_map": ("auto",)},
}


def _match(key: str, names: Iterable[str]) -> str | None:
    for name in names:
        if name.endswith("*") and key.startswith(name[:-1]) or key == name:
            return name
    return None


def account(file: str, tool: str, doc: dict[str, Any], used: frozenset[str],
            known: Iterable[str] = (), unread: dict[str, str] | None = None) -> list[ConfigKey]:
    """Each key of `doc` (a `tool` file named `file`) with its use: not modelled when `unread` names it (or a key
    inside it: a setting the reader met and does not model, with why), modelled when `used` holds it (or a section
    above it, or a key inside it), else by the tool's tables; `known`: more keys of the tool that change no memory
    (DeepSpeed's own tables in recipe_deepspeed.py)."""
    out = []
    no_memory = NO_MEMORY.get(tool, ()) + tuple(known)
    not_modelled = NOT_MODELLED.get(tool, {})
    defaults = AT_DEFAULT.get(tool, {})
    unread = unread or {}
    for key, value in _flatten(doc, SECTIONS.get(tool, ())):
        parts = key.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        shown = _short(value)
        why = next((w for u, w in unread.items() if u == key or u.startswith(key + ".")), None)
        if why is not None:
            out.append(ConfigKey(file, key, shown, "not modelled", why))
        elif prefixes & used or any(u.startswith(key + ".") for u in used):
            out.append(ConfigKey(file, key, shown, "modelled"))
        elif (name := _match(key, not_modelled)) is not None:
            at_default = any(type(value) is type(v) and value == v for v in defaults.get(key, ()))
            on = (value not in OFF and not (isinstance(value, dict) and value.get("enabled") is False)
                  and not at_default or key in FALSE_MATTERS and value is False)
            out.append(ConfigKey(file, key, shown, "not modelled" if on else "off", not_modelled[name]))
        elif _match(key, no_memory) or _match(parts[-1], no_memory) or _match(parts[0], no_memory):
            out.append(ConfigKey(file, key, shown, "no memory"))
        elif value is None or value == "":  # an empty key sets nothing (axolotl's lora_model_dir:)
            out.append(ConfigKey(file, key, shown, "off", f"not a {tool} key campaign knows, and empty"))
        else:
            out.append(ConfigKey(file, key, shown, "unknown", f"not a {tool} key campaign knows: its effect on "
                                                            "memory is not modelled"))
    return out


def _flatten(doc: dict[str, Any], sections: tuple[str, ...]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in doc.items():
        if key in sections and isinstance(value, dict):  # an empty section holds no key
            out += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            out.append((str(key), value))
    return out


def _short(value: Any) -> str:
    text = str(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# peft's default LoRA targets per model type, used when a LoraConfig has no target_modules
# (peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, peft 0.21.2; the decoder and encoder
# model types campaign estimates). peft raises for a model type not in it.
LORA_DEFAULT_TARGETS = {
    "llama": ("q_proj", "v_proj"), "llama4": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"), "gemma2": ("q_proj", "v_proj"), "gemma3_text": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"), "stablelm": ("q_proj", "v_proj"), "opt": ("q_proj", "v_proj"),
    "gptj": ("q_proj", "v_proj"), "gpt_neo": ("q_proj", "v_proj"), "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",), "bloom": ("query_key_value",), "falcon": ("query_key_value",),
    "gpt_bigcode": ("c_attn",), "mpt": ("Wqkv",), "codegen": ("qkv_proj",), "t5": ("q", "v"), "mt5": ("q", "v"),
    "bart": ("q_proj", "v_proj"), "bert": ("query", "value"), "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"), "electra": ("query", "value"), "deberta-v2": ("query_proj", "value_proj"),
    "deberta": ("in_proj",), "nemotron_h": ("q_proj", "k_proj", "v_proj", "o_proj"),
}
PEFT_DEFAULTS_SOURCE = "peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"


def default_lora_targets(model_type: str | None) -> tuple[str, ...] | None:
    """peft's LoRA targets for a model type when the config names none (None: peft has no default for it)."""
    return LORA_DEFAULT_TARGETS.get(model_type or "")


__all__ = ["ConfigKey", "account", "default_lora_targets"]
