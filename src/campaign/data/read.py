"""Read JSONL, CSV/TSV and Parquet datasets into columns: text (one or more fields joined), label, group(s), id,
date. A malformed or non-UTF-8 record stops reading with its file and line (or skips and counts, skip_bad=True).
Files are only ever opened for reading.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import input_file
from ..results import Record
from ..rows import DELIMITERS, BadRecord, RecordScan, record_format

__all__ = ["BadRecord", "DELIMITERS", "Dataset", "Fields", "make_dataset", "raw_rows", "read_dataset"]
SKIP_HINT = "fix it, or skip bad records with --skip-bad (skip_bad=True)"
MAX_KEPT_BAD = 20  # bad records kept for the report; all are counted


@dataclass(frozen=True)
class Fields(Record):
    """Which fields (JSONL keys, CSV header names, Parquet columns) play which role."""

    text: tuple[str, ...] = ("text",)
    label: str | None = None
    group: tuple[str, ...] = ()
    id: str | None = None
    date: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.text, str) or isinstance(self.group, str):
            raise InputError("text and group fields are tuples of names, e.g. text=('question', 'answer')")
        if not self.text or not all(self.text):
            raise InputError(f"text fields {self.text!r} are empty; name at least one, e.g. --text text")

    @property
    def names(self) -> list[str]:
        """Every field read, in order, without repeats."""
        out: list[str] = []
        for n in (*self.text, self.label, *self.group, self.id, self.date):
            if n and n not in out:
                out.append(n)
        return out


@dataclass(frozen=True)
class Dataset:
    """A dataset as columns, one entry per accepted record, in file order.

    labels/ids: str or None (missing); JSON numbers and booleans become their JSON text ("1", "true").
    groups: one tuple per group field, each with one value (or None) per record. dates: POSIX seconds (UTC).
    lines: each record's 1-based line in the file (Parquet: row number).
    """

    path: str
    format: str
    fields: Fields
    texts: tuple[str, ...] = field(repr=False)
    labels: tuple[str | None, ...] | None = field(default=None, repr=False)
    groups: tuple[tuple[str | None, ...], ...] = field(default=(), repr=False)
    ids: tuple[str | None, ...] | None = field(default=None, repr=False)
    dates: tuple[float, ...] | None = field(default=None, repr=False)
    lines: tuple[int, ...] = field(default=(), repr=False)
    bad: tuple[BadRecord, ...] = ()
    n_bad: int = 0
    sha256: str | None = None
    columns: tuple[str, ...] = ()  # every field name seen, in first-seen order (a CSV's header)
    fingerprint: str | None = None  # a Hugging Face dataset's Dataset._fingerprint (format 'hf')

    def __len__(self) -> int:
        return len(self.texts)

    def ref(self, i: int) -> str:
        """Where record i came from: 'file:line' (Parquet, a Hugging Face dataset: 'file row N'), with its id when
        there is one."""
        rows = self.format in ("parquet", "hf")
        where = f"{self.path} row {self.lines[i]}" if rows else f"{self.path}:{self.lines[i]}"
        if self.ids is not None and self.ids[i] is not None:
            where += f" (id {self.ids[i]})"
        return where

    @property
    def name(self) -> str:
        return Path(self.path).name

    def to_dict(self) -> dict[str, Any]:
        # by hand: what the file was (path, format, hash, row count, fields, bad records), never its columns
        out: dict[str, Any] = {"path": self.path, "format": self.format, "sha256": self.sha256}
        if self.fingerprint is not None:   # beside the sha256: the fingerprint the datasets library knows it by
            out["fingerprint"] = self.fingerprint
        return out | {"rows": len(self), "fields": self.fields.to_dict(), "bad_records": self.n_bad,
                      "bad": [b.to_dict() for b in self.bad]}


def make_dataset(texts: Sequence[str], *, labels: Sequence[Any] | None = None,
                 groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, ids: Sequence[Any] | None = None,
                 dates: Sequence[Any] | None = None, name: str = "<memory>") -> Dataset:
    """A Dataset from in-memory columns (a notebook, a test). groups: one column, or {field name: column}."""
    n = len(texts)
    if groups is None:
        named: dict[str, Sequence[Any]] = {}
    elif isinstance(groups, Mapping):
        named = dict(groups)
    else:
        named = {"group": groups}
    for what, col in (("labels", labels), ("ids", ids), ("dates", dates), *named.items()):
        if col is not None and len(col) != n:
            raise InputError(f"{what} has {len(col)} values for {n} texts; give one per text")
    fields = Fields(label="label" if labels is not None else None, group=tuple(named),
                    id="id" if ids is not None else None, date="date" if dates is not None else None)
    return Dataset(path=name, format="memory", fields=fields, texts=tuple(str(t) for t in texts),
                   labels=None if labels is None else tuple(scalar(v) for v in labels),
                   groups=tuple(tuple(scalar(v) for v in col) for col in named.values()),
                   ids=None if ids is None else tuple(scalar(v) for v in ids),
                   dates=None if dates is None else tuple(parse_date(v) for v in dates),
                   lines=tuple(range(1, n + 1)))


def read_dataset(path: str | os.PathLike[str], fields: Fields | None = None, *, skip_bad: bool = False) -> Dataset:
    """Read a JSONL, CSV/TSV or Parquet file, or a Hugging Face dataset (a Dataset.save_to_disk folder or an
    .arrow file), into a Dataset.

    Raises:
        InputError: missing file, unknown format, a field that no record has, or (unless skip_bad) the first bad
            record: "file:line: what is wrong; the fix".
    """
    fields = fields or Fields()
    path = str(path)
    fmt = record_format(path)
    if not (fmt == "hf" and Path(path).is_dir()):
        input_file(path, "data")
    if fmt == "jsonl" and not fields.date:
        fast = _jsonl_fast(path, fields)
        if fast is not None:
            return fast
    cols: dict[str, list[Any]] = {"text": [], "label": [], "id": [], "date": [], "line": []}
    groups: list[list[str | None]] = [[] for _ in fields.group]
    bad: list[BadRecord] = []
    n_bad = 0
    seen: set[str] = set()
    scan = RecordScan(path, fmt, columns=None if fmt == "jsonl" else fields.names)
    for line, _raw, item in _records(scan, fields):
        if isinstance(item, BadRecord):
            if not skip_bad:
                where = f"row {item.line}" if fmt in ("parquet", "hf") else str(item.line)
                sep = ": " if fmt in ("parquet", "hf") else ":"
                raise InputError(f"{path}{sep}{where}: {item.reason}; {SKIP_HINT}")
            n_bad += 1
            if len(bad) < MAX_KEPT_BAD:
                bad.append(item)
            continue
        rec = item
        seen.update(rec["present"])
        cols["text"].append(rec["text"])
        cols["label"].append(rec["label"])
        cols["id"].append(rec["id"])
        cols["date"].append(rec["date"])
        cols["line"].append(line)
        for g, v in zip(groups, rec["groups"], strict=True):
            g.append(v)
    for role, name in (("label", fields.label), ("id", fields.id), *(("group", g) for g in fields.group)):
        if name and cols["line"] and name not in seen:
            raise InputError(f"{path}: no record has the {role} field {name!r}; fields seen: "
                             f"{', '.join(sorted(scan.columns)) or '(none)'}; check the spelling")
    return Dataset(path=path, format=fmt, fields=fields, texts=tuple(cols["text"]),
                   labels=tuple(cols["label"]) if fields.label else None,
                   groups=tuple(tuple(g) for g in groups), ids=tuple(cols["id"]) if fields.id else None,
                   dates=tuple(cols["date"]) if fields.date else None, lines=tuple(cols["line"]),
                   bad=tuple(bad), n_bad=n_bad, sha256=scan.sha256, columns=tuple(scan.columns),
                   fingerprint=scan.fingerprint)


FAST_JSONL_MAX_BYTES = 512 * 2**20  # the fast path holds the file, its text and its lines at once


def _jsonl_fast(path: str, fields: Fields) -> Dataset | None:
    """The Dataset of a well-formed JSONL file read in a few whole-file passes, or None when anything in it needs
    the record-by-record path (which then says what and where): a non-UTF-8 byte, a line that is not one JSON
    object, a text field missing or not a string, a file over FAST_JSONL_MAX_BYTES. Same result as that path:
    blank lines skipped, a BOM dropped, numbers and booleans as JSON text, '' and null as missing."""
    if os.path.getsize(path) > FAST_JSONL_MAX_BYTES:
        return None
    with open(path, "rb") as f:
        data = f.read()
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return None
    del data
    decode = json.JSONDecoder().raw_decode
    numbers: list[int] = []
    objs: list[Any] = []
    try:
        for no, line in enumerate(text.split("\n"), 1):   # split at "\n" only, as the binary lines are
            if not line or line.isspace():
                continue
            obj, end = decode(line)
            if type(obj) is not dict or (end != len(line) and not line[end:].isspace()):
                return None
            numbers.append(no)
            objs.append(obj)
    except (ValueError, RecursionError):  # not JSON, leading spaces, an integer past Python's digit limit
        return None
    texts_by_field = [[o.get(name) for o in objs] for name in fields.text]
    if not all(type(v) is str for col in texts_by_field for v in col):
        return None
    texts = (texts_by_field[0] if len(texts_by_field) == 1
             else ["\n".join(parts) for parts in zip(*texts_by_field, strict=True)])
    columns: dict[str, None] = {}
    previous = None
    for o in objs:
        keys = o.keys()
        if keys != previous:     # a record with other keys adds them in first-seen order
            columns.update(dict.fromkeys(keys))
            previous = keys

    def column(name: str) -> tuple[str | None, ...]:
        return tuple((v or None) if type(v) is str else scalar(v) for v in (o.get(name) for o in objs))

    for role, name in (("label", fields.label), ("id", fields.id), *(("group", g) for g in fields.group)):
        if name and objs and name not in columns:
            raise InputError(f"{path}: no record has the {role} field {name!r}; fields seen: "
                             f"{', '.join(sorted(columns)) or '(none)'}; check the spelling")
    return Dataset(path=path, format="jsonl", fields=fields, texts=tuple(texts),
                   labels=column(fields.label) if fields.label else None,
                   groups=tuple(column(g) for g in fields.group), ids=column(fields.id) if fields.id else None,
                   dates=None, lines=tuple(numbers), bad=(), n_bad=0, sha256=sha256, columns=tuple(columns))


# --------------------------------------------------------------------------------------------------- values


def scalar(value: Any) -> str | None:
    """A label/group/id value as text: None and '' are missing; numbers and booleans as JSON writes them."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value != "" else None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # CSV/pandas round trips turn 1 into 1.0; a label stays "1"
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def parse_date(value: Any) -> float:
    """POSIX seconds from an ISO 8601 string, a date/datetime, or a number of seconds; naive times are UTC."""
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError("missing date")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"date {value!r} is not finite")
        return float(value)
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"date {value!r} is not ISO 8601 (e.g. 2024-05-01 or 2024-05-01T12:00:00Z)") from None
    else:
        raise ValueError(f"date {value!r} is not a date")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _record(get: Any, fields: Fields) -> dict[str, Any]:
    """Pick the roles out of one record; raises ValueError with a one-line reason."""
    parts = []
    for name in fields.text:
        value = get(name)
        if value is _MISSING:
            raise ValueError(f"no text field {name!r}")
        if not isinstance(value, str):
            raise ValueError(f"text field {name!r} is {type(value).__name__ if value is not None else 'null'}, "
                             "not a string")
        parts.append(value)
    out: dict[str, Any] = {"text": "\n".join(parts), "present": set()}
    for role, key in (("label", fields.label), ("id", fields.id)):
        value = get(key) if key else _MISSING
        if value is not _MISSING:
            out["present"].add(key)
        out[role] = None if value is _MISSING else scalar(value)
    out["groups"] = []
    for name in fields.group:
        value = get(name)
        if value is not _MISSING:
            out["present"].add(name)
        out["groups"].append(None if value is _MISSING else scalar(value))
    out["date"] = None
    if fields.date:
        value = get(fields.date)
        if value is _MISSING:
            raise ValueError(f"no date field {fields.date!r}")
        out["date"] = parse_date(value)
    return out


