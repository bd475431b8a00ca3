"""The run of `campaign inspect` over the whole set: each example through the user's collate (its truncation
watched), the figures per example (train/inspect_stats.py), then a few examples per class collated together, and
the report (train/inspect_report.py) with its checks (train/inspect_checks.py)."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..checks import Check
from ..errors import InputError
from .inspect_checks import image_checks, text_checks
from .inspect_report import ClassSummary, Example, InspectReport, SpecialTokens
from .inspect_stats import IGNORE_INDEX, ExampleStats, one_side, padding_side, plain_text
from .setup import Setup, first_line
from .tokenizer_watch import watch_truncation


class InspectRun:
    """What the run over the set shares: the setup, the tokenizer's special ids, and how labels are laid out."""

    def __init__(self, s: Setup, tok: Any, where: str, label_field: str | None, kind: str) -> None:
        self.s, self.tok, self.where, self.label_field, self.kind = s, tok, where, label_field, kind
        if s.collate is None:         # inspect() refuses a setup without one before it builds the run
            raise ValueError("InspectRun needs a setup with a collate function")
        self.collate: Callable[[list[Any]], Any] = s.collate
        self.bos = getattr(tok, "bos_token_id", None)
        self.eos = getattr(tok, "eos_token_id", None)
        self.pad = getattr(tok, "pad_token_id", None)
        self.label_kind = "none"
        self.encoded = False           # the collate encoded text through the tokenizer (so truncation was seen)
        self.padding_sides: set[str] = set()
        self.position_ids = False
        self.pad_loss: set[int] = set()   # examples with a loss position on padding, in any batch collated
        self.padded: set[int] = set()     # examples seen padded in some batch
        self.widened: set[int] = set()    # examples longer in the shown batch than collated alone (padded there)
        self.pad_attended: set[int] = set()   # ... whose added positions the attention mask left at 1
        self.no_mask = False              # a batch came without attention_mask (the padding read off the pad id)

    # ------------------------------------------------------------------ one example through the collate
    def one(self, data: Sequence[Any], i: int) -> ExampleStats:
        cuts: list[int] = []
        with watch_truncation(self.tok, cuts) as calls:
            batch = collate_one(self.collate, [data[i]], self.where, i)
        self.encoded = self.encoded or calls[0] > 0
        st = ExampleStats(label=self._label(data[i], batch))
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
        self.no_mask = self.no_mask or attn is None
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
            side = padding_side([int(a) for a in attn[row]])
            if side != "none":
                self.padding_sides.add(side)
        return [(ids[r].tolist(), [int(a) for a in attn[r]],
                 None if labels is None else (labels[r].tolist() if labels.ndim > 1 else int(labels[r])))
                for r in range(ids.shape[0])]

    def _text(self, ids: list[int], attn: list[int], labels: Any, st: ExampleStats) -> None:
        real = [t for t, a in zip(ids, attn, strict=False) if a]
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
                any(not a and y != IGNORE_INDEX for a, y in zip(attn, labels, strict=True)):
            self.pad_loss.add(i)

    def _answer_kept(self, ids: list[int], attn: list[int], labels: list[int], answer: str) -> bool:
        aligned = len(labels) == len(ids)
        kept = [y for t, y in enumerate(labels) if y != IGNORE_INDEX and (not aligned or attn[t])]
        want = plain_text(self.tok.decode(self.tok(answer, add_special_tokens=False)["input_ids"],
                                      skip_special_tokens=True))
        return bool(want) and want in plain_text(self.tok.decode(kept, skip_special_tokens=True))

    def _image(self, batch: Mapping[str, Any], st: ExampleStats, i: int) -> ExampleStats:
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
    def report(self, data: Sequence[Any], stats: list[ExampleStats], per_class: int) -> InspectReport:
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
            padding_side=one_side(self.padding_sides), tokenizer_padding_side=getattr(self.tok, "padding_side", None),
            truncation_side=getattr(self.tok, "truncation_side", None), special=self._special(stats),
            transform=None if isinstance(self.s.transform, Mapping) else _described(self.s.transform),
            checks=checks, notes=notes,
            source=self.s.source)

    def _no_loss(self, st: ExampleStats) -> bool:
        return self.label_kind != "none" and st.loss_positions == 0

    def _answers_lost(self, stats: list[ExampleStats]) -> list[bool] | None:
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

    def _show(self, data: Sequence[Any], stats: list[ExampleStats], indices: list[int]) -> tuple[Example, ...]:
        """The examples collated together, as one batch of the training loop (images: as collated alone, since
        the shapes per example are what is looked at, and unequal ones cannot stack)."""
        if self.kind == "image":
            return tuple(Example(index=i, label=stats[i].label, length=_prod(stats[i].shape),
                                 loss_positions=stats[i].loss_positions, truncated_tokens=None, answer_kept=None,
                                 shape=stats[i].shape) for i in indices)
        batch = collate_one(self.collate, [data[i] for i in indices], self.where, "shown")
        rows = self._rows(batch, "shown")
        if len(rows) != len(indices):
            raise InputError(f"{self.where}: collate returned {len(rows)} rows for {len(indices)} examples")
        out = []
        for i, (ids, attn, labels) in zip(indices, rows, strict=True):
            st = stats[i]
            self._padding(i, attn, labels)
            if len(ids) > st.length:          # the batch padded this example: the mask must leave it out
                self.widened.add(i)
                if sum(attn) > st.length:
                    self.pad_attended.add(i)
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

    def _summary(self, label: str, indices: list[int], stats: list[ExampleStats],
                 lost: list[bool] | None) -> ClassSummary:
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

    def _special(self, stats: list[ExampleStats]) -> SpecialTokens | None:
        if self.kind != "text":
            return None
        tok = self.tok
        return SpecialTokens(
            bos=getattr(tok, "bos_token", None), bos_id=self.bos, eos=getattr(tok, "eos_token", None),
            eos_id=self.eos, pad=getattr(tok, "pad_token", None), pad_id=self.pad,
            pad_is_eos=self.pad is not None and self.pad == self.eos,
            start_with_bos=sum(st.starts_bos for st in stats), double_bos=sum(st.double_bos for st in stats),
            eos_in_input=sum(st.eos_in_input for st in stats), eos_learned=sum(st.eos_learned for st in stats))

    def _notes(self, stats: list[ExampleStats], truncated: int | None) -> tuple[str, ...]:
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
    def _checks(self, stats: list[ExampleStats], lost: list[bool] | None, truncated: int | None) -> tuple[Check, ...]:
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


def examples_of(dataset: Any, where: str) -> Sequence[Any]:
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


def collate_one(collate: Callable[[list[Any]], Any], examples: list[Any], where: str,
                i: int | str) -> Mapping[str, Any]:
    try:
        batch = collate(examples)
    except Exception as e:
        what = f"example {i}" if isinstance(i, int) else f"the {len(examples)} examples shown"
        raise InputError(f"{where}: collate raised {type(e).__name__} on {what}: {first_line(e)}") from None
    if not isinstance(batch, Mapping):
        raise InputError(f"{where}: collate returned a {type(batch).__name__}; return a dict of tensors "
                         "(input_ids, attention_mask, labels, or pixel_values)")
    return batch


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


__all__ = ["InspectRun", "collate_one", "examples_of"]
