"""config.json -> ModelSpec: the fields checked once where the config is read, then the family's builder.

Each builder lists the parameter tensors exactly as the Hugging Face transformers implementation
creates them (biases, norms, routers, tied heads), so the inventory sum equals the checkpoint's count.
An architecture with no builder gets its inventory from transformers on the meta device and a generic
activation model (models/meta.py); configs with other towers (vision, audio) count them the same way.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import ConfigError
from . import families
from .config import TypedConfig, validate_fields
from .meta import generic_spec, text_fields, tower_groups
from .spec import ENCODER_TYPES, MLA, AttentionLayer, Block, ModelSpec, MoE, ParamGroup, linear_groups, norm_groups

DECODER_TYPES = {
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2",
    "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "deepseek_v2",
}
LAYERNORM_TYPES = {"gpt_neox", "gpt_bigcode", "falcon", "phi", "starcoder2"}
SUPPORTED_TYPES = sorted(DECODER_TYPES | ENCODER_TYPES | LAYERNORM_TYPES | {"gpt2", "t5"})
# vision-language configs that keep their text model's fields at the top level (no text_config): the text family
FLAT_TEXT_TYPES = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2"}


def counted_on_meta_device(cfg: dict[str, Any]) -> bool:
    """Whether this config's spec needs transformers on the meta device (other towers, or no family builder), so
    listing it costs transformers' import and a model build; read from the config alone, nothing is built."""
    return cfg.get("text_config") is not None or cfg.get("model_type") not in SUPPORTED_TYPES


