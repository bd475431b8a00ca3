"""KV cache sizing: per token and per layer from KV heads (GQA/MQA), MLA latents and sliding windows."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..models.resolve import model_spec
from ..models.spec import ModelSpec
from ..results import Record, Result
from .dtypes import ELEMENT_BYTES, WEIGHT_ONLY, parse_dtype
from .search import largest_satisfying

SCHEMA = "campaign.kv/1"


def _kv_element_bytes(dtype: str) -> float:
    return ELEMENT_BYTES[dtype]


def validate_tensor_parallel(spec: ModelSpec, tp: int) -> None:
    """Tensor parallelism splits attention heads: query heads must divide over the cards, and KV heads must
    divide over them or be replicated evenly (vLLM's rule)."""
    if tp <= 1:
        return
    kv = spec.num_kv_heads
    if spec.num_heads % tp or (spec.mla is None and kv % tp and tp % kv):
        raise InputError(f"{spec.num_heads} attention heads ({kv} KV heads) of {spec.name} do not split over "
                         f"{tp} cards; use a number of cards that divides the heads")


def layer_bytes_per_token(spec: ModelSpec, dtype: str, *, tp: int = 1) -> list[float]:
    """Cache bytes one token adds in each layer (before window caps), on one of `tp` tensor-parallel cards.

    Full/sliding attention: K and V, each num_kv_heads x head_dim. KV heads split over tp cards, and are
    replicated when there are fewer KV heads than cards (vLLM's rule). MLA caches the compressed latent
    kv_lora_rank + qk_rope_head_dim once per token per layer (as vLLM and SGLang serve DeepSeek), which
    cannot be split over cards.
    """
    b = _kv_element_bytes(dtype)
    if spec.mla is not None:
        return [(spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * b] * spec.num_layers
    kv_heads = max(1, -(-spec.num_kv_heads // tp))
    return [2 * kv_heads * spec.head_dim * b] * spec.num_layers


@dataclass(frozen=True)
class KVCard(Record):
    """The KV cache on one card beside everything else an inference holds: the full inference estimate's verdict,
    and the longest context (at the given sequences) and the most sequences (at the given context) that fit."""

    name: str
    memory_bytes: int
    weights_dtype: str
    required_bytes: int
    verdict: str  # fits | tight | does not fit
    fits: bool
    max_context: int
    max_sequences: int
    model_max_context: int  # the model's max_position_embeddings: the longest context it is made for


@dataclass(frozen=True)
class KVEstimate(Result):
    """A KV cache size with how it was reached; `bytes` is for all sequences on one card. `context` and
    `sequences` are the kv command's words for the workload's seq_len and batch. `card`: what fits a card beside
    the weights (plan_kv with a card), else None."""

    model: str
    dtype: str
    context: int
    sequences: int
    static: bool
    block_size: int
    bytes_per_token: float
    bytes: int
    cached_tokens_per_sequence: int
    layers_full: int
    layers_sliding: int
    window: int | None
    kind: str
    tp: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    cross_attention_bytes: int = 0  # encoder-decoders: K/V of the encoder output, per decoder layer (in `bytes`)
    schema: str = SCHEMA
    card: KVCard | None = None

    @property
    def checks(self) -> tuple[Check, ...]:
        """kv.fits with a card (the full inference estimate's verdict; 'tight' fails); none without one."""
        if self.card is None:
            return ()
        c = self.card
        seen = (f"{c.name}: {c.verdict} ({c.required_bytes / 2**30:,.2f} of {c.memory_bytes / 2**30:,.2f} GiB with "
                f"{c.weights_dtype} weights); at most {c.max_context:,} tokens x {self.sequences} or "
                f"{c.max_sequences:,} sequences x {self.context:,}")
        if c.fits:
            return (Check("kv.fits", "pass", seen),)
        return (Check("kv.fits", "fail", seen, "an inference that does not fit stops with an out-of-memory error",
                      "a shorter context, fewer sequences, an fp8 cache or a larger card"),)

    def fields_dict(self) -> dict[str, Any]:
        out = super().fields_dict()
        if self.card is None:  # by hand: the JSON of kv without --card has no card field
            del out["card"]
        return out


def estimate_kv(model: str | Path | ModelSpec, *, seq_len: int, batch: int = 1, dtype: str = "bf16",
                static: bool = False, max_seq_len: int | None = None, max_batch: int | None = None,
                block_size: int = 1, tp: int = 1, encoder_seq_len: int | None = None) -> KVEstimate:
    """KV cache bytes for `batch` concurrent sequences of `seq_len` tokens (the Workload's names; the kv command
    says --context and --sequences).

    Args:
        model: a catalog name, model dir, config.json or cached repo id, or a ModelSpec (as every memory call).
        seq_len: tokens per sequence (prompt + generated).
        static: preallocate max_seq_len x max_batch (a static cache or CUDA graphs) instead of growing.
        block_size: paged attention block in tokens (vLLM: 16); each sequence rounds up to whole blocks.
        tp: tensor-parallel cards the heads are split over.
        encoder_seq_len: an encoder-decoder's (T5) input tokens per sequence (default: seq_len); its decoder
            self-attention caches `seq_len` tokens, and cross-attention K/V of the encoder output are cached once
            per sequence in every decoder layer.
    Returns:
        KVEstimate; `bytes_per_token` is the full-attention rate (before window caps).
    """
    spec = model_spec(model)
    spec.formulas_hold()
    context, sequences, max_context, max_sequences = seq_len, batch, max_seq_len, max_batch
    given = (("context", context), ("sequences", sequences), ("block size", block_size), ("tp", tp),
             ("max context", max_context), ("max sequences", max_sequences))
    for label, value in given:
        if value is None and label.startswith("max"):
            continue   # not given: the static cache is sized by context and sequences
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{label} must be a positive integer, got {value!r}")
    if spec.encoder:
        raise InputError(f"{spec.name} is a bidirectional encoder ({spec.model_type}): it keeps no KV cache; size "
                         "its forward with campaign memory --infer")
    validate_tensor_parallel(spec, tp)
    dtype = parse_dtype(dtype, what="kv dtype")
    if dtype in WEIGHT_ONLY:
        raise InputError(f"kv dtype {dtype!r} is a weight format; KV caches use fp32, bf16, fp16, fp8 or int8")
    notes: list[str] = []
    tokens, seqs = context, sequences
    if static:
        tokens = context if max_context is None else max_context
        seqs = sequences if max_sequences is None else max_sequences
        if tokens < context or seqs < sequences:
            raise InputError(f"a static cache of {tokens} tokens x {seqs} sequences cannot hold "
                             f"{context} x {sequences}; raise --max-context/--max-sequences")
        notes.append(f"static cache: preallocated for {tokens} tokens x {seqs} sequences, whatever is used")
    per_layer = layer_bytes_per_token(spec, dtype, tp=tp)
    total = 0.0
    for rate, layer in zip(per_layer, spec.attention, strict=False):
        cached = min(tokens, layer.window) if layer.kind == "sliding" and layer.window else tokens
        if block_size > 1:
            cached = -(-cached // block_size) * block_size
        total += rate * cached * seqs
    cross = 0
    if spec.encdec is not None:  # computed at the first decoder step from the encoder output, then reused
        enc = encoder_seq_len or context
        enc = -(-enc // block_size) * block_size if block_size > 1 else enc
        cross = int(round(sum(per_layer) * enc * seqs))
        notes.append(f"encoder-decoder: decoder self-attention K/V ({sum(per_layer):,.0f} B per generated token) "
                     f"+ cross-attention K/V of the encoder output, computed once per sequence: {enc:,} encoder "
                     f"tokens x 2 x {spec.num_heads} heads x {spec.head_dim} (d_kv) x {_kv_element_bytes(dtype):g} B "
                     f"x {spec.num_layers} decoder layers = {cross:,} B for {seqs} sequence(s)")
        total += cross
    sliding = [a for a in spec.attention if a.kind == "sliding"]
    window = sliding[0].window if sliding else None
    if sliding and tokens > (window or 0):
        notes.append(f"{len(sliding)} of {spec.num_layers} layers use a sliding window of {window} tokens: "
                     "their cache stops growing there")
    if spec.mla is not None:
        notes.append("MLA: the compressed latent is cached (vLLM/SGLang); transformers' eager path caches "
                     "decompressed K and V, many times larger")
        kind = "mla"
    elif spec.num_kv_heads == 1:
        kind = "mqa"
    elif spec.num_kv_heads < spec.num_heads:
        kind = "gqa"
        notes.append(f"GQA: {spec.num_kv_heads} KV heads for {spec.num_heads} query heads, "
                     f"{spec.num_heads // spec.num_kv_heads}x smaller than full multi-head attention")
    else:
        kind = "mha"
    if tp > 1 and spec.mla is None and spec.num_kv_heads < tp:
        notes.append(f"{spec.num_kv_heads} KV heads over {tp} cards: heads are replicated, not split further")
    cached_tokens = (min(tokens, window) if sliding and window is not None and len(sliding) == spec.num_layers
                     else tokens)
    return KVEstimate(
        model=spec.name, dtype=dtype, context=context, sequences=sequences, static=static, block_size=block_size,
        bytes_per_token=sum(per_layer), bytes=int(round(total)), cached_tokens_per_sequence=cached_tokens,
        layers_full=spec.num_layers - len(sliding), layers_sliding=len(sliding), window=window, kind=kind,
        tp=tp, notes=tuple(notes), cross_attention_bytes=cross,
    )


def max_context_for(spec: ModelSpec, budget_bytes: int, *, batch: int = 1, dtype: str = "bf16",
                    block_size: int = 1, tp: int = 1, limit: int = 10_000_000) -> int:
    """Longest context per sequence whose cache fits `budget_bytes` (0 if not even one token)."""
    return largest_satisfying(lambda n: estimate_kv(spec, seq_len=n, batch=batch, dtype=dtype,
                                          block_size=block_size, tp=tp).bytes <= budget_bytes, limit)


def max_sequences_for(spec: ModelSpec, budget_bytes: int, *, seq_len: int, dtype: str = "bf16",
                      block_size: int = 1, tp: int = 1, limit: int = 1_000_000) -> int:
    """Most concurrent sequences of `seq_len` tokens whose cache fits `budget_bytes`."""
    return largest_satisfying(lambda n: estimate_kv(spec, seq_len=seq_len, batch=n, dtype=dtype,
                                          block_size=block_size, tp=tp).bytes <= budget_bytes, limit)
