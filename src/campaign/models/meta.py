"""transformers on the meta device (no memory, no weights, never remote code): the one config -> model class rule,
exact parameter counts, the inventory of any architecture transformers builds, and the towers of multimodal models.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import CampaignError, ConfigError, MissingDependencyError
from .spec import AttentionLayer, Block, ModelSpec, ParamGroup, Role

GENERIC_ACTIVATIONS = ("generic activation model: assumes pre-norm blocks of LayerNorm, q/k/v/o attention over "
                       "num_attention_heads and a two-matrix MLP of intermediate_size with one activation (GPT-2's "
                       "shape); tensors particular to this family are not modelled")
_HEADS = ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModelForImageTextToText")


def _libraries() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError("transformers", "torch") from None
    return torch, transformers


def model_class_and_config(cfg: dict[str, Any], *, transformers: Any = None,
                           source: str = "config.json") -> tuple[Any, Any]:
    """(the transformers class the config's `architectures` names, the transformers config): the one rule, shared by
    the meta-device count, trace and measure.

    Without `architectures`, the causal LM (else the seq2seq LM, else the image-text-to-text model) transformers maps
    the model_type to. A class transformers does not have is refused (remote code is never run).

    Raises:
        ConfigError: transformers does not know the model_type, refuses the config (its own validation: the strict
            dataclass checks of PreTrainedConfig, huggingface_hub's StrictDataclass*Error, which are not ValueErrors;
            validate_architecture, validate_layer_type; rope parameters), or has no such class; named `source`.
    """
    if transformers is None:
        transformers = _libraries()[1]
    cfg = {k: v for k, v in cfg.items() if k not in ("auto_map", "quantization_config")}
    model_type = cfg.pop("model_type", None)
    version = transformers.__version__
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    known = isinstance(model_type, str) and model_type in CONFIG_MAPPING
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except MemoryError:
        raise
    except Exception as e:  # any refusal of a config built from the user's fields is the config's
        reason = _reason(e)
        if known:
            raise ConfigError(f"{source}: transformers {version} refuses this {model_type!r} config ({reason}); fix "
                              "the field it names") from None
        raise ConfigError(f"{source}: transformers {version} cannot build model_type {model_type!r} ({reason}); a "
                          "newer transformers may know it (remote code is never run)") from None
    arch = (cfg.get("architectures") or [None])[0]
    if arch:
        cls = getattr(transformers, arch, None)
        if cls is None:
            raise ConfigError(f"transformers {version} has no class {arch!r} (the config's architectures); a newer "
                              "transformers may (remote code is never run)")
        return cls, config
    from transformers.models.auto import modeling_auto as auto

    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING",
                    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING"):
        try:
            return getattr(auto, mapping)[type(config)], config
        except (KeyError, AttributeError):
            continue
    raise ConfigError(f"the config names no architectures and {model_type!r} has no causal, seq2seq or "
                      f"image-text-to-text LM in transformers {version}; add \"architectures\" to config.json")


def _reason(e: BaseException) -> str:
    """An exception's message on one line (transformers' strict dataclass errors span several), at most 300
    characters, or its type's name."""
    text = " ".join(str(e).split())
    return (text[:297] + "...") if len(text) > 300 else text or type(e).__name__


@contextmanager
def building(cls: Any, source: str | None = None) -> Iterator[None]:
    """Errors from a model's constructor are the config's (one line, exit 2, naming `source` when given); running
    out of memory is not."""
    try:
        yield
    except CampaignError:
        raise
    except Exception as e:
        import torch
        import transformers

        if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
            raise
        where = f"{source}: " if source else ""
        raise ConfigError(f"{where}transformers {transformers.__version__} cannot build {cls.__name__} from this "
                          f"config ({type(e).__name__}: {_reason(e)})") from e


def build_meta_model(cfg: dict[str, Any], source: str = "config.json") -> Any:
    """Instantiate the architecture of a config on torch's meta device; never runs code from a model dir."""
    torch, transformers = _libraries()
    cls, config = model_class_and_config(cfg, transformers=transformers, source=source)
    with torch.device("meta"), building(cls, source):
        return cls(config)


