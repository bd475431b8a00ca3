"""A group- and duplicate-aware K-fold that scikit-learn takes as `cv=` (cross_validate, GridSearchCV,
cross_val_score): rows sharing a group or a duplicate cluster (exact or near, found in the texts) form one unit,
and each unit lands in one fold, so no fold is tested on a near copy of what it trained on. With `stratify`, the
folds keep each label's share of rows, as `StratifiedGroupKFold` does. The units and the allocation are the ones
`LeakFreeSplitter` (splitter.py) forms and assigns, with k equal ratios.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .sketch import DedupConfig
from .splitter import LeakFreeSplitter, assign_rows

if TYPE_CHECKING:
    import numpy as np


class LeakFreeKFold:
    """K folds of whole units: `split(X, y=None, groups=None)` yields (train_idx, test_idx) k times, each row in
    exactly one test fold; `get_n_splits()` is k.

    Args:
        n_splits: k, at least 2 and at most the units the rows form (refused at once when over the rows).
        texts: the texts duplicates are searched in, one per row of X, when X is not itself the texts (a feature
            matrix); default: X, which must then hold strings.
        stratify: keep each label of y at its share in every fold (when y is given).
        seed: an integer: the tie-break order of units of equal size, and the MinHash seed.
        dedup: near-duplicate settings (DedupConfig; default: character 5-grams, Jaccard >= 0.8, seed `seed`).
    Attributes after split(): `folds_` (test fold per row), `units_` (unit id per row), `dedup_` (DedupResult).
    """

    def __init__(self, n_splits: int = 5, *, texts: Sequence[str] | None = None, stratify: bool = True,
                 seed: int = 0, dedup: DedupConfig | None = None, progress: bool | None = None) -> None:
        if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) or n_splits < 2:
            raise InputError(f"n_splits {n_splits!r} must be an integer of at least 2 (k of the K folds)")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise InputError(f"seed {seed!r} must be an integer (the tie-break order and the MinHash seed), "
                             "e.g. seed=0")
        if dedup is not None and not isinstance(dedup, DedupConfig):
            raise InputError(f"dedup {dedup!r} is not a DedupConfig; pass e.g. dedup=DedupConfig(shingle='word') "
                             "(campaign.data.DedupConfig), or leave it out for character 5-grams at Jaccard >= 0.8")
        self.n_splits: int = int(n_splits)
        self.seed: int = int(seed)
        self.texts: Sequence[str] | None = None if texts is None else _sequence(texts, "texts")
        self.stratify: bool = stratify
        self.dedup: DedupConfig | None = dedup
        self.progress: bool | None = progress
        self.folds_: np.ndarray | None = None
        self.units_: np.ndarray | None = None
        self.dedup_: Any = None

    def __repr__(self) -> str:
        return f"LeakFreeKFold(n_splits={self.n_splits}, stratify={self.stratify}, seed={self.seed})"

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return self.n_splits

    def split(self, X: Any, y: Sequence[Any] | None = None,
              groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None
              ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(train_idx, test_idx) for each fold in turn: the fold's rows are the test rows, all others train."""
        import numpy as np

        folds = self.assign(X, y, groups)
        for f in range(self.n_splits):
            yield np.flatnonzero(folds != f), np.flatnonzero(folds == f)

    def assign(self, X: Any, y: Sequence[Any] | None = None,
               groups: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None) -> np.ndarray:
        """The test fold of each row (0..k-1).

        Raises:
            InputError: X that is not texts and no texts=, texts of another length, a generator or one string
                where rows are expected, more folds than rows or than units.
        """
        import numpy as np

        if not hasattr(X, "shape"):
            X = _sequence(X, "X")
        n = X.shape[0] if getattr(X, "shape", ()) else len(X)    # a sparse matrix has no len()
        texts = self.texts if self.texts is not None else X
        if len(texts) != n:
            raise InputError(f"texts= has {len(texts)} values for {n} rows of X; give one text per row")
        if not all(isinstance(t, str) for t in texts):
            raise InputError("X is not a sequence of texts: pass the rows' texts as LeakFreeKFold(texts=...) so "
                             "duplicates can be found")
        if self.n_splits > n:       # refused before the search: each fold tests at least one row
            raise InputError(f"n_splits {self.n_splits} is more than the {n} rows; use at most {n} folds")
        labels = None if y is None else [v.item() if hasattr(v, "item") else v for v in _sequence(y, "y")]
        if groups is not None and not isinstance(groups, Mapping):
            groups = _sequence(groups, "groups")
        splitter = LeakFreeSplitter([1.0] * self.n_splits, stratify=self.stratify, seed=self.seed, dedup=self.dedup,
                                    progress=self.progress)
        units_of = splitter.form_units(list(texts), labels, groups)
        self.units_, self.dedup_ = units_of, splitter.dedup_
        units = len(np.unique(units_of))
        folds = None if units < self.n_splits else assign_rows(units_of, splitter.ratios, labels=labels,
                                                                  stratify=self.stratify, seed=self.seed)
        if folds is None or len(np.unique(folds)) < self.n_splits:
            raise InputError(f"{n} rows form {units} unit(s) (groups and duplicate clusters kept whole): fewer "
                             f"than {self.n_splits} folds; use fewer folds")
        self.folds_ = folds
        return folds


def _sequence(value: Any, name: str) -> Any:
    """value when it is a sequence of rows (a list, an array, a Series); one string (its characters would be the
    rows) or a generator (no length, read once; scikit-learn refuses it too) is refused, naming `name`."""
    if isinstance(value, (str, bytes)):
        raise InputError(f"{name} is one string ({value[:40]!r}), not a sequence of rows; pass a list with one "
                         "text per row")
    if not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        raise InputError(f"{name} is a {type(value).__name__}, not a sequence with a length; pass a list or an "
                         f"array with one value per row (e.g. list({name}))")
    return value


__all__ = ["LeakFreeKFold"]
