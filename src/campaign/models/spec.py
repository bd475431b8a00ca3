"""ModelSpec: the architecture facts that memory depends on, with a parameter inventory.

The inventory (`groups`) lists every parameter tensor kind once with how many copies the model
holds, so parameter counts, LoRA sizes, quantized sizes and sharding all read one source.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from math import prod
from typing import Any, Literal

from ..errors import InputError

Role = Literal["linear", "bias", "embedding", "norm", "router", "other"]
AttentionKind = Literal["full", "sliding", "mla"]


@dataclass(frozen=True)
class ParamGroup:
    """One kind of parameter tensor: `count` copies of `shape` (torch layout: out, in for linears).

    `module` is the short module name peft matches (q_proj, down_proj, c_attn...); `in_blocks` marks
    tensors inside the repeated transformer blocks (what quantizers convert); `expert` marks routed
    MoE expert weights, of which only experts_per_token / num_experts are active per token.
    """

    name: str
    role: Role
    shape: tuple[int, ...]
    count: int = 1
    module: str = ""
    in_blocks: bool = False
    expert: bool = False

    @cached_property  # frozen: computed once (a card solve reads every group's at each probe)
    def numel(self) -> int:
        """Elements in one tensor."""
        return prod(self.shape)

    @cached_property
    def params(self) -> int:
        """Elements over all copies."""
        return self.numel * self.count


def linear_groups(name: str, out_f: int, in_f: int, count: int, *, bias: bool = False, module: str | None = None,
                  expert: bool = False, in_blocks: bool = True) -> list[ParamGroup]:
    """A Linear layer's weight (and bias) as inventory groups."""
    module = module or name.rsplit(".", 1)[-1]
    groups = [ParamGroup(name, "linear", (out_f, in_f), count, module, in_blocks, expert)]
    if bias:
        groups.append(ParamGroup(name + ".bias", "bias", (out_f,), count, module, in_blocks, expert))
    return groups


def norm_groups(name: str, size: int, count: int, *, bias: bool = False, in_blocks: bool = True) -> list[ParamGroup]:
    """A norm's weight (and bias) as inventory groups."""
    groups = [ParamGroup(name, "norm", (size,), count, name.rsplit(".", 1)[-1], in_blocks)]
    if bias:
        groups.append(ParamGroup(name + ".bias", "norm", (size,), count, name.rsplit(".", 1)[-1], in_blocks))
    return groups


