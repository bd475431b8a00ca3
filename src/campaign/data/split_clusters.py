"""The split's units per row, written beside its manifest: which rows move together (a group, a near or exact
duplicate cluster, rows linked through both). An evaluation on a split's rows reads them back as clusters of
related examples (`campaign regress --clusters-from MANIFEST`), so that its standard errors count that related
examples are not independent.

The file (split_clusters.jsonl, one line per input row, in input order) holds {"id": the row's id (the split's
--id field; null without one), "row": the first 16 hex digits of the sha256 of the row's text, "split": the split
it went to, "cluster": its unit, an integer}. It is written into the split's file set (atomically, with the split
files and the manifest), and the manifest names it with its sha256 under "clusters", so a reader can tell a file
that changed since. The Ray engine (a split in shards) writes the same file into its output folder, rows in the
order of the listed shards, before the manifest.json that names it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from .read import Dataset

CLUSTERS_NAME = "split_clusters.jsonl"
ROW_HASH_HEX = 16        # as the usage ledger's row hashes (track/usage.py)


def row_hash(text: str) -> str:
    """The row key of the clusters file: the first 16 hex digits of the sha256 of the row's text."""
    from ..io import sha256_bytes

    return sha256_bytes(text.encode("utf-8", "surrogatepass"))[:ROW_HASH_HEX]


def write_clusters(folder: Path, ds: Dataset, assign: np.ndarray, units: np.ndarray,
                   names: Sequence[str]) -> dict[str, Any]:
    """Write folder/split_clusters.jsonl (see the module docstring); its entry in the manifest: path, sha256, rows,
    clusters (distinct units), key ("id" when the rows carry ids, else "row")."""
    return write_cluster_rows(folder, ds.ids, [row_hash(t) for t in ds.texts], assign, units, names)


def write_cluster_rows(folder: Path, ids: Sequence[Any] | None, rows: Sequence[str], assign: np.ndarray,
                       units: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """write_clusters from its parts, as either engine has them: each row's id (None without ids) and row hash
    (row_hash), split (an index into names) and unit."""
    from ..io import atomic_write_text, sha256_bytes

    lines = []
    for i, row in enumerate(rows):
        lines.append(json.dumps({"id": None if ids is None else ids[i], "row": row, "split": names[int(assign[i])],
                                 "cluster": int(units[i])}, ensure_ascii=False) + "\n")
    data = "".join(lines)
    atomic_write_text(folder / CLUSTERS_NAME, data)
    return {"path": CLUSTERS_NAME, "sha256": sha256_bytes(data.encode("utf-8")), "rows": len(lines),
            "clusters": len({int(u) for u in units.tolist()}), "key": "id" if ids is not None else "row"}


@dataclass(frozen=True)
class SplitClusters:
    """The cluster of every row id a split recorded (ids that name rows of two clusters map to None)."""

    manifest: Path
    of_id: dict[str, int | None]
    clusters: int

    def cluster(self, example_id: str) -> int | None:
        """The cluster of an example id; KeyError when the split has no row with that id."""
        return self.of_id[example_id]


def read_clusters(manifest: str | os.PathLike[str]) -> SplitClusters:
    """The per-row clusters a split manifest names, checked against its sha256.

    Raises:
        InputError: not a split manifest, one written before the split recorded clusters, a split without ids, or
            a clusters file missing or changed since the split.
    """
    from ..io import sha256_file
    from .split_manifest import split_manifest_path

    p = split_manifest_path(manifest)
    from ..io import load_json

    doc = load_json(p, "the split_manifest.json written by `campaign split`")
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("campaign.split"):
        raise InputError(f"{p}: not a campaign split manifest; give the split_manifest.json written by "
                         "`campaign split`")
    entry = doc.get("clusters")
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not isinstance(entry.get("sha256"),
                                                                                                str):
        raise InputError(f"{p}: records no per-row clusters (written by an earlier campaign); re-split with "
                         "`campaign split --force`, or give --cluster FIELD")
    if entry.get("key") != "id":
        raise InputError(f"{p}: the split was made without --id, so its rows cannot be matched to prediction ids; "
                         "re-split with --id FIELD (the field your predictions' --id-field holds) and --force")
    f = p.parent / Path(entry["path"]).name
    if not f.is_file():
        raise InputError(f"{f}: missing ({p.name} names it); restore it or re-split with `campaign split --force`")
    actual = sha256_file(f)
    if actual != entry["sha256"]:
        raise InputError(f"{f}: changed since the split (sha256 {actual[:12]}... on disk, {entry['sha256'][:12]}... "
                         f"in {p.name}); restore it or re-split with `campaign split --force`")
    of_id: dict[str, int | None] = {}
    units: set[int] = set()
    with open(f, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            try:
                rec = json.loads(line)
                key, unit = rec["id"], int(rec["cluster"])
            except (ValueError, KeyError, TypeError) as e:
                raise InputError(f"{f} line {no}: not a cluster record ({e}); re-split with "
                                 "`campaign split --force`") from None
            if key is None:
                continue
            key = str(key)
            units.add(unit)
            if key in of_id and of_id[key] != unit:
                of_id[key] = None          # the same id on rows of two clusters: ambiguous
            else:
                of_id.setdefault(key, unit)
    return SplitClusters(p, of_id, len(units))


def clusters_of_ids(clusters: SplitClusters, ids: Sequence[str], where: Any) -> list[str]:
    """The cluster label of each example id; `where(i)` names example i's row for a message.

    Raises:
        InputError: an example whose id no row of the split carries, or carried by rows of two clusters.
    """
    out = []
    for i, example_id in enumerate(ids):
        if example_id not in clusters.of_id:
            raise InputError(f"{where(i)}: id {example_id!r} is in no row of the split ({clusters.manifest}); "
                             "give predictions on that split's rows (matched by --id-field to the split's --id), or "
                             "the manifest of the split they come from")
        unit = clusters.of_id[example_id]
        if unit is None:
            raise InputError(f"{where(i)}: id {example_id!r} names rows of two clusters in the split "
                             f"({clusters.manifest}); make the ids unique before splitting")
        out.append(f"unit {unit}")
    return out


__all__ = ["CLUSTERS_NAME", "SplitClusters", "clusters_of_ids", "read_clusters", "row_hash", "write_cluster_rows",
           "write_clusters"]
