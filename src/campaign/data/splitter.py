"""The leak-free split algorithm: groups and duplicate clusters are atomic units; ratios are met as fractions of
rows (per label when stratified); a temporal split orders units by date. No files here: split.py is the pipeline
that reads, writes and checks them, on either engine.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .dedup import DedupResult, find_duplicates
from .read import parse_date, scalar
from .sketch import DedupConfig, mix64, mix_int
from .units import atomic_units

if TYPE_CHECKING:
    import numpy as np

DEFAULT_NAMES = {1: ("all",), 2: ("train", "test"), 3: ("train", "val", "test")}
NO_LABEL = "(none)"


def parse_ratios(ratios: str | Sequence[float]) -> tuple[float, ...]:
    """'80/10/10', '0.8,0.1,0.1', '8:1:1' or numbers -> fractions summing to 1."""
    if isinstance(ratios, str):
        parts = [p for p in re.split(r"[/,:\s]+", ratios.strip()) if p]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise InputError(f"ratios {ratios!r} are not numbers; write e.g. 80/10/10 or 0.8,0.1,0.1") from None
    else:
        values = [float(v) for v in ratios]
    if len(values) < 2 or any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError(f"ratios {ratios!r} need two or more positive parts; write e.g. 80/10/10")
    total = sum(values)
    return tuple(v / total for v in values)


def split_names(names: str | Sequence[str] | None, k: int) -> tuple[str, ...]:
    """Names of the k splits: given ('train,val,test'), or train/test, train/val/test, split1..k."""
    if names is None:
        return DEFAULT_NAMES.get(k, tuple(f"split{i + 1}" for i in range(k)))
    out = tuple(n.strip() for n in (names.split(",") if isinstance(names, str) else names))
    if len(out) != k or len(set(out)) != k or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) and n.strip(".")
                                                       for n in out):
        raise InputError(f"split names {names!r} must be {k} distinct names of letters, digits, '_', '-' or '.' "
                         f"(not only dots; one per ratio); write e.g. train,val,test")
    return out


def seeded_keys(n: int, seed: int, salt: int) -> np.ndarray:
    """n pseudo-random uint64 keys, the same on every machine for (seed, salt): the tie-break order."""
    import numpy as np

    return mix64(np.arange(n, dtype=np.uint64) ^ np.uint64(mix_int(seed * 0x9E3779B97F4A7C15 + salt)))


def assign_units(unit_of: np.ndarray, ratios: Sequence[float], *, labels: Sequence[Any] | None = None,
                 seed: int = 0) -> np.ndarray:
    """Split index per row, moving whole units: largest units first (ties in a seeded order), each to the split
    where it most reduces the squared shortfall against the targets, in rows and, with labels, in rows per label.

    Targets are ratio x rows (and ratio x rows of each label); each label's term is weighted by its share of rows,
    so every row counts the same. Small units placed last fill the remainders; then refine_units moves and swaps
    units while that cost falls (the last units alone, e.g. single rows all of one label, cannot balance every
    label). Deterministic for a seed.
    """
    import numpy as np

    n = len(unit_of)
    k = len(ratios)
    _, unit = np.unique(unit_of, return_inverse=True)
    n_units = int(unit.max()) + 1 if n else 0
    size = np.bincount(unit, minlength=n_units)
    if labels is not None:
        lab_names, lab = np.unique(np.asarray([NO_LABEL if v is None else str(v) for v in labels], dtype=object),
                                   return_inverse=True)
    else:
        lab_names, lab = np.array([NO_LABEL], dtype=object), np.zeros(n, dtype=np.int64)
    n_lab = len(lab_names)
    # per-unit (label, count) lists
    pair = unit.astype(np.int64) * n_lab + lab
    upair, ucount = np.unique(pair, return_counts=True)
    pu, pl = upair // n_lab, upair % n_lab
    starts = np.searchsorted(pu, np.arange(n_units))
    ends = np.searchsorted(pu, np.arange(n_units), side="right")
    label_total = np.bincount(lab, minlength=n_lab).astype(float)
    order = np.lexsort((seeded_keys(n_units, seed, 1), -size))
    target = [r * n for r in ratios]
    ltarget = [[r * t for t in label_total] for r in ratios]
    count = [0.0] * k
    lcount = [[0.0] * n_lab for _ in range(k)]
    w_total = 1.0 / max(n, 1) ** 2
    w_label = [1.0 / (max(n, 1) * t) if t else 0.0 for t in label_total]
    stratified = labels is not None
    out_unit = np.empty(n_units, dtype=np.int64)
    pl_list, pc_list = pl.tolist(), ucount.tolist()
    starts_l, ends_l, size_l = starts.tolist(), ends.tolist(), size.tolist()
    for u in order.tolist():
        z = size_l[u]
        best, best_key = 0, None
        for s in range(k):
            cost = w_total * z * (2 * (count[s] - target[s]) + z)
            if stratified:
                for p in range(starts_l[u], ends_l[u]):
                    lbl, c = pl_list[p], pc_list[p]
                    cost += w_label[lbl] * c * (2 * (lcount[s][lbl] - ltarget[s][lbl]) + c)
            key = (cost, -(target[s] - count[s]) / target[s])
            if best_key is None or key < best_key:
                best, best_key = s, key
        out_unit[u] = best
        count[best] += z
        for p in range(starts_l[u], ends_l[u]):
            lcount[best][pl_list[p]] += pc_list[p]
    refine_units(out_unit, size, pu, pl, ucount.astype(float), label_total, ratios, stratified)
    return out_unit[unit]


MIN_GAIN = 1e-6   # the least fall of refine_units' cost (scaled by rows^2; one row moved changes it by about 1)


def refine_units(out_unit: np.ndarray, size: np.ndarray, pu: np.ndarray, pl: np.ndarray, pc: np.ndarray,
                 label_total: np.ndarray, ratios: Sequence[float], stratified: bool, *,
                 max_steps: int = 5000) -> np.ndarray:
    """Improve an allocation of units (the split of each unit, changed in place) by moving one unit or swapping two
    between splits, the best step first, while the cost of assign_units falls. The greedy pass places the large
    units well but its last units (often single rows all of one label) cannot balance what is left; moves and swaps
    of any units can. Swaps are searched among the distinct shapes (size, rows per label) of the 20,000 smallest
    units, units of one shape being interchangeable; a split is never emptied.

    pu, pl, pc: the (unit, label, rows) triples sorted by unit; label_total: rows per label."""
    import numpy as np

    k, n_units, n = len(ratios), len(size), int(size.sum())
    if n_units < 2 or k < 2:
        return out_unit
    n_lab = len(label_total) if stratified else 0
    # weights of the cost scaled by n^2: rows 1, label l n / rows of l (every row counts the same)
    sw = np.concatenate([[1.0], np.sqrt(n / np.maximum(label_total, 1))]) if stratified else np.ones(1)
    dim = 1 + n_lab
    target = np.outer(np.asarray(ratios), np.concatenate([[n], label_total]) if stratified else [n])
    count = np.zeros((k, dim))
    np.add.at(count[:, 0], out_unit, size)
    if stratified:
        np.add.at(count, (out_unit[pu], 1 + pl), pc)
    dev = (count - target) * sw                       # weighted deviation per split
    x0 = size * sw[0]
    norm = x0 ** 2 + (np.bincount(pu, weights=(pc * sw[1 + pl]) ** 2, minlength=n_units) if stratified else 0)

    def proj(d: np.ndarray) -> np.ndarray:
        """x_u . d for every unit u (x_u: its weighted rows and rows per label)."""
        out = x0 * d[0]
        if stratified:
            out = out + np.bincount(pu, weights=pc * sw[1 + pl] * d[1 + pl], minlength=n_units)
        return out

    in_split = np.bincount(out_unit, minlength=k)

    def apply(u: int, a: int, b: int) -> None:
        """Move unit u from split a to split b."""
        out_unit[u] = b
        in_split[a] -= 1
        in_split[b] += 1
        step = np.zeros(dim)
        step[0] = size[u] * sw[0]
        if stratified:
            s, e = np.searchsorted(pu, u), np.searchsorted(pu, u, side="right")
            np.add.at(step, 1 + pl[s:e], pc[s:e] * sw[1 + pl[s:e]])
        dev[a] -= step
        dev[b] += step

    # swap candidates: the distinct shapes among the smallest units; their number bounds the pairs searched
    max_shapes = max(16, int((4e6 / (k * (k - 1) // 2)) ** 0.5))
    small = np.lexsort((np.arange(n_units), size))[:20_000]
    starts = np.searchsorted(pu, small).tolist()
    ends = np.searchsorted(pu, small, side="right").tolist()
    pl_l, pc_l = pl.tolist(), pc.tolist()
    key_of: dict[tuple[int, ...], int] = {}
    shape_of = np.full(n_units, -1)
    for i, u in enumerate(small.tolist()):
        key = (int(size[u]),)
        if stratified:
            key += tuple(x for j in range(starts[i], ends[i]) for x in (pl_l[j], int(pc_l[j])))
        sid = key_of.get(key)
        if sid is None:
            if len(key_of) >= max_shapes:
                continue
            sid = key_of[key] = len(key_of)
        shape_of[u] = sid
    n_shapes = len(key_of)
    X = np.zeros((n_shapes, dim))
    first = np.full(n_shapes, -1)
    cand = np.flatnonzero(shape_of >= 0)
    first[shape_of[cand[::-1]]] = cand[::-1]
    X[:, 0] = size[first] * sw[0]
    if stratified:
        for sid, u in enumerate(first.tolist()):
            s, e = np.searchsorted(pu, u), np.searchsorted(pu, u, side="right")
            X[sid, 1 + pl[s:e]] = pc[s:e] * sw[1 + pl[s:e]]
    G = X @ X.T
    xn = np.diag(G)
    cnt = np.zeros((k, n_shapes), dtype=np.int64)
    np.add.at(cnt, (out_unit[cand], shape_of[cand]), 1)

    for _ in range(max_steps):
        p = np.stack([proj(dev[s]) for s in range(k)])    # k x units
        cur = p[out_unit, np.arange(n_units)]
        delta = 2 * (p - cur) + 2 * norm                 # move to split s
        delta[out_unit, np.arange(n_units)] = np.inf
        delta[:, in_split[out_unit] <= 1] = np.inf       # never empty a split
        to, unit = np.unravel_index(np.argmin(delta), delta.shape)
        if delta[to, unit] < -MIN_GAIN:
            u, a, b = int(unit), int(out_unit[unit]), int(to)
            apply(u, a, b)
            if shape_of[u] >= 0:
                cnt[a, shape_of[u]] -= 1
                cnt[b, shape_of[u]] += 1
            continue
        # no move lowers the cost: the best swap of a shape in split a with a shape in split b
        best: tuple[float, int, int, int, int] = (-MIN_GAIN, -1, -1, -1, -1)
        for a in range(k):
            for b in range(a + 1, k):
                ia, jb = np.flatnonzero(cnt[a]), np.flatnonzero(cnt[b])
                if not len(ia) or not len(jb):
                    continue
                q = X @ (dev[b] - dev[a])
                d = 2 * (q[ia, None] - q[None, jb]) + 2 * (xn[ia, None] + xn[None, jb] - 2 * G[np.ix_(ia, jb)])
                ii, jj = np.unravel_index(np.argmin(d), d.shape)
                if float(d[ii, jj]) < best[0]:
                    best = (float(d[ii, jj]), a, b, int(ia[ii]), int(jb[jj]))
        _, a, b, i, j = best
        if a < 0:
            break
        u = int(np.flatnonzero((shape_of == i) & (out_unit == a))[0])
        v = int(np.flatnonzero((shape_of == j) & (out_unit == b))[0])
        apply(u, a, b)
        apply(v, b, a)
        cnt[a, i] -= 1
        cnt[b, i] += 1
        cnt[b, j] -= 1
        cnt[a, j] += 1
    return out_unit


def assign_temporal(unit_of: np.ndarray, dates: Sequence[float], ratios: Sequence[float], *,
                    seed: int = 0) -> np.ndarray:
    """Split index per row for a temporal split: units ordered by their latest date (ties in a seeded order) fill
    the splits in order; a unit goes to the next split once its middle row would pass the current split's
    cumulative target. Every earlier split's units end no later than any later split's units end."""
    import numpy as np

    n = len(unit_of)
    _, unit = np.unique(unit_of, return_inverse=True)
    n_units = int(unit.max()) + 1 if n else 0
    size = np.bincount(unit, minlength=n_units)
    latest = np.full(n_units, -np.inf)
    np.maximum.at(latest, unit, np.asarray(dates, dtype=float))
    order = np.lexsort((seeded_keys(n_units, seed, 2), latest))
    bounds = np.cumsum(ratios) * n
    out_unit = np.empty(n_units, dtype=np.int64)
    done, s = 0.0, 0
    for u in order.tolist():
        z = size[u]
        while s < len(ratios) - 1 and done + z / 2 > bounds[s]:
            s += 1
        out_unit[u] = s
        done += z
    return out_unit[unit]


def assign_rows(units: np.ndarray, ratios: Sequence[float], *, labels: Sequence[Any] | None = None,
                dates: Sequence[Any] | None = None, stratify: bool = True, temporal: bool = False,
                seed: int = 0) -> np.ndarray:
    """Split index per row from the rows' units: by date (temporal: assign_temporal) or by the allocation of
    assign_units (per label of `labels` when stratify)."""
    if temporal:
        stamps = [d if isinstance(d, float) else parse_date(d) for d in dates]  # type: ignore[union-attr]
        return assign_temporal(units, stamps, ratios, seed=seed)
    return assign_units(units, ratios, labels=labels if stratify else None, seed=seed)


class LeakFreeSplitter:
    """scikit-learn style splitter: `split(X, y=None, groups=None)` yields one tuple of row-index arrays, one per
    ratio (train, val, test). Rows sharing a group or a duplicate cluster (exact or near, found in X) never
    straddle splits; with `stratify`, ratios hold per label of y; with `temporal`, pass `dates=` to split().

    Attributes after split(): `units_` (unit id per row), `dedup_` (the DedupResult).
    """

    def __init__(self, ratios: str | Sequence[float] = (0.8, 0.1, 0.1), *, stratify: bool = True,
                 temporal: bool = False, seed: int = 0, dedup: DedupConfig | None = None,
                 progress: bool | None = None) -> None:
        self.ratios = parse_ratios(ratios)
        self.stratify, self.temporal, self.seed = stratify, temporal, seed
        self.dedup = dedup or DedupConfig(seed=seed)
        self.progress = progress
        self.units_: np.ndarray | None = None
        self.dedup_: DedupResult | None = None
        self._dedup_of: Any = None   # the texts dedup_ was found in (a second assign() over them reuses it)

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return 1

    def split(self, X: Sequence[str], y: Sequence[Any] | None = None,
              groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, *,
              dates: Sequence[Any] | None = None) -> Iterator[tuple[np.ndarray, ...]]:
        """X: texts; y: labels (stratification); groups: one column or {field: column}; dates: temporal split."""
        import numpy as np

        assign = self.assign(X, y, groups, dates=dates)
        yield tuple(np.flatnonzero(assign == s) for s in range(len(self.ratios)))

    def assign(self, X: Sequence[str], y: Sequence[Any] | None = None,
               groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, *,
               dates: Sequence[Any] | None = None, links: Sequence[tuple[int, int]] = ()) -> np.ndarray:
        """Split index per row (the same partition split() yields); `links` are pairs of rows (indices) that must
        stay together beyond the groups and the duplicates found in X."""
        units = self.form_units(X, y, groups, dates=dates, links=links)
        return assign_rows(units, self.ratios, labels=y, dates=dates, stratify=self.stratify,
                           temporal=self.temporal, seed=self.seed)

    def form_units(self, X: Sequence[str], y: Sequence[Any] | None = None,
                   groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None, *,
                   dates: Sequence[Any] | None = None, links: Sequence[tuple[int, int]] = ()) -> np.ndarray:
        """The unit id of each row (also `units_`): rows linked by a group, a duplicate cluster or `links`, which
        assign() then places whole (LeakFreeKFold counts them before it asks for k folds)."""
        n = len(X)
        cols: list[Sequence[Any]] = []
        if groups is not None:
            cols = list(groups.values()) if isinstance(groups, Mapping) else [groups]
        for what, col in (("y", y), ("dates", dates), *(("groups", c) for c in cols)):
            if col is not None and len(col) != n:
                raise InputError(f"{what} has {len(col)} values for {n} texts; give one per text")
        if self.temporal and dates is None:
            raise InputError("a temporal split needs dates; pass dates= (the CLI: --date FIELD)")
        dedup = self.dedup_
        if self._dedup_of is not X or dedup is None:
            dedup = self.dedup_ = find_duplicates(X, self.dedup, progress=self.progress)
            self._dedup_of = X
        # None, "" and NaN are missing group values: they link nothing
        self.units_ = atomic_units(n, groups=[[scalar(v) for v in c] for c in cols],
                                   cluster_of=dedup.cluster_of, links=links)
        return self.units_


__all__ = ["DEFAULT_NAMES", "NO_LABEL", "LeakFreeSplitter", "assign_rows", "assign_temporal", "assign_units",
           "parse_ratios", "seeded_keys", "split_names"]
