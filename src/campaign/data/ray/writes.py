"""The worker side of the Ray engine's writes: a split's rows into the split folders, and a split without its
leaking rows, one shard at a time, each file written under a hidden temporary name and renamed into place.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...io import sha256_file
from ..payload import dumps as dump_payload, loads as load_payload
from ..shards import local_copy
from ..write import write_rows
from .records import WrittenClean, WrittenSplit


def tmp_name(path: str) -> str:
    """A hidden temporary name beside path (listings of shards skip hidden files)."""
    p = Path(path)
    return str(p.with_name(f".{p.name}.tmp-{os.getpid()}"))


def write_clean(batch: dict[str, Any], *, drop: dict[tuple[int, int], list[int]], targets: dict[tuple[int, int],
                 tuple[str, str | None]]) -> dict[str, Any]:
    """--drop-to, per shard: the shard without its leaking rows (the first split's shards copied unchanged) and
    the leaking rows beside it, each written to a temporary file and renamed into place."""
    import numpy as np

    out = []
    for split, shard, payload in zip(batch["split"].tolist(), batch["shard"].tolist(), batch["payload"], strict=True):
        shard_data = load_payload(payload)
        ds, source = shard_data.dataset, shard_data.source
        keep_path, leak_path = targets[split, shard]
        rows = drop.get((split, shard), [])
        with local_copy(source) as local:
            if leak_path is None:
                tmp = tmp_name(keep_path)
                with open(local, "rb") as src, open(tmp, "wb") as dst:
                    while block := src.read(1 << 20):
                        dst.write(block)
                    dst.flush()
                    os.fsync(dst.fileno())
                os.replace(tmp, keep_path)
            else:
                assign = np.zeros(len(ds), dtype=np.int64)
                assign[rows] = 1
                tmps = [tmp_name(keep_path), tmp_name(leak_path)]
                write_rows(replace(ds, path=local), assign, [Path(t) for t in tmps])
                os.replace(tmps[1], leak_path)
                os.replace(tmps[0], keep_path)
        out.append(dump_payload(WrittenClean(split, shard, len(ds) - len(rows), len(rows), sha256_file(keep_path))))
    return {"payload": np.asarray(out, dtype=object)}


def write_split(batch: dict[str, Any], *, assign: dict[int, Any], targets: dict[int, list[str]]) -> dict[str, Any]:
    """Each shard's rows into the split folders (row r to targets[shard][assign[shard][r]]), in the input's format
    and order, each file written under a hidden temporary name and renamed into place."""
    import numpy as np

    out = []
    for sh, payload in zip(batch["shard"].tolist(), batch["payload"], strict=True):
        shard_data = load_payload(payload)
        ds, source = shard_data.dataset, shard_data.source
        tmps = [tmp_name(t) for t in targets[sh]]
        with local_copy(source) as local:
            write_rows(replace(ds, path=local), assign[sh], [Path(t) for t in tmps])
        for t, final in zip(tmps, targets[sh], strict=True):
            os.replace(t, final)
        counts = np.bincount(assign[sh], minlength=len(targets[sh])).tolist()
        out.append(dump_payload(WrittenSplit(sh, counts, [sha256_file(t) for t in targets[sh]])))
    return {"payload": np.asarray(out, dtype=object)}


__all__ = ["tmp_name", "write_clean", "write_split"]
