"""A DeepSpeed config (ds_config.json) as the workload: ZeRO's stage, offload and buckets, the batch sizes, the
16-bit sections and the optimizer, each key accounted for (changes no memory, or named as not modelled); the `deepspeed`
key of a Trainer's file (TrainingArguments, axolotl, LLaMA-Factory) that names one; and what only the files together
decide (`settle`: a bf16 "auto" no Trainer fills, a bf16 master without bf16 training).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from . import recipe_read as rd
from .recipe_keys import ConfigKey
from .workload import zero_elements


def is_deepspeed(doc: dict[str, Any]) -> bool:
    return "zero_optimization" in doc or "train_micro_batch_size_per_gpu" in doc


def recipe_key(r: rd.Reader, path: Path, d: dict[str, Any]) -> None:
    """The `deepspeed` key of TrainingArguments, axolotl or LLaMA-Factory: the config itself as a mapping, or the path
    of a ds_config, which the HF Trainer opens from the folder the command runs in (HfTrainerDeepSpeedConfig)."""
    name, value = rd.label(path), d.get("deepspeed")
    if value is None or value == "":
        return
    r.use(name, "deepspeed")
    if isinstance(value, dict):
        read(r, f"{name}: deepspeed", value)
        return
    if not isinstance(value, str):
        raise InputError(f"{name}: deepspeed is {rd.short(value)}; give the path of a ds_config.json or the DeepSpeed "
                         "config as a mapping")
    open_config(r, path, value, "deepspeed", "the HF Trainer")


def open_config(r: rd.Reader, path: Path, value: str, key: str, opener: str,
                launcher: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> None:
    """Read the ds_config that key `key` of recipe `path` names (`value`, a path `opener` opens from the folder the
    command runs in): looked for there, then beside the recipe, and is the --deepspeed file when that has its name.
    Not found, it is named as not modelled (the estimate without DeepSpeed), never a refusal of the recipe.
    `launcher(name, doc)`: the config as the launcher hands it to DeepSpeed (its "auto" values filled), read in place
    of the file's, whose keys are accounted as written."""
    found: Path | None
    if r.deepspeed is not None and Path(value).name == Path(r.deepspeed).name:  # the file --deepspeed gives
        found, r.deepspeed = Path(r.deepspeed), None  # read: not again
    else:
        found = next((ds for ds in (Path(value), path.parent / value) if ds.is_file()), None)  # absolute: itself
    if found is None:
        r.refuse(f"{rd.label(path)}: {key}", f"{value} (not found from this folder, where {opener} opens it, nor "
                 f"beside {rd.label(path)})", "counted without DeepSpeed; give the file with --deepspeed")
        return
    name, doc = rd.label(found), rd.load_config_file(found)
    if launcher is None:
        read(r, name, doc)
        return
    read(r, name, launcher(name, doc), whole=False)
    r.account(name, "DeepSpeed", doc, DEEPSPEED_KNOWN)


# zero_optimization keys (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig, fields and aliases) -> the workload
# option each sets (memory/deepspeed.py models it)
ZERO_OPTIONS = {
    "reduce_bucket_size": "zero_reduce_bucket", "sub_group_size": "zero_sub_group_size",
    "stage3_prefetch_bucket_size": "zero_prefetch_bucket", "prefetch_bucket_size": "zero_prefetch_bucket",
    "stage3_max_live_parameters": "zero_max_live_params", "max_live_parameters": "zero_max_live_params",
    "stage3_max_reuse_distance": "zero_reuse_distance", "max_reuse_distance": "zero_reuse_distance",
    "stage3_param_persistence_threshold": "zero_persistence_threshold",
    "param_persistence_threshold": "zero_persistence_threshold",
    "overlap_comm": "zero_overlap_comm", "contiguous_gradients": "zero_contiguous_gradients",
}


