"""The user's own training configuration as the workload: HF TrainingArguments (JSON or YAML, TRL's configs
included), a PEFT adapter_config.json, an axolotl YAML, a torchtune recipe YAML, a torchtitan TOML
(recipe_torchtitan.py), a LLaMA-Factory YAML (recipe_llamafactory.py), a DeepSpeed JSON and an accelerate config
(FSDP, DeepSpeed, multi-GPU). Each value read says which file and key it came from. Every key is accounted
for (recipe_keys.py): modelled, changing no memory, or named as not modelled, with what the estimate counts instead
(DoRA, NVMe offload, an optimizer whose states are not modelled: the estimate then a bound, its verdict "not
verified"); a key campaign does not know is named. A valid recipe is never refused whole: only a value its own tool
refuses too (a ZeRO stage 2.0, a misspelt zero_optimization key) is one line, exit 2.

`workload_from_configs(paths)` returns the make_workload keywords, their sources, and the base model the files name
(a PEFT config's base_model_name_or_path, axolotl's base_model), for `campaign memory --config FILE ...`.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from . import recipe_llamafactory, recipe_torchtitan
from .recipe_keys import PEFT_DEFAULTS_SOURCE, ConfigKey, account, default_lora_targets
from .workload import zero_elements

# TrainingArguments.optim / axolotl's optimizer -> (optimizer, implementation) of the estimate
OPTIM = {
    "adamw_torch": ("adamw", "foreach"), "adamw_hf": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"),
    "adamw_apex_fused": ("adamw", "fused"), "adamw": ("adamw", "foreach"), "adam": ("adamw", "foreach"),
    "adamw_bnb_8bit": ("adamw-8bit", "foreach"), "adamw_8bit": ("adamw-8bit", "foreach"),
    "paged_adamw_8bit": ("adamw-8bit", "foreach"), "paged_adamw_32bit": ("adamw", "foreach"),
    # torchao's AdamW8bit (torchao/optim/adam.py): blockwise 8-bit states, one fp32 scale per block of 256, as
    # bitsandbytes' (campaign's adamw-8bit)
    "adamw_torch_8bit": ("adamw-8bit", "foreach"),
    "adafactor": ("adafactor", "foreach"), "sgd": ("sgd", "foreach"),
}
# torchtune's optimizer components
TORCHTUNE_OPTIM = {"torch.optim.AdamW": ("adamw", "foreach"), "torch.optim.Adam": ("adamw", "foreach"),
                   "torch.optim.SGD": ("sgd", "foreach"),
                   "bitsandbytes.optim.PagedAdamW8bit": ("adamw-8bit", "foreach"),
                   "bitsandbytes.optim.AdamW8bit": ("adamw-8bit", "foreach"),
                   "torchao.optim.AdamW8bit": ("adamw-8bit", "foreach")}
TORCHTUNE_ATTN = ("q_proj", "k_proj", "v_proj", "output_proj")
# torchtune's loss components -> Workload.loss (memory/loss.py); another component is named as not modelled
TORCHTUNE_LOSSES = {"torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
                    "torchtune.modules.loss.CrossEntropyLoss": "full", "torch.nn.CrossEntropyLoss": "full"}
FORMATS = ("TrainingArguments, adapter_config.json, axolotl, torchtune, torchtitan, LLaMA-Factory, DeepSpeed or "
           "accelerate")


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


class _Reader:
    """Collects options from several files; two files that set one option differently are refused."""

    def __init__(self, gpus: int | None = None, model_type: str | None = None, reference: str | None = None,
                 causal: bool | None = None) -> None:
        self.options: dict[str, Any] = {}
        self.sources: dict[str, tuple[Any, str]] = {}
        self.model: str | None = None
        self.notes: list[str] = []
        self.used: set[str] = set()  # 'file: key' of each key that changed the workload
        self.unread: dict[str, dict[str, str]] = {}  # file -> key -> why: settings met and not modelled
        self.keys: list[ConfigKey] = []
        self.deepspeed: str | None = None  # the --deepspeed file, which a recipe's deepspeed key may name
        self.ds_auto: list[str] = []  # 'file: bf16.enabled' of a ds_config's half precision left "auto"
        self.ds_filled = False  # a Trainer's file (TrainingArguments, axolotl, LLaMA-Factory) fills that "auto"
        self.gpus, self.model_type, self.reference, self.causal = gpus, model_type, reference, causal

    def set(self, option: str, value: Any, where: str) -> None:
        if option in self.options and self.options[option] != value:
            was, there = self.sources[option]
            raise InputError(f"{where} sets {option} to {value!r} but {there} set {was!r}; give one value (drop one "
                             "file, or pass the option on the command line)")
        self.options[option] = value
        self.sources[option] = (value, where)
        self.used.add(where.split(" (")[0].split(" + ")[0])

    def used_keys(self, name: str) -> frozenset[str]:
        """The keys of file `name` read so far."""
        head = f"{name}: "
        return frozenset(u[len(head):] for u in self.used if u.startswith(head))

    def use(self, name: str, *keys: str) -> None:
        """Keys of file `name` read for the workload without setting an option of their own (a value checked,
        a note)."""
        self.used.update(f"{name}: {k}" for k in keys)

    def account(self, name: str, tool: str, doc: dict[str, Any], known: tuple[str, ...] = ()) -> None:
        """Every key of file `name` with its use (recipe_keys.account)."""
        self.keys += account(name, tool, doc, self.used_keys(name), known, self.unread.get(name))

    def refuse(self, where: str, why: str, counted: str) -> None:
        """A setting of a valid recipe the estimate does not model (`where`: 'file: key'): named as not modelled in
        the output, with `why` and what the estimate counts instead, never a refusal of the whole file; the status
        is then "not verified". A file's name may hold ': ' itself (an inline ds_config, 'args.json: deepspeed'); a
        key never does, so the key is what follows the last one."""
        name, _, key = where.rpartition(": ")
        self.unread.setdefault(name, {})[key] = f"{why}, not modelled: {counted}"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A JSON, YAML or TOML file as a mapping, read once (a pipe, bash's <(cat ds.json), holds its text for one
    read): .json is JSON, .toml TOML (torchtitan's), .yaml/.yml YAML, any other name (a pipe's /dev/fd/63) JSON when
    it opens with '{', else YAML. Every way the file can fail is one line naming it (strict_json)."""
    from ..io import read_input
    from ..strict_json import parse_json, parse_toml, parse_yaml

    p = Path(path)
    raw = read_input(p, "a training config file (JSON, YAML or TOML)")
    suffix = p.suffix.lower()
    if suffix == ".toml":
        doc = parse_toml(raw, str(p))
        if not doc:
            raise InputError(f"{p}: holds no settings; give a training config file")
        return doc
    yaml = suffix in (".yaml", ".yml") or (suffix != ".json" and not raw.lstrip().startswith(b"{"))
    doc = parse_yaml(raw, str(p)) if yaml else parse_json(raw, str(p))
    if not isinstance(doc, dict):
        raise InputError(f"{p}: holds a {type(doc).__name__}, not a mapping of settings; give a training config file")
    return doc


