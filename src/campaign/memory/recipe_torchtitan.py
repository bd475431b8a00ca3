"""A torchtitan job file (its TOML, until torchtitan moved its configs to Python in February 2026) as the workload.

torchtitan trains with FSDP2 over every card (data_parallel_shard_degree -1), fp32 parameters all-gathered in bf16
(training.mixed_precision_param, MixedPrecisionPolicy), AdamW, and activation checkpointing selective every second
layer unless the file says otherwise. The keys moved between versions: the parallel degrees from [training] and
[experimental] to [parallelism], batch_size to local_batch_size, compile from training.compile to [compile] enable;
both layouts are read. A key the file leaves out takes torchtitan's default where it has been the same in every
version (the source says so); where it moved (optimizer.implementation), the estimate's own is kept and noted.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError
from . import recipe_read as rd

# torchtitan's JobConfig defaults, the same from the TOML era's first releases (config_manager.py at 9dec370, Dec
# 2024) to its last (config/job_config.py before 9810191b, Feb 2026)
DEFAULTS = {"batch": 8, "seq_len": 2048, "ac_mode": "selective", "ac_option": "2"}
ADAMW = ("AdamW", "Adam")
IMPLEMENTATIONS = {"fused": "fused", "foreach": "foreach", "for-loop": "loop"}


def is_torchtitan(doc: dict[str, Any]) -> bool:
    """A torchtitan job file: a [training] table beside one of torchtitan's own tables."""
    return isinstance(doc.get("training"), dict) and any(
        isinstance(doc.get(k), dict) for k in ("job", "activation_checkpoint", "parallelism", "float8", "experimental"))


def _table(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise InputError(f"{where}: [{name}] is {value!r}, not a table; fix the file")
    return value


def read(r: rd.Reader, name: str, doc: dict[str, Any]) -> None:
    """Read a torchtitan job file into the reader `r` (recipe_read.Reader)."""
    training = _table(doc, "training", name)
    parallel = _table(doc, "parallelism", name)
    experimental = _table(doc, "experimental", name)

    def where(table: str, key: str) -> str:
        return f"{name}: {table}.{key}"

    def degree(key: str) -> tuple[Any, str] | None:
        for table, values in (("parallelism", parallel), ("training", training), ("experimental", experimental)):
            if key in values:
                return values[key], where(table, key)
        return None

    batch_key = next((k for k in ("local_batch_size", "batch_size") if k in training), None)
    if batch_key is not None:
        r.set("batch", _positive(training[batch_key], where("training", batch_key)), where("training", batch_key))
    else:
        r.set("batch", DEFAULTS["batch"], f"{name} (no training.local_batch_size: torchtitan's default 8)")
    if "seq_len" in training:
        r.set("seq_len", _positive(training["seq_len"], where("training", "seq_len")), where("training", "seq_len"))
    else:
        r.set("seq_len", DEFAULTS["seq_len"], f"{name} (no training.seq_len: torchtitan's default 2048)")
    _precision(r, name, training)
    norm = _table(doc, "model", name).get("norm_type")
    if norm in ("rmsnorm", "layernorm", "np_layernorm"):  # the model's own norms (fused_rmsnorm: left named)
        r.use(name, "model.norm_type")
    _sharding(r, name, training, degree)
    _checkpointing(r, name, _table(doc, "activation_checkpoint", name))
    if "quantize" in doc and not _table(doc, "model", name).get("converters"):
        # [quantize.*] configures a converter that only model.converters applies (its default: none;
        # protocols/model_converter.py build_model_converters): without one it changes nothing
        r.use(name, "quantize")
    _optimizer(r, name, _table(doc, "optimizer", name))
    accumulation = training.get("global_batch_size")
    if isinstance(accumulation, int) and accumulation > 0:
        shard = degree("data_parallel_shard_degree")  # the data-parallel cards: the file's degree, else --gpus
        cards = shard[0] if shard is not None and isinstance(shard[0], int) and shard[0] > 0 else r.gpus
        if cards is None:
            r.notes.append(f"{name}: training.global_batch_size is over every card: give --gpus to read its "
                           "gradient accumulation")
        else:
            local = r.options["batch"]
            steps, rest = divmod(accumulation, local * cards)
            if rest or steps < 1:
                raise InputError(f"{where('training', 'global_batch_size')}: {accumulation} is not a multiple of "
                                 f"local_batch_size x {cards} cards ({local * cards}), as torchtitan requires; fix the "
                                 "file or --gpus")
            r.set("grad_accumulation", steps, f"{where('training', 'global_batch_size')} (over local_batch_size x "
                                              f"{cards} cards)")
    r.account(name, "torchtitan", doc)


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {value!r} is not a positive whole number; fix the file")
    return value


def _precision(r: rd.Reader, name: str, training: dict[str, Any]) -> None:
    """fp32 parameters (training.dtype, float32 by default) all-gathered and computed in mixed_precision_param
    (bfloat16 by default): --dtype fp32 --mixed-precision; bfloat16 parameters: --dtype bf16."""
    dtype = training.get("dtype", "float32")
    param = training.get("mixed_precision_param", "bfloat16")
    if dtype not in ("float32", "bfloat16") or param not in ("float32", "bfloat16"):
        raise InputError(f"{name}: training.dtype {dtype!r}, mixed_precision_param {param!r}: torchtitan takes "
                         "bfloat16 or float32; fix the file")
    if dtype == "bfloat16":
        r.set("dtype", "bf16", f"{name}: training.dtype")
        return
    r.set("dtype", "fp32", f"{name}: training.dtype" if "dtype" in training else
          f"{name} (no training.dtype: torchtitan's fp32 parameters)")
    r.set("mixed_precision", param == "bfloat16", f"{name}: training.mixed_precision_param" if
          "mixed_precision_param" in training else f"{name} (no training.mixed_precision_param: torchtitan's bf16)")
    r.use(name, *(f"training.{k}" for k in ("mixed_precision_reduce",) if k in training))


def _sharding(r: rd.Reader, name: str, training: dict[str, Any], degree: Any) -> None:
    """FSDP2 over the data-parallel shard degree (-1: every card --gpus gives); another parallelism above 1 is left
    to the key's account, named as not modelled."""
    shard = degree("data_parallel_shard_degree")
    value, source = shard if shard is not None else (-1, f"{name} (no data_parallel_shard_degree: torchtitan's -1, "
                                                          "every card)")
    if value == -1:
        cards = r.gpus
        if cards is None:
            r.notes.append(f"{name}: data_parallel_shard_degree -1 shards over every card: give --gpus N")
        elif cards > 1:
            r.set("shard", "fsdp", f"{source} (over {cards} cards)")
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        if value > 1:
            r.set("shard", "fsdp", source)
            r.set("gpus", value, source)
    else:
        raise InputError(f"{source}: {value!r} is not -1 or a positive number of cards; fix the file")
    if shard is not None:
        r.use(name, source.split(": ", 1)[1])
    for key in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                "data_parallel_replicate_degree", "expert_parallel_degree"):
        given = degree(key)
        if given is not None and given[0] == 1:
            r.use(name, given[1].split(": ", 1)[1])  # 1: not used
    reshard = degree("fsdp_reshard_after_forward")
    if reshard is not None and reshard[0] in ("default", "always", "never"):
        if r.options.get("shard") == "fsdp":
            r.set("reshard_after_forward", reshard[0] != "never", reshard[1])
        else:
            r.use(name, reshard[1].split(": ", 1)[1])  # no FSDP: nothing to reshard
    if training.get("enable_cpu_offload") is True:
        r.set("offload_params", "cpu", f"{name}: training.enable_cpu_offload")
    elif "enable_cpu_offload" in training:
        r.use(name, "training.enable_cpu_offload")


