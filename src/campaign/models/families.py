"""config.json -> ModelSpec fields for the LayerNorm decoders (GPT-NeoX, GPT-BigCode, Falcon, Phi-2, StarCoder2),
OLMo 2, Gemma 3 and T5, tensor by tensor as transformers builds them (biases, norms, tied heads).

Defaults are the transformers config classes' defaults, so a config.json that leaves a field out builds the model
transformers builds; the tests compare every family with a real model on the meta device.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from ..errors import ConfigError
from .config import TypedConfig
from .spec import AttentionLayer, Block, EncoderDecoder, ParamGroup, linear_groups, norm_groups


def _divides(c: TypedConfig, hidden: int, heads: int, kv: int, what: str = "hidden_size") -> None:
    if heads % kv:
        raise ConfigError(f"{c.where}: {heads} attention heads is not a multiple of {kv} KV heads; check the config")
    if hidden % heads:
        raise ConfigError(f"{c.where}: {what} {hidden} is not divisible by {heads} attention heads; check the config")


def _full(layers: int) -> tuple[AttentionLayer, ...]:
    return tuple(AttentionLayer("full") for _ in range(layers))


def _head(V: int, h: int, tie: bool, *, bias: bool = False) -> list[ParamGroup]:
    """An untied LM head (and its bias, Phi-2's): a tied head adds nothing."""
    g = [] if tie else [ParamGroup("lm_head", "embedding", (V, h), 1, "lm_head", False)]
    if bias:
        g.append(ParamGroup("lm_head.bias", "bias", (V,), 1, "lm_head", False))
    return g


def _dropout(c: TypedConfig, *keys: str, default: float = 0.0) -> float:
    return max(c.probability(k, default) for k in keys)


def gpt_neox(c: TypedConfig) -> dict[str, Any]:
    """GPT-NeoX / Pythia: fused query_key_value, parallel residual (two LayerNorms on the same input), untied
    embed_out, partial rotary."""
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nh, inter = c.int("num_attention_heads"), c.int("intermediate_size")
    _divides(c, h, nh, nh)
    bias = bool(c.get("attention_bias", True))
    tie = bool(c.get("tie_word_embeddings", False))
    parallel = bool(c.get("use_parallel_residual", True))
    g = [ParamGroup("embed_in", "embedding", (V, h), 1, "embed_in", False)]
    g += norm_groups("input_layernorm", h, L, bias=True) + norm_groups("post_attention_layernorm", h, L, bias=True)
    g += linear_groups("attention.query_key_value", 3 * h, h, L, bias=bias)
    g += linear_groups("attention.dense", h, h, L, bias=bias)
    g += linear_groups("mlp.dense_h_to_4h", inter, h, L, bias=True)
    g += linear_groups("mlp.dense_4h_to_h", h, inter, L, bias=True)
    g += norm_groups("final_layer_norm", h, 1, bias=True, in_blocks=False) + _head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=nh, head_dim=h // nh,
                intermediate_size=inter, vocab_size=V, max_position=c.int("max_position_embeddings", 2048),
                tie_embeddings=tie, mlp="plain", groups=tuple(g), attention=_full(L),
                dropout=_dropout(c, "attention_dropout", "hidden_dropout"),
                activation=str(c.get("hidden_act", "gelu")),
                block=Block("layer", 2, 0, parallel=parallel, fused_qkv=True))


