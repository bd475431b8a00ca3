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

import contextlib
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Record, Result
from .setup import Setup, first_line, load_setup

SCHEMA = "campaign.inspect/1"
IGNORE_INDEX = -100          # transformers' (and torch's cross_entropy default) label for "no loss here"
# share of loss positions that must agree before the label layout is called aligned or pre-shifted
LAYOUT_SHARE = 0.9
# float pixel values above this were never scaled from 0-255 (normalized images lie within about -3..3)
UNSCALED_PIXEL = 10.0


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


@dataclass
class _Stats:
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
    data = _sequence(s.dataset, where)
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
    probe = _collate(s.collate, [first], where, 0)
    kind = "image" if "pixel_values" in probe else "text"
    if kind == "text" and "input_ids" not in probe:
        raise InputError(f"{where}: collate returned {', '.join(map(str, probe)) or 'nothing'}; inspect reads "
                         "input_ids (text) or pixel_values (images)")
    tok = s.tokenizer
    if kind == "text" and tok is None:
        raise InputError(f"{where}: no tokenizer; return tokenizer=<the one your collate uses> to decode the batch")
    ctx = _Context(s, tok, where, label_field, kind)

    stats: list[_Stats] = []
    step = max(1, len(data) // 20)
    for i in range(len(data)):
        if progress is not None and i % step == 0:
            progress(f"collating example {i + 1:,} of {len(data):,}")
        stats.append(ctx.one(data, i))
    if progress is not None:
        progress("collating the examples shown")
    return ctx.report(data, stats, examples)


class _Context:
    """What the run over the set shares: the setup, the tokenizer's special ids, and how labels are laid out."""

    def __init__(self, s: Setup, tok: Any, where: str, label_field: str | None, kind: str) -> None:
        self.s, self.tok, self.where, self.label_field, self.kind = s, tok, where, label_field, kind
        self.bos = getattr(tok, "bos_token_id", None)
        self.eos = getattr(tok, "eos_token_id", None)
        self.pad = getattr(tok, "pad_token_id", None)
        self.label_kind = "none"
        self.encoded = False           # the collate encoded text through the tokenizer (so truncation was seen)
        self.padding_sides: set[str] = set()
        self.position_ids = False
        self.pad_loss: set[int] = set()   # examples with a loss position on padding, in any batch collated
        self.padded: set[int] = set()     # examples seen padded in some batch

    # ------------------------------------------------------------------ one example through the collate
    def one(self, data: Sequence[Any], i: int) -> _Stats:
        cuts: list[int] = []
        with _watch(self.tok, cuts) as calls:
            batch = _collate(self.s.collate, [data[i]], self.where, i)
        self.encoded = self.encoded or calls[0] > 0
        st = _Stats(label=self._label(data[i], batch))
        if self.kind == "image":
            return self._image(batch, st, i)
        rows = self._rows(batch, i)
        if not rows:
            raise InputError(f"{self.where}: collate returned an empty batch for example {i}")
        ids, attn, labels = rows[0]
        st.truncated_tokens = sum(cuts) if calls[0] else None
        self._text(ids, attn, labels, st)
        self._padding(i, attn, labels)
        target = self.s.target_field
        if target is not None and self.label_kind == "token":
            # kept: the loss positions hold the answer text, and a right truncation cut nothing after it (its EOS)
            st.answer_kept = self._answer_kept(ids, attn, labels, str(data[i][target])) and not (
                st.truncated_tokens and getattr(self.tok, "truncation_side", "right") != "left")
            st.answer_tokens = len(self.tok(str(data[i][target]), add_special_tokens=False)["input_ids"])
        return st

    def _label(self, example: Any, batch: Mapping[str, Any]) -> str:
        if self.label_field is not None and isinstance(example, Mapping):
            return str(example[self.label_field])
        labels = batch.get("labels")
        if labels is not None and getattr(labels, "ndim", 2) <= 1 and len(labels) == 1:
            return str(int(labels[0]))
        return "all"

    def _rows(self, batch: Mapping[str, Any], i: int | str) -> list[tuple[list[int], list[int], Any]]:
        """Per row: input ids, attention mask, and the labels (a list per position, an int, or None)."""
        import torch

        ids = torch.as_tensor(batch["input_ids"])
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2:
            raise InputError(f"{self.where}: input_ids of example {i} has shape {tuple(ids.shape)}; a batch of "
                             "token ids is (batch, length)")
        attn = batch.get("attention_mask")
        attn = torch.as_tensor(attn).reshape(ids.shape) if attn is not None else \
            (ids != self.pad if self.pad is not None else torch.ones_like(ids))
        if "position_ids" in batch:
            self.position_ids = True
        labels = batch.get("labels")
        if labels is not None:
            labels = torch.as_tensor(labels)
            if labels.shape == ids.shape:
                self.label_kind = "token"
            elif labels.numel() == ids.shape[0]:
                self.label_kind, labels = "sequence", labels.reshape(-1)
            else:
                self.label_kind = "token"     # seq2seq: decoder labels of their own length
        for row in range(ids.shape[0]):
            side = _side([int(a) for a in attn[row]])
            if side != "none":
                self.padding_sides.add(side)
        return [(ids[r].tolist(), [int(a) for a in attn[r]],
                 None if labels is None else (labels[r].tolist() if labels.ndim > 1 else int(labels[r])))
                for r in range(ids.shape[0])]

    def _text(self, ids: list[int], attn: list[int], labels: Any, st: _Stats) -> None:
        real = [t for t, a in zip(ids, attn) if a]
        st.length = len(real)
        st.starts_bos = self.bos is not None and real[:1] == [self.bos]
        st.double_bos = self.bos is not None and real[:2] == [self.bos, self.bos]
        st.eos_in_input = self.eos is not None and self.eos in real
        if labels is None:
            return
        if isinstance(labels, int):
            st.loss_positions = int(labels != IGNORE_INDEX)
            return
        where = [t for t, y in enumerate(labels) if y != IGNORE_INDEX]
        st.loss_positions = len(where)
        aligned = len(labels) == len(ids)
        st.loss_real = sum(1 for t in where if not aligned or attn[t])
        st.eos_learned = self.eos is not None and any(labels[t] == self.eos and (not aligned or attn[t])
                                                      for t in where)
        if aligned:
            st.same = sum(labels[t] == ids[t] for t in where)
            st.next = sum(t + 1 < len(ids) and labels[t] == ids[t + 1] for t in where)

    def _padding(self, i: int, attn: list[int], labels: Any) -> None:
        if all(attn):
            return
        self.padded.add(i)
        if isinstance(labels, list) and len(labels) == len(attn) and \
                any(not a and y != IGNORE_INDEX for a, y in zip(attn, labels)):
            self.pad_loss.add(i)

    def _answer_kept(self, ids: list[int], attn: list[int], labels: list[int], answer: str) -> bool:
        aligned = len(labels) == len(ids)
        kept = [y for t, y in enumerate(labels) if y != IGNORE_INDEX and (not aligned or attn[t])]
        want = _plain(self.tok.decode(self.tok(answer, add_special_tokens=False)["input_ids"],
                                      skip_special_tokens=True))
        return bool(want) and want in _plain(self.tok.decode(kept, skip_special_tokens=True))

    def _image(self, batch: Mapping[str, Any], st: _Stats, i: int) -> _Stats:
        import torch

        pixels = torch.as_tensor(batch["pixel_values"])
        if pixels.ndim < 2:
            raise InputError(f"{self.where}: pixel_values of example {i} has shape {tuple(pixels.shape)}; give "
                             "(batch, channels, height, width)")
        x = pixels[0].double()
        st.shape = tuple(x.shape)
        st.pixels = (float(x.min()), float(x.max()), float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0)
        labels = batch.get("labels")
        if labels is not None:
            self.label_kind = "sequence"
            st.loss_positions = int(int(torch.as_tensor(labels).reshape(-1)[0]) != IGNORE_INDEX)
        return st

    # ------------------------------------------------------------------ the report
    def report(self, data: Sequence[Any], stats: list[_Stats], per_class: int) -> InspectReport:
        by_class: dict[str, list[int]] = {}
        for i, st in enumerate(stats):
            by_class.setdefault(st.label, []).append(i)
        order = sorted(by_class, key=lambda k: (-len(by_class[k]), k))
        shown_idx = [i for k in order for i in by_class[k][:per_class]]
        # text: tokens before truncation, so that the longest shown is the one truncation cut most
        measure = (lambda st: st.length + (st.truncated_tokens or 0)) if self.kind == "text" else \
            (lambda st: _prod(st.shape))
        longest = max(range(len(stats)), key=lambda i: (measure(stats[i]), -i))
        shortest = min(range(len(stats)), key=lambda i: (measure(stats[i]), i))
        shown = self._show(data, stats, shown_idx)
        pair = self._show(data, stats, sorted({longest, shortest}))
        by_index = {e.index: e for e in pair}
        lost = self._answers_lost(stats)
        truncated = sum(bool(st.truncated_tokens) for st in stats) if self.encoded else None
        classes = tuple(self._summary(k, by_class[k], stats, lost) for k in order)
        checks = self._checks(stats, lost, truncated)
        notes = self._notes(stats, truncated)
        return InspectReport(
            kind=self.kind, examples=len(stats), label_kind=self.label_kind, label_field=self.label_field,
            target_field=self.s.target_field, classes=classes, shown=shown,
            longest=by_index[longest], shortest=by_index[shortest], truncated=truncated,
            tokens_cut=sum(st.truncated_tokens or 0 for st in stats) if truncated is not None else None,
            answer_lost=None if lost is None else sum(lost), no_loss=sum(self._no_loss(st) for st in stats),
            padding_side=_one_side(self.padding_sides), tokenizer_padding_side=getattr(self.tok, "padding_side", None),
            truncation_side=getattr(self.tok, "truncation_side", None), special=self._special(stats),
            transform=None if isinstance(self.s.transform, Mapping) else _described(self.s.transform), checks=checks, notes=notes,
            source=self.s.source)

    def _no_loss(self, st: _Stats) -> bool:
        return self.label_kind != "none" and st.loss_positions == 0

    def _answers_lost(self, stats: list[_Stats]) -> list[bool] | None:
        """Per example: the answer was lost (all or its tail). Exact with target_field; else the tokenizer's cut:
        cutting the tail of a prompt + answer text cuts the answer (with left truncation only an example left
        with no loss position lost it). None when neither is known."""
        if self.kind != "text" or self.label_kind != "token":
            return None
        if self.s.target_field is not None:
            return [st.answer_kept is False for st in stats]
        if not self.encoded:
            return None
        left = getattr(self.tok, "truncation_side", "right") == "left"
        return [bool(st.truncated_tokens) and (not left or st.loss_positions == 0) for st in stats]

    def _show(self, data: Sequence[Any], stats: list[_Stats], indices: list[int]) -> tuple[Example, ...]:
        """The examples collated together, as one batch of the training loop (images: as collated alone, since
        the shapes per example are what is looked at, and unequal ones cannot stack)."""
        if self.kind == "image":
            return tuple(Example(index=i, label=stats[i].label, length=_prod(stats[i].shape),
                                 loss_positions=stats[i].loss_positions, truncated_tokens=None, answer_kept=None,
                                 shape=stats[i].shape) for i in indices)
        batch = _collate(self.s.collate, [data[i] for i in indices], self.where, "shown")
        rows = self._rows(batch, "shown")
        if len(rows) != len(indices):
            raise InputError(f"{self.where}: collate returned {len(rows)} rows for {len(indices)} examples")
        out = []
        for i, (ids, attn, labels) in zip(indices, rows):
            st = stats[i]
            self._padding(i, attn, labels)
            loss = [False] * len(ids)
            if isinstance(labels, list) and len(labels) == len(ids):
                loss = [y != IGNORE_INDEX for y in labels]
            target_ids = [y for y in labels if y != IGNORE_INDEX] if isinstance(labels, list) else []
            answer = str(data[i][self.s.target_field]) if self.s.target_field else None
            out.append(Example(
                index=i, label=st.label, length=st.length, loss_positions=st.loss_positions,
                truncated_tokens=st.truncated_tokens, answer_kept=st.answer_kept,
                marked=_marked(self.tok, ids, attn, loss),
                target=self.tok.decode(target_ids) if target_ids else
                ("" if not isinstance(labels, int) else f"class {labels}"),
                answer=answer, tokens=tuple(self.tok.convert_ids_to_tokens(ids)), loss=tuple(loss),
                padding=tuple(not a for a in attn)))
        return tuple(out)

    def _summary(self, label: str, indices: list[int], stats: list[_Stats], lost: list[bool] | None) -> ClassSummary:
        group = [stats[i] for i in indices]
        if self.kind == "image":
            px = [st.pixels for st in group if st.pixels is not None]
            return ClassSummary(
                label=label, examples=len(group), shapes=tuple(sorted({"x".join(map(str, st.shape)) for st in group})),
                pixel_min=min(p[0] for p in px), pixel_max=max(p[1] for p in px),
                pixel_mean=statistics.fmean(p[2] for p in px), pixel_std=statistics.fmean(p[3] for p in px),
                transform=_described(self.s.transform.get(label)) if isinstance(self.s.transform, Mapping) else None,
                no_loss=sum(self._no_loss(st) for st in group))
        lengths = [st.length for st in group]
        return ClassSummary(
            label=label, examples=len(group), min_length=min(lengths), median_length=float(statistics.median(lengths)),
            max_length=max(lengths), truncated=sum(bool(st.truncated_tokens) for st in group),
            answer_lost=sum(lost[i] for i in indices) if lost is not None else 0,
            no_loss=sum(self._no_loss(st) for st in group))

    def _special(self, stats: list[_Stats]) -> SpecialTokens | None:
        if self.kind != "text":
            return None
        tok = self.tok
        return SpecialTokens(
            bos=getattr(tok, "bos_token", None), bos_id=self.bos, eos=getattr(tok, "eos_token", None),
            eos_id=self.eos, pad=getattr(tok, "pad_token", None), pad_id=self.pad,
            pad_is_eos=self.pad is not None and self.pad == self.eos,
            start_with_bos=sum(st.starts_bos for st in stats), double_bos=sum(st.double_bos for st in stats),
            eos_in_input=sum(st.eos_in_input for st in stats), eos_learned=sum(st.eos_learned for st in stats))

    def _notes(self, stats: list[_Stats], truncated: int | None) -> tuple[str, ...]:
        notes = []
        if self.kind == "text" and truncated is None:
            notes.append("truncation not observed: the collate never called the tokenizer (pre-tokenized data?); "
                         "what was cut before is not counted")
        if self.kind == "text" and self.label_kind == "token" and self.s.target_field is None and truncated is not None:
            notes.append("answers lost are judged by the tokenizer's cut (a prompt + answer text loses its answer "
                         "first); give target_field (the answer's field) to compare with the answer itself")
        if self.label_field is None:
            notes.append("no label_field: examples are grouped " +
                         ("by the class in their labels" if any(st.label != "all" for st in stats) else "as one class"))
        return tuple(notes)

    # ------------------------------------------------------------------ checks
    def _checks(self, stats: list[_Stats], lost: list[bool] | None, truncated: int | None) -> tuple[Check, ...]:
        from .inspect_checks import image_checks, text_checks

        if self.kind == "image":
            return image_checks(self, stats)
        return text_checks(self, stats, lost, truncated)


def _described(transform: Any) -> str | None:
    if transform is None:
        return None
    return transform if isinstance(transform, str) else repr(transform)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _sequence(dataset: Any, where: str) -> Sequence[Any]:
    if dataset is None:
        raise InputError(f"{where}: no dataset; return dataset=<the raw examples> (inspect reads the whole set)")
    if isinstance(dataset, (str, bytes, Mapping)):
        raise InputError(f"{where}: dataset is a {type(dataset).__name__}; give one split's examples (a list of "
                         "dicts, a datasets.Dataset)")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        try:
            dataset = list(dataset)
        except TypeError:
            raise InputError(f"{where}: dataset is a {type(dataset).__name__}, not a sequence of examples") from None
    if len(dataset) == 0:
        raise InputError(f"{where}: the dataset is empty; give the examples the training loop reads")
    return dataset


def _collate(collate: Callable[[list[Any]], Any], examples: list[Any], where: str, i: int | str) -> Mapping[str, Any]:
    try:
        batch = collate(examples)
    except Exception as e:
        what = f"example {i}" if isinstance(i, int) else f"the {len(examples)} examples shown"
        raise InputError(f"{where}: collate raised {type(e).__name__} on {what}: {first_line(e)}") from None
    if not isinstance(batch, Mapping):
        raise InputError(f"{where}: collate returned a {type(batch).__name__}; return a dict of tensors "
                         "(input_ids, attention_mask, labels, or pixel_values)")
    return batch


@contextlib.contextmanager
def _watch(tok: Any, cuts: list[int]) -> Iterator[list[int]]:
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
            cuts.extend(max(0, a - b) for a, b in zip(_lengths(full), _lengths(kept)))
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


def _side(attn: list[int]) -> str:
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


def _one_side(sides: set[str]) -> str:
    if not sides:
        return "none"
    return next(iter(sides)) if len(sides) == 1 else "mixed"


def _plain(text: str) -> str:
    """Text compared without whitespace and case (decoders differ in spacing; normalizers lowercase)."""
    return "".join(text.split()).casefold()


def _marked(tok: Any, ids: list[int], attn: list[int], loss: list[bool]) -> str:
    """The row decoded by runs: loss positions between « », padding collapsed into [pad xN]."""
    parts: list[str] = []
    t = 0
    while t < len(ids):
        state = ("pad" if not attn[t] else "loss" if loss[t] else "in")
        u = t
        while u < len(ids) and ("pad" if not attn[u] else "loss" if loss[u] else "in") == state:
            u += 1
        if state == "pad":
            parts.append(f"[pad x{u - t}]")
        else:
            text = tok.decode(ids[t:u]).strip()
            parts.append(f"«{text}»" if state == "loss" else text)
        t = u
    return " ".join(p for p in parts if p)