def count_with_transformers(cfg: dict[str, Any], source: str = "config.json") -> int:
    """Parameters as transformers builds them (tied weights counted once)."""
    model = build_meta_model(cfg, source)
    return sum(p.numel() for p in model.parameters())


def meta_inventory(model: Any, *, skip: tuple[Any, ...] = (), prefix: str = "") -> tuple[ParamGroup, ...]:
    """The parameter inventory of a built model: tensors of one name pattern and shape (layer indices folded into
    `count`), tied tensors once, `skip` modules left out. Roles: embeddings (and an untied output head), Linear
    weights, biases, norms, anything else 'other'."""
    import torch

    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skipped = {id(p) for m in skip for p in m.parameters()}
    seen: set[int] = set()
    groups: dict[tuple[str, tuple[int, ...]], list[Any]] = {}
    for path, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen or id(p) in skipped:
                continue
            seen.add(id(p))
            pattern = re.sub(r"\.\d+(?=\.|$)", "", f"{path}.{pname}".lstrip("."))
            short = path.rsplit(".", 1)[-1] if path else pname
            blocks = bool(re.search(r"\.\d+(\.|$)", path))
            role: Role
            if module is out_emb or isinstance(module, torch.nn.Embedding):
                role = "embedding"
            elif pname == "bias":
                role = "bias"
            elif p.dim() == 1 and "norm" in type(module).__name__.lower():
                role = "norm"
            elif p.dim() == 2 and pname == "weight" and (isinstance(module, torch.nn.Linear)
                                                          or type(module).__name__ == "Conv1D"):
                role = "linear"
            else:
                role = "other"
            key = (prefix + pattern, tuple(p.shape))
            if key in groups:
                groups[key][1] += 1
            else:
                groups[key] = [ParamGroup(prefix + pattern, role, tuple(p.shape), 1, short, blocks), 1]
    return tuple(ParamGroup(g.name, g.role, g.shape, n, g.module, g.in_blocks) for g, n in groups.values())


def tower_groups(cfg: dict[str, Any], source: str) -> tuple[tuple[ParamGroup, ...], int]:
    """(the inventory of every tower but the language model, the whole model's count) for a multimodal config.

    Raises:
        ConfigError: transformers cannot build it, or no language model is found in what it builds.
        MissingDependencyError: without transformers, since the towers are counted on the meta device.
    """
    model = build_meta_model(cfg, source)
    language = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == "language_model"]
    if not language:
        raise ConfigError(f"{source}: transformers builds {type(model).__name__} with no language_model module, so "
                          "its towers cannot be told apart; remove text_config to count the text model alone")
    head = model.get_output_embeddings()
    skip = (language[0],) + ((head,) if head is not None else ())
    total = sum(p.numel() for p in model.parameters())
    return meta_inventory(model, skip=skip), total


def text_fields(cfg: dict[str, Any], text: dict[str, Any], source: str) -> dict[str, Any]:
    """A multimodal config's text model as transformers reads it: the file's text fields over the defaults its
    config class fills in (google/gemma-3-4b-it's text_config names 6 fields and leaves vocab_size, the heads and
    head_dim to Gemma3TextConfig); the file's own values win.

    Raises:
        ConfigError: transformers refuses the config.
    """
    _, config = model_class_and_config(cfg, source=source)
    inner = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else None
    if inner is None or inner is config:
        return text
    defaults = {k: v for k, v in inner.to_dict().items() if v is not None and not k.startswith("_")}
    return {**defaults, **text}


