"""The records the Ray engine's stages hand each other (as payloads, payload.py), by name rather than by position.
Rows of a split are numbered (shard << ROW_BITS) | row in shard (stages.py); arrays are numpy arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..read import Dataset


@dataclass(frozen=True)
class ShardData:
    """Stage 1, one per shard: its rows as read, and where a worker reads the shard again (to copy or rewrite)."""

    dataset: Dataset
    source: str


@dataclass(frozen=True)
class ShardLabels:
    """A shard's row count and labels (the split job's stratification), with what the split's clusters file and
    messages name its rows by: ids (None without an id field), row hashes (split_clusters.row_hash), the shard's
    format and each row's line (Dataset.lines)."""

    shard: int
    rows: int
    labels: Any
    ids: Any = None
    row_hashes: Any = None
    format: str = "jsonl"
    lines: Any = None


@dataclass(frozen=True)
class ExactAndGroups:
    """One part of the corpus to split: each exact copy with the first row of its content, and each row sharing a
    group value with the value's first row (links)."""

    copies: Any
    first: Any
    group_links: list[tuple[int, int]]


@dataclass(frozen=True)
class Candidates:
    """One part: candidate pairs (lo < hi) of representatives sharing a band key, and the buckets capped."""

    lo: Any
    hi: Any
    capped: int


@dataclass(frozen=True)
class Texts:
    """Stage 3 map: the raw texts of some rows of a split, sent to the part that confirms their pairs."""

    split: int
    rows: Any
    texts: list[str]


@dataclass(frozen=True)
class Confirmed:
    """Stage 3 reduce: the part's confirmed pairs (split a's row, split b's row) with their Jaccard."""

    a: Any
    b: Any
    index_rows: Any
    query_rows: Any
    jaccard: Any


@dataclass(frozen=True)
class Fetched:
    """Stage 4: some rows of a split, as the report and the outputs show them ({row: LeakRow})."""

    split: int
    rows: dict[int, Any]


@dataclass(frozen=True)
class WrittenSplit:
    """A shard's rows written into the split folders: rows per split and each file's sha256."""

    shard: int
    counts: list[int]
    sha256s: list[str]


@dataclass(frozen=True)
class WrittenClean:
    """A shard written without its leaking rows: rows kept and dropped, the kept file's sha256."""

    split: int
    shard: int
    kept: int
    dropped: int
    sha256: str


RECORDS = (ShardData, ShardLabels, ExactAndGroups, Candidates, Texts, Confirmed, Fetched, WrittenSplit, WrittenClean)

__all__ = ["RECORDS", "Candidates", "Confirmed", "ExactAndGroups", "Fetched", "ShardData", "ShardLabels", "Texts",
           "WrittenClean", "WrittenSplit"]