_MISSING = object()


def _records(scan: RecordScan, fields: Fields) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
    """The scan's records with their roles picked out (a record without them becomes a BadRecord)."""
    for line, raw, item in scan:
        if isinstance(item, BadRecord):
            yield line, raw, item
            continue
        try:
            rec = _record(lambda k, o=item: o.get(k, _MISSING), fields)
        except ValueError as e:
            yield line, raw, BadRecord(line, str(e))
            continue
        if scan.fmt in ("parquet", "hf"):   # a null is a missing value there, not a present field
            rec["present"] = {n for n in rec["present"] if item[n] is not None}
        yield line, raw, rec


def raw_rows(ds: Dataset) -> Iterator[tuple[int, Any]]:
    """Re-read ds's file and yield (record index, raw row) for the records ds accepted, in order: JSONL line bytes,
    CSV/TSV value lists, Parquet row indices.

    Raises:
        InputError: the file changed since it was read (another hash, or other records).
    """
    scan = RecordScan(ds.path, ds.format, columns=None if ds.format == "jsonl" else ds.fields.names)
    i = 0
    for line, raw, item in _records(scan, ds.fields):
        if isinstance(item, BadRecord):
            continue
        if i >= len(ds) or ds.lines[i] != line:
            raise InputError(f"{ds.path}: the file changed while it was being split; run the command again")
        yield i, raw
        i += 1
    if i != len(ds) or (ds.sha256 and scan.sha256 != ds.sha256):
        raise InputError(f"{ds.path}: the file changed while it was being split; run the command again")
