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
    if d.get("num_processes") is not None and kind == "NO":  # accelerate launches one process, whatever it says
        r.use(name, "num_processes")
    elif d.get("num_processes") is not None:
        r.set("gpus", rd.whole(d["num_processes"], f"{name}: num_processes"), f"{name}: num_processes")
    if str(d.get("mixed_precision", "no")).lower() in ("bf16", "fp16"):
        r.set("mixed_precision", True, f"{name}: mixed_precision")
    if kind == "FSDP":
        fsdp = rd.section(d, "fsdp_config", name, "accelerate reads a mapping of fsdp_* settings")
        fsdp_plugin(r, name, fsdp)
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
    r.account(name, "accelerate", d)


# FSDP's sharding strategies as accelerate, the HF Trainer and axolotl write them (torch's ShardingStrategy; accelerate
# also takes its 1-based index) -> --shard; HYBRID_SHARD and _HYBRID_SHARD_ZERO2 shard within a node only
STRATEGIES = {"FULL_SHARD": "fsdp", "1": "fsdp", "SHARD_GRAD_OP": "zero2", "2": "zero2", "NO_SHARD": "none",
              "3": "none"}
TRAINER_WORDS = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard")


def fsdp_plugin(r: rd.Reader, name: str, fsdp: dict[str, Any], section: str = "fsdp_config", *,
                switch: str = "distributed_type", version: tuple[str, Any] | None = None) -> None:
    """FSDP's settings as accelerate's fsdp_config writes them (fsdp_-prefixed), or axolotl's (with or without the
    prefix, which axolotl strips: utils/schemas/validation.py check_fsdp_config_kwargs_prefix): the sharding strategy,
    CPU offload of the parameters, FSDP's activation checkpointing, reshard_after_forward. Version 2 is the FSDP
    the estimate models (fully_shard per block); 1, accelerate's and axolotl's default, is counted as it and said
    so in a note: FSDP1 shards and gathers the same bytes per wrapped unit, in one flat parameter (its padding and
    flat buffers not counted). `switch`: the key that turned FSDP on; `version`: (key, value) of a version written
    outside the section (axolotl's top-level fsdp_version)."""
    def key(k: str) -> str:
        return next((f for f in (f"fsdp_{k}", k) if f in fsdp), f"fsdp_{k}")

    strategy, offload = key("sharding_strategy"), key("offload_params")
    reshard = key("reshard_after_forward")
    if strategy not in fsdp and isinstance(fsdp.get(reshard), str):  # accelerate's FSDP1 names it so (FULL_SHARD)
        strategy = reshard
    where = f"{name}: {section}.{strategy}" if strategy in fsdp else f"{name} ({section}: no sharding strategy, " \
        "FULL_SHARD)"
    _strategy(r, where, str(fsdp.get(strategy, "FULL_SHARD")),
              str(fsdp.get(offload, False)).lower() == "true", f"{name}: {section}.{offload}")
    checkpointing = key("activation_checkpointing")
    if fsdp.get(checkpointing):  # on whatever the Trainer's own says (off beside it): rd.settle_checkpointing
        r.fsdp_checkpointing = f"{name}: {section}.{checkpointing}"
    rd.reshard(r, name, fsdp.get(reshard), f"{section}.{reshard}")
    inside = next((f for f in ("fsdp_version", "version") if f in fsdp), None)
    vkey, value = (f"{section}.{inside}", fsdp[inside]) if inside else version or (switch, None)
    r.use(name, vkey)
    if str(value) != "2":
        r.notes.append(f"{name}: {vkey}: FSDP1" + (" (the default without fsdp_version)" if value is None else "") +
                       ", counted as FSDP2's per-block sharding: the same bytes sharded and gathered per wrapped "
                       "unit, FSDP1's flat-parameter padding not counted")
    r.use(name, *(f"{section}.{k}" for k in (strategy, offload, checkpointing) if k in fsdp))


def fsdp_trainer_option(r: rd.Reader, name: str, key: str, value: Any) -> None:
    """The HF Trainer's `fsdp` (TrainingArguments: "full_shard auto_wrap offload"; axolotl: a list of the same
    words): the strategy (full_shard unless another is named) and "offload" (CPUOffload(offload_params=True))."""
    words = [str(w).lower() for w in (value if isinstance(value, list) else str(value).split())]
    strategy = next((w for w in words if w in TRAINER_WORDS), "full_shard")
    _strategy(r, f"{name}: {key}", strategy, "offload" in words, f"{name}: {key}")


def _strategy(r: rd.Reader, where: str, strategy: str, offload: bool, offload_where: str) -> None:
    """--shard from a strategy as written (either case), and --offload-params cpu where offload is on."""
    shard = STRATEGIES.get(strategy.upper())
    if shard is None:
        r.refuse(where, f"{strategy} (sharding within a node)", "counted as FULL_SHARD over the cards (low where "
                 "the node has fewer cards)")
        shard = "fsdp"
    r.set("shard", shard, where)
    if offload and shard != "fsdp":
        r.refuse(offload_where, f"CPU offload with {strategy}", "counted without the offload (an upper bound on the "
                 "card)")
    elif offload:
        r.set("offload_params", "cpu", offload_where)
    if shard == "zero2":
        r.notes.append(rd.SHARD_GRAD_OP_NOTE.format(where=where))