def workload_from_configs(paths: Sequence[str | Path], *, deepspeed: str | Path | None = None,
                          gpus: int | None = None, model_type: str | None = None,
                          reference: str | None = None, causal: bool | None = None) -> TrainingConfig:
    """The workload the configuration files describe (see the module docstring); `deepspeed`: a file that must be a
    DeepSpeed config (--deepspeed), read as the others are. Each file is read once. `gpus`: the cards the run uses,
    where the command line says (a torchtune recipe over several is a distributed one: FSDP); `model_type`: the
    model's, for peft's default LoRA targets of an adapter config without target_modules; `reference`: the command
    line's --reference (None: not given), for a preference config that does not say; `causal`: whether the model is a
    decoder (False: an encoder or encoder-decoder, whose loss the decoder's loss settings do not describe)."""
    r = _Reader(gpus, model_type, reference, causal)
    r.deepspeed = None if deepspeed is None else str(deepspeed)
    for path in paths:
        _read(r, Path(path), load_config_file(path))
    if deepspeed is not None and r.deepspeed is not None:  # not read already as a recipe's deepspeed key
        doc = load_config_file(deepspeed)
        if not _is_deepspeed(doc):
            raise InputError(f"{deepspeed}: not a DeepSpeed config (no zero_optimization, no "
                             "train_micro_batch_size_per_gpu); give the ds_config.json the run passes to deepspeed, or "
                             "the file with --config")
        _deepspeed(r, _label(Path(deepspeed)), doc)
    _settle(r)
    sources = tuple((k, v, where) for k, (v, where) in r.sources.items())
    return TrainingConfig(dict(r.options), sources, r.model, tuple(r.notes), tuple(r.keys))


def _label(path: Path) -> str:
    """How messages name a file: its name, or the whole path for a name without a suffix (a pipe, /dev/fd/63)."""
    return path.name if path.suffix else str(path)


def _is_deepspeed(doc: dict[str, Any]) -> bool:
    return "zero_optimization" in doc or "train_micro_batch_size_per_gpu" in doc


def _read(r: _Reader, path: Path, doc: dict[str, Any]) -> None:
    name = _label(path)
    if "peft_type" in doc:
        _peft(r, name, doc)
    elif _is_deepspeed(doc):
        _deepspeed(r, name, doc)
    elif "distributed_type" in doc:
        _accelerate(r, path, doc)
    elif isinstance(doc.get("model"), dict) and "_component_" in doc["model"]:
        _torchtune(r, name, doc)
    elif recipe_torchtitan.is_torchtitan(doc):
        recipe_torchtitan.read(r, name, doc)
    elif recipe_llamafactory.is_llamafactory(doc):
        recipe_llamafactory.read(r, path, doc, sys.modules[__name__])
    elif "base_model" in doc and ("micro_batch_size" in doc or "sequence_len" in doc or "adapter" in doc):
        _axolotl(r, path, doc)
    elif "per_device_train_batch_size" in doc or "output_dir" in doc or "gradient_accumulation_steps" in doc:
        _training_arguments(r, path, doc)
    else:
        raise InputError(f"{path}: not a training config campaign reads ({FORMATS}); give one of those, or the "
                         "workload as options (campaign memory --help)")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {value!r} is not a positive whole number; fix the file")
    return value


def _section(d: dict[str, Any], key: str, where: str, form: str) -> dict[str, Any]:
    """The mapping under `key` ({} when absent or null); any other value is refused, naming the form the tool reads:
    a setting dropped because it was written as a list or a string would change the estimate in silence."""
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {key} is {_short(value)}, not a mapping: {form}; fix the file")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _modules(value: Any, where: str) -> tuple[str, ...]:
    """LoRA target module names as peft takes them (LoraConfig.target_modules, axolotl's lora_target_modules): a
    list of names, or the one string 'all-linear'. Any other single string peft matches as a regular expression
    against whole module paths (re.fullmatch on model.layers.0.self_attn.q_proj: peft/utils/other.py,
    match_target_against_key), so 'q_proj' alone targets nothing: refused, as is anything but a list of names."""
    if value == "all-linear":
        return ("all-linear",)
    if isinstance(value, str):
        raise InputError(f"{where}: {value!r} is one string, which peft matches as a regular expression against whole "
                         "module paths (model.layers.0.self_attn.q_proj), not as a module name; write the names as a "
                         "list ([q_proj, v_proj]) or all-linear")
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise InputError(f"{where}: {_short(value)} is not a list of module names; write e.g. [q_proj, v_proj] or "
                         "all-linear")
    return tuple(t.strip() for t in value)


def _glu(r: _Reader) -> str:
    """The name of the model's gated-MLP kernel in Liger's apply_liger_kernel_to_<model type> (geglu for Gemma)."""
    from .activations import LIGER_GLU

    return LIGER_GLU.get(r.model_type or "", "swiglu")


def _liger_defaults(r: _Reader) -> dict[str, bool]:
    """What _apply_liger_kernel_to_instance applies by default (liger_kernel/transformers/monkey_patch.py
    apply_liger_kernel_to_llama and its siblings: rope, rms_norm, the gated MLP's kernel and fused_linear_cross_entropy
    on, cross_entropy off), which TrainingArguments' liger_kernel_config overrides one by one."""
    return {"rope": True, "rms_norm": True, _glu(r): True, "fused_linear_cross_entropy": True, "cross_entropy": False}


def _liger_config(r: _Reader, name: str, d: dict[str, Any]) -> dict[str, bool]:
    """The Liger kernels use_liger_kernel applies ({} when off): Liger's defaults, overridden by liger_kernel_config
    where it names only those kernels with true or false (read); a config with another kernel (cross_entropy on:
    Liger's unfused loss kernel, layer_norm...) stays named as not modelled, its known kernels still read. The other
    family's gated-MLP kernel (swiglu for Gemma, geglu for Llama) is not in that model's apply function: Liger drops
    it, and so does campaign, saying so."""
    if d.get("use_liger_kernel") is not True:
        return {}
    config = d.get("liger_kernel_config")
    kernels = _liger_defaults(r)
    if isinstance(config, dict):
        other = ({"swiglu", "geglu"} - {_glu(r)}) & set(config)
        for key in sorted(other):
            r.notes.append(f"{name}: liger_kernel_config: {key} is not a keyword of Liger's apply_liger_kernel_to_"
                           f"{r.model_type or 'llama'} (its gated MLP is {_glu(r)}): Liger drops it")
        config = {k: v for k, v in config.items() if k not in other}
        kernels.update({k: v for k, v in config.items() if k in kernels and isinstance(v, bool)})
        if all(k in kernels and isinstance(v, bool) for k, v in config.items()) and not kernels["cross_entropy"]:
            r.use(name, "liger_kernel_config")
    return kernels


# axolotl's `rl` trainers of chosen and rejected pairs -> whether each runs a reference model
AXOLOTL_PAIRS = {"dpo": True, "ipo": True, "orpo": False, "simpo": False}
AXOLOTL_LIGER = {"liger_rope": "rope", "liger_rms_norm": "rms_norm", "liger_glu_activation": "glu"}  # glu: _glu


def _liger_layers(r: _Reader, kernels: tuple[str, ...], where: str) -> bool:
    """Liger's layer kernels (--liger-kernels) where the model's Liger patches are modelled (True); else a note: the
    estimate without them is an upper bound (they only drop saved tensors)."""
    from .activations import LIGER_MODEL_TYPES

    if not kernels or r.model_type in LIGER_MODEL_TYPES:
        r.set("liger_kernels", ",".join(kernels), where)
        return True
    r.notes.append(f"{where}: Liger's {', '.join(kernels)} kernels are modelled for {', '.join(LIGER_MODEL_TYPES)} "
                   f"models, not {r.model_type or 'this model'}: the estimate without them is an upper bound")
    return False


# transformers' attn_implementation: eager materializes the scores (--attention eager); the others are kernels
# that keep none (SDPA's, flash attention's, flex attention's)
EAGER, FLASH_STYLE = ("eager",), ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def _attention(r: _Reader, name: str, d: dict[str, Any]) -> None:
    """attn_implementation (TrainingArguments' model_init_kwargs, TRL's ModelConfig, axolotl): eager or a kernel;
    a hub kernel ('kernels-community/...') or another name is named as not modelled."""
    value = d.get("attn_implementation")
    if value is None:
        return
    where = f"{name}: attn_implementation"
    if value in EAGER or value in FLASH_STYLE:
        r.set("attention", "eager" if value in EAGER else "sdpa", where)
    else:
        r.refuse(where, f"attention kernel {value!r}", "counted as SDPA's (no scores kept)")


