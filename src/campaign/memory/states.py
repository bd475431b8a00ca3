"""Persistent state: weights (with quantization metadata), trainable parameters, gradients, optimizer states."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from ..errors import InputError
from ..models.spec import ModelSpec, ParamGroup
from .constants import BNB_8BIT_BLOCK, FP32_BYTES, TORCHAO_4BIT_BLOCK
from .dtypes import ELEMENT_BYTES, QUANTIZED, linear_bytes
from .terms import Term
from .workload import LORA_REGEX, Workload


def is_router(g: ParamGroup) -> bool:
    """MoE routers stay in 16-bit under weight quantizers (modules_to_not_convert) and are not LoRA targets."""
    return g.module in ("gate", "shared_expert_gate")


@dataclass(frozen=True)
class WeightBytes:
    """Where the weight bytes go: quantized data, its scales/zeros, and what stays 16-bit (named)."""

    quantized: int
    quant_overhead: int
    dense: int
    dense_names: tuple[str, ...]
    largest_quantized_16bit: int  # the largest converted tensor, briefly in 16-bit while it is quantized

    @property
    def total(self) -> int:
        return self.quantized + self.quant_overhead + self.dense


def weight_bytes(spec: ModelSpec, w: Workload) -> WeightBytes:
    """Bytes of the base weights as stored on the card (before sharding).

    Quantized formats convert the Linear layers inside the blocks; embeddings, the LM head, norms,
    biases and MoE routers stay in 16-bit (bf16), as bitsandbytes, GPTQ and AWQ leave them.
    Mixed precision (AMP) keeps trainable weights in fp32.
    """
    quantized = overhead = dense = largest = 0
    names: list[str] = []
    amp_fp32 = w.mixed_precision and w.base_trainable and w.shard not in ("zero1", "zero2", "zero3")
    # peft's prepare_model_for_kbit_training casts what the quantizer left 16-bit to fp32 (Workload.kbit_fp32); the
    # DeepSpeed engine casts a model loaded in fp32 to its 16-bit dtype (deepspeed_casts; the fp32 master is ZeRO's)
    dense_dtype = "fp32" if amp_fp32 or w.kbit_fp32 else (w.dtype if w.dtype in ("fp32", "bf16", "fp16") else "bf16")
    if deepspeed_casts(w) and dense_dtype == "fp32":
        dense_dtype = "bf16"
    for g in spec.groups:
        if w.dtype in QUANTIZED and g.role == "linear" and g.in_blocks and not is_router(g):
            lb = linear_bytes(w.dtype, g.shape[0], g.shape[1], group_size=w.group_size,
                              double_quant=w.double_quant)
            quantized += lb.data * g.count
            overhead += lb.overhead * g.count
            largest = max(largest, g.numel * 2)  # loaded in 16-bit, then quantized
        else:
            dense += int(g.params * ELEMENT_BYTES[dense_dtype])
            if w.dtype in QUANTIZED and g.role in ("embedding", "linear") and g.module not in names:
                names.append(g.module)
    return WeightBytes(quantized, overhead, dense, tuple(names), largest)


# Where transformers puts the repeated blocks of the models campaign counts in closed form, by the class it builds:
# the causal LM (Llama's model.layers, GPT-2's and Falcon's transformer.h, GPT-NeoX, OPT, BERT and RoBERTa), and the
# language model inside a vision/audio wrapper (transformers >= 4.52 model.language_model.layers, older and Voxtral
# language_model.model.layers, SmolVLM/Idefics3 model.text_model.layers). A pattern is tried under each: the user
# wrote it against the one their model has.
BLOCK_PATHS = ("model.layers.", "model.language_model.layers.", "language_model.model.layers.",
               "model.text_model.layers.", "model.language_model.model.layers.", "transformer.h.", "gpt_neox.layers.",
               "model.decoder.layers.", "encoder.layer.", "bert.encoder.layer.", "roberta.encoder.layer.")
_STACK = re.compile(r"^(.*?\b(?:layers|h|layer|blocks|block))\.")


def lora_regex(w: Workload) -> str | None:
    """The regular expression of a target_modules given as one string, or None for a list of names."""
    t = w.lora_targets
    return t[0][len(LORA_REGEX):] if len(t) == 1 and t[0].startswith(LORA_REGEX) else None


def _paths(g: ParamGroup, layer: int) -> tuple[str, ...]:
    """The module paths peft reads for layer `layer`'s copy of `g`. A group counted in closed form is named inside
    its block (self_attn.q_proj); one from the meta-device inventory (models/meta.py) by its whole path with the
    layer index folded out and its .weight (model.visual.blocks.attn.qkv.weight): the index goes back after the
    stack's name."""
    if g.name.endswith(".weight"):
        return (_STACK.sub(lambda m: f"{m.group(1)}.{layer}.", g.name[: -len(".weight")], count=1),)
    return tuple(f"{p}{layer}.{g.name}" for p in BLOCK_PATHS)


