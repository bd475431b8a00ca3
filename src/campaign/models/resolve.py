"""Find a model by what the user typed: a local dir or config.json, a repo id in campaign's Hub cache or the local
HF cache, a catalog name, or (online) a repo id read from the Hub without its weights (hub.py)."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError, MissingDependencyError
from ..io import load_json
from ..validate import kind_of
from . import hub
from .architectures import SUPPORTED_TYPES, spec_from_config
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


def load_spec(model: str, *, exact: bool = False, revision: str | None = None) -> ModelSpec:
    """Resolve a model reference to a ModelSpec; offline unless a repo id is found in no local cache.

    Args:
        model: a local model dir, a config.json path, a catalog name, or an HF repo id ('ORG/NAME', or
            'ORG/NAME@REVISION'): from campaign's Hub cache or the local HF cache, else read from the Hub
            (config.json and safetensors headers; hub.py).
        exact: also count parameters with transformers on the meta device (needs the torch extra).
        revision: the Hub revision (branch, tag or commit) of a repo id; default main.
    Raises:
        ConfigError, UnknownNameError: a bad config or a name that matches nothing (with suggestions).
        InputError: the Hub could not be read (offline, a missing, gated or private repo); one line.
    """
    cfg, source, name, directory = resolve_config(model, revision=revision)
    try:
        spec = spec_from_config(cfg, name=name, source=source)
    except (ConfigError, MissingDependencyError) as e:
        raise remote_code_error(cfg, source) or e from None
    if directory is not None:
        stats = hub.header_stats(directory) if source.startswith("hub:") else tensor_stats(directory)
        if stats is not None and stats.params is not None:
            spec = _with_exact(spec, stats.params, "safetensors")
    if exact:
        spec = _with_exact(spec, count_with_transformers(cfg, source), "transformers")
    return spec


def remote_code_error(cfg: dict[str, Any], source: str) -> ConfigError | None:
    """For a config that could not be read, names its own code (auto_map, which campaign never runs) and has a
    model_type neither campaign's families nor transformers (when installed) build: the one line that says so, what
    is missing and what to do instead; None for any other config (its own error stands)."""
    auto_map = cfg.get("auto_map")
    model_type = cfg.get("model_type")
    if not auto_map or model_type in SUPPORTED_TYPES:
        return None
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        pass
    else:
        if model_type in CONFIG_MAPPING:
            return None
    first = next(iter(auto_map.values()), "") if isinstance(auto_map, dict) else auto_map
    code = first[0] if isinstance(first, list) and first else first
    return ConfigError(f"{source}: this config asks for remote code ({str(code)[:80]}, auto_map), which "
                       f"campaign never runs, and model_type {str(model_type)[:40]!r} is not a family campaign can "
                       "build without it; give the config of the known family its architecture follows "
                       "(campaign models lists them)")


def model_spec(model: str | Path | ModelSpec) -> ModelSpec:
    """The ModelSpec of what every memory call takes as `model`: a catalog name, a model dir, a config.json, a
    repo id (see load_spec), or a ModelSpec already read."""
    if isinstance(model, ModelSpec):
        return model
    return load_spec(str(model))


def resolve_config(model: str, *, revision: str | None = None) -> tuple[dict[str, Any], str, str, Path | None]:
    """(config dict, source, display name, model dir or None) for what the user typed; see load_spec. A repo id
    read from the Hub has the source 'hub:ORG/NAME@COMMIT' and, as its dir, its snapshot in campaign's Hub cache
    (config.json and the safetensors headers, no weights)."""
    if not model or not model.strip():
        raise InputError("no model given; name a catalog model (campaign models), a model dir or a config.json")
    if revision is not None:
        hub.check_revision(revision)
    path = Path(model).expanduser()
    directory: Path | None = None
    if path.exists():
        if revision is not None:
            raise InputError(f"--revision {revision}: {model} is a local path, which has no revisions; give a Hub "
                             "repo id (ORG/NAME) or leave out --revision")
        if path.is_dir():
            directory = path
            if not (path / "config.json").is_file():
                raise ConfigError(f"{path}: no config.json in this directory; point at a model dir or a config.json")
            cfg, source = read_config(path / "config.json"), str(path / "config.json")
        else:
            cfg, source = read_config(path), str(path)
            directory = path.parent if path.name == "config.json" else None
        name = str(cfg.get("_name_or_path") or (directory.name if directory else path.stem))
        return cfg, source, name, directory
    if model.startswith("hub:"):  # a ModelSpec's source, read again (memory/build.py): the commit, cached
        snapshot = hub.snapshot_of_source(model)
        if snapshot is None:
            raise InputError(f"{model}: not in campaign's Hub cache ({hub.cache_root()}); give the repo id again")
        return _from_snapshot(model[4:].partition("@")[0], snapshot)
    repo_id, at_revision = hub.split_revision(model)
    if at_revision is not None and revision is not None and at_revision != revision:
        raise InputError(f"{model!r} names revision {at_revision!r} and --revision says {revision!r}; give one")
    revision = revision or at_revision
    if revision is not None and not hub.is_repo_id(repo_id):
        raise InputError(f"--revision {revision}: {repo_id!r} is not a Hub repo id (ORG/NAME); give one, or leave "
                         "out the revision")
    if hub.is_repo_id(repo_id) and (snapshot := hub.cached_snapshot(repo_id, revision)) is not None:
        return _from_snapshot(repo_id, snapshot)
    if revision is None:
        if (snap := find_in_hf_cache(model)) is not None:
            return read_config(snap / "config.json"), f"hf-cache:{snap}", model, snap
        if (catalog_id := find_in_catalog(model)) is not None:
            return load_catalog_config(catalog_id), f"catalog:{catalog_id}", catalog_id, None
    if not hub.is_repo_id(repo_id):
        raise unknown_model(model)
    try:
        snapshot = hub.fetch(repo_id, revision)
    except MissingDependencyError:
        raise unknown_model(model, hub_extra=True) from None
    return _from_snapshot(repo_id, snapshot)


def _from_snapshot(repo_id: str, snapshot: Path) -> tuple[dict[str, Any], str, str, Path | None]:
    return read_config(snapshot / "config.json"), hub.source_of(repo_id, snapshot), repo_id, snapshot


def _with_exact(spec: ModelSpec, count: int, method: str) -> ModelSpec:
    """Attach an exact count; note when it differs from the architecture's inventory."""
    notes = spec.notes
    if count != spec.inventory_params:
        notes += (f"{method} counts {count:,} parameters, the {spec.architecture} layout {spec.inventory_params:,} "
                  f"({count - spec.inventory_params:+,}); memory uses the layout, which is what gets loaded",)
    return replace(spec, params_exact=count, params_method=method, notes=notes)
