"""The reader every recipe module fills (`Reader`: the options, where each came from, every key's use) and the
readers of settings several tools write the same way: HF TrainingArguments' keys that axolotl and LLaMA-Factory
files carry too (optim, attn_implementation, gradient_accumulation_steps, Liger's kernels, torch_dtype), LoRA's
target modules and extras, FSDP2's reshard_after_forward. training_config.py says which module reads which file.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from .constants import TORCHAO_STEP_BYTES
from .recipe_keys import PEFT_DEFAULTS_SOURCE, ConfigKey, account, default_lora_targets

# TrainingArguments.optim / axolotl's optimizer -> (optimizer, implementation) of the estimate
OPTIM = {
    "adamw_torch": ("adamw", "foreach"), "adamw_hf": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"),
    "adamw_apex_fused": ("adamw", "fused"), "adamw": ("adamw", "foreach"), "adam": ("adamw", "foreach"),
    "adamw_bnb_8bit": ("adamw-8bit", "foreach"), "adamw_8bit": ("adamw-8bit", "foreach"),
    "paged_adamw_8bit": ("adamw-8bit", "foreach"), "paged_adamw_32bit": ("adamw-32bit", "fused"),
    # torchao's AdamW8bit (torchao/optim/adam.py): blockwise 8-bit states, one fp32 scale per block of 256, as
    # bitsandbytes', stepped by a compiled function per tensor
    "adamw_torch_8bit": ("adamw-8bit-ao", "foreach"),
    # torchao's AdamW4bit (torchao/optim/subclass_4bit.py): 4-bit codes, one fp32 scale per block of 128
    "adamw_torch_4bit": ("adamw-4bit", "foreach"),
    "adafactor": ("adafactor", "foreach"), "sgd": ("sgd", "foreach"),
}


class Reader:
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
        self.fsdp_checkpointing: str | None = None  # 'file: key' of FSDP's own activation checkpointing, when on
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


def label(path: Path) -> str:
    """How messages name a file: its name, or the whole path for a name without a suffix (a pipe, /dev/fd/63)."""
    return path.name if path.suffix else str(path)


def whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {value!r} is not a positive whole number; fix the file")
    return value


def section(d: dict[str, Any], key: str, where: str, form: str) -> dict[str, Any]:
    """The mapping under `key` ({} when absent or null); any other value is refused, naming the form the tool reads:
    a setting dropped because it was written as a list or a string would change the estimate in silence."""
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {key} is {short(value)}, not a mapping: {form}; fix the file")
    return value


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def modules(value: Any, where: str) -> tuple[str, ...]:
    """LoRA target module names as peft takes them (LoraConfig.target_modules, axolotl's lora_target_modules): a
    list of names, the one string 'all-linear', or any other one string, which peft matches as a regular expression
    against whole module paths (re.fullmatch on model.layers.0.self_attn.q_proj: peft/tuners/tuners_utils.py
    check_target_module_exists), kept as workload.LORA_REGEX + the pattern. A bare name ('q_proj') as that one string
    matches no dotted path, so peft stops: refused here, naming the file, as is anything else."""
    import re

    from .workload import LORA_REGEX

    if value == "all-linear":
        return ("all-linear",)
    if isinstance(value, str) and re.fullmatch(r"[\w-]+", value.strip()):
        raise InputError(f"{where}: {value!r} is one string, which peft matches as a regular expression against whole "
                         "module paths (model.layers.0.self_attn.q_proj), not as a module name; write the names as a "
                         "list ([q_proj, v_proj]) or all-linear")
    if isinstance(value, str) and value.strip():
        try:
            re.compile(value)
        except re.error as e:
            raise InputError(f"{where}: {value!r} is not a regular expression ({e}); fix the pattern") from None
        return (LORA_REGEX + value,)
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise InputError(f"{where}: {short(value)} is not a list of module names; write e.g. [q_proj, v_proj], "
                         "all-linear or one regular expression")
    return tuple(t.strip() for t in value)


def glu(r: Reader) -> str:
    """The name of the model's gated-MLP kernel in Liger's apply_liger_kernel_to_<model type> (geglu for Gemma)."""
    from .activations import LIGER_GLU

    return LIGER_GLU.get(r.model_type or "", "swiglu")


def liger_defaults(r: Reader) -> dict[str, bool]:
    """What _apply_liger_kernel_to_instance applies by default (liger_kernel/transformers/monkey_patch.py
    apply_liger_kernel_to_llama and its siblings: rope, rms_norm, the gated MLP's kernel and fused_linear_cross_entropy
    on, cross_entropy off), which TrainingArguments' liger_kernel_config overrides one by one."""
    return {"rope": True, "rms_norm": True, glu(r): True, "fused_linear_cross_entropy": True, "cross_entropy": False}


def liger_config(r: Reader, name: str, d: dict[str, Any]) -> dict[str, bool]:
    """The Liger kernels use_liger_kernel applies ({} when off): Liger's defaults, overridden by liger_kernel_config
    where it names only those kernels with true or false (read); a config with another kernel (cross_entropy on:
    Liger's unfused loss kernel, layer_norm...) stays named as not modelled, its known kernels still read. The other
    family's gated-MLP kernel (swiglu for Gemma, geglu for Llama) is not in that model's apply function: Liger drops
    it, and so does campaign, saying so."""
    if d.get("use_liger_kernel") is not True:
        return {}
    config = d.get("liger_kernel_config")
    kernels = liger_defaults(r)
    if isinstance(config, dict):
        other = ({"swiglu", "geglu"} - {glu(r)}) & set(config)
        for key in sorted(other):
            r.notes.append(f"{name}: liger_kernel_config: {key} is not a keyword of Liger's apply_liger_kernel_to_"
                           f"{r.model_type or 'llama'} (its gated MLP is {glu(r)}): Liger drops it")
        config = {k: v for k, v in config.items() if k not in other}
        kernels.update({k: v for k, v in config.items() if k in kernels and isinstance(v, bool)})
        if all(k in kernels and isinstance(v, bool) for k, v in config.items()) and not kernels["cross_entropy"]:
            r.use(name, "liger_kernel_config")
    return kernels


def liger_layers(r: Reader, kernels: tuple[str, ...], where: str) -> bool:
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


def attention(r: Reader, name: str, d: dict[str, Any]) -> None:
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


def loss(r: Reader, value: str, where: str, key: str) -> None:
    """--loss from the recipe (`key`: 'file: key' of the setting); a decoder's loss (chunked, fused, log-probs) on
    an encoder or encoder-decoder is named as not modelled, the model's own loss counted."""
    if value != "full" and r.causal is False:
        r.refuse(key, f"the {value} loss (modelled for a decoder's causal-LM loss; {r.model_type or 'this model'} "
                 "is not a decoder)", "the model's own loss counted, as transformers computes it")
        return
    r.set("loss", value, where)


def accumulation(r: Reader, d: dict[str, Any], name: str) -> None:
    """gradient_accumulation_steps: micro-batches per optimizer step, whose summed gradients stay allocated through
    the next micro-batch's forward and backward (Workload.grad_accumulation); 'auto' (a ds_config the HF Trainer
    fills) says nothing."""
    steps = d.get("gradient_accumulation_steps")
    if steps not in (None, "auto"):
        r.set("grad_accumulation", whole(steps, f"{name}: gradient_accumulation_steps"),
              f"{name}: gradient_accumulation_steps")


def optim(r: Reader, value: Any, where: str, table: dict[str, tuple[str, str]]) -> None:
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


PAIRS = ("x 2: a pair's chosen and rejected run in one forward, as TRL's DPO, ORPO and CPO trainers concatenate "
         "them")


LOGPS = "TRL's preference and RL trainers take the sequences' log-probabilities: selective_log_softmax, row by row"


# torch.utils.checkpoint's keywords that keep what the estimate counts: each checkpointed layer's input, the layer
# recomputed in backward, whether by the reentrant autograd Function or by saved-tensor hooks (use_reentrant), with or
# without the RNG state (a few bytes) or its checks
CHECKPOINT_KWARGS = ("use_reentrant", "preserve_rng_state", "determinism_check", "debug")


def checkpointing_kwargs(r: Reader, name: str, d: dict[str, Any]) -> None:
    """gradient_checkpointing_kwargs made of CHECKPOINT_KWARGS is read (accounted as modelled); any other keyword
    (a context_fn choosing what to save) stays named as not modelled (recipe_keys)."""
    kwargs = d.get("gradient_checkpointing_kwargs")
    if isinstance(kwargs, dict) and set(kwargs) <= set(CHECKPOINT_KWARGS):
        r.use(name, "gradient_checkpointing_kwargs")


# torch_dtype as from_pretrained takes it (a torch dtype's name, with or without "torch.")
TORCH_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                "float32": "fp32", "fp32": "fp32", "float": "fp32"}


