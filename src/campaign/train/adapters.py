"""Adapters (peft) bound to their exact base model.

An adapter means nothing on another base: LoRA's low-rank updates were learned against those weights, and loaded on
a base of another revision they load without a word and give other outputs. So the adapter is saved with a binding:
the base model's name (its repo id, or the folder it was loaded from), its revision when it comes from the HF cache
(the snapshot folder `models--org--name/snapshots/<commit>/` it was loaded from, or the config's `_commit_hash` where
transformers still sets it), and a hash of its weights (every base tensor's name, dtype, shape and bytes, in name
order: the same figure from the live model or from its safetensors files). What cannot be named (a base built in
memory has no name; a repo id loaded by name no recorded revision) is said in one warning when the adapter is saved.
`load_adapter` refuses a base whose hash differs, in one line. The same base loaded in another dtype (bf16 instead
of fp32) is the same base: the binding also holds a fingerprint of the values (per floating-point tensor, its norm and
two projections on fixed random signs) compared within what a cast to 16 bits changes, and a base that matches only
that one is accepted with a warning that says the dtypes.

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
from ..models.resolve import require_safetensors
from ..validate import JsonObject

BINDING = "campaign_binding.json"
SCHEMA = "campaign.adapter_binding/1"
# an HF cache snapshot: <cache>/models--<org>--<name>/snapshots/<commit>/ (a repo name holds no '--')
_SNAPSHOT = re.compile(r"(?:^|/)models--([^/]+)/snapshots/([^/]+)(?:/|$)")


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
    for name, _module in model.get_base_model().named_modules():
        if name.rsplit(".", 1)[-1] in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_dropout",
                                       "lora_magnitude_vector"):
            names.append(name + ".")
    return names


# A cast to bf16 (8 significant bits, round to nearest) moves each value by at most 2^-8 of it, uniformly: standard
# deviation 2^-8 / sqrt(3) of it; a projection on random signs sums independent errors, so it moves with a standard
# deviation of at most 2^-8 / sqrt(3) x the tensor's L2 norm. Six of those is the band within which two tensors are
# the same values in other dtypes (fp16 rounds finer; its subnormals, below 6e-5, add at most 2^-25 per value: the
# absolute term). A tensor changed by 5% of its norm (a revision) falls outside all 8 projections' bands but with
# probability ~4e-6; a change below the cast's own rounding cannot be told from it.
CAST_BAND = 6 * 2.0**-8 / 3 ** 0.5
CAST_FLOOR = 2.0**-24
PROJECTIONS = 8
_CHUNK = 1 << 22


def fingerprint(tensors: dict[str, Any]) -> dict[str, list[float]]:
    """Per floating-point tensor, in float64: [elements, L2 norm, PROJECTIONS projections on fixed random signs
    (seeded by the tensor's size, the same in every process)]; independent of the dtype the values are stored in."""
    import torch

    out = {}
    for name in sorted(tensors):
        t = tensors[name].detach()
        if not t.is_floating_point():
            continue
        flat = t.reshape(-1)
        g = torch.Generator().manual_seed(flat.numel())
        norm, proj = 0.0, torch.zeros(PROJECTIONS, dtype=torch.float64)
        for start in range(0, flat.numel(), _CHUNK):
            x = flat[start:start + _CHUNK].to("cpu", torch.float64)
            signs = torch.randint(0, 2, (PROJECTIONS, x.numel()), generator=g, dtype=torch.int8)
            norm += float((x * x).sum())
            proj += (signs.to(torch.float64) * 2 - 1) @ x
        out[name] = [float(flat.numel()), norm ** 0.5, *(float(v) for v in proj)]
    return out


def same_values(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    """Two fingerprints of the same values stored in other dtypes: the same tensors and sizes, and norms and
    projections within CAST_BAND of the norm (plus CAST_FLOOR per element for fp16's subnormals)."""
    if set(a) != set(b):
        return False
    for name, (n, norm, *proj) in a.items():
        m, other, *proj_b = b[name]
        band = CAST_BAND * max(norm, other) + CAST_FLOOR * n ** 0.5
        if n != m or abs(norm - other) > band or any(abs(x - y) > band for x, y in zip(proj, proj_b, strict=False)):
            return False
    return True


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

    base: str                    # the base's repo id or folder (base_identity), '' when built in memory
    revision: str | None         # the HF cache snapshot's commit (or config._commit_hash), when known
    weights_sha256: str
    tensors: int
    dtypes: tuple[str, ...] = ()         # the base's floating-point dtypes when bound
    values: dict[str, list[float]] | None = None   # fingerprint() of the base (None in older bindings)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "base": self.base, "revision": self.revision,
                "weights_sha256": self.weights_sha256, "tensors": self.tensors, "dtypes": list(self.dtypes),
                "values": self.values}


def _dtypes(state: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted({str(t.dtype).removeprefix("torch.") for t in state.values() if t.is_floating_point()}))


def base_identity(model: Any) -> tuple[str, str | None, list[str]]:
    """(name, revision, what cannot be named) of a plain transformers model, from its config: the name is the repo id
    (`org/name`, also when loaded from its HF cache snapshot folder) or the absolute path of the folder it was loaded
    from, '' when built in memory; the revision is the snapshot folder's commit, else config._commit_hash."""
    import os

    config = getattr(model, "config", None)
    raw = str(getattr(config, "_name_or_path", "") or "").strip()
    commit = getattr(config, "_commit_hash", None)
    revision = commit if isinstance(commit, str) and commit else None
    snapshot = _SNAPSHOT.search(raw.replace("\\", "/"))
    if not raw:
        return "", revision, ["the base has no name (built in memory: config._name_or_path is empty)"]
    if snapshot:
        return snapshot.group(1).replace("--", "/"), snapshot.group(2), []
    if os.path.isabs(raw) or Path(raw).is_dir():
        return str(Path(raw).resolve()), revision, []     # a folder names its own weights; it has no revision
    if revision is None:
        return raw, None, [f"the revision of {raw} is not recorded (transformers keeps none when loading by repo id)"]
    return raw, revision, []


def binding_of(model: Any) -> Binding:
    name, revision, _ = base_identity(model.get_base_model())
    state = base_state(model)
    return Binding(name, revision, weights_sha256(state), len(state), _dtypes(state), fingerprint(state))


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


def save_adapter(model: Any, directory: str | Path, *, warn: bool = True) -> Path:
    """model.save_pretrained(directory) (adapter_model.safetensors, adapter_config.json) and the binding beside it,
    with the adapter files' hashes. What of the base cannot be named (no name, no revision) is warned in one line
    (`warn=False`: not, for a save whose caller reports it itself); the weights' hash and fingerprint bind it anyway."""
    out = Path(directory)
    missing = base_identity(model.get_base_model())[2]
    if warn and missing:
        import warnings

        warnings.warn(f"{out}: {'; '.join(missing)}; the adapter's binding holds the base's weights hash and "
                      "fingerprint only: load the base with from_pretrained from a named repo or folder (an HF cache "
                      "snapshot folder also names its commit)", stacklevel=2)
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
    dtypes = b.raw("dtypes", [])
    values = b.raw("values", None)
    ok = isinstance(values, dict) and all(isinstance(v, list) and len(v) == 2 + PROJECTIONS and
                                          all(isinstance(x, (int, float)) for x in v) for v in values.values())
    return Binding(b.str("base", ""), revision if isinstance(revision, str) else None, b.str("weights_sha256"),
                   b.count("tensors"),
                   tuple(d for d in dtypes if isinstance(d, str)) if isinstance(dtypes, list) else (),
                   {k: [float(x) for x in v] for k, v in values.items()} if ok else None)


def load_adapter(base_model: Any, directory: str | Path) -> Any:
    """The adapter in `directory` on `base_model` (a plain transformers model), after checking that the base is the
    one it was trained on.

    The same base in another dtype (its values' fingerprint within a 16-bit cast of the bound one) loads, with a
    warning naming both dtypes: the adapter's outputs then differ by that rounding.

    Raises:
        InputError: no binding, or a base whose weights differ from the bound base's (one line, both hashes).
    """
    import warnings

    from peft import PeftModel

    binding = read_binding(directory)
    here = base_identity(base_model)[1]
    if binding.revision and here and here != binding.revision:
        raise InputError(f"{directory}: the adapter was trained on revision {binding.revision[:12]} of "
                         f"{binding.base or 'its base'}; this base is revision {here[:12]}; load that revision")
    state = {k: v for k, v in base_model.state_dict().items()}
    digest = weights_sha256(state)
    if digest != binding.weights_sha256 and binding.values is not None \
            and _dtypes(state) != binding.dtypes and same_values(fingerprint(state), binding.values):
        warnings.warn(f"{directory}: the base is the bound one ({binding.base or 'unnamed'}) in another dtype: "
                      f"{', '.join(_dtypes(state)) or 'none'} here, {', '.join(binding.dtypes) or 'unknown'} when the "
                      "adapter was trained; its outputs differ by that rounding", stacklevel=2)
    elif digest != binding.weights_sha256:
        raise InputError(f"{directory}: the adapter was trained on another base ({binding.base or 'unnamed'}, weights "
                         f"sha256 {binding.weights_sha256[:12]}; this one: {digest[:12]}); load the exact base")
    return PeftModel.from_pretrained(base_model, str(require_safetensors(directory, "adapter")))


__all__ = ["Binding", "base_identity", "binding_of", "files_sha256", "fingerprint", "is_adapter_model", "load_adapter",
           "planned_trainable", "read_binding", "same_values", "save_adapter", "weights_sha256"]
