"""An accelerate config (`accelerate launch --config_file FILE`) as the workload: the processes, mixed precision,
FSDP's plugin (sharding strategy, CPU offload, activation checkpointing, reshard after forward) and DeepSpeed's,
inline or through its deepspeed_config_file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from . import recipe_deepspeed, recipe_read as rd


def read(r: rd.Reader, path: Path, d: dict[str, Any]) -> None:
    name = rd.label(path)
    kind = str(d.get("distributed_type", "NO")).upper()
    if d.get("num_processes") is not None:
        r.set("gpus", rd.whole(d["num_processes"], f"{name}: num_processes"), f"{name}: num_processes")
    if str(d.get("mixed_precision", "no")).lower() in ("bf16", "fp16"):
        r.set("mixed_precision", True, f"{name}: mixed_precision")
    if kind == "FSDP":
        fsdp = rd.section(d, "fsdp_config", name, "accelerate reads a mapping of fsdp_* settings")
        strategy = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        shard = {"FULL_SHARD": "fsdp", "1": "fsdp", "SHARD_GRAD_OP": "zero2", "2": "zero2", "NO_SHARD": "none",
                 "3": "none"}.get(strategy)
        if shard is None:
            r.refuse(f"{name}: fsdp_config.fsdp_sharding_strategy", f"{strategy} (sharding within a node)",
                     "counted as FULL_SHARD over the cards (low where the node has fewer cards)")
            shard = "fsdp"
        r.set("shard", shard, f"{name}: fsdp_config.fsdp_sharding_strategy")
        if str(fsdp.get("fsdp_offload_params", False)).lower() == "true":  # accelerate: CPUOffload(offload_params)
            if shard != "fsdp":
                r.refuse(f"{name}: fsdp_config.fsdp_offload_params", f"CPU offload with {strategy}",
                         "counted without the offload (an upper bound on the card)")
            else:
                r.set("offload_params", "cpu", f"{name}: fsdp_config.fsdp_offload_params")
        if strategy in ("SHARD_GRAD_OP", "2"):
            r.notes.append(rd.SHARD_GRAD_OP_NOTE.format(where=f"{name}: fsdp_config.fsdp_sharding_strategy"))
        if fsdp.get("fsdp_activation_checkpointing"):
            r.set("grad_checkpointing", True, f"{name}: fsdp_config.fsdp_activation_checkpointing")
        rd.reshard(r, name, fsdp.get("fsdp_reshard_after_forward"), "fsdp_config.fsdp_reshard_after_forward")
    elif kind == "DEEPSPEED":
        ds = rd.section(d, "deepspeed_config", name, "accelerate reads a mapping of zero_stage, offload_*_device...")
        file = ds.get("deepspeed_config_file")
        if file is not None:
            if not isinstance(file, str) or not file:
                raise InputError(f"{name}: deepspeed_config.deepspeed_config_file is {rd.short(file)}; give the "
                                 "path of a ds_config.json")
            recipe_deepspeed.read(r, rd.label(path.parent / file), rd.load_config_file(path.parent / file))
            r.use(name, "deepspeed_config.deepspeed_config_file")
        else:
            where = f"{name}: deepspeed_config"
            stage = recipe_deepspeed.zero_stage(ds.get("zero_stage", 0), f"{where}.zero_stage")
            for key in ("offload_optimizer_device", "offload_param_device"):
                recipe_deepspeed.offload_device(r, ds.get(key), f"{where}.{key}", stage, key.rsplit("_", 1)[0])
            recipe_deepspeed.read(r, where, {"zero_optimization": {"stage": stage}}, whole=False)
            if stage == 3 and ds.get("zero3_init_flag") is True:  # from_pretrained under deepspeed.zero.Init
                r.set("zero_init", True, f"{where}.zero3_init_flag")
            elif stage != 3 and "zero3_init_flag" in ds:
                r.use(name, "deepspeed_config.zero3_init_flag")  # read by ZeRO-3 only
            r.use(name, "deepspeed_config.zero_stage", *(f"deepspeed_config.{k}" for k in (
                "offload_optimizer_device", "offload_param_device") if k in ds))
        steps = ds.get("gradient_accumulation_steps")
        if steps not in (None, "auto"):
            where = f"{name}: deepspeed_config.gradient_accumulation_steps"
            r.set("grad_accumulation", rd.whole(steps, where), where)
    r.use(name, *(k for k in ("distributed_type", "num_processes", "mixed_precision") if k in d))
    if kind == "FSDP":
        r.use(name, *(f"fsdp_config.{k}" for k in ("fsdp_offload_params", "fsdp_sharding_strategy",
                                                    "fsdp_activation_checkpointing") if k in fsdp))
    r.account(name, "accelerate", d)
