"""What `campaign inspect` returns: the whole set after the exact preprocessing, its examples shown, per-class
summaries, the special tokens, and the checks (train/inspect_checks.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import Check
from ..results import Record, Result

SCHEMA = "campaign.inspect/1"


@dataclass(frozen=True)
class Example(Record):
    """One example after preprocessing. tokens/loss/padding: per position of its row in the batch shown (loss:
    labels != -100 there; padding: attention mask 0); marked: the decoded row, loss positions in « », padding
    collapsed; target: the decoded loss positions; truncated_tokens: what the tokenizer cut (None: not observed);
    answer_kept: the loss positions hold the answer (None without target_field). Images: shape, tokens empty."""

    index: int
    label: str
    length: int
    loss_positions: int
    truncated_tokens: int | None
    answer_kept: bool | None
    marked: str = ""
    target: str = ""
    answer: str | None = None
    tokens: tuple[str, ...] = ()
    loss: tuple[bool, ...] = ()
    padding: tuple[bool, ...] = ()
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClassSummary(Record):
    """Per class over the whole set: lengths in tokens (text) or shapes and pixel statistics (images)."""

    label: str
    examples: int
    min_length: int = 0
    median_length: float = 0.0
    max_length: int = 0
    truncated: int = 0
    answer_lost: int = 0
    no_loss: int = 0
    shapes: tuple[str, ...] = ()
    pixel_min: float | None = None
    pixel_max: float | None = None
    pixel_mean: float | None = None
    pixel_std: float | None = None
    transform: str | None = None  # this class's own transform, when the setup gives one per class


@dataclass(frozen=True)
class SpecialTokens(Record):
    """The tokenizer's BOS/EOS/pad and what the preprocessed examples do with them (counts over the whole set)."""

    bos: str | None
    bos_id: int | None
    eos: str | None
    eos_id: int | None
    pad: str | None
    pad_id: int | None
    pad_is_eos: bool
    start_with_bos: int
    double_bos: int
    eos_in_input: int
    eos_learned: int


@dataclass(frozen=True)
class InspectReport(Result):
    """The whole set after preprocessing: counts, per-class summaries, examples shown, special tokens, checks."""

    kind: str                     # text | image
    examples: int
    label_kind: str               # token (causal/seq2seq LM) | sequence (one class per example) | none
    label_field: str | None
    target_field: str | None
    classes: tuple[ClassSummary, ...]
    shown: tuple[Example, ...]
    longest: Example
    shortest: Example
    truncated: int | None         # examples the tokenizer cut (None: truncation not observable)
    tokens_cut: int | None
    answer_lost: int | None
    no_loss: int
    padding_side: str             # right | left | mixed | none (as seen in the batches)
    tokenizer_padding_side: str | None
    truncation_side: str | None
    special: SpecialTokens | None
    transform: str | None
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    source: str = ""
    schema: str = SCHEMA


__all__ = ["ClassSummary", "Example", "InspectReport", "SCHEMA", "SpecialTokens"]
