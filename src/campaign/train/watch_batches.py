"""Facts about the batches the watched loop fed its model (train/watch.py, after the watched updates), read from the
tensors themselves: the token ids and per-token targets as the probes found them (train/watch_probes.py: by what
changing each does to the model, not by their names), and the attention mask (another input of the ids' shape
holding only 0 and 1). No tokenizer is needed, so a Trainer's or TRL's collate is read as it fed the model.

- padding: a position whose attention mask is 0 must carry an ignored target (a negative label: -100, -1); and a
  run of one repeated token after a row's last target, ignored by the loss, is padding the mask must leave out;
- truncation: in rows whose targets follow an ignored prompt (completion-only labels), the targets of an answer
  end with one token (EOS) in every row the length did not cut. A row whose targets run to the batch's last column
  and end on another token than the end token the other rows' targets end with was cut there, its EOS with it
  (the longest row of a batch padded to its longest also fills it, but ends on the end token). The end token is the
  one at least half the rows that end inside the batch end with. Where every row runs to the last column and no
  token ends half of them, the lengths tell: answers that all end at exactly one length L (every micro-batch, two
  or more, L wide, no row padded) though their prompts differ in length were cut at L (TRL's max_length, a
  tokenizer's truncation=True), every EOS with them; otherwise truncation cannot be told from answers without EOS
  (a warning).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

# rows considered, over every micro-batch of the watched updates
MAX_ROWS = 4096


def _find(args: tuple[Any, ...], kwargs: dict[str, Any], where: str | None) -> Any:
    if where is None:
        return None
    if where.startswith("argument "):
        i = int(where.split()[1])
        return args[i] if i < len(args) else None
    return kwargs.get(where)


def _mask(args: tuple[Any, ...], kwargs: dict[str, Any], ids: Any, targets: Any) -> Any:
    """Another input of the ids' shape holding only 0 and 1: the attention mask."""
    import torch

    values = [*args, *kwargs.values()]
    for v in values:
        if isinstance(v, torch.Tensor) and v is not ids and v is not targets and tuple(v.shape) == tuple(ids.shape) \
                and not v.is_floating_point() and bool(((v == 0) | (v == 1)).all()):
            return v
    return None


def batch_facts(batches: list[tuple[Any, Any]], ids_where: str | None, targets_where: str | None) -> dict[str, Any]:
    if ids_where is None or targets_where is None:
        return {"applies": False, "why": "no per-token targets among the model's inputs"}
    rows = padded = pad_learned = pad_attended = 0
    first_learned: tuple[int, int] | None = None
    finals: list[tuple[int, bool]] = []          # (final target token, ends at the row's edge), completion rows
    widths: set[int] = set()                     # the widths of the batches the completion rows came in
    batches_with_answers: set[int] = set()
    prompts: set[int] = set()                    # the lengths of the masked prompts before their targets
    masked = False
    for b, (a, kw) in enumerate(batches):
        args, kwargs = tuple(a), dict(kw or {})
        ids, targets = _find(args, kwargs, ids_where), _find(args, kwargs, targets_where)
        if ids is None or targets is None or tuple(ids.shape) != tuple(targets.shape) or ids.dim() != 2:
            continue
        mask = _mask(args, kwargs, ids, targets)
        t = targets.detach().cpu()
        keep = t >= 0
        m = mask.detach().cpu().bool() if mask is not None else None
        masked = masked or m is not None
        for r in range(t.shape[0]):
            if rows >= MAX_ROWS:
                break
            rows += 1
            real = m[r] if m is not None else None
            if real is not None and not bool(real.all()):
                padded += 1
                wrong = keep[r] & ~real
                if bool(wrong.any()):
                    pad_learned += 1
                    first_learned = first_learned or (b, r)
            on = keep[r].nonzero().flatten()
            if on.numel() == 0:
                continue
            last = int(on[-1])
            after = ids[r, last + 1:].detach().cpu()
            if real is not None and after.numel() >= 2 and bool(real[last + 1:].all()) \
                    and bool((after == after[0]).all()):
                pad_attended += 1         # one token repeated after the answer, unlearned yet attended: padding
            if int(on[0]) == 0:
                continue                  # targets from the first position: no prompt masked
            finals.append((int(t[r, last]), last == t.shape[1] - 1))    # the row filled to the batch's width
            widths.add(int(t.shape[1]))
            batches_with_answers.add(b)
            prompts.add(int(on[0]))
    out: dict[str, Any] = {"applies": True, "rows": rows, "masked": masked, "padded": padded,
                           "pad_learned": pad_learned, "first_pad_learned": first_learned,
                           "pad_attended": pad_attended,
                           "completion_rows": len(finals)}
    if finals:
        inside = Counter(f for f, edge in finals if not edge)    # rows that ended before the batch's last column
        pool = inside or Counter(f for f, _ in finals)
        common, c = pool.most_common(1)[0]
        # the end token: shared by at least half the rows that ended inside the batch (or, where every row runs to
        # the last column, by at least half of all and by two rows)
        end: int | None = common if 2 * c >= sum(pool.values()) and (inside or c >= 2) else None
        cut = [f for f, edge in finals if edge and f != end] if end is not None else []
        no_end = [f for f, edge in finals if not edge and f != end]
        at_edge = sum(e for _, e in finals)
        unended = end is None and not inside and at_edge >= 2
        # every answer, over two micro-batches or more, ends at one length though the prompts before them differ:
        # cut there, not ended there (batches padded to their longest row would differ in width)
        one_length = unended and len(widths) == 1 and len(prompts) >= 2 and padded == 0 \
            and len(batches_with_answers) >= 2
        out |= {"end_token": end, "ending_with_end": sum(f == end for f, _ in finals) if end is not None else 0,
                "cut": len(cut), "no_end": len(no_end) if end is not None else 0, "at_edge": at_edge,
                "all_at_edge_unended": unended and not one_length,
                "cut_at_length": next(iter(widths)) if one_length else None,
                "prompt_lengths": [min(prompts), max(prompts)] if prompts else None,
                "final_tokens": len({f for f, _ in finals})}
    return out


__all__ = ["batch_facts"]
