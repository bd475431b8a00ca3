"""The bundled catalog of real config.json files, and name matching (case-insensitive, with or without org)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import UnknownNameError

# the bundled files beside this module (a plain path: importlib.resources costs each command's start-up ~5 ms)
CATALOG = Path(__file__).with_name("catalog")
_VARIANT_WORDS = ("-instruct", "-it", "-base", "-chat")


def _keys(repo_id: str) -> set[str]:
    """The lowercase names a user may type for a repo id: with org, without, without -Instruct/-it/-Base."""
    full = repo_id.lower()
    short = full.split("/", 1)[-1]
    keys = {full, short}
    for k in list(keys):
        bare = k
        for word in _VARIANT_WORDS:
            bare = bare.replace(word + "-", "-")
            if bare.endswith(word):
                bare = bare[: -len(word)]
        keys.add(bare)
    return keys


@lru_cache(maxsize=1)
def catalog_index() -> dict[str, str]:
    """repo id -> file name of every bundled config."""
    out = {}
    for entry in CATALOG.iterdir():
        name = entry.name
        if name.endswith(".json") and "--" in name:
            out[name[:-5].replace("--", "/", 1)] = name
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def catalog_names() -> list[str]:
    """Repo ids of the bundled models, sorted."""
    return list(catalog_index())


def find_in_catalog(name: str) -> str | None:
    """The repo id a user's name refers to, or None. Exact keys win over variant-stripped ones."""
    key = name.strip().lower()
    index = catalog_index()
    exact = [rid for rid in index if key in (rid.lower(), rid.lower().split("/", 1)[-1])]
    if exact:
        return exact[0]
    loose = [rid for rid in index if key in _keys(rid)]
    if len(loose) == 1:
        return loose[0]
    # a unique entry that starts with what was typed at a '-' boundary: 'mixtral-8x7b' -> ...-v0.1
    prefixed = [rid for rid in index if any(k.startswith(key + "-") for k in _keys(rid))]
    return prefixed[0] if len(prefixed) == 1 else None


def load_catalog_config(repo_id: str) -> dict[str, Any]:
    """The parsed config.json of a bundled model."""
    file = catalog_index()[repo_id]
    return json.loads((CATALOG / file).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def published_counts() -> dict[str, dict[str, Any]]:
    """Published parameter counts with their sources (catalog/published_counts.json), when bundled."""
    path = CATALOG / "published_counts.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def unknown_model(name: str, *, hub_extra: bool = False) -> UnknownNameError:
    """The error for a name that is neither a path, a cached repo nor a catalog entry; `hub_extra`: a repo id that
    huggingface_hub (not installed) would read from the Hub."""
    known = catalog_names() + [rid.split("/", 1)[-1] for rid in catalog_names()]
    hint = ("Give a catalog name (campaign models), a local model dir or config.json, or a Hub repo id (ORG/NAME)."
            if not hub_extra else
            "It is not a local path or a catalog model; to read it from the Hub, install huggingface_hub: "
            "pip install 'campaign[hub]'.")
    return UnknownNameError("model", name, known, hint)
