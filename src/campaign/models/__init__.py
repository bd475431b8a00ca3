"""What a model IS: ModelSpec from config.json, safetensors headers, transformers (meta device), the bundled catalog."""
from .catalog import catalog_names, find_in_catalog, published_counts
from .resolve import load_spec
from .spec import MLA, AttentionLayer, ModelSpec, MoE, ParamGroup

__all__ = ["MLA", "AttentionLayer", "ModelSpec", "MoE", "ParamGroup", "catalog_names", "find_in_catalog",
           "load_spec", "published_counts"]