def generic_spec(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """A ModelSpec for an architecture with no family builder: the inventory transformers builds on the meta device,
    sizes and KV heads from its config's fields, the generic activation model (stated in the notes).

    Raises:
        ConfigError: transformers cannot build it.
    """
    torch, transformers = _libraries()
    cls, config = model_class_and_config(cfg, transformers=transformers, source=source)
    with torch.device("meta"), building(cls, source):
        model = cls(config)
    groups = meta_inventory(model)
    total = sum(p.numel() for p in model.parameters())
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config

    def field(*keys: str) -> int | None:  # the first positive whole number among the keys
        for key in keys:
            value = getattr(text, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    h = field("hidden_size", "d_model", "n_embd", "dim")
    L = field("num_hidden_layers", "num_layers", "n_layer", "decoder_layers")
    if h is None or L is None:
        raise ConfigError(f"{source}: transformers builds {cls.__name__}, but its config gives no hidden size or "
                          "layer count for the generic activation model")
    nh = field("num_attention_heads", "n_head", "num_heads", "decoder_attention_heads")
    notes = [f"{GENERIC_ACTIVATIONS}; parameters from transformers on the meta device ({cls.__name__})"]
    if nh is None:
        notes.append("no attention heads in the config: no KV cache counted")
    nkv = (field("num_key_value_heads", "num_kv_heads", "n_head_kv") or nh) if nh else 0
    hd = field("head_dim", "d_kv") or (h // nh if nh else 0)
    V = field("vocab_size") or 1
    layer_types = getattr(text, "layer_types", None)
    window = getattr(text, "sliding_window", None)
    attention = tuple(
        AttentionLayer("sliding", window) if t in ("sliding_attention", "chunked_attention") and isinstance(window, int)
        else AttentionLayer("full")
        for t in (layer_types if isinstance(layer_types, list) and len(layer_types) == L else ["full_attention"] * L))
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    tie = bool(getattr(config, "tie_word_embeddings", False))
    unmodelled = unmodelled_layers({**config.to_dict(), **cfg}, text.to_dict() if text is not config else {})
    if unmodelled:
        notes.append(f"memory and kv refuse it: it {unmodelled}; campaign trace runs its real step")
    return ModelSpec(
        name=name, model_type=cfg["model_type"], architecture=cls.__name__, source=source, hidden_size=h,
        num_layers=L, num_heads=nh or 1, num_kv_heads=nkv or 0, head_dim=hd or 0,
        intermediate_size=field("intermediate_size", "ffn_dim", "d_ff", "n_inner", "decoder_ffn_dim") or 4 * h,
        vocab_size=V, max_position=field("max_position_embeddings", "n_positions") or 2048, tie_embeddings=tie,
        mlp="plain", groups=groups, attention=attention, torch_dtype=dtype if isinstance(dtype, str) else "float32",
        checkpoint_quant=cfg.get("quantization_config"), params_exact=total, params_method="transformers",
        activation=str(getattr(text, "hidden_act", None) or getattr(text, "activation_function", None) or "gelu"),
        notes=tuple(notes), block=Block("layer", 2, 0), generic=GENERIC_ACTIVATIONS,
        unmodelled=unmodelled,
    )


# What a config says of layers that are not attention blocks: a state-space or recurrent state's size, or a list of
# layer kinds naming others (transformers' Mamba, Mamba2, Jamba, Bamba, Falcon-H1, Zamba, NemotronH, Qwen3-Next,
# MiniMax, RecurrentGemma, LFM2 configs)
STATE_FIELDS = ("state_size", "ssm_state_size", "mamba_d_state", "lru_width", "conv_L_cache", "linear_num_value_heads")
LAYER_KINDS = ("layer_types", "layers_block_type", "block_types")
ATTENTION_KINDS = {"full_attention", "sliding_attention", "chunked_attention", "attention", "global", "local",
                   "moe", "mlp"}
RECURRENT_TYPES = {"rwkv", "xlstm"}  # their configs name no state field


def unmodelled_layers(cfg: dict[str, Any], text: dict[str, Any]) -> str:
    """Why the generic activation model (attention blocks) cannot describe this model, or '' when it can."""
    for c in (cfg, text):
        state = next((k for k in STATE_FIELDS if c.get(k)), None)
        kinds = next(({str(v) for v in c[k]} - ATTENTION_KINDS for k in LAYER_KINDS if isinstance(c.get(k), list)
                      and {str(v) for v in c[k]} - ATTENTION_KINDS), set())
        if state or kinds or c.get("model_type") in RECURRENT_TYPES:
            what = f"its config's {state}" if state else (f"layers of kind {', '.join(sorted(kinds))}" if kinds
                                                           else f"model_type {c.get('model_type')}")
            return f"has state-space or recurrent layers ({what}), not only attention blocks"
    if cfg.get("is_encoder_decoder"):
        return "is an encoder-decoder other than T5 (decoder-only and encoder models and T5 are modelled)"
    return ""
