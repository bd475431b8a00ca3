"""Renderers of the train family: batch (effective batch and accumulation), check (one step, resume), inspect."""
from __future__ import annotations

from typing import Any

from . import checks, console, notes, table


def render_batch(r: Any) -> None:
    ok = r.passed
    verdict = "[green]EQUIVALENT[/green]" if ok else "[red]NOT EQUIVALENT[/red]"
    console.print(f"{verdict} — effective batch {r.micro_batch} x {r.accumulation} x {r.processes} = "
                  f"{r.effective_batch} rows; {r.tokens_per_update:,} tokens per update "
                  f"({min(r.tokens_per_micro_batch):,}-{max(r.tokens_per_micro_batch):,} per micro-batch"
                  + (f"; per process {', '.join(f'{t:,}' for t in r.tokens_per_process)}" if r.tokens_per_process
                     else "") + f"); your normalization: {r.normalization.replace('_', ' ')}")
    t = table("Accumulated gradient against the whole update's",
              (("normalization", "left"), ("relative error", "right"), ("cosine", "right"), ("meaning", "left")))
    for v in r.variants:
        mark = " <- yours" if v.normalization == r.normalization else ""
        t.add_row(v.normalization.replace("_", " ") + mark, f"{v.relative_error:.2e}", f"{v.cosine:.6f}", v.meaning)
    console.print(t)
    checks(r.checks, ("fail", "warn", "skipped"), escaped=False)
    notes(r.notes)
