"""Truncation observed, not guessed: while a collate runs, the tokenizer's one encoding funnel (`_encode_plus`, which
`__call__`, `encode` and `apply_chat_template` all reach) also encodes the same text untruncated, and the
difference is what was cut."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def watch_truncation(tok: Any, cuts: list[int]) -> Iterator[list[int]]:
    """While the collate runs, every truncating encode through the tokenizer also records how many tokens each
    sequence lost (its untruncated length - its kept length). Yields [number of encode calls] (0 throughout when
    the tokenizer is not a transformers one, or the collate never encodes: pre-tokenized data)."""
    calls = [0]
    original = getattr(tok, "_encode_plus", None) if tok is not None else None
    if original is None:
        yield calls
        return
    from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy

    def watched(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        calls[0] += 1
        strategy = kwargs.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
        if strategy not in (TruncationStrategy.DO_NOT_TRUNCATE, "do_not_truncate", False, None):
            plain = {**kwargs, "padding_strategy": PaddingStrategy.DO_NOT_PAD, "return_tensors": None,
                     "return_overflowing_tokens": False, "verbose": False}
            full = original(*args, **{**plain, "truncation_strategy": TruncationStrategy.DO_NOT_TRUNCATE})
            kept = original(*args, **plain)
            cuts.extend(max(0, a - b) for a, b in zip(_lengths(full), _lengths(kept), strict=False))
        return out

    own = vars(tok).get("_encode_plus")          # an instance attribute of the user's own, put back after
    tok._encode_plus = watched
    try:
        yield calls
    finally:
        if own is None:
            del tok._encode_plus
        else:
            tok._encode_plus = own


def _lengths(encoding: Any) -> list[int]:
    ids = encoding["input_ids"]
    if ids and isinstance(ids[0], list):
        return [len(x) for x in ids]
    return [len(ids)]


__all__ = ["watch_truncation"]
