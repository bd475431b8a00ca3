"""Find a model by what the user typed: a local dir or config.json, a repo id in the local HF cache, or a catalog
name."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from ..io import load_json
from ..validate import kind_of
from .architectures import spec_from_config
from .catalog import find_in_catalog, load_catalog_config, unknown_model
from .meta import count_with_transformers
from .safetensors_header import tensor_stats
from .spec import ModelSpec

PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # weights torch.load would unpickle


def require_safetensors(folder: str | os.PathLike[str], what: str = "model folder") -> Path:
    """`folder` when its weights are safetensors; a folder whose weights are only pickles (pytorch_model.bin,
    adapter_model.bin, *.pt) is refused: campaign never unpickles a file from a model folder, not even with
    weights_only (the project's promise: no code from a model folder, no pickle).

    Raises:
        InputError: pickled weights and no safetensors, naming the file and the conversion.
    """
    p = Path(folder)
    if p.is_dir() and not any(p.glob("*.safetensors")):
        pickled = sorted(f.name for pattern in PICKLED for f in p.glob(pattern))
        if pickled:
            raise InputError(f"{p}: the {what}'s weights are pickles ({pickled[0]}), which campaign never loads; "
                             "convert them to safetensors where you trust the file (model.save_pretrained(dir, "
                             "safe_serialization=True)) and give that folder")
    return p


def read_config(path: Path) -> dict[str, Any]:
    """Parse a config.json with one-line errors for an unreadable file, non-UTF-8, malformed JSON or a non-object."""
    data = load_json(path, "a model's config.json", ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config must be a JSON object, got a JSON {kind_of(data)}")
    return data


def hf_cache_dirs() -> list[Path]:
    """Where the local Hugging Face hub cache may be ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)."""
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        dirs.append(Path(os.environ["HUGGINGFACE_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def find_in_hf_cache(repo_id: str) -> Path | None:
    """The snapshot dir of repo_id in the local HF cache (refs/main when present, else the newest), or None."""
    if "/" not in repo_id:
        return None
    folder_name = "models--" + repo_id.replace("/", "--")
    for cache in hf_cache_dirs():
        repo = cache / folder_name
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            commit = ref.read_bytes().decode("utf-8", "replace").strip()
            # refs/main holds a commit hash; anything else (a damaged or hand-edited ref) falls back to the newest
            if commit.isalnum() and (snapshots / commit / "config.json").is_file():
                return snapshots / commit
        candidates = [s for s in snapshots.iterdir() if (s / "config.json").is_file()]
        if candidates:
            return max(candidates, key=lambda s: s.stat().st_mtime)
    return None


def load_spec(model: str, *, exact: bool = False) -> ModelSpec:
    """Resolve a model reference to a ModelSpec, fully offline.

    Args:
        model: a local model dir, a config.json path, an HF repo id in the local cache, or a catalog name.
        exact: also count parameters with transformers on the meta device (needs the torch extra).
    Raises:
        ConfigError, UnknownNameError: a bad config or a name that matches nothing (with suggestions).
    """
    cfg, source, name, directory = resolve_config(model)
    spec = spec_from_config(cfg, name=name, source=source)
    if directory is not None:
        stats = tensor_stats(directory)
        if stats is not None and stats.params is not None:
            spec = _with_exact(spec, stats.params, "safetensors")
    if exact:
        spec = _with_exact(spec, count_with_transformers(cfg, source), "transformers")
    return spec


def model_spec(model: str | Path | ModelSpec) -> ModelSpec:
    """The ModelSpec of what every memory call takes as `model`: a catalog name, a model dir, a config.json, a
    cached repo id (see load_spec), or a ModelSpec already read."""
    if isinstance(model, ModelSpec):
        return model
    return load_spec(str(model))


def resolve_config(model: str) -> tuple[dict[str, Any], str, str, Path | None]:
    """(config dict, source, display name, model dir or None) for what the user typed; see load_spec."""
    if not model or not model.strip():
        raise InputError("no model given; name a catalog model (campaign models), a model dir or a config.json")
    path = Path(model).expanduser()
    directory: Path | None = None
    if path.exists():
        if path.is_dir():
            directory = path
            if not (path / "config.json").is_file():
                raise ConfigError(f"{path}: no config.json in this directory; point at a model dir or a config.json")
            cfg, source = read_config(path / "config.json"), str(path / "config.json")
        else:
            cfg, source = read_config(path), str(path)
            directory = path.parent if path.name == "config.json" else None
        name = str(cfg.get("_name_or_path") or (directory.name if directory else path.stem))
    elif (snap := find_in_hf_cache(model)) is not None:
        directory, cfg, source, name = snap, read_config(snap / "config.json"), f"hf-cache:{snap}", model
    elif (repo_id := find_in_catalog(model)) is not None:
        cfg, source, name = load_catalog_config(repo_id), f"catalog:{repo_id}", repo_id
    else:
        raise unknown_model(model)
    return cfg, source, name, directory


def _with_exact(spec: ModelSpec, count: int, method: str) -> ModelSpec:
    """Attach an exact count; note when it differs from the architecture's inventory."""
    notes = spec.notes
    if count != spec.inventory_params:
        notes += (f"{method} counts {count:,} parameters, the {spec.architecture} layout {spec.inventory_params:,} "
                  f"({count - spec.inventory_params:+,}); memory uses the layout, which is what gets loaded",)
    return replace(spec, params_exact=count, params_method=method, notes=notes)