def gpt_bigcode(c: TypedConfig) -> dict[str, Any]:
    """GPT-BigCode / StarCoder: GPT-2's layout with Linear layers and multi-query attention (one K/V head)."""
    h, L, V = c.int("n_embd", c.get("hidden_size")), c.int("n_layer", c.get("num_hidden_layers")), c.int("vocab_size")
    nh = c.int("n_head", c.get("num_attention_heads"))
    _divides(c, h, nh, nh, "n_embd")
    hd = h // nh
    mq = bool(c.get("multi_query", True))
    kv = 1 if mq else nh
    inner = c.int("n_inner") if c.get("n_inner") is not None else 4 * h
    P = c.int("n_positions", c.get("max_position_embeddings", 1024))
    tie = bool(c.get("tie_word_embeddings", True))
    g = [ParamGroup("wte", "embedding", (V, h), 1, "wte", False), ParamGroup("wpe", "embedding", (P, h), 1, "wpe")]
    g += norm_groups("ln_1", h, L, bias=True) + norm_groups("ln_2", h, L, bias=True)
    g += linear_groups("attn.c_attn", h + 2 * kv * hd, h, L, bias=True)
    g += linear_groups("attn.c_proj", h, h, L, bias=True)
    g += linear_groups("mlp.c_fc", inner, h, L, bias=True) + linear_groups("mlp.c_proj", h, inner, L, bias=True)
    g += norm_groups("ln_f", h, 1, bias=True, in_blocks=False) + _head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=kv, head_dim=hd, intermediate_size=inner,
                vocab_size=V, max_position=P, tie_embeddings=tie, mlp="plain", groups=tuple(g), attention=_full(L),
                dropout=_dropout(c, "attn_pdrop", "resid_pdrop", default=0.1),
                activation=str(c.get("activation_function", "gelu_pytorch_tanh")), block=Block("layer", 2, 0),
                buffers=((f"causal mask buffer, n_positions^2 x 1 B (bool) = {P}^2", P * P),))


@cache
def falcon_shared_attention() -> bool:
    """Whether the installed transformers runs Falcon on the shared attention functions (5.25 on): K and V keep their
    own heads up to the cache, the 4-D mask is always passed (allow_is_causal_skip=False), so sdpa_attention_forward
    repeats K/V to every query head (repeat_kv: a stride-0 view for one KV head, a copy for several) and SDPA's fused
    kernels run. Before 5.25 FalconAttention called SDPA itself: multi-query K/V of one head with the mask (only the
    math kernel takes them), the new decoder architecture's K/V expanded to every head before the cache update.
    No transformers installed: the current code (True)."""
    import re
    from importlib.metadata import PackageNotFoundError, version  # only for a Falcon: not at start-up

    try:
        m = re.match(r"(\d+)\.(\d+)", version("transformers"))
    except PackageNotFoundError:
        return True
    return m is None or (int(m[1]), int(m[2])) >= (5, 25)


