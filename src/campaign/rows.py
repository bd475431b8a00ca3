"""One reader of JSONL, CSV/TSV and Parquet records (rows), in file order: each row with where it starts, its raw
bytes or values (to write it out unchanged) and its fields, or a BadRecord saying why it could not be read; the
file's hash after the pass. Inputs are only ever opened for reading.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import decimal
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, MissingDependencyError
from .io import sha256_file

RECORD_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
                  ".parquet": "parquet", ".pq": "parquet", ".arrow": "hf"}
HF_DICT = "dataset_dict.json"   # the file Hugging Face's DatasetDict.save_to_disk writes beside one folder per split
DELIMITERS = {"csv": ",", "tsv": "\t"}


@dataclass(frozen=True)
class BadRecord:
    """A record that could not be read: where (1-based line, or row for Parquet) and why."""

    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


def record_format(path: str | os.PathLike[str], what: str = "data") -> str:
    """'jsonl', 'csv', 'tsv' or 'parquet' from the file extension (.json is read as JSONL); 'hf' for a Hugging
    Face dataset: a folder written by Dataset.save_to_disk or DatasetDict.save_to_disk, or one .arrow file.

    Raises:
        InputError: another extension, or a folder that is no saved dataset.
    """
    p = Path(path)
    if p.is_dir():
        if hf_kind(p) in ("dataset", "dict"):
            return "hf"
        raise InputError(f"{p}: a folder that is no Hugging Face dataset (no state.json and dataset_info.json of "
                         "Dataset.save_to_disk); give a data file or a saved dataset's folder")
    ext = p.suffix.lower()
    if ext not in RECORD_FORMATS:
        raise InputError(f"{path}: unknown {what} format {ext or '(no extension)'!r}; use .jsonl (one JSON object "
                         "per line), .csv or .tsv (a header row), .parquet, or a Hugging Face dataset (a "
                         "save_to_disk folder or an .arrow file)")
    return RECORD_FORMATS[ext]


def hf_kind(path: str | os.PathLike[str]) -> str | None:
    """'dataset' (a folder of Dataset.save_to_disk), 'dict' (of DatasetDict.save_to_disk), 'arrow' (one .arrow
    file) or None."""
    p = Path(path)
    if p.is_dir():
        if (p / "state.json").is_file() and (p / "dataset_info.json").is_file():
            return "dataset"
        if (p / HF_DICT).is_file():
            return "dict"
        return None
    return "arrow" if p.suffix.lower() == ".arrow" and p.is_file() else None


def hf_splits(path: str | os.PathLike[str]) -> list[str]:
    """The splits a DatasetDict folder lists, in its order."""
    p = Path(path) / HF_DICT
    try:
        splits = json.loads(p.read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{p}: not the dataset_dict.json of DatasetDict.save_to_disk; save the dataset again") \
            from None
    if not isinstance(splits, list) or not all(isinstance(x, str) and x for x in splits):
        raise InputError(f"{p}: 'splits' is not a list of names; save the dataset again")
    if not splits:
        raise InputError(f"{p}: 'splits' is empty, so there is no split to read; list the split folders beside "
                         'it, e.g. {"splits": ["train", "test"]}, or save the DatasetDict again')
    twice = next((x for i, x in enumerate(splits) if x in splits[:i]), None)
    if twice is not None:       # loaded twice, its rows would count twice
        raise InputError(f"{p}: 'splits' lists the split {twice!r} more than once; list each split once")
    return splits


def load_hf(path: str | os.PathLike[str]) -> Any:
    """A Hugging Face datasets.Dataset from a save_to_disk folder or an .arrow file (memory-mapped, never copied
    into the cache); a DatasetDict's folder as its splits one after the other, in its order (rows numbered through
    them). `datasets` is imported here, not before.

    Raises:
        InputError: a folder or file `datasets` cannot load, a DatasetDict whose splits have other columns;
            MissingDependencyError without `datasets`.
    """
    try:
        import datasets
    except ImportError as e:
        raise MissingDependencyError("datasets", "data") from e
    kind = hf_kind(path)
    try:
        ds = datasets.load_from_disk(str(path)) if kind in ("dataset", "dict") else \
            datasets.Dataset.from_file(str(path))
    except Exception as e:  # datasets raises several types for a broken folder or file
        raise InputError(f"{path}: not a readable Hugging Face dataset ({str(e).splitlines()[0] if str(e) else e!r}); "
                         "save it again with Dataset.save_to_disk") from None
    if isinstance(ds, datasets.DatasetDict):
        parts = [ds[name] for name in hf_splits(path)]
        if any(p.features != parts[0].features for p in parts):
            raise InputError(f"{path}: the DatasetDict's splits have other columns or types; give one split's folder")
        ds = datasets.concatenate_datasets(parts)
    return ds


def hf_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a dataset on disk: an .arrow file's bytes; for a folder, a sha256 over its files' relative
    names and sha256s (as a run record hashes a folder), so any edited, added or removed file changes it."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
    listing = "".join(f"{f.relative_to(p).as_posix()}\0{sha256_file(f)}\n" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


class RecordScan:
    """One pass over a JSONL, CSV/TSV or Parquet file, in file order.

    Iterating yields (line, raw, record): line is where the record starts (1-based; Parquet: the row number);
    raw is the line's bytes (JSONL), the row's values (CSV/TSV) or the row index (Parquet), so a record can be
    written out unchanged; record is a dict of the row's fields (CSV values are strings, JSONL values JSON
    values, Parquet values Python ones) or a BadRecord saying why it could not be read (not UTF-8, not JSON,
    not an object, ragged or malformed CSV). Blank lines are skipped (a CSV row of empty values is a record).
    Parquet dates and times come as ISO 8601 text and decimals as numbers, as they would in JSONL.
    After the pass, `sha256` is the hash of the file's bytes and `columns` every field name, first seen first.

    Args:
        columns: the fields needed: a CSV header or Parquet schema without one of them is an InputError, and
            Parquet reads only those columns. None: every field.
    Raises:
        InputError: what no record can recover from: an empty CSV, a bad CSV header, an unreadable Parquet file.
    """

    def __init__(self, path: str | os.PathLike[str], fmt: str | None = None, *,
                 columns: Sequence[str] | None = None) -> None:
        self.path = str(path)
        self.fmt = fmt or record_format(path)
        self.wanted = list(columns) if columns is not None else None
        self.columns: dict[str, None] = {}
        self.sha256: str | None = None
        self.fingerprint: str | None = None    # a Hugging Face dataset's own (Dataset._fingerprint)

    def __iter__(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        if self.fmt == "jsonl":
            return self._jsonl()
        if self.fmt in DELIMITERS:
            return self._csv()
        if self.fmt == "hf":
            return self._hf()
        return self._parquet()

    def _missing(self, names: Sequence[str], where: str) -> None:
        missing = [n for n in self.wanted or () if n not in names]
        if missing:
            raise InputError(f"{self.path}: no column {missing[0]!r}; {where} {', '.join(names)}; "
                             "name an existing column")

    def _jsonl(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        h = hashlib.sha256()
        with open(self.path, "rb") as f:
            for no, raw in enumerate(f, 1):      # binary lines split at b"\n" only, never at U+2028 and kin
                h.update(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield no, raw, BadRecord(no, _not_utf8(raw, e))
                    continue
                if no == 1:
                    text = text.removeprefix("\ufeff")
                if not text.strip():
                    continue
                array = ("; the file looks like one JSON array: write one object per line (JSONL)"
                         if not self.columns and text.lstrip().startswith("[") else "")
                try:
                    obj = json.loads(text.rstrip("\r\n"))    # columns of a cut-off line point at its end
                except json.JSONDecodeError as e:
                    yield no, raw, BadRecord(no, f"not valid JSON ({e.msg} at column {e.colno}){array}")
                    continue
                except RecursionError:
                    yield no, raw, BadRecord(no, "JSON nested too deeply to read")
                    continue
                except ValueError as e:                    # an integer past Python's 4,300-digit conversion limit
                    yield no, raw, BadRecord(no, f"not readable JSON ({str(e).split(';')[0]})")
                    continue
                if not isinstance(obj, dict):
                    yield no, raw, BadRecord(no, f"is a JSON {type(obj).__name__}, not an object{array}")
                    continue
                self.columns.update(dict.fromkeys(obj))
                yield no, raw, obj
        self.sha256 = h.hexdigest()

    def _csv(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        h = hashlib.sha256()
        bad_lines: dict[int, str] = {}
        delimiter = DELIMITERS[self.fmt]

        def lines(f: Any) -> Iterator[str]:
            for no, raw in enumerate(f, 1):
                h.update(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    bad_lines[no] = _not_utf8(raw, e)
                    text = raw.decode("utf-8", "replace")
                yield text.removeprefix("\ufeff") if no == 1 else text

        with open(self.path, "rb") as f, _field_limit():
            reader = csv.reader(lines(f), delimiter=delimiter)
            header: list[str] = []
            while not any(v.strip() for v in header):     # blank lines before the header are skipped
                try:
                    header = next(reader)
                except StopIteration:
                    raise InputError(f"{self.path}: no header line; a CSV needs a header naming its columns") from None
                except csv.Error as e:
                    raise InputError(f"{self.path}:{reader.line_num}: the header is not valid CSV ({e}); fix the "
                                     "header line (a file with old-Mac CR-only line ends: save it with LF)") from None
                if reader.line_num in bad_lines:
                    raise InputError(f"{self.path}:{reader.line_num}: the header is {bad_lines[reader.line_num]}; "
                                     "save the file as UTF-8")
            _check_header(self.path, header, reader.line_num)
            self.columns.update(dict.fromkeys(header))
            self._missing(header, "the header has")
            end = reader.line_num
            while True:
                start = end + 1
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error as e:
                    end = reader.line_num
                    yield start, None, BadRecord(start, f"not valid CSV ({e})")
                    continue
                end = reader.line_num
                if not row:                                  # an empty line; a row of empty values is a record
                    continue
                bad = next((bad_lines[n] for n in range(start, end + 1) if n in bad_lines), None)
                if bad:
                    yield start, row, BadRecord(start, bad)
                elif len(row) != len(header):
                    yield start, row, BadRecord(start, f"has {len(row)} fields, the header has {len(header)} "
                                                       f"(quote values that contain {delimiter!r})")
                else:
                    yield start, row, dict(zip(header, row, strict=True))
        self.sha256 = h.hexdigest()

    def _parquet(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        try:
            pf = parquet().ParquetFile(self.path)
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise InputError(f"{self.path}: not a readable Parquet file ({str(e).splitlines()[0]}); "
                             "check the file or rewrite it with pyarrow") from None
        names = pf.schema_arrow.names
        self.columns.update(dict.fromkeys(names))
        self._missing(names, "the columns are")
        wanted = self.wanted if self.wanted is not None else names
        yield from self._table(pf.read(columns=wanted), wanted)
        self.sha256 = sha256_file(self.path)

    def _hf(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        ds = load_hf(self.path)
        if ds._indices is not None:            # a select() not yet written out: rows in the order it gives
            ds = ds.flatten_indices(keep_in_memory=True)   # never a cache file beside the input's
        names = list(ds.column_names)
        self.columns.update(dict.fromkeys(names))
        self._missing(names, "the columns are")
        wanted = self.wanted if self.wanted is not None else names
        self.fingerprint = ds._fingerprint
        yield from self._table(ds.data.table.select(wanted), wanted)
        self.sha256 = hf_sha256(self.path)

    def _table(self, table: Any, wanted: Sequence[str]) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        """The rows of an Arrow table (Parquet, a Hugging Face dataset) as JSONL would hold them."""
        data = {n: table.column(n).to_pylist() for n in wanted}
        for r in range(table.num_rows):
            row: dict[str, Any] = {}
            for n in wanted:
                v = data[n][r]
                if isinstance(v, bytes):
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError as e:
                        yield r + 1, r, BadRecord(r + 1, f"column {n!r} is not valid UTF-8 (byte {e.start + 1})")
                        break
                row[n] = _json_like(v)
            else:
                yield r + 1, r, row


def parquet() -> Any:
    """pyarrow.parquet (the `data` extra), or a one-line error naming the extra."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError("pyarrow", "data") from e
    return pq


def _json_like(value: Any) -> Any:
    """A Parquet value as JSONL would hold it: dates and times as ISO 8601 text, decimals as numbers, durations
    in seconds; lists and structs element by element."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, list):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_like(v) for k, v in value.items()}
    return value


def _not_utf8(raw: bytes, e: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"


def _check_header(path: str, header: Sequence[str], line: int = 1) -> None:
    """Every column needs a unique, non-empty name: rows are rewritten whole under the header, so a repeated or
    empty name would shift or lose a column in the written splits."""
    seen: dict[str, int] = {}
    for i, name in enumerate(header, 1):
        if not name.strip():
            raise InputError(f"{path}:{line}: column {i} of the header has no name; name every column (or delete "
                             "the empty column)")
        if name in seen:
            raise InputError(f"{path}:{line}: the header names the column {name!r} twice (columns {seen[name]} and "
                             f"{i}); rename one so every column name is unique")
        seen[name] = i


@contextlib.contextmanager
def _field_limit() -> Iterator[None]:
    """Allow long CSV fields (documents) while reading; restore the global limit afterwards."""
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(old)