@lru_cache(maxsize=64)
def _regex_layers(groups: tuple[ParamGroup, ...], pattern: str) -> tuple[tuple[ParamGroup, int], ...]:
    compiled = re.compile(pattern)
    out = []
    for g in groups:
        n = sum(1 for layer in range(g.count) if any(compiled.fullmatch(p) for p in _paths(g, layer)))
        if n:
            out.append((g, n))
    return tuple(out)


def regex_targets(spec: ModelSpec, pattern: str) -> tuple[tuple[ParamGroup, int], ...]:
    """(each Linear group the pattern matches, in how many of its layers), as peft matches it: re.fullmatch against
    every layer's module path (BLOCK_PATHS). Routed experts are not Linear modules in transformers 5 and routers
    are never adapted, as with all-linear. A group's copies are taken as layers 0..count-1 (an MoE model's dense
    and sparse layers are not told apart by index).

    Raises:
        InputError: the pattern is not a regular expression, or matches no Linear of the model (peft then stops:
            'Target modules ... not found in the base model').
    """
    linears = tuple(g for g in spec.groups if g.role == "linear" and g.in_blocks and not is_router(g)
                    and not g.expert)
    try:
        found = _regex_layers(linears, pattern)
    except re.error as e:
        raise InputError(f"LoRA target_modules '{pattern}' is not a regular expression ({e}); fix the pattern") \
            from None
    if not found:
        example = _paths(linears[0], 0)[0] if linears else "model.layers.0.self_attn.q_proj"
        raise InputError(f"LoRA target_modules '{pattern}' matches no Linear module of {spec.name} (peft stops with "
                         f"'Target modules not found'); its paths look like {example}")
    return found


def regex_note(spec: ModelSpec, w: Workload) -> str | None:
    """What a regex target_modules adapts, and where it adapts a module in some layers only: there the adapters'
    weights, gradients and states are counted in those layers, their activations in every layer (an upper bound)."""
    pattern = lora_regex(w)
    if pattern is None or not (w.training and w.adapters):
        return None
    found = regex_targets(spec, pattern)
    parts = [g.name if n == g.count else f"{g.name} ({n} of {g.count} layers)" for g, n in found]
    partial = any(n < g.count for g, n in found)
    return (f"LoRA targets from the regular expression '{pattern}': {', '.join(parts)}"
            + ("; adapters on some layers only: their weights, gradients and states counted there, their activations"
               " in every layer (an upper bound)" if partial else ""))


def _names(g: ParamGroup, target: str) -> bool:
    """Whether a LoRA target name in a list names group `g`, as peft matches it (check_target_module_exists: the
    module's path equals it or ends with '.' + it)."""
    return target in (g.module, g.name) or g.name.endswith("." + target)


def lora_groups(spec: ModelSpec, w: Workload) -> list[ParamGroup]:
    """The Linear groups LoRA adapts: 'all-linear' = every block Linear except MoE routers and routed experts; a
    regular expression (workload.LORA_REGEX) each group it matches, counted in the layers it matches."""
    pattern = lora_regex(w)
    linears = [g for g in spec.groups if g.role == "linear" and g.in_blocks and not is_router(g)]
    if pattern is not None:
        chosen = [g if n == g.count else replace(g, count=n) for g, n in regex_targets(spec, pattern)]
    elif "all-linear" in w.lora_targets:
        chosen = [g for g in linears if not g.expert]
    else:  # peft's list: a name is a module's whole name or a dotted end of it (shared_expert.gate_proj)
        chosen = [g for g in linears if any(_names(g, t) for t in w.lora_targets)]
        known = {g.module for g in linears}
        unknown = [t for t in w.lora_targets if t != "all-linear" and not any(_names(g, t) for g in linears)]
        if unknown:
            raise InputError(f"LoRA target {unknown[0]!r} is not a Linear module of {spec.name}; "
                             f"choose from {', '.join(sorted(known))}, all-linear or re:PATTERN")
    smallest = min((min(g.shape) for g in chosen), default=0)
    if chosen and w.lora_rank > smallest:
        raise InputError(f"LoRA rank {w.lora_rank} is larger than the smallest targeted layer dimension ({smallest}); "
                         "a rank that high is a full-rank update: lower --lora-rank")
    return chosen


