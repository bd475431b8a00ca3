"""The data family's renderers: split, leaks, usage."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import checks, console, status

if TYPE_CHECKING:
    from ...data.leaks import LeakReport
    from ...data.split_result import ShardSplit, SplitResult
    from ...track.usage import UsageReport


def split(r: SplitResult | ShardSplit) -> None:
    """Verdict, the splits (target vs achieved, labels, groups), the checks, the leak check, notes; a split in
    shards (the ray engine) from its manifest."""
    from rich.table import Table

    from ...data.split_result import SplitResult

    if not isinstance(r, SplitResult):      # a split in shards: its own manifest
        return shard_split(r)

    n = sum(p.rows for p in r.parts)
    how = "temporal" if r.parameters["temporal"] else ("stratified" if r.parameters["stratify"] else "by rows")
    verdict = {"fail": "[red]FAIL[/red]", "not verified": "[yellow]NOT VERIFIED[/yellow]"}.get(r.status,
                                                                                             "[green]PASS[/green]")
    console.print(f"{verdict} {r.input['path']}: {n:,} rows into {len(r.parts)} splits ({how}, seed {r.seed}); "
            f"{r.units:,} atomic units (groups + duplicate clusters), largest {r.largest_unit:,} rows")
    t = Table(title="Splits (fractions of rows)", title_justify="left")
    for col, just in (("split", "left"), ("rows", "right"), ("target", "right"), ("achieved", "right"),
                      ("groups", "right"), ("dates", "left"), ("file", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for p in r.parts:
        dates = f"{p.first_date[:10]} .. {p.last_date[:10]}" if p.first_date and p.last_date else ""
        t.add_row(p.name, f"{p.rows:,}", f"{p.target_fraction:.2%}", f"{p.fraction:.2%}",
                  ", ".join(f"{k} {v:,}" for k, v in p.groups.items()), dates, f"{Path(p.path).name}")
    console.print(t)
    labels = sorted({k for p in r.parts for k in p.labels})
    if labels:
        lt = Table(title="Per label: rows (share of the label's rows; target in the header)", title_justify="left")
        lt.add_column("label")
        for p in r.parts:
            lt.add_column(f"{p.name} ({p.target_fraction:.0%})", justify="right")
        for lbl in labels:
            lt.add_row(lbl, *(f"{p.labels.get(lbl, 0):,} ({p.label_fractions.get(lbl, 0.0):.1%})" for p in r.parts))
        console.print(lt)
    d = r.duplicates
    console.print(f"Duplicates kept together: {d['exact_duplicates']:,} exact copies, {d['near_pairs']:,} near pairs, "
            f"{d['clusters']:,} clusters ({d['rows_in_clusters']:,} rows)")
    checks(r.checks)        # the split's checks, then the leak check of the written files (leak.*)
    for note in r.notes:
        console.print(f"[dim]- {note}[/dim]")
    console.print(f"[dim]manifest: {r.manifest}[/dim]")


def shard_split(r: ShardSplit) -> None:
    """A split in shards: the verdict, each split's rows against its target and folder, the checks, notes."""
    import typer

    m = r.manifest
    typer.echo(f"{m['status']} — {m['rows']:,} rows in {len(m['splits'])} splits, {m['units']:,} units (largest "
               f"{m['largest_unit']:,} rows); {r.path}")
    for s in m["splits"]:
        typer.echo(f"  {s['name']}: {s['rows']:,} rows ({s['fraction']:.2%} for {s['target_fraction']:.2%}) in "
                   f"{s['path']}")
    for c in m["checks"]:
        typer.echo(f"  {c['id']}: {c['status']} — {c['seen']}")
    for n in m["notes"]:
        typer.echo(f"  note: {n}")


