"""Adapters (peft) bound to their exact base model.

An adapter means nothing on another base: LoRA's low-rank updates were learned against those weights, and loaded on
a base of another revision they load without a word and give other outputs. So the adapter is saved with a binding:
the base model's name, its revision when it comes from the HF cache, and a hash of its weights (every base tensor's
name, dtype, shape and bytes, in name order: the same figure from the live model or from its safetensors files).
`load_adapter` refuses a base whose hash differs, in one line.

`planned_trainable` counts what the adapter's config should train from the targeted layers' shapes (r x (in + out)
per layer, plus the modules it saves in full), so a base tensor left trainable shows as a difference.
"""
from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_json, load_json, sha256_file
from ..validate import JsonObject

BINDING = "campaign_binding.json"
SCHEMA = "campaign.adapter_binding/1"
_REVISION = re.compile(r"/snapshots/([0-9a-f]{40})(/|$)")


def is_adapter_model(model: Any) -> bool:
    """A peft model (LoRA or another tuner) wrapping a base. Without peft imported there is none (and importing
    it to find out would cost a second)."""
    if "peft" not in sys.modules:
        return False
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def base_state(model: Any) -> dict[str, Any]:
    """The base model's own tensors (no adapter weights), under the base's parameter names."""
    adapter = set(_adapter_names(model))
    out = {}
    for name, t in model.get_base_model().state_dict().items():
        if any(name.startswith(a) or name == a for a in adapter):
            continue
        if ".modules_to_save." in name:
            continue
        # peft renames a wrapped layer's weight to '<module>.base_layer.weight' (a module saved in full keeps its
        # original as '<module>.original_module.weight'); the base calls it '<module>.weight'
        out[name.replace(".base_layer.", ".").replace(".original_module.", ".")] = t
    return out


def _adapter_names(model: Any) -> list[str]:
    names = []
    for name, module in model.get_base_model().named_modules():
        if name.rsplit(".", 1)[-1] in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_dropout",
                                       "lora_magnitude_vector"):
            names.append(name + ".")
    return names


def weights_sha256(tensors: dict[str, Any]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}\0{str(t.dtype).removeprefix('torch.')}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-dim: a counter
    return h.hexdigest()


def files_sha256(directory: str | Path) -> str:
    """The same hash from a model folder's safetensors files (all of them, read tensor by tensor). A model whose
    weights are tied stores the shared tensor once, so its files hash differently from its live state_dict."""
    from safetensors import safe_open

    tensors = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    if not tensors:
        raise InputError(f"{directory}: no safetensors files to hash")
    return weights_sha256(tensors)


@dataclass(frozen=True)
class Binding:
    """What an adapter was trained on."""

    base: str                    # the base's name or path (config._name_or_path), '' when unknown
    revision: str | None         # the HF cache snapshot's commit, when the base was loaded from the cache
    weights_sha256: str
    tensors: int

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "base": self.base, "revision": self.revision,
                "weights_sha256": self.weights_sha256, "tensors": self.tensors}


def binding_of(model: Any) -> Binding:
    base = model.get_base_model()
    name = str(getattr(getattr(base, "config", None), "_name_or_path", "") or "")
    match = _REVISION.search(name.replace("\\", "/"))
    state = base_state(model)
    return Binding(name, match.group(1) if match else None, weights_sha256(state), len(state))


def planned_trainable(model: Any) -> int:
    """Elements the adapter's config plans to train: r x (in + out) per adapted Linear (r x (vocab + dim) for an
    embedding), from the layers' shapes and the adapter's rank, plus the modules it saves in full (modules_to_save:
    a new classification head), at their own size."""
    total = 0
    for _, module in model.get_base_model().named_modules():
        if hasattr(module, "modules_to_save") and hasattr(module, "original_module"):
            total += sum(p.numel() for m in module.modules_to_save.values() for p in m.parameters())
            continue
        a, b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if a is None or b is None or not hasattr(a, "keys"):
            continue
        base = module.get_base_layer()
        for key in a.keys():
            r = module.r[key]
            if hasattr(base, "in_features"):
                total += r * (base.in_features + base.out_features)
        for key in getattr(module, "lora_embedding_A", {}).keys():
            total += module.r[key] * (base.num_embeddings + base.embedding_dim)
    return total


def save_adapter(model: Any, directory: str | Path) -> Path:
    """model.save_pretrained(directory) (adapter_model.safetensors, adapter_config.json) and the binding beside it,
    with the adapter files' hashes."""
    out = Path(directory)
    model.save_pretrained(str(out), safe_serialization=True)
    files = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != BINDING}
    atomic_write_json(out / BINDING, binding_of(model).to_dict() | {"files": files})
    return out


def read_binding(directory: str | Path) -> Binding:
    path = Path(directory) / BINDING
    if not path.is_file():
        raise InputError(f"{path}: no binding; this adapter was not saved by campaign (save_adapter), so its base "
                         "cannot be verified")
    b = JsonObject(load_json(path, "adapter binding"), str(path))
    revision = b.raw("revision", None)
    return Binding(b.str("base", ""), revision if isinstance(revision, str) else None, b.str("weights_sha256"),
                   b.count("tensors"))


def load_adapter(base_model: Any, directory: str | Path) -> Any:
    """The adapter in `directory` on `base_model` (a plain transformers model), after checking that the base is the
    one it was trained on.

    Raises:
        InputError: no binding, or a base whose weights differ from the bound base's (one line, both hashes).
    """
    from peft import PeftModel

    binding = read_binding(directory)
    state = {k: v for k, v in base_model.state_dict().items()}
    digest = weights_sha256(state)
    if digest != binding.weights_sha256:
        raise InputError(f"{directory}: the adapter was trained on another base ({binding.base or 'unnamed'}, weights "
                         f"sha256 {binding.weights_sha256[:12]}; this one: {digest[:12]}); load the exact base")
    return PeftModel.from_pretrained(base_model, str(directory))


__all__ = ["Binding", "binding_of", "files_sha256", "is_adapter_model", "load_adapter", "planned_trainable",
           "read_binding", "save_adapter", "weights_sha256"]
