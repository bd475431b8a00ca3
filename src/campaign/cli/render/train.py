"""Renderers of the train family: batch (effective batch and accumulation), check (one step, resume), inspect."""
from __future__ import annotations

import math
from typing import Any

from . import Scale, checks, console, notes, table


def render_batch(r: Any) -> None:
    verdict = "[green]EQUIVALENT[/green]" if r.passed else "[red]NOT VERIFIED[/red]" \
        if r.status == "not verified" else "[red]NOT EQUIVALENT[/red]"
    console.print(f"{verdict} — effective batch {r.micro_batch} x {r.accumulation} x {r.processes} = "
                  f"{r.effective_batch} rows; {r.tokens_per_update:,} tokens per update "
                  f"({min(r.tokens_per_micro_batch):,}-{max(r.tokens_per_micro_batch):,} per micro-batch"
                  + (f"; per process {', '.join(f'{t:,}' for t in r.tokens_per_process)}" if r.tokens_per_process
                     else "") + f"); {_checked(r.normalization)}")
    t = table("Accumulated gradient against the whole update's",
              (("normalization", "left"), ("relative error", "right"), ("cosine", "right"), ("meaning", "left")))
    for v in r.variants:
        mark = " <- yours" if v.normalization == r.normalization else ""
        t.add_row(v.normalization.replace("_", " ") + mark, f"{v.relative_error:.2e}", f"{v.cosine:.6f}", v.meaning)
    console.print(t)
    checks(r.checks, ("fail", "warn", "skipped"), escaped=False)
    notes(r.notes)


def _checked(normalization: str) -> str:
    """What the accumulation check compared with the whole update: the loop's own step or a declared normalization."""
    if normalization == "accumulate":
        return "checked: your accumulation step (accumulate)"
    if normalization:
        return f"your normalization: {normalization.replace('_', ' ')}"
    return "your loop: not given (return accumulate, or --normalization)"


def _not_run(rows: Any) -> str:
    """The skipped checks a go depends on, for the verdict line of a result that is not verified."""
    ids = [c.id for c in rows if c.status == "skipped" and c.gates]
    return f"{', '.join(ids)} not run"


def render_check(r: Any) -> None:
    counts = {s: sum(c.status == s for c in r.checks) for s in ("pass", "fail", "warn", "skipped")}
    shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = "[green]READY[/green]" if r.passed else f"[red]NOT READY[/red] — {counts['fail']} failed" \
        if counts["fail"] else f"[red]NOT VERIFIED[/red] — {_not_run(r.checks)}"
    console.print(f"{verdict} — {len(r.checks)} checks: {shown}")
    total = r.trainable_elements + r.frozen_elements
    length = f" x {r.sequence_length} tokens" if r.sequence_length else ""
    expected = f" (ln {round(math.exp(r.expected_loss))} = {r.expected_loss:.3f} at random)" if r.expected_loss \
        else ""
    console.print(f"one step on {r.micro_batch} rows{length} on {r.device}: loss {r.loss:.4f}{expected}; "
                  f"{r.trainable_elements:,} of {total:,} parameters train "
                  f"({r.trainable_elements / total:.1%})" if total else "")
    phases = r.memory.phases
    estimated = {m.phase: m for m in r.memory_vs_estimate}
    scale = Scale(*(p.peak_allocated_bytes for p in phases))
    t = table(f"Memory of the second update ({r.memory.environment.device}, measured) beside campaign memory's "
              "estimate", (("phase", "left"), (f"peak allocated {scale.unit}", "right"), (f"estimate {scale.unit}",
                                                                                         "right"),
                           ("measured / estimate", "right"), (f"at end {scale.unit}", "right")))
    for p in phases:
        m = estimated.get(p.name)
        ratio = m.ratio if m is not None else None
        t.add_row(p.name, scale(p.peak_allocated_bytes), scale(m.estimated_bytes if m else None),
                  f"{ratio:.2f}" if ratio is not None else "-", scale(p.allocated_bytes))
    console.print(t)
    t = table("Optimizer groups", (("group", "right"), ("learning rate", "right"), ("tensors", "right"),
                                   ("elements", "right"), ("gradient norm", "right")))
    for g in r.groups:
        t.add_row(str(g.group), f"{g.lr:.3g}", str(g.tensors), f"{g.elements:,}", f"{g.grad_norm:.4g}")
    console.print(t)
    for what, counts_by_dtype in r.dtypes.items():
        console.print(f"{what}: " + (", ".join(f"{d} {n:,}" for d, n in counts_by_dtype.items()) or "none"))
    if r.overfit_losses:
        console.print(f"overfit one batch: loss {r.overfit_losses[0]:.3f} -> {r.overfit_losses[-1]:.3f} in "
                      f"{len(r.overfit_losses) - 1} updates")
    if r.resume is not None:
        m = r.resume
        console.print(f"resume: checkpoint after the first updates ({len(m.files)} files), next loss {m.loss:.6f} "
                      f"uninterrupted vs {m.resumed_loss:.6f} in a fresh process")
    checks(r.checks, ("fail", "warn", "skipped"))
    notes(r.notes)


