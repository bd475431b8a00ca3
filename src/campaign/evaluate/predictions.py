"""Prediction files (JSONL or CSV: an id, the gold value, the prediction, metadata) read with line-numbered errors.

`read_rows` is the generic reader (every row with its line number); `read_predictions` builds a PredictionSet
from it. Inputs are read once as bytes and never modified; errors quote the file and line and end with the fix.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import sha256_bytes

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}
# A missing or empty prediction is a prediction of its own ("the model produced nothing"), not an error.
NO_PREDICTION = "(none)"


@dataclass(frozen=True)
class Row:
    """One record of an input file: its 1-based line number (where the record starts) and its fields."""

    line: int
    fields: dict[str, Any]


def read_rows(path: str | os.PathLike[str], *, what: str = "input") -> tuple[list[Row], str]:
    """Every record of a JSONL (.jsonl, .ndjson, .json) or CSV (.csv, .tsv) file, with line numbers.

    Returns:
        (rows, sha256 of the file's bytes). CSV values are strings; JSONL values are JSON values.
    Raises:
        InputError: missing file, unknown format, non-UTF-8 bytes, malformed JSON, ragged CSV, no records.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} file '{p}' not found; check the path")
    data = p.read_bytes()
    digest = sha256_bytes(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise InputError(f"{p} line {line} is not valid UTF-8 (byte 0x{data[e.start]:02x} at column {col}); "
                         f"re-save the file as UTF-8") from None
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        rows = list(_jsonl_rows(text, p))
    elif suffix in CSV_SUFFIXES:
        rows = list(_csv_rows(text, p, CSV_SUFFIXES[suffix]))
    else:
        raise InputError(f"{what} file '{p}' has an unknown format {suffix or '(no suffix)'!r}; "
                         f"use .jsonl (one JSON object per line) or .csv with a header row")
    if not rows:
        raise InputError(f"{what} file '{p}' has no records; write one record per line (JSONL) or after a CSV header")
    return rows, digest


def _jsonl_rows(text: str, path: Path) -> Iterator[Row]:
    # split on "\n" only: str.splitlines() also breaks at U+2028, U+2029, U+0085 and other separators, which
    # json.dumps(ensure_ascii=False) writes raw inside strings of valid JSONL
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"malformed JSON at {path} line {number} column {e.colno}: {e.msg}; "
                             f"fix or remove that line (JSONL: one object per line)") from None
        if not isinstance(value, dict):
            raise InputError(f"{path} line {number} is a JSON {type(value).__name__}, not an object; "
                             f"write one object per line, e.g. {{\"id\": ..., \"gold\": ..., \"pred\": ...}}")
        yield Row(number, value)


def _csv_rows(text: str, path: Path, delimiter: str) -> Iterator[Row]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    start = 1
    try:
        for record in reader:
            line, start = start, reader.line_num + 1
            if not record or all(not v.strip() for v in record):
                continue
            if header is None:
                header = [h.strip() for h in record]
                dupes = sorted({h for h in header if header.count(h) > 1})
                if dupes or "" in header:
                    what = f"duplicate column {dupes[0]!r}" if dupes else "an empty column name"
                    raise InputError(f"{path} line {line}: the header has {what}; give every column a unique name")
                continue
            if len(record) != len(header):
                raise InputError(f"{path} line {line} has {len(record)} fields but the header has {len(header)}; "
                                 f"quote values that contain '{delimiter}' or fix the row")
            yield Row(line, dict(zip(header, record)))
    except csv.Error as e:
        raise InputError(f"malformed CSV at {path} line {reader.line_num}: {e}; fix the quoting of that row") from None


def label_of(value: Any, *, where: str, what: str) -> str | None:
    """A class label as a string: 'refund', 3 -> '3', 2.0 -> '2', true -> 'true'; None or '' -> None."""
    if value is None or (isinstance(value, str) and value == ""):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    raise InputError(f"{what} at {where} is {json.dumps(value)[:40]}, not a single label; "
                     f"classification needs one label per example (use --task extraction for objects)")


def number_of(value: Any, *, where: str, what: str) -> float:
    """A finite number from a JSON number or a CSV string; anything else is bad input."""
    if isinstance(value, bool):
        raise InputError(f"{what} at {where} is {value!r}, not a number; write the metric as a number")
    if isinstance(value, (int, float)):
        x = float(value)
    else:
        try:
            x = float(str(value).strip())
        except ValueError:
            raise InputError(f"{what} {value!r} at {where} is not a number; write the metric as a number "
                             f"(e.g. 0.734)") from None
    if not math.isfinite(x):
        raise InputError(f"{what} {value!r} at {where} is not finite; remove the row or rerun that evaluation")
    return x


def require_columns(rows: Sequence[Row], columns: Sequence[str], path: str | os.PathLike[str], *,
                    options: dict[str, str] | None = None) -> None:
    """Raise one line naming the first missing column, the columns the file has and the option to point elsewhere."""
    for row in rows:
        for col in columns:
            if col not in row.fields:
                option = (options or {}).get(col)
                fix = f"rename the column or pass {option} NAME" if option else "add the column"
                have = ", ".join(repr(c) for c in row.fields) or "none"
                raise InputError(f"{path} line {row.line} has no {col!r} field (fields: {have}); {fix}")


@dataclass(frozen=True)
class Prediction:
    """One example: its id, the gold value, the prediction (as read) and the remaining fields (metadata)."""

    id: str
    gold: Any
    pred: Any
    line: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictionSet:
    """The predictions of one file, in file order, with unique ids."""

    path: str
    sha256: str
    predictions: tuple[Prediction, ...]
    id_field: str = "id"
    gold_field: str = "gold"
    pred_field: str = "pred"

    def __len__(self) -> int:
        return len(self.predictions)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.predictions)

    def by_id(self) -> dict[str, Prediction]:
        return {p.id: p for p in self.predictions}

    def where(self, p: Prediction) -> str:
        return f"{self.path} line {p.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "examples": len(self.predictions)}


def read_predictions(path: str | os.PathLike[str], *, id_field: str = "id", gold_field: str = "gold",
                     pred_field: str = "pred") -> PredictionSet:
    """Read a prediction file: every record needs the id and gold fields; the pred field may be null or empty.

    Raises:
        InputError: the reader's errors, a missing column, an empty id or gold, a duplicate id.
    """
    rows, digest = read_rows(path, what="predictions")
    require_columns(rows, [id_field, gold_field], path,
                    options={id_field: "--id-field", gold_field: "--gold-field"})
    if not any(pred_field in r.fields for r in rows):
        require_columns(rows, [pred_field], path, options={pred_field: "--pred-field"})
    seen: dict[str, int] = {}
    out: list[Prediction] = []
    for row in rows:
        raw_id = row.fields[id_field]
        ident = None if isinstance(raw_id, (dict, list)) else label_of(raw_id, where=f"{path} line {row.line}", what="id")
        if ident is None:
            raise InputError(f"{path} line {row.line} has an empty or non-scalar id; give every example a unique id")
        if ident in seen:
            raise InputError(f"duplicate id {ident!r} at {path} lines {seen[ident]} and {row.line}; ids must be unique")
        seen[ident] = row.line
        gold = row.fields[gold_field]
        if gold is None or gold == "":
            raise InputError(f"{path} line {row.line} (id {ident!r}) has no gold value; fill it or drop the example")
        meta = {k: v for k, v in row.fields.items() if k not in (id_field, gold_field, pred_field)}
        out.append(Prediction(ident, gold, row.fields.get(pred_field), row.line, meta))
    return PredictionSet(str(path), digest, tuple(out), id_field, gold_field, pred_field)