def _loss(r: _Reader, value: str, where: str, key: str) -> None:
    """--loss from the recipe (`key`: 'file: key' of the setting); a decoder's loss (chunked, fused, log-probs) on
    an encoder or encoder-decoder is named as not modelled, the model's own loss counted."""
    if value != "full" and r.causal is False:
        r.refuse(key, f"the {value} loss (modelled for a decoder's causal-LM loss; {r.model_type or 'this model'} "
                 "is not a decoder)", "the model's own loss counted, as transformers computes it")
        return
    r.set("loss", value, where)


def _accumulation(r: _Reader, d: dict[str, Any], name: str) -> None:
    """gradient_accumulation_steps: micro-batches per optimizer step, whose summed gradients stay allocated through
    the next micro-batch's forward and backward (Workload.grad_accumulation); 'auto' (a ds_config the HF Trainer
    fills) says nothing."""
    steps = d.get("gradient_accumulation_steps")
    if steps not in (None, "auto"):
        r.set("grad_accumulation", _int(steps, f"{name}: gradient_accumulation_steps"),
              f"{name}: gradient_accumulation_steps")


def _optim(r: _Reader, value: Any, where: str, table: dict[str, tuple[str, str]]) -> None:
    key = str(value).strip()
    if key not in table:
        r.refuse(where, f"optimizer {key!r}", f"the estimate keeps --optimizer's (AdamW unless given); campaign reads "
                                              f"{', '.join(sorted(table))}")
        return
    optimizer, impl = table[key]
    r.set("optimizer", optimizer, where)
    r.set("optimizer_impl", impl, where)
    if "paged" in key.lower():
        # bitsandbytes Optimizer8bit/Optimizer2State.get_state_buffer: F.get_paged (cudaMallocManaged) for a tensor
        # of 1e5 elements or more when is_paged; torch.cuda's statistics do not see that memory
        r.notes.append(f"{where}: {key}: paged states (bitsandbytes: CUDA unified memory, outside PyTorch's "
                       "allocator, evicted to host RAM under pressure) are counted on the card: an upper bound for "
                       "torch.cuda's peak figures")


# The loops these configs drive free the logits before backward (memory/workload.py, logits_held): the HF Trainer's
# compute_loss returns the loss only (axolotl and TRL train through it); torchtune's recipes `del logits` before
# loss.backward() ("free logits otherwise it peaks backward memory", recipes/full_finetune_single_device.py)
TRAINER_FREES_LOGITS = "the HF Trainer's compute_loss returns the loss only: logits freed before backward"
TORCHTUNE_FREES_LOGITS = "torchtune's recipe deletes the logits before loss.backward()"


# Keys of TRL's configs that name a trainer whose memory the file alone does not settle (GRPO, RLOO: generation by
# the trained model; KTO: a KL batch beside each batch): named as not modelled (recipe_keys.NOT_MODELLED)
GENERATING = ("num_generations", "generation_batch_size", "steps_per_generation")
KTO = ("desirable_weight", "undesirable_weight")
# Keys that say a pair trainer keeps no reference model: TRL's CPOConfig (cpo_alpha, simpo_gamma; loss_type simpo)
# and the older DPOConfig's reference_free
REFERENCE_FREE = ("cpo_alpha", "simpo_gamma", "reference_free")
PAIRS = ("x 2: a pair's chosen and rejected run in one forward, as TRL's DPO, ORPO and CPO trainers concatenate "
         "them")


LOGPS = "TRL's preference and RL trainers take the sequences' log-probabilities: selective_log_softmax, row by row"