@dataclass(frozen=True)
class AttentionLayer:
    """How one layer attends: full, sliding (with its window) or MLA (latent cache)."""

    kind: AttentionKind
    window: int | None = None


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention dims (DeepSeek-V2/V3): what is cached is the latent, not K and V."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MoE:
    """Mixture of experts: routed experts per MoE layer, active per token, shared experts."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    moe_layers: int
    shared_intermediate_size: int = 0


ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta"})  # bidirectional: no KV cache, nothing generated


@dataclass(frozen=True)
class Block:
    """How one transformer block is wired, for the activation model (what autograd keeps per token).

    norm: 'rms' (RMSNorm, computed in fp32) or 'layer' (LayerNorm with mean and rstd); norms: the norms whose
    output feeds a Linear (pre-norms); post_norms: norms on a sublayer's output (Gemma 2/3, OLMo 2);
    parallel: attention and MLP read the same input (GPT-NeoX, Falcon, Phi-2), so a shared input is kept once;
    fused_qkv: one projection makes q, k and v; q and k are rotated into new tensors while v stays a view of
    the projection, so its whole output is kept besides them (GPT-NeoX, multi-head Falcon);
    qk_norm: 'head' (per head, Qwen3/Gemma 3), 'full' (over the whole projection, OLMo 2) or ''.
    """

    norm: Literal["rms", "layer"] = "rms"
    norms: int = 2
    post_norms: int = 0
    parallel: bool = False
    fused_qkv: bool = False
    qk_norm: Literal["", "head", "full"] = ""


@dataclass(frozen=True)
class EncoderDecoder:
    """An encoder-decoder (T5): the encoder's layers and the decoder's, which add cross-attention over the
    encoder's output. `num_layers` of the spec counts the decoder layers (the KV cache's), `num_heads` and
    `head_dim` are shared by both stacks."""

    encoder_layers: int
    decoder_layers: int


@dataclass(frozen=True)
class ModelSpec:
    """What a model IS for memory purposes, read from its config.json.

    Sizes are element counts; `params` is exact when `params_method` is 'safetensors' or
    'transformers', and equal to the inventory sum when it is 'config'.
    """

    name: str
    model_type: str
    architecture: str
    source: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position: int
    tie_embeddings: bool
    mlp: Literal["gated", "plain"]
    groups: tuple[ParamGroup, ...]
    attention: tuple[AttentionLayer, ...]
    torch_dtype: str = "float32"
    mla: MLA | None = None
    moe: MoE | None = None
    dropout: float = 0.0
    activation: str = "silu"
    checkpoint_quant: dict[str, Any] | None = None
    params_exact: int | None = None
    params_method: str = "config"
    notes: tuple[str, ...] = field(default_factory=tuple)
    block: Block = field(default_factory=Block)
    encdec: EncoderDecoder | None = None
    generic: str = ""  # set when the family is not known: what the generic activation model assumes
    unmodelled: str = ""  # set when the formulas cannot hold (state-space layers, an encoder-decoder): why, for the
    #                       refusal of memory and kv (memory/estimate.py, kv.py); trace runs the real code
    buffers: tuple[tuple[str, int], ...] = ()  # (what, bytes) of large buffers the model registers (not parameters)

    def formulas_hold(self) -> None:
        """Refuse, in one line, an estimate from the formulas for a model whose layers they do not describe."""
        if self.unmodelled:
            given = self.source.removeprefix("hub:").removeprefix("catalog:")
            raise InputError(f"{self.name} ({self.model_type}) {self.unmodelled}: campaign's formulas do not model "
                             f"it; trace the real step instead: campaign trace {given} (add --attention eager where "
                             "it has no SDPA)")

    @property
    def encoder(self) -> bool:
        """A bidirectional encoder (BERT, RoBERTa): inference is one forward over the batch, with no KV cache."""
        return self.model_type in ENCODER_TYPES

    @property
    def params(self) -> int:
        """Total parameter count (exact when known, else from the inventory)."""
        return self.params_exact if self.params_exact is not None else self.inventory_params

    @cached_property
    def inventory_params(self) -> int:
        """Sum over the inventory: the count derived from config fields."""
        return sum(g.params for g in self.groups)

    @property
    def active_params(self) -> int:
        """Parameters used per token: MoE routed experts count k/E of their weight."""
        if self.moe is None:
            return self.inventory_params
        dense = sum(g.params for g in self.groups if not g.expert)
        routed = sum(g.params for g in self.groups if g.expert)
        return dense + routed * self.moe.experts_per_token // self.moe.num_experts

    @property
    def embedding_params(self) -> int:
        """Input embeddings and an untied LM head (what stays 16-bit under most quantizers)."""
        return sum(g.params for g in self.groups if g.role == "embedding")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the derived counts."""
        d = asdict(self)
        d["groups"] = [asdict(g) | {"params": g.params} for g in self.groups]
        d["attention"] = _compress_layers(self.attention)
        d.update(params=self.params, inventory_params=self.inventory_params,
                 active_params=self.active_params, embedding_params=self.embedding_params)
        return d


def _compress_layers(layers: tuple[AttentionLayer, ...]) -> list[dict[str, Any]]:
    """Run-length encode per-layer attention kinds for JSON."""
    out: list[dict[str, Any]] = []
    for layer in layers:
        if out and out[-1]["kind"] == layer.kind and out[-1]["window"] == layer.window:
            out[-1]["layers"] += 1
        else:
            out.append({"kind": layer.kind, "window": layer.window, "layers": 1})
    return out
