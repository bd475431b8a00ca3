"""A config.json read field by field: the checks made once where it is read (types, absurd sizes), and typed access
to its fields for the families' builders; every error names the field and the file."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError

# Layer counts past this are a broken config (the deepest published models have a few hundred layers); sizes
# past MAX_SIZE overflow the int64 shapes torch builds.
LAYER_FIELDS = {"num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "n_layers", "num_encoder_layers"}
MAX_LAYERS = 10_000
MAX_SIZE = 2**40
# What transformers accepts for torch_dtype / dtype: the name of a torch dtype (getattr(torch, name)).
TORCH_DTYPES = {"float32", "float", "float16", "half", "bfloat16", "float64", "double", "float8_e4m3fn",
                "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "uint8", "int16", "int32", "int64",
                "bool", "complex64", "complex128"}
_SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder", "decoder", "speech_config")


def validate_fields(cfg: Any, where: str, *, top: bool = True) -> None:
    """Reject fields of the wrong type, with one line naming the field, before anything reads them.

    Raises:
        ConfigError: the config is not an object, or a field has the wrong type or an absurd size.
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: config must be a JSON object, got {type(cfg).__name__}")
    mt = cfg.get("model_type")
    if top and mt is None:
        raise ConfigError(f"{where}: missing field 'model_type'; a complete config.json has it")
    if mt is not None and (not isinstance(mt, str) or not mt):
        raise ConfigError(f"{where}: field 'model_type' must be a non-empty string, got {mt!r}")
    for key in ("architectures", "layer_types"):
        value = cfg.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where}: field {key!r} must be a list of strings, got {value!r}")
    for key in ("torch_dtype", "dtype"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, dict) and value not in TORCH_DTYPES:
            raise ConfigError(f"{where}: field {key!r} is {value!r}, not a torch dtype; use e.g. bfloat16, "
                              "float16 or float32")
    for key in ("id2label", "label2id", "rope_scaling", "quantization_config"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{where}: field {key!r} must be an object, got {value!r}")
    for key in LAYER_FIELDS & cfg.keys():
        value = cfg[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{where}: field {key!r} must be an integer, got {value!r}")
        if isinstance(value, int) and not 0 <= value <= MAX_LAYERS:
            raise ConfigError(f"{where}: field {key!r} is {value:,}, outside 0..{MAX_LAYERS:,}; check the config")
    for key in _SUBCONFIGS:
        value = cfg.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: field {key!r} must be an object (a sub-config), got {value!r}")
        validate_fields(value, f"{where} ({key})", top=False)


class TypedConfig:
    """Typed access to a config dict; every error names the field and the file."""

    def __init__(self, cfg: dict[str, Any], where: str) -> None:
        self.cfg, self.where = cfg, where

    def get(self, key: str, default: Any = None) -> Any:
        value = self.cfg.get(key, default)
        return default if value is None else value

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.cfg.get(key)
        value = default if value is None else value
        if value is None:
            raise ConfigError(f"{self.where}: missing field {key!r}; a complete config.json has it")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.where}: field {key!r} must be an integer, got {value!r}")
        if value < minimum:
            raise ConfigError(f"{self.where}: field {key!r} must be >= {minimum}, got {value}")
        limit = MAX_LAYERS if key in LAYER_FIELDS else MAX_SIZE
        if value > limit:
            raise ConfigError(f"{self.where}: field {key!r} is {value:,}, more than {limit:,}; check the config")
        return value

    def probability(self, key: str, default: float = 0.0) -> float:
        """A dropout probability: a number in [0, 1] (transformers' config fields are floats; a string such as
        "0.1" is refused there too), `default` when absent or null."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{self.where}: field {key!r} must be a probability between 0 and 1, got {value!r}")
        return float(value)