def lora_in_features(spec: ModelSpec, w: Workload) -> dict[str, int]:
    """LoRA-targeted module name -> in_features, when adapters train (empty otherwise). A second Linear of the same
    name in a block (GPT-2's attn.c_proj and mlp.c_proj) goes by its path (mlp.c_proj)."""
    if not (w.training and w.adapters):
        return {}
    out: dict[str, int] = {}
    for g in lora_groups(spec, w):
        out[g.module if g.module not in out else g.name] = g.shape[1]
    return out


def trainable_params(spec: ModelSpec, w: Workload) -> int:
    """Parameters that receive gradients: all (full), the adapters r*(in+out) per target (LoRA), or none."""
    if not w.training or w.method == "frozen":
        return 0
    if w.method == "full":
        return spec.inventory_params
    return sum(w.lora_rank * (g.shape[0] + g.shape[1]) * g.count for g in lora_groups(spec, w))


def adapter_dtype(w: Workload) -> str:
    """The dtype of the LoRA weights: fp32 since peft 0.12 (autocast_adapter_dtype=True, peft#1706), on a 16-bit
    base and on a quantized one, whose storage is not a floating dtype (memory/constants.py, ADAPTER_BYTES). Without
    it (--no-peft-autocast) the base weights' dtype (lora update_layer's self.to(weight.device, dtype=weight.dtype));
    on a quantized base the compute dtype: torchtune builds its QLoRA adapters under the recipe's dtype
    (training.set_default_dtype), and TRL 0.22 on casts a k-bit model's adapters to bf16."""
    if deepspeed_casts(w):  # DeepSpeed casts every floating parameter to the 16-bit dtype, adapters included
        return "fp16" if w.dtype == "fp16" else "bf16"
    if w.peft_autocast or w.dtype == "fp32":
        return "fp32"
    return w.dtype if w.dtype in ("bf16", "fp16") else w.compute_dtype


@dataclass(frozen=True)
class LoraInputs:
    """How LoRA's adapters keep their inputs for backward: `element` bytes of what lora_A and lora_B keep, and whether
    each adapter keeps a cast copy of its own input (`copies`) or the very tensor the base Linear read."""

    element: float
    copies: bool
    cast: str  # what casts the copies, in words: 'fp32' (peft, to the adapter dtype) or 'autocast 16-bit'
    dropout: bool = False  # lora_dropout > 0: each adapter keeps its own dropped-out input and a 1-byte mask

    def saved(self, in_features: list[int], rank: int, *, input_kept: bool) -> float:
        """Bytes per token the adapters on Linears that read one tensor (`in_features` each: q, k and v read the
        attention norm's output) keep: each one's copy of the input, or that input once unless the layer already
        keeps it (SDPA keeps o_proj's); and each lora_A's output (`rank` features), kept by lora_B."""
        if not in_features:
            return 0.0
        if self.dropout:  # lora_A keeps dropout's output (a new tensor per adapter), native_dropout a bool mask
            return self.element * (sum(in_features) + rank * len(in_features)) + sum(in_features)
        inputs = sum(in_features) if self.copies else (0 if input_kept else max(in_features))
        return self.element * (inputs + rank * len(in_features))


def lora_inputs(w: Workload) -> LoraInputs:
    """What LoRA's forward keeps (peft tuners/lora/layer.py Linear.forward, read at 0.21.2): the base layer runs on
    x, then x = self._cast_input_dtype(x, lora_A.weight.dtype), which casts only where the dtypes differ (else x
    itself), and result + lora_B(lora_A(dropout(x))) * scaling, dropout 0 an nn.Identity (torchtune's LoRALinear:
    lora_a(dropout(x)), no cast). lora_A keeps its input, lora_B lora_A's output. Under torch.autocast both matmuls
    run in its 16-bit dtype, each on a copy of its own unless input and adapters are 16-bit already. Where nothing
    casts, lora_A keeps x itself, shared by the adapters reading it: a new storage only where the layer keeps x for
    nothing else, since a frozen Linear (a 16-bit one, bitsandbytes' 4-bit one since 0.43.2) keeps its weight, not
    its input. A LoRA dropout above 0 gives each adapter its own input, dropout's output (of the cast copy where one
    is made, which nothing keeps then), beside the bool mask CUDA's native_dropout keeps."""
    c = ELEMENT_BYTES[w.compute_dtype]
    adapter = ELEMENT_BYTES[adapter_dtype(w)]
    autocast = w.mixed_precision and not deepspeed_casts(w)
    element = 2 if autocast else adapter  # autocast's bf16/fp16, else the adapters' own dtype
    return LoraInputs(element, c != element or adapter != element,
                      "autocast 16-bit" if autocast else adapter_dtype(w), w.lora_dropout > 0)