def falcon(c: TypedConfig) -> dict[str, Any]:
    """Falcon: fused query_key_value (multi-query for 7B, grouped for the new decoder architecture of 40B/180B),
    parallel attention with one or two LayerNorms, biases only when `bias`, tied head."""
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nh = c.int("num_attention_heads")
    new = bool(c.get("new_decoder_architecture", False))
    mq = bool(c.get("multi_query", True))
    kv_cfg = c.int("num_kv_heads", nh)
    kv = kv_cfg if (new or not mq) else 1
    _divides(c, h, nh, kv)
    hd = h // nh
    qkv_out = (2 * kv_cfg + nh) * hd if new else (h + 2 * hd if mq else 3 * h)
    bias = bool(c.get("bias", False))
    parallel = bool(c.get("parallel_attn", True))
    n_ln = c.get("num_ln_in_parallel_attn") or (2 if new else 1)
    inter = c.int("ffn_hidden_size", 4 * h)
    tie = bool(c.get("tie_word_embeddings", True))
    g = [ParamGroup("word_embeddings", "embedding", (V, h), 1, "word_embeddings", False)]
    g += linear_groups("self_attention.query_key_value", qkv_out, h, L, bias=bias)
    g += linear_groups("self_attention.dense", h, h, L, bias=bias)
    g += linear_groups("mlp.dense_h_to_4h", inter, h, L, bias=bias)
    g += linear_groups("mlp.dense_4h_to_h", h, inter, L, bias=bias)
    if not parallel:
        norms = (norm_groups("input_layernorm", h, L, bias=True)
                 + norm_groups("post_attention_layernorm", h, L, bias=True))
    elif n_ln == 2:
        norms = norm_groups("ln_attn", h, L, bias=True) + norm_groups("ln_mlp", h, L, bias=True)
    else:
        norms = norm_groups("input_layernorm", h, L, bias=True)
    g += norms + norm_groups("ln_f", h, 1, bias=True, in_blocks=False) + _head(V, h, tie)
    notes: tuple[str, ...] = \
        ("ALiBi positions: eager attention adds a b x heads x s x s bias",) if c.get("alibi") else ()
    shared = falcon_shared_attention()
    if new and kv < nh and not shared:  # FalconAttention (transformers < 5.25) expands K/V before the cache update
        notes += (f"transformers' Falcon caches K/V expanded to all {nh} heads (its {kv} KV heads); vLLM caches {kv}",)
        kv = nh
    # v stays a view of the fused projection, keeping all of it: multi-head Falcon; from 5.25 also when repeat_kv
    # makes no copy (one KV head: a stride-0 view; as many KV heads as heads: no repeat)
    fused = (not new and not mq) or (shared and kv in (1, nh))
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=kv, head_dim=hd, intermediate_size=inter,
                vocab_size=V, max_position=c.int("max_position_embeddings", 2048), tie_embeddings=tie, mlp="plain",
                groups=tuple(g), attention=_full(L), dropout=_dropout(c, "attention_dropout", "hidden_dropout"),
                activation=str(c.get("activation", "gelu")), notes=notes,
                block=Block("layer", len(norms) // 2, 0, parallel=parallel, fused_qkv=fused))


def phi(c: TypedConfig) -> dict[str, Any]:
    """Phi-1/1.5/2: q/k/v/dense with biases, one LayerNorm feeding attention and MLP in parallel, fc1/fc2, an
    untied LM head with a bias, partial rotary; q/k LayerNorms when qk_layernorm."""
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nh, inter = c.int("num_attention_heads"), c.int("intermediate_size")
    kv = c.int("num_key_value_heads", nh)
    _divides(c, h, nh, kv)
    hd = c.int("head_dim") if c.get("head_dim") is not None else h // nh
    tie = bool(c.get("tie_word_embeddings", False))
    g = [ParamGroup("embed_tokens", "embedding", (V, h), 1, "embed_tokens", False)]
    g += linear_groups("self_attn.q_proj", nh * hd, h, L, bias=True)
    g += linear_groups("self_attn.k_proj", kv * hd, h, L, bias=True)
    g += linear_groups("self_attn.v_proj", kv * hd, h, L, bias=True)
    g += linear_groups("self_attn.dense", h, nh * hd, L, bias=True)
    qk_norm = bool(c.get("qk_layernorm", False))
    if qk_norm:
        g += norm_groups("self_attn.q_layernorm", h // nh, L, bias=True)
        g += norm_groups("self_attn.k_layernorm", h // nh, L, bias=True)
    g += linear_groups("mlp.fc1", inter, h, L, bias=True) + linear_groups("mlp.fc2", h, inter, L, bias=True)
    g += norm_groups("input_layernorm", h, L, bias=True)
    g += norm_groups("final_layernorm", h, 1, bias=True, in_blocks=False)
    g += _head(V, h, tie, bias=True)
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=kv, head_dim=hd, intermediate_size=inter,
                vocab_size=V, max_position=c.int("max_position_embeddings", 2048), tie_embeddings=tie, mlp="plain",
                groups=tuple(g), attention=_full(L), dropout=_dropout(c, "attention_dropout", "resid_pdrop"),
                activation=str(c.get("hidden_act", "gelu_new")),
                block=Block("layer", 1, 0, parallel=True, qk_norm="head" if qk_norm else ""))


def starcoder2(c: TypedConfig, attention: tuple[AttentionLayer, ...]) -> dict[str, Any]:
    """StarCoder2: Llama's attention with biases (use_bias), LayerNorms, a c_fc/c_proj GELU MLP, tied head,
    sliding window."""
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nh, inter = c.int("num_attention_heads"), c.int("intermediate_size")
    kv = c.int("num_key_value_heads", 2)
    _divides(c, h, nh, kv)
    hd = h // nh
    bias = bool(c.get("use_bias", True))
    tie = bool(c.get("tie_word_embeddings", True))
    g = [ParamGroup("embed_tokens", "embedding", (V, h), 1, "embed_tokens", False)]
    g += linear_groups("self_attn.q_proj", nh * hd, h, L, bias=bias)
    g += linear_groups("self_attn.k_proj", kv * hd, h, L, bias=bias)
    g += linear_groups("self_attn.v_proj", kv * hd, h, L, bias=bias)
    g += linear_groups("self_attn.o_proj", h, nh * hd, L, bias=bias)
    g += linear_groups("mlp.c_fc", inter, h, L, bias=bias) + linear_groups("mlp.c_proj", h, inter, L, bias=bias)
    g += norm_groups("input_layernorm", h, L, bias=True) + norm_groups("post_attention_layernorm", h, L, bias=True)
    g += norm_groups("norm", h, 1, bias=True, in_blocks=False) + _head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=kv, head_dim=hd, intermediate_size=inter,
                vocab_size=V, max_position=c.int("max_position_embeddings", 4096), tie_embeddings=tie, mlp="plain",
                groups=tuple(g), attention=attention,
                dropout=_dropout(c, "attention_dropout", "residual_dropout"),
                activation=str(c.get("hidden_act", "gelu_pytorch_tanh")), block=Block("layer", 2, 0))


def t5(c: TypedConfig) -> dict[str, Any]:
    """T5 (v1.0 relu, v1.1 / Flan gated-gelu): shared embedding, an encoder of self-attention blocks and a
    decoder that adds cross-attention; relative position biases in each stack's first layer; RMS-style
    T5LayerNorm without bias. transformers 5 always ties lm_head to the shared embedding (T5Config sets
    tie_word_embeddings to True whatever the file says)."""
    h, V = c.int("d_model", c.get("hidden_size")), c.int("vocab_size")
    Le = c.int("num_layers", c.get("num_hidden_layers"))
    Ld = c.int("num_decoder_layers", Le)
    nh, hd, ff = c.int("num_heads", c.get("num_attention_heads")), c.int("d_kv", c.get("head_dim")), c.int("d_ff")
    buckets = c.int("relative_attention_num_buckets", 32)
    proj = str(c.get("feed_forward_proj", "relu"))
    gated = proj.split("-")[0] == "gated"
    act = "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1]
    inner = nh * hd
    g = [ParamGroup("shared", "embedding", (V, h), 1, "shared", False)]
    for stack, layers, cross in (("encoder", Le, False), ("decoder", Ld, True)):
        attn = ["SelfAttention", "EncDecAttention"] if cross else ["SelfAttention"]
        for a in attn:
            for proj_name in ("q", "k", "v"):
                g += linear_groups(f"{stack}.{a}.{proj_name}", inner, h, layers)
            g += linear_groups(f"{stack}.{a}.o", h, inner, layers)
        g.append(ParamGroup(f"{stack}.relative_attention_bias", "embedding", (buckets, nh), 1,
                            "relative_attention_bias", False))
        if gated:
            g += linear_groups(f"{stack}.DenseReluDense.wi_0", ff, h, layers)
            g += linear_groups(f"{stack}.DenseReluDense.wi_1", ff, h, layers)
        else:
            g += linear_groups(f"{stack}.DenseReluDense.wi", ff, h, layers)
        g += linear_groups(f"{stack}.DenseReluDense.wo", h, ff, layers)
        g += norm_groups(f"{stack}.layer_norm", h, layers * (len(attn) + 1))
        g += norm_groups(f"{stack}.final_layer_norm", h, 1, in_blocks=False)
    notes: tuple[str, ...] = ("encoder-decoder: the encoder reads seq_len tokens and the decoder as many (the decoder "
                              "length campaign assumes); activations in campaign.memory.encdec",)
    if c.get("tie_word_embeddings") is False:
        notes += ("transformers 5 ties T5's lm_head to the shared embedding (T5Config forces tie_word_embeddings)",)
    return dict(hidden_size=h, num_layers=Ld, num_heads=nh, num_kv_heads=nh, head_dim=hd, intermediate_size=ff,
                vocab_size=V, max_position=c.int("n_positions", 512), tie_embeddings=True,
                mlp="gated" if gated else "plain", groups=tuple(g), attention=_full(Ld),
                dropout=c.probability("dropout_rate", 0.1), activation=act, notes=notes,
                block=Block("rms", 2, 0), encdec=EncoderDecoder(Le, Ld))