# keys that change no buffer on the card: how collectives are cut or ordered (allgather_bucket_size only sets the
# number of shards of the stage 1-2 all-gather, runtime/utils.py all_gather_dp_groups: views, no buffer), checkpoint
# files, checks, logging
ZERO_NO_MEMORY = frozenset((
    "allgather_bucket_size", "allgather_partitions", "reduce_scatter", "round_robin_gradients",
    "load_from_fp32_weights",
    "elastic_checkpoint", "ignore_unused_parameters", "use_multi_rank_bucket_allreduce",
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "stage3_model_persistence_threshold", "model_persistence_threshold",
    "stage3_module_granularity_threshold", "module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
    "use_all_reduce_for_fetch_params", "stage3_allgather_sequential", "allgather_sequential", "memory_efficient_linear",
    "log_trace_cache_warnings", "enable_sanity_checks", "override_module_apply", "pipeline_loading_checkpoint",
    "mics_hierarchical_params_gather", "leaf_module"))


# keys that change memory in ways the estimate does not model, refused when set to anything but DeepSpeed's default
ZERO_REFUSED = {
    "zero_hpz_partition_size": (1, "a secondary partition of the parameters (ZeRO++ hpZ)"),
    "zero_quantized_weights": (False, "quantized weight all-gathers (ZeRO++ qwZ)"),
    "zero_quantized_nontrainable_weights": (False, "quantized frozen weights"),
    "zero_quantized_gradients": (False, "quantized gradient reduction (ZeRO++ qgZ)"),
    "mics_shard_size": (-1, "MiCS sharding within groups of cards"),
    "zenflow": (None, "ZenFlow"), "zeropp_loco_param": (None, "ZeRO++ LoCo"),
    "cpu_offload": (None, "CPU offload"), "cpu_offload_param": (None, "CPU offload"),
    "cpu_offload_use_pin_memory": (None, "CPU offload"),
    "save_muon_momentum_buffer_in_memory": (False, "Muon's momentum buffer"),
}


DEEPSPEED_OPTIMIZERS = ("adam", "adamw")


# top-level ds_config keys (DeepSpeed's docs, config-json) read above, or that change no buffer on the card: batch
# arithmetic, clipping, schedules, logging and monitors, checkpoint files, tuning, data sampling
DEEPSPEED_READ = frozenset(("zero_optimization", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "optimizer", "data_types", "activation_checkpointing", "communication_data_type"))


# the bf16 / fp16 sections' keys besides enabled and the low-precision master (_low_precision_master): loss scaling,
# overflow checks, the moment of the update (DeepSpeed's DeepSpeedBF16Config and DeepSpeedFP16Config)
HALF_NO_MEMORY = ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                  "min_loss_scale", "auto_cast", "immediate_grad_update", "check_grad_overflow", "check_overflow",
                  "fp16_master_weights_and_grads", "bf16_master_weights_and_grads", "bf16_optimizer_states")


DEEPSPEED_NO_MEMORY = frozenset((
    "train_batch_size", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
    "dump_state", "memory_breakdown", "scheduler", "prescale_gradients", "gradient_predivide_factor",
    "gradient_allreduce_op", "seq_parallel_communication_data_type", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger",
    "elasticity", "autotuning", "checkpoint", "aio", "dataloader_drop_last", "curriculum_learning", "data_efficiency",
    "timers", "graph_harvesting", "disable_allgather", "sparse_gradients", "managed_gradient_accumulation", "log_level",
    "eigenvalue", "load_universal_checkpoint", "use_node_local_storage", "use_data_before_expert_parallel_"))


# top-level keys that change memory in ways the estimate does not model: refused when they are on
DEEPSPEED_REFUSED = {
    "amp": "apex AMP", "torch_autocast": "DeepSpeed's torch autocast", "compile": "DeepCompile",
    "sparse_attention": "sparse attention", "compression_training": "compression training",
    "hybrid_engine": "the hybrid (RLHF) engine", "weight_quantization": "weight quantization",
    "quantize_training": "quantized training", "progressive_layer_drop": "progressive layer drop",
    "tensor_parallel": "tensor parallelism (AutoTP)", "sequence_parallel_size": "sequence parallelism (Ulysses)",
    "pipeline": "pipeline parallelism", "expert_parallel": "expert parallelism",
}