def _generating(r: _Reader, name: str, d: dict[str, Any], liger: dict[str, bool]) -> None:
    """TRL's GRPO and RLOO configs (num_generations): each card generates its rollouts with the trained model
    (per_device_train_batch_size x steps_per_generation, which defaults to gradient_accumulation_steps; or
    generation_batch_size over the cards), max_completion_length tokens after each prompt, then trains on the
    completions' log-probabilities. vLLM in server mode generates on other cards (no rollouts here); colocated vLLM
    is left named as not modelled. beta > 0 loads a reference model, 0 none; absent, its default moved between
    TRL versions (0.04, then 0.0): the command line's --reference, or beta's absence is noted and num_generations
    stays named as not modelled. The prompt length is the dataset's unless max_prompt_length bounds it."""
    completion = d.get("max_completion_length")
    if completion is None:
        r.notes.append(f"{name}: no max_completion_length (its default moved between TRL versions): give "
                       "--completion-tokens and --rollouts; num_generations stays not modelled")
        return
    where = f"{name}: max_completion_length"
    r.set("completion_tokens", _int(completion, where), where)
    if d.get("max_prompt_length") is not None:
        prompt = _int(d["max_prompt_length"], f"{name}: max_prompt_length")
        r.set("seq_len", prompt + completion, f"{name}: max_prompt_length + max_completion_length")
    else:
        r.notes.append(f"{name}: no max_prompt_length: --seq-len is the longest prompt + {completion} completion "
                       "tokens (give it)")
    if not liger.get("fused_linear_cross_entropy"):
        _loss(r, "logps", f"{name} (num_generations, {LOGPS})", f"{name}: num_generations")
    vllm, mode = d.get("use_vllm") is True, d.get("vllm_mode")
    share = d.get("vllm_gpu_memory_utilization")
    if vllm and mode == "server":  # trl vllm-serve on other cards
        r.set("rollouts", 0, f"{name}: use_vllm + vllm_mode server (generated on other cards)")
        r.use(name, "use_vllm", "vllm_mode")
    elif vllm and mode == "colocate" and isinstance(share, (int, float)) and not isinstance(share, bool) and share > 0:
        r.set("vllm_share", float(share), f"{name}: use_vllm + vllm_mode colocate + vllm_gpu_memory_utilization")
        r.set("rollouts", 0, f"{name}: use_vllm (the colocated vLLM engine generates)")
        r.use(name, "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization")
    elif vllm:  # vllm_mode's default moved (server, then colocate), and so did the share's (0.9, then 0.3)
        r.notes.append(f"{name}: use_vllm without vllm_mode colocate and vllm_gpu_memory_utilization (their defaults "
                       "moved between TRL versions): give --vllm-share for a colocated engine")
        return
    elif not vllm:
        per = d.get("per_device_train_batch_size")
        if per is None and d.get("generation_batch_size") is None:
            r.notes.append(f"{name}: no per_device_train_batch_size, so no count of the rollouts: give --batch and "
                           "--rollouts")
            return
        if d.get("generation_batch_size") is not None:
            if r.gpus is None:
                r.notes.append(f"{name}: generation_batch_size is over every card: give --gpus to read it")
                return
            total = _int(d["generation_batch_size"], f"{name}: generation_batch_size")
            r.set("rollouts", -(-total // r.gpus), f"{name}: generation_batch_size / {r.gpus} cards")
        else:
            key = next((k for k in ("steps_per_generation", "gradient_accumulation_steps") if d.get(k) is not None),
                       None)
            steps = _int(d[key], f"{name}: {key}") if key else 1
            per = _int(per, f"{name}: per_device_train_batch_size")
            r.set("rollouts", per * steps, f"{name}: per_device_train_batch_size x {key or 'steps_per_generation 1'}")
        r.use(name, *(k for k in ("use_vllm",) if k in d))
    beta = d.get("beta")
    if isinstance(beta, (int, float)) and not isinstance(beta, bool):
        adapters = r.options.get("method") in ("lora", "qlora")
        r.set("reference", ("adapters-off" if adapters else "copy") if beta > 0 else "none",
              f"{name}: beta" + (" (TRL loads no reference model at 0)" if beta == 0 else ""))
    elif r.reference is None:
        r.notes.append(f"{name}: no beta, whose default moved between TRL versions (0.04, then 0.0): give "
                       "--reference copy, adapters-off or none")
        return
    r.use(name, "num_generations", "temperature")


def _pairs(d: dict[str, Any]) -> bool:
    """A TRL pair-preference config (DPO, IPO, ORPO, CPO, SimPO): a `beta` without the keys of a generating trainer
    (GRPO, RLOO) or of KTO, whose batches are not pairs."""
    return "beta" in d and not any(k in d for k in GENERATING + KTO)


def _reference(r: _Reader, name: str, d: dict[str, Any], reference: str | None) -> None:
    """A pair trainer's reference model (Workload.reference): none with precompute_ref_log_probs (computed before
    training, the model freed) or in a reference-free loss; else the file does not say (DPO keeps one, ORPO does
    not): `reference`, the command line's word, or `beta` stays named as not modelled. With PEFT a DPO reference is
    the trained model with its adapters disabled (adapters-off: TRL's use_adapter(model, None)), no copy."""
    why = None
    if d.get("precompute_ref_log_probs") is True:
        why = ("the reference log-probs computed before training (TRL: no reference model kept)",
               "precompute_ref_log_probs")
    elif d.get("loss_type") == "simpo" or any(d.get(k) not in (None, False) for k in REFERENCE_FREE):
        key = next((k for k in REFERENCE_FREE if d.get(k) not in (None, False)), "loss_type")
        why = ("a reference-free loss (CPO, SimPO)", key)
    if why is not None:
        r.set("reference", "none", f"{name}: {why[1]} ({why[0]})")
        r.use(name, "beta")
    elif reference is not None:
        r.use(name, "beta")  # the command line says (--reference)


def _training_arguments(r: _Reader, path: Path, d: dict[str, Any]) -> None:
    name = _label(path)
    r.set("logits_held", False, f"{name} ({TRAINER_FREES_LOGITS})")
    pairs = _pairs(d)
    if "per_device_train_batch_size" in d:
        per = _int(d["per_device_train_batch_size"], f"{name}: per_device_train_batch_size")
        r.set("batch", 2 * per if pairs else per,
              f"{name}: per_device_train_batch_size" + (f" ({PAIRS})" if pairs else ""))
    for key in ("max_seq_length", "max_length"):  # TRL's SFTConfig
        if d.get(key) is not None:
            r.set("seq_len", _int(d[key], f"{name}: {key}"), f"{name}: {key}")
    if d.get("gradient_checkpointing") is not None:
        r.set("grad_checkpointing", bool(d["gradient_checkpointing"]), f"{name}: gradient_checkpointing")
    _checkpointing_kwargs(r, name, d)
    _attention(r, name, d)
    _args_peft(r, name, d)
    liger = _liger_config(r, name, d)
    generating = "num_generations" in d and not any(k in d for k in KTO)
    if generating:
        _generating(r, name, d, liger)
    if pairs:
        _reference(r, name, d, r.reference)
        if not liger.get("fused_linear_cross_entropy"):  # Liger's fused DPO loss: --loss fused, below
            _loss(r, "logps", f"{name} (beta, {LOGPS})", f"{name}: beta")  # beta stays open: _reference
    if "seq_len" not in r.options:  # TRL's defaults for it moved between trainers and versions
        r.notes.append(f"{name}: no max_length or max_seq_length: the length counted is --seq-len's (2048 unless "
                       "given); give the longest sequence your data packs or truncates to")
    half = "bf16" if d.get("bf16") else "fp16" if d.get("fp16") else None
    r.use(name, *(k for k in ("bf16", "fp16") if k in d))
    loaded = _torch_dtype(d.get("torch_dtype"), f"{name}: torch_dtype")
    r.use(name, *(k for k in ("torch_dtype",) if k in d))  # QLoRA: the compute dtype of its nf4 base
    if loaded is not None and r.options.get("method") != "qlora":  # QLoRA: the compute dtype, the base nf4
        if loaded == "fp32" and half:
            r.set("mixed_precision", True, f"{name}: {half} (autocast over the fp32 model torch_dtype loads)")
        r.set("dtype", loaded, f"{name}: torch_dtype (the model loaded in it)")
    if d.get("optim") is not None:
        _optim(r, d["optim"], f"{name}: optim", OPTIM)
    _accumulation(r, d, name)
    if d.get("use_liger_kernel") is not None:
        where = f"{name}: use_liger_kernel" + (" + liger_kernel_config" if "liger_kernel_config" in r.used_keys(name)
                                              else "")
        if r.causal is False:  # Liger's apply table (MODEL_TYPE_TO_APPLY_LIGER_FN) holds decoders only
            r.use(name, "use_liger_kernel")
            if liger:
                r.notes.append(f"{where}: Liger has no kernels for {r.model_type or 'this model'} (not a decoder): "
                               "the Trainer's patch changes nothing")
        else:
            if liger.get("fused_linear_cross_entropy"):
                _loss(r, "fused", where, f"{name}: use_liger_kernel")
            elif not (pairs or generating):  # theirs take the log-probabilities (logps), set above
                r.set("loss", "full", where)
            _liger_layers(r, tuple(k for k in ("rope", "rms_norm", _glu(r)) if liger.get(k)), where)
    fsdp = d.get("fsdp")
    if isinstance(fsdp, list):
        fsdp = " ".join(str(x) for x in fsdp)
    if fsdp:
        grad_op_offload = "offload" in str(fsdp) and "shard_grad_op" in str(fsdp)
        if grad_op_offload:
            r.refuse(f"{name}: fsdp", "CPU offload with shard_grad_op", "counted without the offload (an upper "
                     "bound on the card)")
        r.set("shard", "zero2" if "shard_grad_op" in str(fsdp) else "fsdp", f"{name}: fsdp")
        if "offload" in str(fsdp) and not grad_op_offload:  # "full_shard offload": CPUOffload(offload_params=True)
            r.set("offload_params", "cpu", f"{name}: fsdp")
        if "shard_grad_op" in str(fsdp):
            r.notes.append(SHARD_GRAD_OP_NOTE.format(where=f"{name}: fsdp"))
    elif "fsdp" in d:
        r.use(name, "fsdp")
    _deepspeed_key(r, path, d)
    _auto_half(r, name, half)
    if half and (loaded is None or r.options.get("method") == "qlora") and "mixed_precision" not in r.options:
        r.notes.append(f"{name}: {half}: autocast over the weights' own dtype (--dtype); add --mixed-precision when "
                       "the model is loaded in fp32 (fp32 master weights, grads and states)")
    name_or_path = d.get("model_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip() and r.model is None:
        r.model = name_or_path.strip()
    r.account(name, "TrainingArguments", d)


# torch.utils.checkpoint's keywords that keep what the estimate counts: each checkpointed layer's input, the layer
# recomputed in backward, whether by the reentrant autograd Function or by saved-tensor hooks (use_reentrant), with or
# without the RNG state (a few bytes) or its checks
CHECKPOINT_KWARGS = ("use_reentrant", "preserve_rng_state", "determinism_check", "debug")


def _checkpointing_kwargs(r: _Reader, name: str, d: dict[str, Any]) -> None:
    """gradient_checkpointing_kwargs made of CHECKPOINT_KWARGS is read (accounted as modelled); any other keyword
    (a context_fn choosing what to save) stays named as not modelled (recipe_keys)."""
    kwargs = d.get("gradient_checkpointing_kwargs")
    if isinstance(kwargs, dict) and set(kwargs) <= set(CHECKPOINT_KWARGS):
        r.use(name, "gradient_checkpointing_kwargs")


# torch_dtype as from_pretrained takes it (a torch dtype's name, with or without "torch.")
TORCH_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                "float32": "fp32", "fp32": "fp32", "float": "fp32"}


def _torch_dtype(value: Any, where: str) -> str | None:
    """The dtype the model is loaded in (None: absent, or "auto", the checkpoint's own: the estimate's --dtype)."""
    if value is None or value == "auto":
        return None
    key = str(value).removeprefix("torch.")
    if key not in TORCH_DTYPES:
        raise InputError(f"{where}: {_short(value)} is not a dtype from_pretrained loads in; write bfloat16, float16, "
                         "float32 or auto")
    return TORCH_DTYPES[key]


def _args_peft(r: _Reader, name: str, d: dict[str, Any]) -> None:
    """LoRA settings carried by an argument file (fms-hf-tuning: peft_method, r, target_modules; TRL's ModelConfig:
    use_peft, lora_r, lora_target_modules, load_in_4bit/8bit), handed by those scripts to peft's LoraConfig."""
    method, use_peft = d.get("peft_method"), d.get("use_peft")
    if str(method).lower() == "alora":  # fms-hf-tuning builds the same peft LoraConfig for activated LoRA
        method = "lora"
    r.use(name, *(k for k in ("peft_method", "use_peft") if k in d))
    if method is not None and str(method).lower() not in ("lora", "none", ""):
        r.refuse(f"{name}: peft_method", f"{method!r}", "counted as --method's (full unless given; campaign reads "
                 "lora)")
    if not (str(method).lower() == "lora" or use_peft is True):
        return
    key = "peft_method" if str(method).lower() == "lora" else "use_peft"
    _lora_extras(r, name, d, "modules_to_save", "lora_modules_to_save")
    four, eight = d.get("load_in_4bit") is True, d.get("load_in_8bit") is True
    r.set("method", "qlora" if four else "lora", f"{name}: {key}" + (" + load_in_4bit" if four else ""))
    if four or eight:  # trl/trainer/sft_trainer.py and dpo_trainer.py since 0.22 (TRL #3882, #3906)
        r.notes.append(f"{name}: a k-bit base: TRL 0.22 and later neither call peft's prepare_model_for_kbit_training "
                       "nor keep the adapters in fp32 (they cast them to bf16): add --no-kbit-upcast "
                       "--no-peft-autocast for those; the estimate without is the older stack's, higher")
    r.use(name, *(k for k in ("load_in_4bit", "load_in_8bit", "use_dora", "modules_to_save", "lora_modules_to_save")
                  if k in d))
    if eight and not four:
        r.set("dtype", "int8", f"{name}: load_in_8bit")
    for rank in ("r", "lora_r"):
        if d.get(rank) is not None:
            r.set("lora_rank", _int(d[rank], f"{name}: {rank}"), f"{name}: {rank}")
    targets = next((t for t in ("target_modules", "lora_target_modules") if d.get(t) is not None), None)
    if targets:
        r.set("lora_targets", _modules(d[targets], f"{name}: {targets}"), f"{name}: {targets}")
    else:
        _default_targets(r, f"{name}: {key}")


def _lora_extras(r: _Reader, name: str, d: dict[str, Any], *saved: str) -> None:
    """DoRA and fully trained modules beside LoRA (peft's modules_to_save, under each tool's name): named as not
    modelled, the adapters counted without them (low)."""
    if d.get("use_dora"):
        r.refuse(f"{name}: use_dora", "DoRA (a magnitude vector per target, and the weight norm in the step)",
                 "counted as LoRA, which is low")
    for key in saved:
        if d.get(key):
            r.refuse(f"{name}: {key}", f"fully trained modules {d[key]}",
                     "the adapters are counted without them, which is low")


def _default_targets(r: _Reader, where: str) -> None:
    """No target_modules: peft's LoraConfig takes its default for the model type (recipe_keys.LORA_DEFAULT_TARGETS),
    and raises for a model type it has none for."""
    if r.model_type is None:
        return
    targets = default_lora_targets(r.model_type)
    if targets is None:
        raise InputError(f"{where}: no target_modules, and peft has no default for model type {r.model_type!r} "
                         "(its LoraConfig raises); give target_modules")
    r.set("lora_targets", targets, f"{where} (no target_modules: peft's default for {r.model_type}, "
                                   f"{PEFT_DEFAULTS_SOURCE})")


def _deepspeed_key(r: _Reader, path: Path, d: dict[str, Any]) -> None:
    """The `deepspeed` key of TrainingArguments, axolotl or LLaMA-Factory: the config itself as a mapping, or the path
    of a ds_config, which the HF Trainer opens from the folder the command runs in (HfTrainerDeepSpeedConfig); it is
    looked for there, then beside the file, and is the --deepspeed file when that has its name. Not found, it is
    named as not modelled (the estimate without DeepSpeed), never a refusal of the recipe."""
    name, value = _label(path), d.get("deepspeed")
    if value is None or value == "":
        return
    r.use(name, "deepspeed")
    if isinstance(value, dict):
        _deepspeed(r, f"{name}: deepspeed", value)
        return
    if not isinstance(value, str):
        raise InputError(f"{name}: deepspeed is {_short(value)}; give the path of a ds_config.json or the DeepSpeed "
                         "config as a mapping")
    if r.deepspeed is not None and Path(value).name == Path(r.deepspeed).name:  # the file --deepspeed gives
        _deepspeed(r, _label(Path(r.deepspeed)), load_config_file(r.deepspeed))
        r.deepspeed = None  # read: not again
        return
    for ds in (Path(value), path.parent / value):  # an absolute value is itself both times
        if ds.is_file():
            _deepspeed(r, _label(ds), load_config_file(ds))
            return
    r.refuse(f"{name}: deepspeed", f"{value} (not found from this folder, where the HF Trainer opens it, nor beside "
             f"{name})", "counted without DeepSpeed; give the file with --deepspeed")


def _peft(r: _Reader, name: str, d: dict[str, Any]) -> None:
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
    _lora_extras(r, name, d, "modules_to_save")
    r.set("method", "lora", f"{name}: peft_type")
    r.use(name, *(k for k in ("use_dora", "modules_to_save") if k in d))
    if d.get("r") is not None:
        r.set("lora_rank", _int(d["r"], f"{name}: r"), f"{name}: r")
    if d.get("target_modules") is not None:
        r.set("lora_targets", _modules(d["target_modules"], f"{name}: target_modules"), f"{name}: target_modules")
    else:
        _default_targets(r, f"{name}: target_modules")
    r.account(name, "peft", d)


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
SHARD_GRAD_OP_NOTE = ("{where}: FSDP SHARD_GRAD_OP is estimated as --shard zero2, DeepSpeed's reduce bucket and fp32 "
                      "gradient copy included: an upper bound for FSDP, which has neither")
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


def _stage(value: Any, where: str) -> int:
    """A ZeRO stage: DeepSpeed's ZeroStageEnum, a whole number 0-3 (true, 2.0 or "2" are not stages)."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2, 3):
        raise InputError(f"{where}: {_short(value)} is not a ZeRO stage; write 0, 1, 2 or 3")
    return value


def _offload(r: _Reader, section: Any, where: str, stage: int) -> None:
    """offload_optimizer / offload_param: DeepSpeed reads an object whose `device` is none, cpu or nvme
    (DeepSpeedZeroOffloadOptimizerConfig, ...ParamConfig); offload_optimizer to the CPU sets --offload-optimizer cpu
    at stage 1, 2 or 3 (ZeRO-Offload), offload_param to the CPU --offload-params cpu at stage 3 (ZeRO-Infinity's CPU
    case; DeepSpeed offloads parameters at stage 3 only), nvme is refused by name, since the estimate does not model
    it, and a form DeepSpeed cannot read ("cpu", ["cpu"], true) is refused with the form it can."""
    if section is None:
        return
    if not isinstance(section, dict):
        raise InputError(f"{where}: {_short(section)} is not a form DeepSpeed reads; it takes an object, "
                         f"{OFFLOAD_FORM}, and the estimate models no offload: drop the key for one without it")
    kind = "offload_param" if where.endswith("offload_param") else "offload_optimizer"
    _offload_device(r, section.get("device", "none"), where, stage, kind)


def _offload_device(r: _Reader, device: Any, where: str, stage: int, kind: str) -> None:
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


def _batch_sizes(r: _Reader, name: str, d: dict[str, Any]) -> None:
    """DeepSpeed's three batch sizes, of which any two give the third (runtime/config.py
    _set_batch_related_parameters: train_batch_size = micro-batch x gradient_accumulation_steps x GPUs; with the
    total alone the accumulation is 1); a size the GPUs decide is read with --gpus, else noted."""
    given = {k: d.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    total, micro, steps = (None if v in (None, "auto") else _int(v, f"{name}: {k}") for k, v in given.items())
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


def _auto_half(r: _Reader, name: str, half: str | None) -> None:
    """A ds_config's bf16/fp16 "enabled": "auto" is the Trainer's own bf16/fp16 (transformers' HfTrainerDeepSpeedConfig
    fills it): with it on, DeepSpeed trains a 16-bit model over fp32 master weights (mixed precision); off, neither."""
    r.ds_filled = r.ds_filled or bool(r.ds_auto)
    if r.ds_auto and half and "mixed_precision" not in r.options:
        r.set("mixed_precision", True, f"{name}: {half} (fills {r.ds_auto[0]} auto)")


def _settle(r: _Reader) -> None:
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


def _restate(r: _Reader, file: str, keys: set[str], why: str, counted: str) -> None:
    """Keys of `file` accounted before the other files were read, named now as not modelled."""
    for key in keys:
        r.refuse(f"{file}: {key}", why, counted)
    r.keys = [ConfigKey(k.file, k.key, k.value, "not modelled", r.unread[file][k.key])
              if k.file == file and k.key in keys else k for k in r.keys]


def _low_precision_master(r: _Reader, name: str, key: str, section: dict[str, Any]) -> None:
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


def _deepspeed(r: _Reader, name: str, d: dict[str, Any], *, whole: bool = True) -> None:
    """A DeepSpeed config; `whole`: a file (or mapping) of the user's, each of its keys accounted for (not the stage
    accelerate's own deepspeed_config names)."""
    given = d
    if d.get("zero_optimization") is False:  # DeepSpeed's deprecated boolean form: false is stage 0
        d = {k: v for k, v in d.items() if k != "zero_optimization"}
        r.use(name, "zero_optimization")
    zero = _section(d, "zero_optimization", name, 'DeepSpeed reads an object such as {"stage": 2}')
    stage = _stage(zero.get("stage", 0), f"{name}: zero_optimization.stage")
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
    _accumulation(r, d, name)
    _batch_sizes(r, name, d)
    for key in ("bf16", "bfloat16", "fp16"):
        section = _section(d, key, name, 'DeepSpeed reads an object such as {"enabled": true}')
        if section.get("enabled") not in (None, False, "auto"):
            r.set("mixed_precision", True, f"{name}: {key}.enabled")
        elif section.get("enabled") == "auto":  # the HF Trainer fills it from its own bf16/fp16 (_auto_half)
            r.ds_auto.append(f"{name}: {key}.enabled")
        if "enabled" in section:
            r.use(name, f"{key}.enabled")
        _low_precision_master(r, name, key, section)
    optimizer = _section(d, "optimizer", name, 'DeepSpeed reads an object such as {"type": "AdamW", "params": {}}')
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
    types = _section(d, "data_types", name, 'DeepSpeed reads an object such as {"grad_accum_dtype": "bf16"}')
    if types.get("grad_accum_dtype") not in (None, "bf16", "fp16"):
        r.refuse(f"{name}: data_types.grad_accum_dtype", f"gradients accumulated in {types['grad_accum_dtype']}",
                 "the gradient partition counted in the 16-bit dtype (fp32: 2 B more per trainable parameter and "
                 "card)")
    checkpointing = _section(d, "activation_checkpointing", name,
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
    r = _Reader(gpus)
    _deepspeed(r, name, doc)
    unread = next(iter(r.unread.get(name, {}).items()), None)
    if unread is not None:  # a published row with a setting the estimate does not model is not compared
        raise InputError(f"{name}: {unread[0]}: {unread[1]}")
    return dict(r.options)


def _accelerate(r: _Reader, path: Path, d: dict[str, Any]) -> None:
    name = _label(path)
    kind = str(d.get("distributed_type", "NO")).upper()
    if d.get("num_processes") is not None:
        r.set("gpus", _int(d["num_processes"], f"{name}: num_processes"), f"{name}: num_processes")
    if str(d.get("mixed_precision", "no")).lower() in ("bf16", "fp16"):
        r.set("mixed_precision", True, f"{name}: mixed_precision")
    if kind == "FSDP":
        fsdp = _section(d, "fsdp_config", name, "accelerate reads a mapping of fsdp_* settings")
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
            r.notes.append(SHARD_GRAD_OP_NOTE.format(where=f"{name}: fsdp_config.fsdp_sharding_strategy"))
        if fsdp.get("fsdp_activation_checkpointing"):
            r.set("grad_checkpointing", True, f"{name}: fsdp_config.fsdp_activation_checkpointing")
        _reshard(r, name, fsdp.get("fsdp_reshard_after_forward"), "fsdp_config.fsdp_reshard_after_forward")
    elif kind == "DEEPSPEED":
        ds = _section(d, "deepspeed_config", name, "accelerate reads a mapping of zero_stage, offload_*_device...")
        file = ds.get("deepspeed_config_file")
        if file is not None:
            if not isinstance(file, str) or not file:
                raise InputError(f"{name}: deepspeed_config.deepspeed_config_file is {_short(file)}; give the path of "
                                 "a ds_config.json")
            _deepspeed(r, _label(path.parent / file), load_config_file(path.parent / file))
            r.use(name, "deepspeed_config.deepspeed_config_file")
        else:
            where = f"{name}: deepspeed_config"
            stage = _stage(ds.get("zero_stage", 0), f"{where}.zero_stage")
            for key in ("offload_optimizer_device", "offload_param_device"):
                _offload_device(r, ds.get(key), f"{where}.{key}", stage, key.rsplit("_", 1)[0])
            _deepspeed(r, where, {"zero_optimization": {"stage": stage}}, whole=False)
            if stage == 3 and ds.get("zero3_init_flag") is True:  # from_pretrained under deepspeed.zero.Init
                r.set("zero_init", True, f"{where}.zero3_init_flag")
            elif stage != 3 and "zero3_init_flag" in ds:
                r.use(name, "deepspeed_config.zero3_init_flag")  # read by ZeRO-3 only
            r.use(name, "deepspeed_config.zero_stage", *(f"deepspeed_config.{k}" for k in (
                "offload_optimizer_device", "offload_param_device") if k in ds))
        steps = ds.get("gradient_accumulation_steps")
        if steps not in (None, "auto"):
            where = f"{name}: deepspeed_config.gradient_accumulation_steps"
            r.set("grad_accumulation", _int(steps, where), where)
    r.use(name, *(k for k in ("distributed_type", "num_processes", "mixed_precision") if k in d))
    if kind == "FSDP":
        r.use(name, *(f"fsdp_config.{k}" for k in ("fsdp_offload_params", "fsdp_sharding_strategy",
                                                    "fsdp_activation_checkpointing") if k in fsdp))
    r.account(name, "accelerate", d)


def _axolotl(r: _Reader, path: Path, d: dict[str, Any]) -> None:
    name = _label(path)
    r.set("logits_held", False, f"{name} (axolotl trains through the HF Trainer: {TRAINER_FREES_LOGITS})")
    r.model = str(d["base_model"])
    adapter = str(d.get("adapter") or "").lower()
    if adapter not in ("", "lora", "qlora"):
        r.refuse(f"{name}: adapter", f"{adapter!r}", "counted as a full fine-tune (an upper bound; campaign reads "
                 "lora and qlora)")
    method = "qlora" if adapter == "qlora" or (adapter == "lora" and d.get("load_in_4bit")) else \
        "lora" if adapter == "lora" else "full"
    r.set("method", method, f"{name}: adapter" + (" + load_in_4bit" if d.get("load_in_4bit") else ""))
    if d.get("load_in_8bit"):
        r.set("dtype", "int8", f"{name}: load_in_8bit")
    if d.get("lora_r") is not None:
        r.set("lora_rank", _int(d["lora_r"], f"{name}: lora_r"), f"{name}: lora_r")
    if d.get("lora_target_linear"):
        r.set("lora_targets", ("all-linear",), f"{name}: lora_target_linear")
    elif d.get("lora_target_modules") is not None:  # axolotl hands it to peft's LoraConfig as it is
        r.set("lora_targets", _modules(d["lora_target_modules"], f"{name}: lora_target_modules"),
              f"{name}: lora_target_modules")
    if d.get("lora_modules_to_save"):
        r.refuse(f"{name}: lora_modules_to_save", f"fully trained modules {d['lora_modules_to_save']}",
                 "the adapters are counted without them, which is low")
    if d.get("sequence_len") is not None:
        r.set("seq_len", _int(d["sequence_len"], f"{name}: sequence_len"), f"{name}: sequence_len")
    rl = str(d.get("rl") or "").lower()
    pairs = rl in AXOLOTL_PAIRS
    if d.get("micro_batch_size") is not None:
        per = _int(d["micro_batch_size"], f"{name}: micro_batch_size")
        r.set("batch", 2 * per if pairs else per, f"{name}: micro_batch_size" + (f" ({PAIRS})" if pairs else ""))
    if pairs:  # axolotl's DPO loads a reference model for a full fine-tune; with an adapter TRL disables it
        reference = ("adapters-off" if method in ("lora", "qlora") else "copy") if AXOLOTL_PAIRS[rl] else "none"
        r.set("reference", reference, f"{name}: rl")
        if d.get("liger_fused_linear_cross_entropy") is not True:
            _loss(r, "logps", f"{name}: rl ({LOGPS})", f"{name}: rl")
    if d.get("gradient_checkpointing") is not None:
        r.set("grad_checkpointing", bool(d["gradient_checkpointing"]), f"{name}: gradient_checkpointing")
    if method != "qlora" and not d.get("load_in_8bit"):  # the model is loaded in that dtype (QLoRA's base: nf4)
        if d.get("bf16") in (True, "auto"):
            r.set("dtype", "bf16", f"{name}: bf16 (the model loaded in bf16)")
        elif d.get("fp16") is True:
            r.set("dtype", "fp16", f"{name}: fp16 (the model loaded in fp16)")
    if d.get("optimizer") is not None:
        _optim(r, d["optimizer"], f"{name}: optimizer", OPTIM)
    _accumulation(r, d, name)
    if d.get("liger_fused_linear_cross_entropy") is True:
        _loss(r, "fused", f"{name}: liger_fused_linear_cross_entropy", f"{name}: liger_fused_linear_cross_entropy")
    elif d.get("liger_fused_linear_cross_entropy") is not None:
        if not pairs:
            r.set("loss", "full", f"{name}: liger_fused_linear_cross_entropy")
        r.use(name, "liger_fused_linear_cross_entropy")
    liger = {k: _glu(r) if kernel == "glu" else kernel for k, kernel in AXOLOTL_LIGER.items() if d.get(k) is not None}
    if liger:
        if _liger_layers(r, tuple(kernel for k, kernel in liger.items() if d[k] is True),
                         " + ".join(f"{name}: {k}" for k in liger)):
            r.use(name, *liger)
            if d.get("liger_rms_norm") is True and r.model_type in ("qwen3", "qwen3_moe"):
                # axolotl patches Liger's RMSNorm class before the model loads (LigerPlugin.pre_model_load), so
                # Qwen3's q_norm/k_norm are Liger's too; campaign counts them as the Trainer's patch of a loaded
                # model leaves them, HF's
                r.notes.append(f"{name}: liger_rms_norm: axolotl's Liger patch reaches Qwen3's q/k norms too; they "
                               "are counted as HF's (fp32 copies of q and k): the activations are an upper bound")
    _attention(r, name, d)
    _deepspeed_key(r, path, d)
    _auto_half(r, name, "bf16" if d.get("bf16") in (True, "auto") else "fp16" if d.get("fp16") is True else None)
    r.use(name, *(k for k in ("base_model", "adapter", "load_in_4bit", "load_in_8bit", "lora_target_linear",
                              "bf16", "fp16", "gradient_checkpointing") if k in d))
    _axolotl_liger_inert(r, name, d)
    r.account(name, "axolotl", d)


LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"


def _axolotl_liger_inert(r: _Reader, name: str, d: dict[str, Any]) -> None:
    """axolotl's LigerPlugin passes a liger_* key only where the model's apply_liger_kernel_to_<type> takes that
    keyword: liger_layer_norm changes nothing on the RMSNorm models campaign models Liger for (no layer_norm keyword),
    read as such. The plugins list is read when it holds LigerPlugin alone and its kernels are modelled."""
    from .activations import LIGER_MODEL_TYPES

    if r.model_type not in LIGER_MODEL_TYPES:
        return
    if d.get("plugins") == [LIGER_PLUGIN] and "liger_kernels" in r.options:
        r.use(name, "plugins")
    if d.get("liger_layer_norm") is not None:
        r.use(name, "liger_layer_norm")
        if d["liger_layer_norm"] is True:
            r.notes.append(f"{name}: liger_layer_norm: Liger's apply_liger_kernel_to_{r.model_type} takes no "
                           "layer_norm (the model's norms are RMSNorms): axolotl's plugin passes nothing, no memory "
                           "changes")


def _torchtune(r: _Reader, name: str, d: dict[str, Any]) -> None:
    component = str(d["model"]["_component_"])
    leaf = component.rsplit(".", 1)[-1]
    method = "qlora" if leaf.startswith("qlora_") else "lora" if leaf.startswith("lora_") else "full"
    r.set("method", method, f"{name}: model._component_")
    r.set("logits_held", False, f"{name} ({TORCHTUNE_FREES_LOGITS})")
    model = d["model"]
    # torchtune runs on several cards only through its *_distributed recipes, which all shard with FSDP
    # (recipes/*_distributed.py: training.shard_model, fully_shard on each layer and the root)
    if r.gpus is not None and r.gpus > 1:
        r.set("shard", "fsdp", f"{name} (over {r.gpus} cards: a torchtune distributed recipe, FSDP)")
    if method != "full":
        # the model is built under training.set_default_dtype(dtype): the LoRA weights in it too (no peft autocast);
        # the QLoRA base is torchao's NF4Tensor, without peft's prepare_model_for_kbit_training
        r.set("peft_autocast", False, f"{name} (torchtune builds the adapters in the recipe's dtype)")
        if method == "qlora":
            r.set("kbit_upcast", False, f"{name} (torchtune's QLoRA: no k-bit preparation, norms in the dtype)")
        if model.get("lora_rank") is not None:
            r.set("lora_rank", _int(model["lora_rank"], f"{name}: model.lora_rank"), f"{name}: model.lora_rank")
        attn = _attn_modules(model.get("lora_attn_modules"), f"{name}: model.lora_attn_modules")
        targets = attn + (["gate_proj", "up_proj", "down_proj"] if model.get("apply_lora_to_mlp") else []) + (
            ["lm_head"] if model.get("apply_lora_to_output") else [])
        names = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
        if targets:
            r.set("lora_targets", tuple(names.get(t, t) for t in targets), f"{name}: model.lora_attn_modules")
    tokenizer = _section(d, "tokenizer", name, "torchtune reads a component (_component_: ..., max_seq_len: ...)")
    if tokenizer.get("max_seq_len") is not None:
        r.set("seq_len", _int(tokenizer["max_seq_len"], f"{name}: tokenizer.max_seq_len"),
              f"{name}: tokenizer.max_seq_len")
    else:  # torchtune truncates nothing: each batch pads to its longest sample
        r.notes.append(f"{name}: tokenizer.max_seq_len {'null' if 'max_seq_len' in tokenizer else 'absent'}: "
                       "torchtune truncates nothing (a batch is as long as its longest sample); the length counted "
                       "is --seq-len's (2048 unless given): give your data's longest")
    if d.get("batch_size") is not None:
        r.set("batch", _int(d["batch_size"], f"{name}: batch_size"), f"{name}: batch_size")
    _torchtune_ac(r, d, name)
    if d.get("dtype") in ("bf16", "fp32", "fp16"):
        if method == "qlora":  # the compute dtype: the base is NF4 (torchtune's qlora_* builders, quantize_base)
            r.use(name, "dtype")
            r.notes.append(f"{name}: dtype {d['dtype']}: QLoRA's compute dtype; the base is stored in NF4")
        else:
            r.set("dtype", d["dtype"], f"{name}: dtype (torchtune trains in it: no fp32 master copy)")
    optimizer = _section(d, "optimizer", name, "torchtune reads a component (_component_: torch.optim.AdamW, ...)")
    if optimizer.get("_component_"):
        table = TORCHTUNE_OPTIM
        if optimizer.get("fused") is True and optimizer["_component_"] in ("torch.optim.AdamW", "torch.optim.Adam"):
            table = {optimizer["_component_"]: ("adamw", "fused")}
            r.use(name, "optimizer.fused")
        elif optimizer.get("foreach") is False and optimizer["_component_"] in ("torch.optim.AdamW",
                                                                               "torch.optim.Adam"):
            table = {optimizer["_component_"]: ("adamw", "loop")}
            r.use(name, "optimizer.foreach")
        _optim(r, optimizer["_component_"], f"{name}: optimizer._component_", table)
        r.use(name, *(f"optimizer.{k}" for k in ("fused", "foreach") if k in optimizer))
    _accumulation(r, d, name)
    loss = d.get("loss")
    component = str(loss.get("_component_", "")) if isinstance(loss, dict) else ""
    if component in TORCHTUNE_LOSSES:
        _loss(r, TORCHTUNE_LOSSES[component], f"{name}: loss", f"{name}: loss")
    if d.get("optimizer_in_bwd") is not None:
        r.set("optimizer_in_backward", d["optimizer_in_bwd"] is True, f"{name}: optimizer_in_bwd")
    if d.get("enable_activation_offloading") is not None:
        r.set("activation_offloading", d["enable_activation_offloading"] is True,
              f"{name}: enable_activation_offloading")
    # training.shard_model(cpu_offload=...): fully_shard(offload_policy=CPUOffloadPolicy()); only the *_distributed
    # recipes read it, and they always shard with FSDP. Older recipes (lora_finetune_fsdp2.py, the first 405B QLoRA
    # config) wrote it as a section, fsdp: {cpu_offload: ...}
    nested = d.get("fsdp") if isinstance(d.get("fsdp"), dict) and set(d["fsdp"]) == {"cpu_offload"} else None
    for key, present, value in (("fsdp_cpu_offload", "fsdp_cpu_offload" in d, d.get("fsdp_cpu_offload")),
                                ("fsdp.cpu_offload", nested is not None, nested and nested["cpu_offload"])):
        if value is True:
            r.set("shard", "fsdp", f"{name}: {key} (a torchtune distributed recipe, FSDP)")
            r.set("offload_params", "cpu", f"{name}: {key}")
        elif present:
            r.use(name, key)
    _custom_sharded(r, name, d.get("custom_sharded_layers"))
    _reshard(r, name, d.get("fsdp_reshard_after_forward"), "fsdp_reshard_after_forward")
    r.use(name, "enable_activation_checkpointing", "model.apply_lora_to_mlp", "model.apply_lora_to_output",
          "model.lora_attn_modules", "tokenizer.max_seq_len")
    r.account(name, "torchtune", d)


def _torchtune_ac(r: _Reader, d: dict[str, Any], name: str) -> None:
    """Activation checkpointing of a torchtune recipe. Without ac_mode, enable_activation_checkpointing wraps every
    layer. The distributed recipes also read ac_mode and ac_option, applied only with enable_activation_checkpointing
    false (full_finetune_distributed.py _setup_model: "(not enable_activation_checkpointing) and (ac_mode is not None)";
    with it true and an ac_mode, neither runs: no checkpointing). training.apply_selective_activation_checkpointing
    (training/_activation_checkpointing.py) wraps every layer for ac_mode full; for selective the blocks counted from 1
    whose count % int(ac_option) == 0 (0: all); any other mode, none. ac_option op is refused (torchtune's int('op')
    raises): op-level checkpointing is torchtitan's."""
    enable, mode = d.get("enable_activation_checkpointing"), d.get("ac_mode")
    if mode is None:
        if enable is not None:
            r.set("grad_checkpointing", bool(enable), f"{name}: enable_activation_checkpointing")
        r.use(name, "ac_option")  # read only with an ac_mode
        return
    r.use(name, "ac_mode", "ac_option", "enable_activation_checkpointing")
    if enable:
        r.set("grad_checkpointing", False, f"{name}: enable_activation_checkpointing with ac_mode (torchtune then "
                                           "applies neither)")
        return
    if mode != "selective":
        r.set("grad_checkpointing", mode == "full", f"{name}: ac_mode {_short(mode)}")
        return
    option = d.get("ac_option")
    text = "" if isinstance(option, bool) else str(option).strip()
    if not text.isdigit():
        raise InputError(f"{name}: ac_option {_short(option)} with ac_mode selective must be a layer count (2: every "
                         "second layer; torchtune takes int(ac_option)); op-level checkpointing is torchtitan's")
    r.set("grad_checkpointing", True, f"{name}: ac_mode selective")
    if int(text) > 1:
        r.set("checkpoint_every", int(text), f"{name}: ac_option")


def _custom_sharded(r: _Reader, name: str, value: Any) -> None:
    """torchtune's custom_sharded_layers (the *_distributed recipes): each module it names becomes an FSDP unit of
    its own (training.shard_model). ['tok_embeddings', 'output'] is modelled (--fsdp-embedding-units); another list
    is left to the key's account, named as not modelled (the root estimate stays: an upper bound). A single-device
    recipe (no FSDP) never reads it: off, changing no memory."""
    if value in (None, [], ()):
        if value is not None:
            r.use(name, "custom_sharded_layers")
        return
    if r.options.get("shard") != "fsdp":
        r.use(name, "custom_sharded_layers")
        r.notes.append(f"{name}: custom_sharded_layers: read by torchtune's distributed recipes only (FSDP); one "
                       "card: no effect")
        return
    if isinstance(value, list) and sorted(value) == ["output", "tok_embeddings"]:
        r.set("fsdp_embedding_units", True, f"{name}: custom_sharded_layers")


def _reshard(r: _Reader, name: str, value: Any, key: str) -> None:
    """FSDP2's reshard_after_forward (torchtune's fsdp_reshard_after_forward, accelerate's FSDP2
    fsdp_reshard_after_forward): True, the default, frees each block's gathered parameters after its forward; False
    keeps them to its backward (--no-reshard-after-forward). Without FSDP (one card) it changes nothing. Another value
    (FSDP1's sharding-strategy names) is left to the key's account."""
    if not isinstance(value, bool):
        return
    if r.options.get("shard") != "fsdp":
        r.use(name, key)  # not sharded: nothing to reshard
        return
    r.set("reshard_after_forward", value, f"{name}: {key}")


def _attn_modules(value: Any, where: str) -> list[str]:
    """torchtune's lora_attn_modules: a list of q_proj, k_proj, v_proj, output_proj (List[LORA_ATTN_MODULES] in its
    builders); a bare string or anything else is refused (the builders test `"q_proj" in lora_attn_modules`, which
    on a string is a substring test)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, str) and m in TORCHTUNE_ATTN for m in value):
        raise InputError(f"{where}: {_short(value)} is not a list of {', '.join(TORCHTUNE_ATTN)}; write e.g. "
                         "[q_proj, v_proj]")
    return value


__all__ = ["TrainingConfig", "load_config_file", "workload_from_configs"]
