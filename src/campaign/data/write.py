"""Rows of a data file written out again, split over several files, in the input's own format."""
from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..rows import parquet
from .read import DELIMITERS, Dataset, raw_rows

if TYPE_CHECKING:
    import numpy as np


def write_rows(ds: Dataset, assign: np.ndarray, paths: Sequence[Path]) -> None:
    """Write row i of ds to paths[assign[i]], in the input's format and order: JSONL lines byte for byte, CSV/TSV
    rows under the input's header, Parquet rows of the input's table. Called on a staging folder, which
    io.file_set makes the output in one step; files get the mode open() gives."""
    if ds.format == "parquet":
        import numpy as np

        pq = parquet()
        table = pq.read_table(ds.path)
        rows = np.asarray(ds.lines, dtype=np.int64) - 1
        for s, p in enumerate(paths):
            pq.write_table(table.take(rows[assign == s]), p)
        return
    binary = ds.format == "jsonl"
    # bytes for JSONL (lines copied byte for byte), text for the csv module
    handles: list[IO[Any]] = [open(p, "wb") if binary else open(p, "w", encoding="utf-8", newline="") for p in paths]
    try:
        writers = None
        if not binary:
            writers = [csv.writer(h, delimiter=DELIMITERS[ds.format], lineterminator="\n") for h in handles]
            for w in writers:
                w.writerow(ds.columns)
        for i, raw in raw_rows(ds):
            s = int(assign[i])
            if writers is None:
                handles[s].write(raw if raw.endswith(b"\n") else raw + b"\n")
            else:
                writers[s].writerow(raw)
        for h in handles:
            h.flush()
            os.fsync(h.fileno())
    finally:
        for h in handles:
            h.close()
