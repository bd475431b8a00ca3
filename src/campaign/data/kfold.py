"""A group- and duplicate-aware K-fold that scikit-learn takes as `cv=` (cross_validate, GridSearchCV,
cross_val_score): rows sharing a group or a duplicate cluster (exact or near, found in the texts) form one unit,
and each unit lands in one fold, so no fold is tested on a near copy of what it trained on. With `stratify`, the
folds keep each label's share of rows, as `StratifiedGroupKFold` does. The units and the allocation are the ones
`LeakFreeSplitter` (splitter.py) forms and assigns, with k equal ratios.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .sketch import DedupConfig
from .splitter import LeakFreeSplitter

if TYPE_CHECKING:
    import numpy as np


class LeakFreeKFold:
    """K folds of whole units: `split(X, y=None, groups=None)` yields (train_idx, test_idx) k times, each row in
    exactly one test fold; `get_n_splits()` is k.

    Args:
        n_splits: k, at least 2.
        texts: the texts duplicates are searched in, one per row of X, when X is not itself the texts (a feature
            matrix); default: X, which must then hold strings.
        stratify: keep each label of y at its share in every fold (when y is given).
        seed: the tie-break order of units of equal size, and the MinHash seed.
        dedup: near-duplicate settings (DedupConfig; default: character 5-grams, Jaccard >= 0.8, seed `seed`).
    Attributes after split(): `folds_` (test fold per row), `units_` (unit id per row), `dedup_` (DedupResult).
    """

    def __init__(self, n_splits: int = 5, *, texts: Sequence[str] | None = None, stratify: bool = True,
                 seed: int = 0, dedup: DedupConfig | None = None, progress: bool | None = None) -> None:
        if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 2:
            raise InputError(f"n_splits {n_splits!r} must be an integer of at least 2 (k of the K folds)")
        self.n_splits = n_splits
        self.texts, self.stratify, self.seed, self.dedup, self.progress = texts, stratify, seed, dedup, progress
        self._splitter = LeakFreeSplitter([1.0] * n_splits, stratify=stratify, seed=seed, dedup=dedup,
                                          progress=progress)
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
            InputError: X that is not texts and no texts=, texts of another length, fewer units than folds.
        """
        import numpy as np

        n = X.shape[0] if getattr(X, "shape", ()) else len(X)    # a sparse matrix has no len()
        texts = self.texts if self.texts is not None else X
        if len(texts) != n:
            raise InputError(f"texts= has {len(texts)} values for {n} rows of X; give one text per row")
        if not all(isinstance(t, str) for t in texts):
            raise InputError("X is not a sequence of texts: pass the rows' texts as LeakFreeKFold(texts=...) so "
                             "duplicates can be found")
        labels = None if y is None else [v.item() if hasattr(v, "item") else v for v in y]
        folds = self._splitter.assign(list(texts), labels, groups)
        units_of = self._splitter.units_
        assert units_of is not None
        self.units_, self.dedup_ = units_of, self._splitter.dedup_
        units = len(np.unique(units_of))
        if units < self.n_splits or len(np.unique(folds)) < self.n_splits:
            raise InputError(f"{n} rows form {units} unit(s) (groups and duplicate clusters kept whole): fewer "
                             f"than {self.n_splits} folds; use fewer folds")
        self.folds_ = folds
        return folds


__all__ = ["LeakFreeKFold"]
