"""Rows of a data file written out again, split over several files, in the input's own format; or as Hugging Face
datasets (a save_to_disk folder per split, or an .arrow file)."""
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


def write_rows(ds: Dataset, assign: np.ndarray, paths: Sequence[Path], *, as_hf: bool = False) -> None:
    """Write row i of ds to paths[assign[i]], in the input's format and order: JSONL lines byte for byte, CSV/TSV
    rows under the input's header, Parquet rows of the input's table, a Hugging Face dataset's rows as the input
    is (a save_to_disk folder, an .arrow file); with as_hf, every format as Hugging Face Dataset folders (write_hf).
    Called on a staging folder, which io.file_set (or io.export_folder) makes the output
    in one step; files get the mode open() gives."""
    if as_hf or ds.format == "hf":
        write_hf(ds, assign, paths, folders=as_hf or Path(ds.path).is_dir())
        return
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


def hf_rows(ds: Dataset) -> Any:
    """ds's accepted rows as a Hugging Face datasets.Dataset (in order): the input dataset's own rows (a Hugging
    Face dataset, Parquet: the same Arrow types), or a JSONL/CSV file's records as read."""
    import numpy as np

    from ..rows import RecordScan, load_hf
    from .read import BadRecord

    try:
        import datasets
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("datasets", "data") from e
    if ds.format in ("hf", "parquet"):
        source = load_hf(ds.path) if ds.format == "hf" else datasets.Dataset(parquet().read_table(ds.path))
        return source.select(np.asarray(ds.lines, dtype=np.int64) - 1)
    wanted = set(ds.lines)
    records = [r for line, _, r in RecordScan(ds.path, ds.format) if line in wanted and not isinstance(r, BadRecord)]
    return datasets.Dataset.from_list(records)


def write_hf(ds: Dataset, assign: np.ndarray, paths: Sequence[Path], *, folders: bool) -> None:
    """Row i of ds to paths[assign[i]] as a Hugging Face dataset: a folder each (Dataset.save_to_disk), or an
    Arrow stream file each (what Dataset.from_file reads)."""
    import datasets as bars
    import numpy as np

    from ..errors import InputError

    counts = np.bincount(assign, minlength=len(paths)) if len(assign) else [0] * len(paths)
    empty = [p.name for p, n in zip(paths, counts, strict=False) if not n]
    if empty:   # datasets cannot load back a Dataset of 0 rows that save_to_disk wrote (IndexError in load_from_disk)
        raise InputError(f"split {empty[0]!r} gets 0 of {len(assign)} rows, and a Hugging Face dataset of 0 rows "
                         "cannot be loaded back; give more rows or other --ratios, or write jsonl or parquet")
    quiet = bars.are_progress_bars_disabled()
    bars.disable_progress_bars()       # datasets' own bars on stderr; the user's setting is put back below
    try:
        _write_hf(hf_rows(ds), assign, paths, folders=folders)
    finally:
        if not quiet:
            bars.enable_progress_bars()


def _write_hf(rows: Any, assign: np.ndarray, paths: Sequence[Path], *, folders: bool) -> None:
    """Each split's rows streamed out in batches (rows.select keeps an index over the input's memory-mapped table):
    nothing goes through datasets' cache, which flatten_indices or map would write beside the input's own files
    (a cache-*.arrow as large as the data, in a folder campaign only reads)."""
    import shutil

    import numpy as np
    from datasets.arrow_writer import ArrowWriter

    for s, p in enumerate(paths):
        part = rows.select(np.flatnonzero(assign == s))
        if not folders:      # an Arrow stream file whose schema carries the features, as Dataset.from_file reads
            with ArrowWriter(path=str(p), features=part.features) as writer:
                for batch in part.with_format("arrow").iter(batch_size=1000):
                    writer.write_table(batch)
                writer.finalize()
        else:
            if p.exists():                                   # an earlier round of the same split
                shutil.rmtree(p)
            part.save_to_disk(str(p))      # streams the selected rows: no cache file either
