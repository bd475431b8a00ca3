"""A batch after the exact preprocessing (`campaign inspect`): the user's own collate function run over the whole
dataset, one example at a time, so that every count covers the set and not a sample: tokens kept, tokens cut by the
tokenizer's truncation, positions where the loss is computed (labels != -100), answers lost, special tokens, the
padding side; then a few examples per class collated together as the training loop batches them, decoded with the
loss positions marked. Images (a `pixel_values` tensor): shapes and value ranges per class.

Truncation is observed, not guessed: while the collate runs, the tokenizer's one encoding funnel (`_encode_plus`,
which `__call__`, `encode` and `apply_chat_template` all reach) also encodes the same text untruncated, and the
difference is what was cut. With `target_field` the answer itself is compared: an example keeps its answer when the
decoded loss positions contain the answer text (whitespace and case aside, through the same tokenizer).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InputError
from .inspect_report import SCHEMA, ClassSummary, Example, InspectReport, SpecialTokens
from .inspect_run import InspectRun, collate_one, examples_of
from .inspect_stats import ExampleStats
from .setup import Setup, load_setup


def inspect(setup: str | Callable[[], Any] | Setup | Mapping[str, Any], *, examples: int = 2,
            progress: Callable[[str], None] | None = None) -> InspectReport:
    """Run the setup's collate over its whole dataset and report what the model will see.

    Args:
        setup: 'FILE.py:FUNCTION', a factory, a Setup or a dict (a notebook's live objects) with dataset,
            collate and (text) tokenizer.
        examples: examples shown per class, collated together as one batch.
        progress: called with each phase: building the setup (from a file), then 'collating example 1,201 of
            24,000' now and then over the set, then the examples shown.
    Raises:
        InputError: no dataset, no collate, no tokenizer for text, a collate that raises or returns neither
            input_ids nor pixel_values, a label_field or target_field the examples lack.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise InputError(f"examples={examples!r} must be a whole number >= 1 (examples shown per class)")
    if progress is not None and isinstance(setup, str):       # the user's file runs: imports, tokenizer, data
        progress(f"building the setup ({setup})")
    if isinstance(setup, Mapping):
        fields = dict(setup)
        setup = lambda: fields  # noqa: E731
    s = load_setup(setup, needs=())
    where = s.source or "the setup"
    data = examples_of(s.dataset, where)
    if s.collate is None:
        raise InputError(f"{where}: no collate function; return collate=<examples -> batch>, the exact "
                         "preprocessing of your training loop")
    first = data[0]
    for name in ("label_field", "target_field"):
        key = getattr(s, name)
        if key is not None and not (isinstance(first, Mapping) and key in first):
            have = ", ".join(map(str, first)) if isinstance(first, Mapping) else type(first).__name__
            raise InputError(f"{where}: {name} {key!r} is not a field of the examples (they have {have})")
    label_field = s.label_field or ("label" if isinstance(first, Mapping) and "label" in first else None)
    probe = collate_one(s.collate, [first], where, 0)
    kind = "image" if "pixel_values" in probe else "text"
    if kind == "text" and "input_ids" not in probe:
        raise InputError(f"{where}: collate returned {', '.join(map(str, probe)) or 'nothing'}; inspect reads "
                         "input_ids (text) or pixel_values (images)")
    tok = s.tokenizer
    if kind == "text" and tok is None:
        raise InputError(f"{where}: no tokenizer; return tokenizer=<the one your collate uses> to decode the batch")
    ctx = InspectRun(s, tok, where, label_field, kind)

    stats: list[ExampleStats] = []
    step = max(1, len(data) // 20)
    for i in range(len(data)):
        if progress is not None and i % step == 0:
            progress(f"collating example {i + 1:,} of {len(data):,}")
        stats.append(ctx.one(data, i))
    if progress is not None:
        progress("collating the examples shown")
    return ctx.report(data, stats, examples)


__all__ = ["SCHEMA", "ClassSummary", "Example", "InspectReport", "SpecialTokens", "inspect"]
