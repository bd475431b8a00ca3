"""Prediction files (JSONL, CSV/TSV or Parquet: an id, the gold value, the prediction, metadata) read with
line-numbered errors.

`read_rows` reads every row with its line number through the project's one record reader (campaign.io), and
stops at the first bad record; `read_predictions` builds a PredictionSet from it. Inputs are never modified;
errors quote the file and line and end with the fix.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..io import input_file
from ..rows import DELIMITERS, BadRecord, RecordScan, record_format

# A missing or empty prediction is a prediction of its own ("the model produced nothing"), not an error.
NO_PREDICTION = "(none)"


@dataclass(frozen=True)
class Row:
    """One record of an input file: its 1-based line number (where the record starts) and its fields."""

    line: int
    fields: dict[str, Any]


def read_rows(path: str | os.PathLike[str], *, what: str = "input") -> tuple[list[Row], str]:
    """Every record of a JSONL (.jsonl, .ndjson, .json), CSV/TSV or Parquet file, with line numbers.

    CSV header names are stripped of surrounding spaces ("id, gold, pred" names the column "gold").
    Returns:
        (rows, sha256 of the file's bytes). CSV values are strings; JSONL values are JSON values.
    Raises:
        InputError: missing file, unknown format, the first bad record (non-UTF-8, malformed JSON or CSV,
            ragged row) as "file:line: what; fix", no records.
    """
    p = input_file(path, what)
    scan = RecordScan(p, record_format(p, what))
    rows = []
    for line, _raw, record in scan:
        if isinstance(record, BadRecord):
            where = f"{p}: row {line}" if scan.fmt == "parquet" else f"{p}:{line}"
            raise InputError(f"{where}: {record.reason}; fix or remove that record")
        if scan.fmt in DELIMITERS and not any(str(v).strip() for v in record.values()):
            continue                                 # a CSV row of empty values carries no prediction
        rows.append(Row(line, record))
    if scan.fmt in DELIMITERS:
        names = [n.strip() for n in scan.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InputError(f"{p}:1: the header names the column {dupes[0]!r} twice (once with spaces around "
                             "it); give every column a unique name")
        if names != list(scan.columns):
            rows = [Row(r.line, {k.strip(): v for k, v in r.fields.items()}) for r in rows]
    if not rows:
        raise InputError(f"{what} file '{p}' has no records; write one record per line (JSONL) or after a CSV header")
    assert scan.sha256 is not None
    return rows, scan.sha256


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
    raise InputError(f"{what} at {where} is {json.dumps(value, default=str)[:40]}, not a single label; "
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
        ident = (None if isinstance(raw_id, (dict, list))
                 else label_of(raw_id, where=f"{path} line {row.line}", what="id"))
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
