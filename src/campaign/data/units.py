"""Atomic units of a split: rows that must stay together (a shared group value, an exact or near duplicate, a pair
found by the check of the written files), and what to tell the user about them: which links chain rows into a
unit too large to place, and duplicates inside the input that carry different labels.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .dedup import DedupResult, connected_components

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class UnitInputs:
    """What an engine found that a split's units are formed from: the duplicate cluster of each row, and the rows
    sharing a group value, as group columns (one value per row and group field) or as linked pairs of rows."""

    cluster_of: Any
    groups: Sequence[Sequence[Any]] = ()
    links: Sequence[tuple[int, int]] = ()


def atomic_units(n: int, *, groups: Sequence[Sequence[Any]] = (),
                 cluster_of: Sequence[int] | None = None,
                 links: Sequence[tuple[int, int]] = ()) -> np.ndarray:
    """Unit id (the smallest row index of the unit) per row: rows sharing any group value (per field), a
    duplicate cluster or a link (a pair of rows) are one unit, transitively. Missing group values (None) link
    nothing."""
    import numpy as np

    a, b = [], []
    for col in groups:
        first: dict[Any, int] = {}
        for i, v in enumerate(col):
            if v is not None:
                j = first.setdefault(v, i)
                if j != i:
                    a.append(i)
                    b.append(j)
    for i, j in links:
        a.append(i)
        b.append(j)
    aa = np.asarray(a, dtype=np.int64)
    bb = np.asarray(b, dtype=np.int64)
    if cluster_of is not None:
        c = np.asarray(cluster_of, dtype=np.int64)
        moved = np.flatnonzero(c != np.arange(n))
        aa, bb = np.concatenate((aa, moved)), np.concatenate((bb, c[moved]))
    return connected_components(n, aa, bb)


def _largest_inside(units: np.ndarray, rows: np.ndarray) -> int:
    import numpy as np

    return int(np.unique(units[rows], return_counts=True)[1].max())


def describe_largest_unit(units: np.ndarray, groups: Mapping[str, Sequence[Any]], dedup: DedupResult, *,
                          links: Sequence[tuple[int, int]] = (), smallest_share: float) -> str | None:
    """What chains the largest unit when it is larger than the smallest split can take (None otherwise): the
    near-duplicate pairs and group values inside it, how large it would be without each kind of link (units
    recomputed without it), and what to change.

    Args:
        units: unit id per row (atomic_units); groups: {field: values per row, None for missing}.
        smallest_share: the smallest split's target fraction of rows.
    """
    import numpy as np

    n = len(units)
    ids, sizes = np.unique(units, return_counts=True)
    size = int(sizes.max())
    if not n or size <= smallest_share * n:
        return None
    rows = np.flatnonzero(units == ids[sizes.argmax()])
    inside = set(rows.tolist())
    near = [p for p in dedup.near_pairs if p.a in inside]
    cols = [list(c) for c in groups.values()]
    parts = []
    if near:
        lo, hi = min(p.jaccard for p in near), max(p.jaccard for p in near)
        parts.append(f"{len(near):,} near-duplicate pair(s) (Jaccard {lo:.2f}-{hi:.2f})")
    for name, col in groups.items():
        values = Counter(col[r] for r in rows.tolist() if col[r] is not None)
        if values:
            top, k = values.most_common(1)[0]
            parts.append(f"{len(values):,} value(s) of {name!r} (the largest, {top!r}, on {k:,} rows)")
    without = []
    exact = dedup.exact_of or tuple(range(n))
    if near:
        alone = atomic_units(n, groups=cols, cluster_of=exact, links=links)
        without.append(f"without the near-duplicate links its largest piece would be {_largest_inside(alone, rows):,}")
    for i, name in enumerate(groups):
        alone = atomic_units(n, groups=cols[:i] + cols[i + 1:], cluster_of=dedup.cluster_of, links=links)
        without.append(f"without {name!r}, {_largest_inside(alone, rows):,}")
    fix = []
    if near:
        fix.append("raise --near-threshold (templated texts chain through their shared boilerplate), use word "
                   "shingles (--shingle word --ngram 3), or point --text at a field without the template")
    if groups:
        fix.append("check that the group field names what must not straddle (a user, a document), not a broad "
                   "category")
    chained = " and ".join(parts) or "exact duplicates"
    return (f"the largest unit holds {size:,} rows ({size / n:.1%}), more than the smallest split's "
            f"{smallest_share:.0%}: {chained} chain it" + (f"; {'; '.join(without)} rows" if without else "")
            + (f". To break it: {'; or '.join(fix)}" if fix else ""))


def label_conflicts(dedup: DedupResult, labels: Sequence[Any], where: Sequence[str], *,
                    examples: int = 3) -> tuple[int, int, list[str]]:
    """Duplicate clusters (the same or nearly the same text) whose rows carry different labels: (clusters, rows
    in them, up to `examples` descriptions 'line 5 'refund' vs line 77 'billing''). Rows without a label are not
    compared."""
    clusters = rows = 0
    shown: list[str] = []
    for members in dedup.clusters:
        labelled = [(labels[i], i) for i in members if labels[i] is not None]
        distinct = {str(v) for v, _ in labelled}
        if len(distinct) < 2:
            continue
        clusters += 1
        rows += len(labelled)
        if len(shown) < examples:
            first: dict[str, int] = {}
            for v, i in labelled:
                first.setdefault(str(v), i)
            (va, ia), (vb, ib) = sorted(first.items(), key=lambda t: t[1])[:2]
            shown.append(f"{where[ia]} {va!r} vs {where[ib]} {vb!r}")
    return clusters, rows, shown
