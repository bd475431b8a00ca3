"""The figures `campaign inspect` gathers per example while the whole set streams through the collate, and the
small rules that read a row (where its padding sits, text compared without spacing), shared by the run
(train/inspect_run.py) and the checks (train/inspect_checks.py)."""
from __future__ import annotations

from dataclasses import dataclass

IGNORE_INDEX = -100          # transformers' (and torch's cross_entropy default) label for "no loss here"
# share of loss positions that must agree before the label layout is called aligned or pre-shifted
LAYOUT_SHARE = 0.9
# float pixel values above this were never scaled from 0-255 (normalized images lie within about -3..3)
UNSCALED_PIXEL = 10.0


@dataclass
class ExampleStats:
    """Per example, gathered while the whole set streams through the collate."""

    label: str
    length: int = 0
    loss_positions: int = 0
    truncated_tokens: int | None = None     # summed over the truncating tokenizer calls of its collate
    answer_kept: bool | None = None
    answer_tokens: int | None = None        # the answer text's own tokens (with target_field)
    loss_real: int = 0                      # loss positions on real tokens (attention mask 1)
    starts_bos: bool = False
    double_bos: bool = False
    eos_in_input: bool = False
    eos_learned: bool = False
    same: int = 0                 # loss positions whose label is the input token there (HF convention)
    next: int = 0                 # ... whose label is the next input token (already shifted)
    shape: tuple[int, ...] = ()
    pixels: tuple[float, float, float, float] | None = None   # min, max, mean, std


def padding_side(attn: list[int]) -> str:
    """Where a row's padding sits: right (zeros after the tokens), left, none, or mixed."""
    if all(attn):
        return "none"
    first = attn.index(1) if 1 in attn else len(attn)
    last = len(attn) - attn[::-1].index(1) if 1 in attn else 0
    inner = all(attn[first:last])
    if first == 0 and inner:
        return "right"
    if last == len(attn) and inner:
        return "left"
    return "mixed"


def one_side(sides: set[str]) -> str:
    """The padding side of the whole set from its rows' sides: one side, none, or mixed."""
    if not sides:
        return "none"
    return next(iter(sides)) if len(sides) == 1 else "mixed"


def plain_text(text: str) -> str:
    """Text compared without whitespace and case (decoders differ in spacing; normalizers lowercase)."""
    return "".join(text.split()).casefold()


__all__ = ["ExampleStats", "IGNORE_INDEX", "LAYOUT_SHARE", "UNSCALED_PIXEL", "one_side", "padding_side",
           "plain_text"]