def leaks(r: LeakReport) -> None:
    """Verdict, one row per check and split pair, example pairs, notes."""
    from rich.table import Table

    failed = [ch for ch in r.checks if ch.status == "fail"]
    limit = "any leak fails" if r.threshold == 0 else f"threshold {r.threshold:.2%} of a split's rows"
    sizes = ", ".join(f"{s.name} {s.rows:,}" for s in r.splits)
    if failed:
        console.print(f"[red]LEAKS FOUND[/red] — {len(failed)} of {len(r.checks)} checks fail ({limit}); "
                      f"rows: {sizes}")
    elif r.status == "not verified":     # nothing found, but a search that could not be completed
        console.print(f"[yellow]NOT VERIFIED[/yellow] — {sum(ch.status == 'skipped' and ch.gates for ch in r.checks)}"
                      f" check(s) could not be completed, none fails ({limit}); rows: {sizes}")
    else:
        console.print(f"[green]NO LEAKS[/green] — {sum(ch.status == 'pass' for ch in r.checks)} checks pass, "
                f"{sum(ch.status == 'skipped' for ch in r.checks)} skipped ({limit}); rows: {sizes}")
    t = Table(title_justify="left")
    for col, just in (("check", "left"), ("status", "left"), ("between", "left"), ("rows", "right"),
                      ("rate", "right"), ("links", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for ch in r.checks:
        if not ch.pairs:
            t.add_row(ch.id, status(ch.status), ch.seen, "", "", "", end_section=True)
            continue
        for i, p in enumerate(ch.pairs):
            t.add_row(ch.id if i == 0 else "", status(ch.status) if i == 0 else "", f"{p.index} -> {p.query}",
                      f"{p.rows:,}", f"{p.rate:.2%}", f"{p.links:,}", end_section=i == len(ch.pairs) - 1)
    console.print(t)
    for ch in r.checks:
        if ch.status == "skipped" and ch.pairs:  # a search that could not be completed: say so, never imply a pass
            console.print(f"[yellow]{ch.id} skipped[/yellow]: {ch.seen}. Fix: {ch.fix}.")
    for ch in failed:
        console.print(f"[bold]{ch.id}[/bold]: {ch.seen}. Why it matters: {ch.why}. Fix: {ch.fix}.")
        for p in ch.pairs:
            for e in p.examples:
                console.print(f"  {e.detail}: {e.index_ref}  <->  {e.query_ref}")
                console.print(f"[dim]    {e.index_text}\n    {e.query_text}[/dim]")
    for note in r.notes:
        console.print(f"[dim]- {note}[/dim]")


def usage(r: UsageReport) -> None:
    """Verdict on the final split, the counts per split and purpose, the recorded entry, warnings."""
    from rich.table import Table

    from ...track.usage import PURPOSES

    if r.recorded:
        e = r.recorded
        console.print(f"recorded: {e.split} for {e.purpose.replace('_', ' ')}" + (f" — {e.note}" if e.note else ""))
    if r.status == "pass":
        console.print(f"[green]OK[/green] — the final split {r.final_split!r} informed {r.final_decisions} "
                      f"decision(s) of {r.max_final_uses} allowed")
    else:   # a failing check in red, a warning (a model selection on the test split, an old ledger) in yellow
        for ch in r.checks:
            if ch.status in ("fail", "warn"):
                colour = "red" if ch.status == "fail" else "yellow"
                console.print(f"[{colour}]WARNING[/{colour}] {ch.id}: {ch.seen}. Why it matters: {ch.why}. "
                              f"Fix: {ch.fix}.")
    t = Table(title=f"Uses per split ({len(r.entries)} in {Path(r.ledger).name})", title_justify="left")
    t.add_column("split")
    for p in PURPOSES:
        t.add_column(p.replace("_", " "), justify="right")
    for s in r.splits:
        t.add_row(s + (" (final)" if s == r.final_split else ""), *(str(r.counts[s][p]) for p in PURPOSES))
    console.print(t)
    for w in r.warnings:
        console.print(f"[dim]- {w}[/dim]")