def torch_dtype(value: Any, where: str) -> str | None:
    """The dtype the model is loaded in (None: absent, or "auto", the checkpoint's own: the estimate's --dtype)."""
    if value is None or value == "auto":
        return None
    key = str(value).removeprefix("torch.")
    if key not in TORCH_DTYPES:
        raise InputError(f"{where}: {short(value)} is not a dtype from_pretrained loads in; write bfloat16, float16, "
                         "float32 or auto")
    return TORCH_DTYPES[key]


def lora_dropout(r: Reader, name: str, d: dict[str, Any], key: str = "lora_dropout", shown: str = "") -> None:
    """peft's lora_dropout (torchtune's model.lora_dropout): --lora-dropout, each adapter's own dropped-out input and
    mask above 0. An empty key sets nothing."""
    value = d.get(key)
    if value is None or value == "":
        return
    where = f"{name}: {shown or key}"
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not a dropout probability; give a number such as 0.05") from None
    r.set("lora_dropout", p, where)


def lora_extras(r: Reader, name: str, d: dict[str, Any], *saved: str) -> None:
    """DoRA and fully trained modules beside LoRA (peft's modules_to_save, under each tool's name): named as not
    modelled, the adapters counted without them (low); and the adapters' dropout (lora_dropout)."""
    lora_dropout(r, name, d)
    if d.get("use_dora"):
        r.refuse(f"{name}: use_dora", "DoRA (a magnitude vector per target, and the weight norm in the step)",
                 "counted as LoRA, which is low")
    for key in saved:
        if d.get(key):
            r.refuse(f"{name}: {key}", f"fully trained modules {d[key]}",
                     "the adapters are counted without them, which is low")