def _deepspeed_on(key: str, value: Any) -> bool:
    """Whether a refused top-level section is on: an `enabled` flag, a size above 1, or any other setting."""
    if key == "sequence_parallel_size":
        return value not in (None, 1)
    if key == "tensor_parallel":
        return isinstance(value, dict) and value.get("autotp_size", value.get("tp_size", 1)) not in (None, 0, 1)
    if isinstance(value, dict):
        return value.get("enabled", bool(value)) not in (False, None, "false")
    return value not in (None, False)


OFFLOAD_FORM = '{"device": "cpu"} (or "nvme"; "none" for no offload)'


def zero_stage(value: Any, where: str) -> int:
    """A ZeRO stage: DeepSpeed's ZeroStageEnum, a whole number 0-3 (true, 2.0 or "2" are not stages)."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2, 3):
        raise InputError(f"{where}: {rd.short(value)} is not a ZeRO stage; write 0, 1, 2 or 3")
    return value


def _offload(r: rd.Reader, section: Any, where: str, stage: int) -> None:
    """offload_optimizer / offload_param: DeepSpeed reads an object whose `device` is none, cpu or nvme
    (DeepSpeedZeroOffloadOptimizerConfig, ...ParamConfig); offload_optimizer to the CPU sets --offload-optimizer cpu
    at stage 1, 2 or 3 (ZeRO-Offload), offload_param to the CPU --offload-params cpu at stage 3 (ZeRO-Infinity's CPU
    case; DeepSpeed offloads parameters at stage 3 only), nvme is refused by name, since the estimate does not model
    it, and a form DeepSpeed cannot read ("cpu", ["cpu"], true) is refused with the form it can."""
    if section is None:
        return
    if not isinstance(section, dict):
        raise InputError(f"{where}: {rd.short(section)} is not a form DeepSpeed reads; it takes an object, "
                         f"{OFFLOAD_FORM}, and the estimate models no offload: drop the key for one without it")
    kind = "offload_param" if where.endswith("offload_param") else "offload_optimizer"
    offload_device(r, section.get("device", "none"), where, stage, kind)


def offload_device(r: rd.Reader, device: Any, where: str, stage: int, kind: str) -> None:
    """An offload device as a ds_config (offload_optimizer.device, offload_param.device) or accelerate
    (offload_optimizer_device, offload_param_device) writes it, at ZeRO stage `stage` (memory/offload.py)."""
    if device == "cpu" and kind == "offload_optimizer" and stage in (1, 2, 3):  # ZeRO-Offload
        r.set("offload_optimizer", "cpu", where)
    elif device == "cpu" and kind == "offload_param" and stage == 3:  # ZeRO-Infinity, its CPU case
        r.set("offload_params", "cpu", where)
    elif device == "cpu":
        raise InputError(f"{where}: offload to cpu at ZeRO stage {stage}: DeepSpeed offloads "
                         f"{'parameters at stage 3' if kind == 'offload_param' else 'the optimizer at stages 1-3'} "
                         "only; set the stage to 3, or drop the key")
    elif device not in (None, "none"):
        r.refuse(where, f"offload to {device}", "counted on the card (an upper bound)")


def _batch_sizes(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    """DeepSpeed's three batch sizes, of which any two give the third (runtime/config.py
    _set_batch_related_parameters: train_batch_size = micro-batch x gradient_accumulation_steps x GPUs; with the
    total alone the accumulation is 1); a size the GPUs decide is read with --gpus, else noted."""
    given = {k: d.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    total, micro, steps = (None if v in (None, "auto") else rd.whole(v, f"{name}: {k}") for k, v in given.items())
    if micro is not None:
        r.set("batch", micro, f"{name}: train_micro_batch_size_per_gpu")
    if total is None or (micro is not None and steps is not None):
        return
    if r.gpus is None:
        r.refuse(f"{name}: train_batch_size", f"{total} over every card, from which DeepSpeed derives the "
                 f"{'accumulation' if micro is not None else 'micro-batch'}", "give --gpus to read it; counted as "
                 f"--{'grad-accumulation' if micro is not None else 'batch'} says")
    elif micro is None:
        r.use(name, "train_batch_size")
        r.set("batch", max(1, total // (steps or 1) // r.gpus),
              f"{name}: train_batch_size / ({'gradient_accumulation_steps' if steps else 'no accumulation'} x "
              f"{r.gpus} cards)")
    else:
        r.use(name, "train_batch_size")
        r.set("grad_accumulation", max(1, total // (micro * r.gpus)),
              f"{name}: train_batch_size / (train_micro_batch_size_per_gpu x {r.gpus} cards)")


def settle(r: rd.Reader) -> None:
    """What only the files together decide, named as not modelled where they leave it open (the estimate then a
    bound): a ds_config's bf16 "auto" that no Trainer file fills (counted as --mixed-precision says), and DeepSpeed's
    bf16 master (zero_bf16_master, modelled for bf16 training on the card) read where bf16 is not on or the optimizer
    is offloaded to the CPU (fp32 master and states counted, an upper bound), rather than refusing the recipe."""
    if r.ds_auto and not r.ds_filled:
        file, _, key = r.ds_auto[0].rpartition(": ")
        _restate(r, file, {key}, "auto: the HF Trainer fills it from its bf16/fp16, and no TrainingArguments file "
                 "given here says", "counted as --mixed-precision says (off unless given: no fp32 master, low where "
                 "the Trainer's bf16 is on)")
    if not r.options.get("zero_bf16_master"):
        return
    if r.options.get("offload_optimizer") == "cpu":
        why = "a bf16 master with the optimizer offloaded to the CPU (bf16 moments in DeepSpeedCPUAdam)"
    elif not r.options.get("mixed_precision"):
        why = "a bf16 master without bf16 training on"
    else:
        return
    file, _, keys = r.sources.pop("zero_bf16_master")[1].rpartition(": ")
    del r.options["zero_bf16_master"]
    section = keys.split(".")[0]
    _restate(r, file, {f"{section}.bf16_master_weights_and_grads", f"{section}.bf16_optimizer_states"}, why,
             "fp32 master and states counted (an upper bound)")


def _restate(r: rd.Reader, file: str, keys: set[str], why: str, counted: str) -> None:
    """Keys of `file` accounted before the other files were read, named now as not modelled."""
    for key in keys:
        r.refuse(f"{file}: {key}", why, counted)
    r.keys = [ConfigKey(k.file, k.key, k.value, "not modelled", r.unread[file][k.key])
              if k.file == file and k.key in keys else k for k in r.keys]


def _low_precision_master(r: rd.Reader, name: str, key: str, section: dict[str, Any]) -> None:
    """DeepSpeed's bf16 section's bf16_master_weights_and_grads with bf16_optimizer_states (--zero-bf16-master, both
    on: master, gradient partition and Adam moments in bf16 on the card); the master alone (DeepSpeed then requires
    ZeRO-Offload's CPU Adam) and fp16's fp16_master_weights_and_grads are refused by name."""
    master = section.get(f"{'fp16' if key == 'fp16' else 'bf16'}_master_weights_and_grads") is True
    states = section.get("bf16_optimizer_states") is True
    if not (master or states):
        return
    if key == "fp16" or not (master and states):
        on = [k for k in ("fp16_master_weights_and_grads", "bf16_master_weights_and_grads", "bf16_optimizer_states")
              if section.get(k) is True]
        r.refuse(f"{name}: {key}.{on[0]}", "a 16-bit master without bf16 optimizer states on the card (DeepSpeed "
                 "keeps them with ZeRO-Offload's CPU Adam)", "fp32 master and states counted (an upper bound)")
        return
    r.set("zero_bf16_master", True, f"{name}: {key}.bf16_master_weights_and_grads + bf16_optimizer_states")
    r.use(name, f"{key}.bf16_master_weights_and_grads", f"{key}.bf16_optimizer_states")


def read(r: rd.Reader, name: str, d: dict[str, Any], *, whole: bool = True) -> None:
    """A DeepSpeed config; `whole`: a file (or mapping) of the user's, each of its keys accounted for (not the stage
    accelerate's own deepspeed_config names)."""
    given = d
    if d.get("zero_optimization") is False:  # DeepSpeed's deprecated boolean form: false is stage 0
        d = {k: v for k, v in d.items() if k != "zero_optimization"}
        r.use(name, "zero_optimization")
    zero = rd.section(d, "zero_optimization", name, 'DeepSpeed reads an object such as {"stage": 2}')
    stage = zero_stage(zero.get("stage", 0), f"{name}: zero_optimization.stage")
    for key in ("offload_optimizer", "offload_param"):
        _offload(r, zero.get(key), f"{name}: zero_optimization.{key}", stage)
    r.set("shard", "none" if stage == 0 else f"zero{stage}", f"{name}: zero_optimization.stage")
    r.use(name, *(f"zero_optimization.{k}" for k in ("offload_optimizer", "offload_param") if k in zero))
    for key, value in zero.items():
        where = f"{name}: zero_optimization.{key}"
        if key in ("stage", "offload_optimizer", "offload_param") or key in ZERO_NO_MEMORY:
            continue
        if key in ZERO_REFUSED:
            default, what = ZERO_REFUSED[key]
            if value not in (default, None, False):
                r.refuse(where, what, "counted without it")
            continue
        if key not in ZERO_OPTIONS:  # DeepSpeed refuses it too: DeepSpeedZeroConfig is a DeepSpeedConfigModel,
            # extra = "forbid" (deepspeed/runtime/config_utils.py); an unknown top-level key it ignores is named instead
            raise InputError(f"{where}: not a DeepSpeed zero_optimization key (DeepSpeed itself refuses it: its ZeRO "
                             "config forbids other keys); fix the name, or remove it from a copy of the file")
        option = ZERO_OPTIONS[key]
        if option in ("zero_overlap_comm", "zero_contiguous_gradients"):
            if not isinstance(value, bool):
                raise InputError(f"{where}: {value!r} is not true or false; fix the file")
            r.set(option, value, where)
        else:
            try:
                elements = zero_elements(value, key)
            except InputError:
                raise InputError(f"{where}: {value!r} is not a whole number of elements (5e8, 500000000) or auto; fix "
                                 "the file") from None
            r.set(option, elements, where)
    for key, value in d.items():
        if key in DEEPSPEED_REFUSED:
            if _deepspeed_on(key, value):
                r.refuse(f"{name}: {key}", DEEPSPEED_REFUSED[key], "counted without it")
        elif key in DEEPSPEED_READ and key != "zero_optimization":  # its keys are accounted one by one
            r.use(name, key)
    if d.get("communication_data_type") not in (None, "bf16", "fp16", "bfp16"):
        r.refuse(f"{name}: communication_data_type", f"gradients reduced in {d['communication_data_type']}",
                 "the reduce bucket counted in the 16-bit dtype (fp32 holds twice the bytes)")
    rd.accumulation(r, d, name)
    _batch_sizes(r, name, d)
    for key in ("bf16", "bfloat16", "fp16"):
        section = rd.section(d, key, name, 'DeepSpeed reads an object such as {"enabled": true}')
        if section.get("enabled") not in (None, False, "auto"):
            r.set("mixed_precision", True, f"{name}: {key}.enabled")
        elif section.get("enabled") == "auto":  # the HF Trainer fills it from its own bf16/fp16 (rd.auto_half)
            r.ds_auto.append(f"{name}: {key}.enabled")
        if "enabled" in section:
            r.use(name, f"{key}.enabled")
        _low_precision_master(r, name, key, section)
    optimizer = rd.section(d, "optimizer", name, 'DeepSpeed reads an object such as {"type": "AdamW", "params": {}}')
    if optimizer.get("type") is not None:
        kind = str(optimizer["type"]).lower()
        params = optimizer.get("params") or {}
        if kind not in DEEPSPEED_OPTIMIZERS:
            r.refuse(f"{name}: optimizer.type", f"DeepSpeed optimizer {optimizer['type']!r}",
                     "the estimate keeps --optimizer's (AdamW unless given); campaign reads Adam and AdamW")
        # deepspeed/runtime/engine.py _configure_basic_optimizer: Adam/AdamW -> FusedAdam (multi-tensor, in place),
        # torch's AdamW with "torch_adam": true
        torch_adam = isinstance(params, dict) and params.get("torch_adam") is True
        for option, value in (("optimizer", "adamw"), ("optimizer_impl", "foreach" if torch_adam else "fused")) \
                if kind in DEEPSPEED_OPTIMIZERS else ():
            if option in r.options and r.options[option] != value:  # the Trainer's optim gives way to DeepSpeed's
                r.notes.append(f"{name}: optimizer.type replaces {r.sources[option][1]} ({option} "
                               f"{r.options[option]!r}): the HF Trainer uses DeepSpeed's optimizer when it names one")
                del r.options[option], r.sources[option]
            r.set(option, value, f"{name}: optimizer.type ({'torch AdamW' if torch_adam else 'DeepSpeed FusedAdam'})")
    types = rd.section(d, "data_types", name, 'DeepSpeed reads an object such as {"grad_accum_dtype": "bf16"}')
    if types.get("grad_accum_dtype") not in (None, "bf16", "fp16"):
        r.refuse(f"{name}: data_types.grad_accum_dtype", f"gradients accumulated in {types['grad_accum_dtype']}",
                 "the gradient partition counted in the 16-bit dtype (fp32: 2 B more per trainable parameter and "
                 "card)")
    checkpointing = rd.section(d, "activation_checkpointing", name,
                             'DeepSpeed reads an object such as {"partition_activations": false}')
    for key in ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization"):
        if checkpointing.get(key):
            r.refuse(f"{name}: activation_checkpointing.{key}", "DeepSpeed's own activation checkpointing",
                     "the activations counted as --grad-checkpointing says (the model's own)")
    if whole:
        r.account(name, "DeepSpeed", given, DEEPSPEED_KNOWN)


# DeepSpeed keys that change no memory on the card, or keys the refusals above left at their default (off)
DEEPSPEED_KNOWN = (tuple(DEEPSPEED_NO_MEMORY) + tuple(DEEPSPEED_REFUSED) + tuple(
    f"zero_optimization.{k}" for k in (*ZERO_NO_MEMORY, *ZERO_REFUSED)) + tuple(
    f"{s}.{k}" for s in ("bf16", "bfloat16", "fp16") for k in (*HALF_NO_MEMORY, "enabled")))


def deepspeed_options(doc: dict[str, Any], name: str = "ds_config", gpus: int | None = None) -> dict[str, Any]:
    """The make_workload keywords a DeepSpeed config held in memory sets, read as --deepspeed reads a file (the same
    refusals); `name` stands for the file in messages. benchmarks/memory_reference.py reads its entries' configs so."""
    r = rd.Reader(gpus)
    read(r, name, doc)
    unread = next(iter(r.unread.get(name, {}).items()), None)
    if unread is not None:  # a published row with a setting the estimate does not model is not compared
        raise InputError(f"{name}: {unread[0]}: {unread[1]}")
    return dict(r.options)