def spec_from_config(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json.

    Families with a builder are read field by field; any other architecture transformers knows is counted on
    the meta device with a generic activation model; a config with a text_config keeps its other towers.

    Raises:
        ConfigError: a missing or invalid field, heads that do not divide, or an architecture transformers
            cannot build either.
    """
    validate_fields(cfg, source)
    model_type = cfg["model_type"]
    text = cfg.get("text_config")
    if text is not None:
        return _multimodal(cfg, name=name, source=source)
    if model_type == "gemma3" or model_type in FLAT_TEXT_TYPES:  # a text model with or without text_config
        return _multimodal(cfg, name=name, source=source)
    fields = _family_fields(cfg, model_type, source)
    if fields is None:
        return generic_spec(cfg, name=name, source=source)
    return _spec(cfg, fields, model_type, name=name, source=source)


def _spec(cfg: dict[str, Any], fields: dict[str, Any], model_type: str, *, name: str, source: str) -> ModelSpec:
    architectures = cfg.get("architectures") or [model_type]
    quant = cfg.get("quantization_config")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    return ModelSpec(
        name=name, model_type=model_type, architecture=str(architectures[0]), source=source,
        torch_dtype=str(dtype) if isinstance(dtype, str) else "float32",
        checkpoint_quant=quant if isinstance(quant, dict) else None, **fields,
    )


def _family_fields(cfg: dict[str, Any], model_type: str, source: str) -> dict[str, Any] | None:
    """The spec fields of a family with a builder, or None when there is none."""
    c = TypedConfig(cfg, source)
    if model_type in DECODER_TYPES:
        return _decoder(c, model_type)
    if model_type == "gpt2":
        return _gpt2(c)
    if model_type in ENCODER_TYPES:
        return _encoder(c, model_type)
    if model_type == "starcoder2":
        return families.starcoder2(c, _attention_layers(c, model_type, c.int("num_hidden_layers")))
    if model_type == "t5":
        return families.t5(c)
    if model_type in LAYERNORM_TYPES:
        return getattr(families, model_type)(c)
    return None


def _multimodal(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """A config with a text model and other towers (LLaVA, Gemma 3, Qwen2-VL...): the text model from its family's
    builder (or the generic one), every other tower counted on the meta device (it needs transformers)."""
    text = dict(cfg.get("text_config") or {})
    if not text and cfg["model_type"] in FLAT_TEXT_TYPES:  # Qwen2-VL, Qwen2.5-VL: the text fields are the top level
        text = {k: v for k, v in cfg.items() if k != "vision_config"}
        text["model_type"] = FLAT_TEXT_TYPES[cfg["model_type"]]
    text_type = text.get("model_type") or ("gemma3_text" if cfg["model_type"] == "gemma3" else None)
    towers, total = tower_groups(cfg, source)
    if text_type and text_type in SUPPORTED_TYPES:  # the fields the file leaves to transformers' defaults
        text = text_fields(cfg, text, source) | {"model_type": text_type}
    fields = _family_fields(text, text_type, f"{source} (text_config)") if text_type else None
    if fields is None or not text_type:  # (fields is None whenever text_type is empty)
        spec = generic_spec(cfg, name=name, source=source)
        return spec
    fields["groups"] = fields["groups"] + towers
    tower_params = sum(g.params for g in towers)
    fields["notes"] = tuple(fields.get("notes", ())) + (
        f"other towers counted on the meta device: {tower_params:,} parameters "
        f"({', '.join(sorted({g.name.split('.', 1)[0] for g in towers}))}); their activations are not modelled "
        "(text-only batches); training counts their gradients and optimizer states as for a step with images, "
        "where a text-only step leaves them none (campaign trace shows that step)",)
    spec = _spec({**text, "architectures": cfg.get("architectures"), "quantization_config":
                  cfg.get("quantization_config"), "torch_dtype": cfg.get("torch_dtype") or text.get("torch_dtype")},
                 fields, text_type, name=name, source=source)
    if total != spec.inventory_params:
        spec = replace(spec, notes=spec.notes + (
            f"transformers builds {total:,} parameters, the inventory has {spec.inventory_params:,}",))
    return spec


def _heads(c: TypedConfig, hidden: int, heads_key: str = "num_attention_heads") -> tuple[int, int, int]:
    nh = c.int(heads_key)
    nkv = c.int("num_key_value_heads", nh)
    if nh % nkv:
        raise ConfigError(f"{c.where}: num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}; "
                          "check the config")
    if c.get("head_dim") is not None:
        hd = c.int("head_dim")
    else:
        if hidden % nh:
            raise ConfigError(f"{c.where}: hidden_size {hidden} is not divisible by num_attention_heads {nh}; "
                              "check the config or give head_dim")
        hd = hidden // nh
    return nh, nkv, hd


def _attention_layers(c: TypedConfig, model_type: str, layers: int) -> tuple[AttentionLayer, ...]:
    """Per-layer attention kind: from layer_types when present, else the family's rule."""
    window = c.get("sliding_window")
    types = c.get("layer_types")
    if model_type in ("deepseek_v3", "deepseek_v2"):
        return tuple(AttentionLayer("mla") for _ in range(layers))
    if types is None:
        if model_type == "gemma2":
            window = window or 4096
            types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
        elif model_type == "gemma3_text":  # Gemma3TextConfig: every sliding_window_pattern-th layer is global
            window = window or 4096
            every = c.int("sliding_window_pattern", 6)
            types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
        elif model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
            on = bool(c.get("use_sliding_window", False)) and window is not None
            first = c.get("max_window_layers", layers)
            types = ["sliding_attention" if on and i >= first else "full_attention" for i in range(layers)]
        elif model_type in ("mistral", "mixtral", "phi3", "starcoder2") and window is not None:
            types = ["sliding_attention"] * layers
        else:
            types = ["full_attention"] * layers
    if len(types) != layers:
        raise ConfigError(f"{c.where}: layer_types has {len(types)} entries but num_hidden_layers is {layers}")
    out = []
    for t in types:
        if t in ("sliding_attention", "chunked_attention"):
            if not isinstance(window, int) or window <= 0:
                raise ConfigError(f"{c.where}: a sliding layer needs a positive 'sliding_window', got {window!r}")
            out.append(AttentionLayer("sliding", window))
        else:
            out.append(AttentionLayer("full"))
    return tuple(out)


def _decoder(c: TypedConfig, mt: str) -> dict[str, Any]:
    """Llama-like decoders: Llama, Mistral, Qwen2/3, Gemma/Gemma 2/Gemma 3, Phi-3, OLMo 2, and the MoE and MLA
    variants."""
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    V = c.int("vocab_size")
    nh, nkv, hd = _heads(c, h)
    inter = c.int("intermediate_size")
    tie = bool(c.get("tie_word_embeddings", mt in ("gemma", "gemma2", "gemma3_text")))
    g: list[ParamGroup] = [ParamGroup("embed_tokens", "embedding", (V, h), 1, "embed_tokens", False)]
    mla: MLA | None = None

    # attention
    if mt in ("deepseek_v3", "deepseek_v2"):
        q_lora = c.get("q_lora_rank")
        mla = MLA(c.int("kv_lora_rank"), q_lora if q_lora else None, c.int("qk_nope_head_dim"),
                  c.int("qk_rope_head_dim"), c.int("v_head_dim"))
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        bias = bool(c.get("attention_bias", False))
        if mla.q_lora_rank:
            g += linear_groups("self_attn.q_a_proj", mla.q_lora_rank, h, L, bias=bias)
            g += norm_groups("self_attn.q_a_layernorm", mla.q_lora_rank, L)
            g += linear_groups("self_attn.q_b_proj", nh * qk, mla.q_lora_rank, L)
        else:
            g += linear_groups("self_attn.q_proj", nh * qk, h, L)
        g += linear_groups("self_attn.kv_a_proj_with_mqa", mla.kv_lora_rank + mla.qk_rope_head_dim, h, L, bias=bias)
        g += norm_groups("self_attn.kv_a_layernorm", mla.kv_lora_rank, L)
        g += linear_groups("self_attn.kv_b_proj", nh * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, L)
        g += linear_groups("self_attn.o_proj", h, nh * mla.v_head_dim, L, bias=bias)
    elif mt == "phi3":
        g += linear_groups("self_attn.qkv_proj", (nh + 2 * nkv) * hd, h, L)
        g += linear_groups("self_attn.o_proj", h, nh * hd, L)
    else:
        qkv_bias = mt in ("qwen2", "qwen2_moe") or bool(c.get("attention_bias", False))
        o_bias = mt not in ("qwen2", "qwen2_moe") and bool(c.get("attention_bias", False))
        g += linear_groups("self_attn.q_proj", nh * hd, h, L, bias=qkv_bias)
        g += linear_groups("self_attn.k_proj", nkv * hd, h, L, bias=qkv_bias)
        g += linear_groups("self_attn.v_proj", nkv * hd, h, L, bias=qkv_bias)
        g += linear_groups("self_attn.o_proj", h, nh * hd, L, bias=o_bias)
        if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
            g += norm_groups("self_attn.q_norm", hd, L) + norm_groups("self_attn.k_norm", hd, L)
        if mt == "olmo2":  # RMSNorm over the whole q and k projections
            g += norm_groups("self_attn.q_norm", nh * hd, L) + norm_groups("self_attn.k_norm", nkv * hd, L)

    # norms around attention and MLP: OLMo 2 normalizes each sublayer's output instead of its input
    if mt != "olmo2":
        g += norm_groups("input_layernorm", h, L)
    g += norm_groups("post_attention_layernorm", h, L)
    if mt in ("gemma2", "gemma3_text"):
        g += norm_groups("pre_feedforward_layernorm", h, L)
    if mt in ("gemma2", "gemma3_text", "olmo2"):
        g += norm_groups("post_feedforward_layernorm", h, L)
    block = Block("rms", 0 if mt == "olmo2" else 2, {"gemma2": 2, "gemma3_text": 2, "olmo2": 2}.get(mt, 0),
                  qk_norm="full" if mt == "olmo2" else "head" if mt in ("qwen3", "qwen3_moe", "gemma3_text") else "")

    # MLP: dense layers and MoE layers
    moe: MoE | None = None
    mlp_bias = bool(c.get("mlp_bias", False))
    moe_layers = 0
    if mt == "mixtral":
        E, k = c.int("num_local_experts"), c.int("num_experts_per_tok")
        moe_layers, dense_layers = L, 0
        g += linear_groups("block_sparse_moe.gate", E, h, L, module="gate")
        g += linear_groups("experts.w1", inter, h, L * E, expert=True)
        g += linear_groups("experts.w3", inter, h, L * E, expert=True)
        g += linear_groups("experts.w2", h, inter, L * E, expert=True)
        moe = MoE(E, k, inter, moe_layers)
    elif mt in ("qwen2_moe", "qwen3_moe", "deepseek_v3", "deepseek_v2"):
        if mt.startswith("deepseek"):
            E, k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
            first_dense = c.int("first_k_dense_replace", 0, minimum=0)
            freq = c.int("moe_layer_freq", 1)
            is_moe = [i >= first_dense and i % freq == 0 for i in range(L)]
            shared = c.int("moe_intermediate_size") * c.int("n_shared_experts", 0, minimum=0)
        else:
            E, k = c.int("num_experts"), c.int("num_experts_per_tok")
            step = c.int("decoder_sparse_step", 1)
            only = set(c.get("mlp_only_layers", []) or [])
            is_moe = [(i not in only) and (i + 1) % step == 0 for i in range(L)]
            shared = c.int("shared_expert_intermediate_size", 0, minimum=0) if mt == "qwen2_moe" else 0
        moe_inter = c.int("moe_intermediate_size")
        moe_layers = sum(is_moe)
        dense_layers = L - moe_layers
        if moe_layers:
            g += linear_groups("mlp.gate", E, h, moe_layers, module="gate")
            experts = (("gate_proj", (moe_inter, h)), ("up_proj", (moe_inter, h)), ("down_proj", (h, moe_inter)))
            for proj, (o, i) in experts:
                g += linear_groups(f"mlp.experts.{proj}", o, i, moe_layers * E, expert=True)
            if shared:
                for proj, (o, i) in (("gate_proj", (shared, h)), ("up_proj", (shared, h)), ("down_proj", (h, shared))):
                    g += linear_groups(f"mlp.shared_expert.{proj}", o, i, moe_layers)
            if mt == "qwen2_moe":
                g += linear_groups("mlp.shared_expert_gate", 1, h, moe_layers, module="shared_expert_gate")
        moe = MoE(E, k, moe_inter, moe_layers, shared)
    else:
        dense_layers = L
    if moe is not None and moe.experts_per_token > moe.num_experts:
        raise ConfigError(f"{c.where}: {moe.experts_per_token} experts per token of {moe.num_experts} experts: a token "
                          "cannot use more experts than there are; check num_experts_per_tok")
    if dense_layers:
        if mt == "phi3":
            g += linear_groups("mlp.gate_up_proj", 2 * inter, h, dense_layers)
            g += linear_groups("mlp.down_proj", h, inter, dense_layers)
        else:
            g += linear_groups("mlp.gate_proj", inter, h, dense_layers, bias=mlp_bias)
            g += linear_groups("mlp.up_proj", inter, h, dense_layers, bias=mlp_bias)
            g += linear_groups("mlp.down_proj", h, inter, dense_layers, bias=mlp_bias)

    g += norm_groups("norm", h, 1, in_blocks=False)
    if not tie:
        g.append(ParamGroup("lm_head", "embedding", (V, h), 1, "lm_head", False))
    notes = []
    if mt.startswith("deepseek") and c.get("num_nextn_predict_layers"):
        notes.append(f"{c.get('num_nextn_predict_layers')} multi-token-prediction layer(s) in the checkpoint are "
                     "not counted: transformers does not build them")
    return dict(
        hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=nkv if mla is None else nh,
        head_dim=hd if mla is None else mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        intermediate_size=inter, vocab_size=V, max_position=c.int("max_position_embeddings", 2048),
        tie_embeddings=tie, mlp="gated", groups=tuple(g), attention=_attention_layers(c, mt, L),
        mla=mla, moe=moe, dropout=c.probability("attention_dropout"), notes=tuple(notes),
        activation=str(c.get("hidden_activation") or c.get("hidden_act", "silu")), block=block,
    )


def _gpt2(c: TypedConfig) -> dict[str, Any]:
    """GPT-2: Conv1D layers (same element counts as Linear), learned positions, LayerNorm with bias, the head tied
    unless the config says tie_word_embeddings false (GPT2LMHeadModel then makes its own lm_head, no bias)."""
    h, L, V = c.int("n_embd"), c.int("n_layer"), c.int("vocab_size")
    nh = c.int("n_head")
    if h % nh:
        raise ConfigError(f"{c.where}: n_embd {h} is not divisible by n_head {nh}; check the config")
    inner = c.get("n_inner") or 4 * h
    P = c.int("n_positions", 1024)
    g = [ParamGroup("wte", "embedding", (V, h), 1, "wte"), ParamGroup("wpe", "embedding", (P, h), 1, "wpe")]
    g += norm_groups("ln_1", h, L, bias=True)
    g += linear_groups("attn.c_attn", 3 * h, h, L, bias=True) + linear_groups("attn.c_proj", h, h, L, bias=True)
    g += norm_groups("ln_2", h, L, bias=True)
    g += linear_groups("mlp.c_fc", inner, h, L, bias=True) + linear_groups("mlp.c_proj", h, inner, L, bias=True)
    g += norm_groups("ln_f", h, 1, bias=True, in_blocks=False)
    tie = bool(c.get("tie_word_embeddings", True))
    if not tie:
        g.append(ParamGroup("lm_head", "embedding", (V, h), 1, "lm_head", False))
    drop = max(c.probability("attn_pdrop", 0.1), c.probability("resid_pdrop", 0.1))
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=nh, head_dim=h // nh,
                intermediate_size=inner, vocab_size=V, max_position=P, tie_embeddings=tie, mlp="plain",
                groups=tuple(g), attention=tuple(AttentionLayer("full") for _ in range(L)), dropout=drop,
                activation=str(c.get("activation_function", "gelu_new")), block=Block("layer", 2, 0))