def render_inspect(r: Any) -> None:
    from . import escape

    counts = {s: sum(c.status == s for c in r.checks) for s in ("pass", "fail", "warn", "skipped")}
    verdict = "[green]CLEAN[/green]" if r.passed else f"[red]PROBLEMS[/red] ({counts['fail']} failed)" \
        if counts["fail"] else f"[red]NOT VERIFIED[/red] — {_not_run(r.checks)}"
    classes = ", ".join(f"{escape(c.label)} {c.examples:,}" for c in r.classes)
    console.print(f"{verdict} — {r.examples:,} examples after the exact preprocessing ({len(r.classes)} "
                  f"class{'es' if len(r.classes) != 1 else ''}: {classes})")
    if r.kind == "image":
        _render_images(r)
    else:
        _render_text(r)
    checks(r.checks, ("fail", "warn"))
    notes(r.notes, escaped=True)


def _render_text(r: Any) -> None:
    from . import escape

    lengths = [c.min_length for c in r.classes] + [c.max_length for c in r.classes]
    cut = "not observed" if r.truncated is None else \
        f"{r.truncated:,} example(s) cut ({r.tokens_cut:,} tokens)"
    lost = "" if r.answer_lost is None else f"; {r.answer_lost:,} lost their answer"
    layout = {"token": "per token", "sequence": "one class per example", "none": "none"}[r.label_kind]
    console.print(f"tokens per example {min(lengths):,}-{max(lengths):,}; truncation: {cut}{lost}; "
                  f"{r.no_loss:,} with no loss position; labels: {layout}")
    sp = r.special
    if sp is not None:
        def token(name: str, text: str | None, i: int | None) -> str:
            return f"{name} {escape(repr(text))} ({i})" if i is not None else f"{name} none"
        console.print(f"padding: {r.padding_side} (tokenizer {r.tokenizer_padding_side}), truncation side "
                      f"{r.truncation_side}; {token('BOS', sp.bos, sp.bos_id)}, {token('EOS', sp.eos, sp.eos_id)}, "
                      f"{token('pad', sp.pad, sp.pad_id)}{' = EOS' if sp.pad_is_eos else ''}")
    t = table("Per class, whole set", (("class", "left"), ("examples", "right"), ("tokens min", "right"),
                                       ("median", "right"), ("max", "right"), ("truncated", "right"),
                                       ("answer lost", "right"), ("no loss", "right")))
    for c in r.classes:
        t.add_row(escape(c.label), f"{c.examples:,}", f"{c.min_length:,}", f"{c.median_length:g}",
                  f"{c.max_length:,}", f"{c.truncated:,}", "-" if r.answer_lost is None else f"{c.answer_lost:,}",
                  f"{c.no_loss:,}")
    console.print(t)
    t = table("Examples collated together (loss positions in « », padding as \\[pad xN])",
              (("#", "right"), ("class", "left"), ("tokens", "right"), ("loss", "right"), ("cut", "right"),
               ("the row, decoded", "left")))
    for e in r.shown:
        t.add_row(str(e.index), escape(e.label), f"{e.length:,}", f"{e.loss_positions:,}",
                  "-" if e.truncated_tokens is None else f"{e.truncated_tokens:,}", escape(e.marked))
    console.print(t)
    for name, e in (("longest", r.longest), ("shortest", r.shortest)):
        console.print(f"{name}: #{e.index} ({escape(e.label)}), {e.length:,} tokens, {e.loss_positions:,} with loss"
                      + ("" if not e.truncated_tokens else f" ({e.length + e.truncated_tokens:,} before "
                                                             f"truncation)") + f": {escape(e.marked)}")


def _render_images(r: Any) -> None:
    from . import escape

    if r.transform:
        console.print(f"transform: {escape(r.transform)}")
    t = table("Per class, whole set (pixel values after the transforms)",
              (("class", "left"), ("examples", "right"), ("shapes", "left"), ("min", "right"), ("max", "right"),
               ("mean", "right"), ("std", "right"), ("transform", "left")))
    for c in r.classes:
        t.add_row(escape(c.label), f"{c.examples:,}", ", ".join(c.shapes), f"{c.pixel_min:.3g}",
                  f"{c.pixel_max:.3g}", f"{c.pixel_mean:.3g}", f"{c.pixel_std:.3g}", escape(c.transform or "-"))
    console.print(t)
    for name, e in (("largest", r.longest), ("smallest", r.shortest)):
        console.print(f"{name}: #{e.index} ({escape(e.label)}), {'x'.join(map(str, e.shape))}")