def default_targets(r: Reader, where: str) -> None:
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


SHARD_GRAD_OP_NOTE = ("{where}: FSDP SHARD_GRAD_OP is estimated as --shard zero2, DeepSpeed's reduce bucket and fp32 "
                      "gradient copy included: an upper bound for FSDP, which has neither")


def auto_half(r: Reader, name: str, half: str | None) -> None:
    """A ds_config's bf16/fp16 "enabled": "auto" is the Trainer's own bf16/fp16 (transformers' HfTrainerDeepSpeedConfig
    fills it): with it on, DeepSpeed trains a 16-bit model over fp32 master weights (mixed precision); off, neither."""
    r.ds_filled = r.ds_filled or bool(r.ds_auto)
    if r.ds_auto and half and "mixed_precision" not in r.options:
        r.set("mixed_precision", True, f"{name}: {half} (fills {r.ds_auto[0]} auto)")


def settle_optimizer(r: Reader) -> None:
    """torchao's low-bit AdamW under DeepSpeed ZeRO (a flat partition for it to quantize and step, not modelled): the
    optimizer key is named as not modelled and the estimate keeps AdamW's states, read after every file so that the
    order of the files does not matter."""
    if r.options.get("optimizer") not in TORCHAO_STEP_BYTES or r.options.get("shard") not in ("zero1", "zero2",
                                                                                              "zero3"):
        return

    where = r.sources["optimizer"][1]
    for option in ("optimizer", "optimizer_impl"):
        r.options.pop(option, None)
        r.sources.pop(option, None)
    file, _, key = where.rpartition(": ")
    why = "torchao's low-bit AdamW on a DeepSpeed ZeRO partition, not modelled: counted as AdamW, an upper bound"
    r.keys = [replace(k, use="not modelled", why=why) if (k.file, k.key) == (file, key) else k for k in r.keys]


def settle_checkpointing(r: Reader) -> None:
    """FSDP's activation checkpointing (accelerate's and axolotl's fsdp_config) wraps every layer whatever the
    Trainer's gradient_checkpointing says, which the HF Trainer requires off beside it ("can't be set to True
    simultaneously"): checkpointing is on, read after every file so that neither order conflicts."""
    if r.fsdp_checkpointing is None:
        return
    if r.options.get("grad_checkpointing") is False:
        r.notes.append(f"{r.fsdp_checkpointing}: FSDP checkpoints every layer; {r.sources['grad_checkpointing'][1]} "
                       "off is the Trainer's own, which FSDP's replaces")
        del r.options["grad_checkpointing"], r.sources["grad_checkpointing"]
    r.set("grad_checkpointing", True, r.fsdp_checkpointing)


def reshard(r: Reader, name: str, value: Any, key: str) -> None:
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