def _encoder(c: TypedConfig, mt: str) -> dict[str, Any]:
    """BERT / RoBERTa: the encoder plus the head named in `architectures[0]` (pooler, MLM, NSP, classifier)."""
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nh = c.int("num_attention_heads")
    if h % nh:
        raise ConfigError(f"{c.where}: hidden_size {h} is not divisible by num_attention_heads {nh}; check the config")
    inter, P = c.int("intermediate_size"), c.int("max_position_embeddings", 512)
    T = c.int("type_vocab_size", 2, minimum=0)
    arch = (c.get("architectures") or [""])[0]
    labels = len(c.get("id2label", {})) or 2
    g = [ParamGroup("word_embeddings", "embedding", (V, h), 1, "word_embeddings"),
         ParamGroup("position_embeddings", "embedding", (P, h), 1, "position_embeddings")]
    if T:
        g.append(ParamGroup("token_type_embeddings", "embedding", (T, h), 1, "token_type_embeddings"))
    g += norm_groups("embeddings.LayerNorm", h, 1, bias=True, in_blocks=False)
    for proj in ("query", "key", "value"):
        g += linear_groups(f"attention.self.{proj}", h, h, L, bias=True)
    g += linear_groups("attention.output.dense", h, h, L, bias=True, module="dense")
    g += norm_groups("attention.output.LayerNorm", h, L, bias=True)
    g += linear_groups("intermediate.dense", inter, h, L, bias=True, module="dense")
    g += linear_groups("output.dense", h, inter, L, bias=True, module="dense")
    g += norm_groups("output.LayerNorm", h, L, bias=True)
    roberta = mt != "bert"
    has_pooler = arch.endswith(("Model", "ForPreTraining", "ForNextSentencePrediction", "ForMultipleChoice")) or (
        not roberta and arch.endswith("ForSequenceClassification"))
    head = lambda name, o, i: linear_groups(name, o, i, 1, bias=True, in_blocks=False)  # noqa: E731
    if has_pooler:
        g += head("pooler.dense", h, h)
    if arch.endswith(("ForMaskedLM", "ForPreTraining", "ForCausalLM")):
        g += head("lm_head.dense", h, h) + norm_groups("lm_head.layer_norm", h, 1, bias=True, in_blocks=False)
        g.append(ParamGroup("lm_head.decoder.bias", "bias", (V,), 1, "decoder"))  # decoder weight is tied
    if arch.endswith("ForPreTraining"):
        g += head("cls.seq_relationship", 2, h)
    if arch.endswith("ForSequenceClassification"):
        g += (head("classifier.dense", h, h) + head("classifier.out_proj", labels, h)) if roberta else head(
            "classifier", labels, h)
    if arch.endswith("ForTokenClassification"):
        g += head("classifier", labels, h)
    drop = max(c.probability("attention_probs_dropout_prob", 0.1), c.probability("hidden_dropout_prob", 0.1))
    return dict(hidden_size=h, num_layers=L, num_heads=nh, num_kv_heads=nh, head_dim=h // nh,
                intermediate_size=inter, vocab_size=V, max_position=P, tie_embeddings=True, mlp="plain",
                groups=tuple(g), attention=tuple(AttentionLayer("full") for _ in range(L)), dropout=drop,
                activation=str(c.get("hidden_act", "gelu")), block=Block("layer", 2, 0))
