"""Manual review: a sample of errors stratified by cell, written as a CSV sheet; the sheet's tags read back.

The loop: `--review-sheet review.csv` writes up to `per_cell` examples of every error cell (gold -> pred for
classification, the failure kind for extraction) with empty `tag` and `note` columns; a person fills the tags
(several per example separated by ';'); `--taxonomy review.csv` counts the errors per tag.
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_text
from ..results import Record
from .predictions import read_rows, require_columns
from .stats import numpy

CORE_COLUMNS = ("id", "gold", "pred", "cell", "tag", "note")


@dataclass(frozen=True)
class ReviewCandidate:
    """One example that may go on the sheet: its id, values as text, its cell, and its metadata."""

    id: str
    gold: str
    pred: str
    cell: str
    error: bool
    meta: dict[str, Any]


def as_text(value: Any) -> str:
    """A value as one CSV cell: strings as they are, everything else as compact JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def sample_for_review(candidates: Sequence[ReviewCandidate], *, per_cell: int = 5, correct_per_cell: int = 0,
                      seed: int = 0) -> list[ReviewCandidate]:
    """Up to `per_cell` examples drawn uniformly without replacement from each error cell (largest cells
    first, file order within a cell), plus up to `correct_per_cell` from each correct cell for calibration."""
    if per_cell < 1 or correct_per_cell < 0:
        raise InputError(f"per-cell count must be >= 1 (got {per_cell}); "
                         f"correct per cell >= 0 (got {correct_per_cell})")
    np = numpy()
    rng = np.random.default_rng(seed)
    cells: dict[tuple[bool, str], list[int]] = {}
    for i, c in enumerate(candidates):
        cells.setdefault((c.error, c.cell), []).append(i)
    order = sorted(cells, key=lambda k: (not k[0], -len(cells[k]), k[1]))
    out: list[ReviewCandidate] = []
    for key in order:
        members = cells[key]
        want = per_cell if key[0] else correct_per_cell
        if want == 0:
            continue
        chosen = sorted(rng.choice(len(members), size=min(want, len(members)), replace=False))
        out.extend(candidates[members[j]] for j in chosen)
    return out


def write_review_sheet(path: str | os.PathLike[str], rows: Sequence[ReviewCandidate], *,
                       inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Write the sheet atomically: id, gold, pred, cell, tag, note, then the metadata fields. Never over an input."""
    target = Path(path)
    for src in inputs:
        if target.resolve() == Path(src).resolve():
            raise InputError(f"the review sheet {str(target)!r} is an input file; write the sheet to another path")
    meta_cols: list[str] = []
    for r in rows:
        meta_cols.extend(k for k in r.meta if k not in meta_cols and k not in CORE_COLUMNS)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CORE_COLUMNS, *meta_cols])
    for r in rows:
        w.writerow([r.id, r.gold, r.pred, r.cell, "", "", *(as_text(r.meta.get(k)) for k in meta_cols)])
    return atomic_write_text(target, buf.getvalue())


@dataclass(frozen=True)
class TagCount(Record):
    """Errors carrying one tag: count, share of the tagged errors, rate over all examples."""

    tag: str
    errors: int
    share_of_tagged: float
    rate: float
    correct: int          # examples with this tag whose prediction is correct (a tagging mistake, or a bad gold)


@dataclass(frozen=True)
class TaxonomySummary(Record):
    """Error counts and rates per tag, from a filled review sheet (id -> tag)."""

    path: str
    examples: int
    errors: int
    tagged_errors: int
    untagged_errors: int
    tags: tuple[TagCount, ...]
    notes: tuple[str, ...] = ()


def summarize_taxonomy(path: str | os.PathLike[str], *, ids: Sequence[str],
                       error_ids: Iterable[str]) -> TaxonomySummary:
    """Count errors per tag. Rows: id, tag (empty tags skipped; 'a;b' is two tags; an id may repeat).

    Raises:
        InputError: missing id/tag columns, or ids that are not in the predictions.
    """
    rows, _ = read_rows(path, what="taxonomy")
    require_columns(rows, ["id", "tag"], path)
    known = set(ids)
    errors = set(error_ids)
    tags_of: dict[str, set[str]] = {}
    unknown: list[str] = []
    for row in rows:
        ident = as_text(row.fields["id"])
        if ident not in known:
            unknown.append(ident)
            continue
        tags = {t.strip() for t in as_text(row.fields["tag"]).split(";") if t.strip()}
        if tags:
            tags_of.setdefault(ident, set()).update(tags)
    if unknown:
        raise InputError(f"{path} tags {len(unknown)} id(s) that are not in the predictions (e.g. {unknown[0]!r}); "
                         f"tag ids from the same predictions file")
    tagged_errors = [i for i in tags_of if i in errors]
    err_count: Counter[str] = Counter(t for i in tagged_errors for t in tags_of[i])
    ok_count: Counter[str] = Counter(t for i, ts in tags_of.items() if i not in errors for t in ts)
    n = len(known)
    counts = [TagCount(tag, err_count[tag], err_count[tag] / len(tagged_errors) if tagged_errors else 0.0,
                       err_count[tag] / n if n else 0.0, ok_count[tag])
              for tag in sorted(set(err_count) | set(ok_count), key=lambda t: (-err_count[t], t))]
    notes = []
    if len(tagged_errors) < len(errors):
        notes.append(f"{len(tagged_errors)} of {len(errors)} errors are tagged; shares are over the tagged ones")
    if sum(ok_count.values()):
        notes.append(f"{sum(1 for i in tags_of if i not in errors)} tagged example(s) are correct predictions "
                     f"(column 'correct'): check the tag or the gold label")
    return TaxonomySummary(str(path), n, len(errors), len(tagged_errors), len(errors) - len(tagged_errors),
                           tuple(counts), tuple(notes))