def _checkpointing(r: rd.Reader, name: str, ac: dict[str, Any]) -> None:
    """[activation_checkpoint]: mode none | full | selective (default) with selective_ac_option 'op' (per op) or a
    layer count K (every K-th layer; default '2'); memory_budget (the compiler's own choice) is left named."""
    mode = ac.get("mode", DEFAULTS["ac_mode"])
    where = f"{name}: activation_checkpoint.mode" if "mode" in ac else \
        f"{name} (no activation_checkpoint.mode: torchtitan's selective, every second layer)"
    if mode in ("none", "full"):
        r.set("grad_checkpointing", mode == "full", where)
        if "selective_ac_option" in ac:  # read with mode selective only (activation_checkpoint.py)
            r.use(name, "activation_checkpoint.selective_ac_option")
    elif mode == "selective":
        r.set("grad_checkpointing", True, where)
        option = str(ac.get("selective_ac_option", DEFAULTS["ac_option"])).strip()
        source = f"{name}: activation_checkpoint.selective_ac_option" if "selective_ac_option" in ac else where
        if option == "op":
            r.set("checkpoint_ops", True, source)
        elif option.isdigit() and int(option) > 0:
            if int(option) > 1:
                r.set("checkpoint_every", int(option), source)
            else:
                r.use(name, "activation_checkpoint.selective_ac_option")
        else:
            raise InputError(f"{name}: activation_checkpoint.selective_ac_option {option!r} is 'op' or a positive "
                             "number of layers, as torchtitan takes it; fix the file")
    else:
        return  # memory_budget: named by the account
    r.use(name, "activation_checkpoint.mode")


def _optimizer(r: rd.Reader, name: str, opt: dict[str, Any]) -> None:
    kind = opt.get("name", "AdamW")
    if kind not in ADAMW:
        r.refuse(f"{name}: optimizer.name", f"optimizer {kind!r}", "the estimate keeps --optimizer's (AdamW unless "
                 "given)")
    else:
        r.set("optimizer", "adamw", f"{name}: optimizer.name" if "name" in opt else f"{name} (torchtitan's AdamW)")
    impl = opt.get("implementation")
    if impl is not None:
        if impl not in IMPLEMENTATIONS:
            raise InputError(f"{name}: optimizer.implementation {impl!r}: torchtitan takes fused, foreach or "
                             "for-loop; fix the file")
        r.set("optimizer_impl", IMPLEMENTATIONS[impl], f"{name}: optimizer.implementation")
    else:
        r.notes.append(f"{name}: no optimizer.implementation (torchtitan's default moved from foreach to fused): "
                       "foreach's temporaries counted, an upper bound for fused")
    if opt.get("early_step_in_backward") is True:
        r.set("optimizer_in_backward", True, f"{name}: optimizer.early_step_in_backward")
    elif "early_step_in_backward" in opt:
        r.use(name, "optimizer.early_step_in_backward")


__all__ = ["is_torchtitan", "read"]
