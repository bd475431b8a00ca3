"""Renderer of `campaign check -- python SCRIPT ARGS` (train/watch_checks.py): the verdict, the watched updates, the
checks (failures, warnings, and what was skipped with how to run it)."""
from __future__ import annotations

from typing import Any

from . import checks, console, escape, notes, table


def render_watch(r: Any) -> None:
    counts = {s: sum(c.status == s for c in r.checks) for s in ("pass", "fail", "warn", "skipped")}
    shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    skipped = [c.id for c in r.checks if c.status == "skipped" and c.gates]
    verdict = "[green]READY[/green]" if r.passed else f"[red]NOT READY[/red] — {counts['fail']} failed" \
        if counts["fail"] else f"[red]NOT VERIFIED[/red] — {', '.join(skipped)} not run"
    console.print(f"{verdict} — {len(r.checks)} checks: {shown}")
    per = f"{r.seconds_per_update:.3f} s per update" if r.seconds_per_update is not None else ""
    console.print(f"watched {escape(' '.join(r.command))}: {r.updates_watched} of {r.updates_asked} updates of "
                  f"{escape(r.model or 'the model')}" + (f"; {per}" if per else "")
                  + f"; {r.wall_seconds:.1f} s in all")
    t = table("Watched updates", (("update", "right"), ("backwards", "right"), ("loss (as backpropagated)", "right"),
                                  ("learning rate", "right")))
    for i, (loss, lrs, n) in enumerate(zip(r.losses, r.learning_rates, r.micro_batches, strict=True), 1):
        t.add_row(str(i), str(n), f"{loss:.4f}", ", ".join(f"{x:.3g}" for x in lrs))
    console.print(t)
    checks(r.checks, ("fail", "warn", "skipped"))
    notes(r.notes)
