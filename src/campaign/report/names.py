"""Where each shipped artifact goes inside a bundle's artifacts/ folder (campaign export writes it there; the model
card and campaign verify find it there)."""
from __future__ import annotations

from pathlib import Path


def shipped_names(paths: list[str]) -> dict[str, str]:
    """Each artifact's path inside artifacts/: its file or folder name, or where two share a name, the shortest
    tail of its path that tells it apart (a/preds.jsonl, b/preds.jsonl)."""
    parts = {p: Path(p).parts for p in paths}
    out = {}
    for p, tail in parts.items():
        for k in range(1, len(tail) + 1):
            name = tail[-k:]
            if all(other == p or parts[other][-k:] != name for other in paths):
                break
        out[p] = str(Path(*name))
    return out


__all__ = ["shipped_names"]
