"""The user's own training configuration as the workload: HF TrainingArguments (JSON or YAML, TRL's configs included:
recipe_trainer.py), TRL's CLI file (recipe_trl_cli.py), a PEFT adapter_config.json (here), an axolotl YAML
(recipe_axolotl.py), a torchtune recipe YAML (recipe_torchtune.py), a torchtitan TOML (recipe_torchtitan.py), a
LLaMA-Factory YAML (recipe_llamafactory.py), a DeepSpeed JSON (recipe_deepspeed.py) and an accelerate config
(recipe_accelerate.py). This module tells them apart and reads them in order into one recipe_read.Reader. Each value
read says which file and key it came from. Every key is accounted for (recipe_keys.py): modelled, changing no memory,
or named as not modelled, with what the estimate counts instead (DoRA, NVMe offload, an optimizer whose states are
not modelled: the estimate then a bound, its verdict "not verified"); a key campaign does not know is named. A valid
recipe is never refused whole: only a value its own tool refuses too (a ZeRO stage 2.0, a misspelt zero_optimization
key) is one line, exit 2.

`workload_from_configs(paths)` returns the make_workload keywords, their sources, and the base model the files name
(a PEFT config's base_model_name_or_path, axolotl's base_model), for `campaign memory --config FILE ...`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from . import (
    recipe_accelerate,
    recipe_axolotl,
    recipe_deepspeed,
    recipe_llamafactory,
    recipe_llamafactory_v1,
    recipe_read as rd,
    recipe_torchtitan,
    recipe_torchtune,
    recipe_trainer,
    recipe_trl_cli,
)
from .recipe_keys import ConfigKey

FORMATS = ("TrainingArguments, a TRL CLI file, adapter_config.json, axolotl, torchtune, torchtitan, LLaMA-Factory "
           "(v0 and v1), DeepSpeed or accelerate")


@dataclass(frozen=True)
class TrainingConfig:
    """options: make_workload keywords; sources: (option, value, 'file: key') for each; model: the base model the
    files name, else None; notes: what was read but does not change the per-card estimate; keys: every key of every
    file with its use (recipe_keys.ConfigKey)."""

    options: dict[str, Any]
    sources: tuple[tuple[str, Any, str], ...]
    model: str | None
    notes: tuple[str, ...]
    keys: tuple[ConfigKey, ...] = ()

    @property
    def unmodelled(self) -> tuple[ConfigKey, ...]:
        """The keys whose effect on memory the estimate does not count (not modelled, or unknown)."""
        return tuple(k for k in self.keys if k.unmodelled)


def workload_from_configs(paths: Sequence[str | Path], *, deepspeed: str | Path | None = None,
                          gpus: int | None = None, model_type: str | None = None,
                          reference: str | None = None, causal: bool | None = None) -> TrainingConfig:
    """The workload the configuration files describe (see the module docstring); `deepspeed`: a file that must be a
    DeepSpeed config (--deepspeed), read as the others are. Each file is read once. `gpus`: the cards the run uses,
    where the command line says (a torchtune recipe over several is a distributed one: FSDP); `model_type`: the
    model's, for peft's default LoRA targets of an adapter config without target_modules; `reference`: the command
    line's --reference (None: not given), for a preference config that does not say; `causal`: whether the model is a
    decoder (False: an encoder or encoder-decoder, whose loss the decoder's loss settings do not describe)."""
    r = rd.Reader(gpus, model_type, reference, causal)
    r.deepspeed = None if deepspeed is None else str(deepspeed)
    for path in paths:
        _read(r, Path(path), rd.load_config_file(path))
    if deepspeed is not None and r.deepspeed is not None:  # not read already as a recipe's deepspeed key
        doc = rd.load_config_file(deepspeed)
        if not recipe_deepspeed.is_deepspeed(doc):
            raise InputError(f"{deepspeed}: not a DeepSpeed config (no zero_optimization, no "
                             "train_micro_batch_size_per_gpu); give the ds_config.json the run passes to deepspeed, or "
                             "the file with --config")
        recipe_deepspeed.read(r, rd.label(Path(deepspeed)), doc)
    recipe_deepspeed.settle(r)
    rd.settle_checkpointing(r)
    rd.settle_optimizer(r)
    sources = tuple((k, v, where) for k, (v, where) in r.sources.items())
    return TrainingConfig(dict(r.options), sources, r.model, tuple(r.notes), tuple(r.keys))


def _read(r: rd.Reader, path: Path, doc: dict[str, Any]) -> None:
    name = rd.label(path)
    if "peft_type" in doc:
        _peft(r, name, doc)
    elif recipe_deepspeed.is_deepspeed(doc):
        recipe_deepspeed.read(r, name, doc)
    elif "distributed_type" in doc:
        recipe_accelerate.read(r, path, doc)
    elif recipe_torchtune.is_torchtune(doc):
        recipe_torchtune.read(r, name, doc)
    elif recipe_torchtitan.is_torchtitan(doc):
        recipe_torchtitan.read(r, name, doc)
    elif recipe_llamafactory.is_llamafactory(doc):
        recipe_llamafactory.read(r, path, doc)
    elif recipe_llamafactory_v1.is_v1(doc):
        recipe_llamafactory_v1.read(r, path, doc)
    elif "base_model" in doc and ("micro_batch_size" in doc or "sequence_len" in doc or "adapter" in doc):
        recipe_axolotl.read(r, path, doc)
    elif recipe_trl_cli.is_trl_cli(doc):
        recipe_trl_cli.read(r, path, doc)
    elif "per_device_train_batch_size" in doc or "output_dir" in doc or "gradient_accumulation_steps" in doc:
        recipe_trainer.read(r, path, doc)
    else:
        raise InputError(f"{path}: not a training config campaign reads ({FORMATS}); give one of those, or the "
                         "workload as options (campaign memory --help)")


def _peft(r: rd.Reader, name: str, d: dict[str, Any]) -> None:
    kind = str(d.get("peft_type", "")).upper()
    base = d.get("base_model_name_or_path")
    if isinstance(base, str) and base.strip():
        r.model = base.strip()
    if kind != "LORA":  # the file's other keys are then the other method's: named, not read
        r.refuse(f"{name}: peft_type", f"an adapter of type {kind}",
                 "counted as --method's (full unless given; campaign reads LORA)")
        for key in d:  # the other method's settings: named with it, not as unknown peft keys
            if key not in ("peft_type", "base_model_name_or_path", "task_type", "revision", "inference_mode"):
                r.refuse(f"{name}: {key}", f"a setting of the {kind} adapter", "not read")
        r.account(name, "peft", d)
        return
    rd.lora_extras(r, name, d, "modules_to_save")
    r.set("method", "lora", f"{name}: peft_type")
    r.use(name, *(k for k in ("use_dora", "modules_to_save") if k in d))
    if d.get("r") is not None:
        r.set("lora_rank", rd.whole(d["r"], f"{name}: r"), f"{name}: r")
    if d.get("target_modules") is not None:
        r.set("lora_targets", rd.modules(d["target_modules"], f"{name}: target_modules"), f"{name}: target_modules")
    else:
        rd.default_targets(r, f"{name}: target_modules")
    r.account(name, "peft", d)


__all__ = ["TrainingConfig", "workload_from_configs"]