def deepspeed_casts(w: Workload) -> bool:
    """DeepSpeed ZeRO with bf16/fp16 enabled (--mixed-precision): deepspeed.initialize casts the module's floating
    parameters to the 16-bit dtype (engine.py _cast_module_mixed_precision: p.data = p.data.to(param_dtype); older
    releases module.bfloat16() / .half()), and the ZeRO optimizer keeps fp32 master weights and states for what
    trains."""
    return w.mixed_precision and w.shard in ("zero1", "zero2", "zero3")


def state_bytes_per_element(w: Workload) -> float:
    """dtype of gradients and optimizer states: the adapters' own dtype (they follow the parameters: torch.optim
    makes its states like each parameter), fp32 for mixed precision, else the weight dtype."""
    if deepspeed_casts(w):
        # the ZeRO optimizer steps fp32 master partitions; bf16 ones with bf16_master_weights_and_grads, whose Adam
        # moments bf16_optimizer_states keeps in bf16 (FusedAdam's zeros_like of the master)
        return 2 if w.zero_bf16_master else 4
    if w.adapters:
        return ELEMENT_BYTES[adapter_dtype(w)]
    if w.mixed_precision:
        return 4
    return ELEMENT_BYTES[w.dtype]


def optimizer_bytes(spec: ModelSpec, w: Workload, trainable: int) -> Term:
    """Optimizer state bytes for `trainable` parameters, and the formula in words."""
    s = state_bytes_per_element(w)
    if w.optimizer == "adamw":
        return Term(int(2 * s * trainable), f"AdamW: exp_avg + exp_avg_sq = 2 x {s:g} B x trainable params")
    if w.optimizer == "adamw-32bit":  # bitsandbytes Optimizer2State.init_state: float32 state1 and state2
        return Term(int(2 * FP32_BYTES * trainable), "32-bit AdamW (bitsandbytes): 2 fp32 states, whatever the "
                                                     "parameters' dtype = 8 B x trainable params")
    if w.optimizer in ("adamw-8bit", "adamw-8bit-ao"):  # torchao's AdamW8bit: the same blocks of 256 (subclass_8bit)
        per = 2 * (1 + FP32_BYTES / BNB_8BIT_BLOCK)
        who = "bitsandbytes" if w.optimizer == "adamw-8bit" else "torchao"
        return Term(int(per * trainable), f"8-bit AdamW ({who}): 2 states x 1 B + fp32 scale per "
                                          f"{BNB_8BIT_BLOCK} = {per:.4f} B x trainable params")
    if w.optimizer == "adamw-4bit":  # torchao OptimState4bit.zeros: codes n / 2 uint8, scale n / 128 fp32
        per = 2 * (0.5 + FP32_BYTES / TORCHAO_4BIT_BLOCK)
        return Term(int(per * trainable), f"4-bit AdamW (torchao): 2 states x (0.5 B + fp32 scale per "
                                          f"{TORCHAO_4BIT_BLOCK}) = {per:.4f} B x trainable params")
    if w.optimizer == "sgd":
        return Term(int(s * trainable), f"SGD with momentum: 1 buffer x {s:g} B x trainable params")
    if w.optimizer == "adafactor":
        total = 0
        for g in _trainable_shapes(spec, w):
            shape, count = g
            # torch.optim.Adafactor makes row_var / col_var (variance for vectors) in the gradient's dtype
            total += int(s * count * ((shape[0] + shape[1]) if len(shape) == 2 else shape[0]))
        return Term(total, f"Adafactor (no momentum): row + column second moments per matrix, full for vectors, "
                           f"x {s:g} B")
    return Term(0, "no optimizer")


def _trainable_shapes(spec: ModelSpec, w: Workload) -> list[tuple[tuple[int, ...], int]]:
    if w.method == "full":
        return [(g.shape, g.count) for g in spec.groups]
    out: list[tuple[tuple[int, ...], int]] = []
    for g in lora_groups(spec, w):
        out.append(((w.lora_rank, g.shape[1]), g.count))
        out.append(((g.shape[0], w.lora_rank), g.count))
    return out
