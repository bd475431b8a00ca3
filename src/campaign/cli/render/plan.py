"""Renderers of the plan family: budget (rentals compared, the schedule as a text Gantt), ablate plan, ablate
analyze."""
from __future__ import annotations

from typing import Any

from . import checks, console, escape, notes, table

BAR = 48        # characters of the text Gantt's time axis


def usd(amount_cents: int | None) -> str:
    from ...plan.prices import usd as fmt

    return "-" if amount_cents is None else fmt(amount_cents)


def _h(hours: float | None) -> str:
    return "-" if hours is None else f"{hours:,.1f}"


def budget(r: Any) -> None:
    """A budget: the verdict and why, every rental, the phases on the chosen card, its schedule, cuts, checks."""
    console.print(f"[bold]{escape(r.plan)}[/bold] · {escape(r.name)} · {len(r.phases)} phases, recovery margin "
                  f"{r.margin:.0%} on every run")
    if r.recommended:
        console.print(f"[green]TAKE[/green] {escape(r.recommended_card)} {escape(r.recommended)} — {escape(r.why)}")
    else:
        console.print(f"[red]NOTHING FITS[/red] — {escape(r.why)}")
    t = table("Rentals (ends: when the last run ends, margin included; path: the critical path; use: busy "
              "card-hours / cards x window; /useful: cost per useful result)",
              [("card", "left"), ("rental", "left"), ("cards", "right"), ("window h", "right"), ("ends h", "right"),
               ("path h", "right"), ("slack h", "right"), ("use", "right"), ("cost", "right"),
               ("/useful", "right"), ("fits", "left")])
    t.columns[0].no_wrap = True
    for o in r.packages:
        mark = "[green]yes[/green]" if o.fits else "[red]no[/red]"
        t.add_row(escape(o.card), escape(o.name), str(o.cards), _h(o.window_hours), _h(o.hours),
                  _h(o.critical_path_hours), _h(o.slack_hours),
                  "-" if o.utilization is None else f"{o.utilization:.0%}", usd(o.cost_cents),
                  usd(o.cost_per_useful_cents), mark)
    console.print(t)
    for o in r.packages:
        if not o.fits:
            console.print(f"[dim]{escape(o.card)} {escape(o.name)} does not fit: {escape(o.why)}[/dim]")
    card = r.recommended_card or (r.packages[0].card if r.packages else "")
    p = table(f"Phases on {escape(card)} (hours per run before the margin)",
              [("phase", "left"), ("kind", "left"), ("runs", "right"), ("h/run", "right"), ("hours", "left"),
               ("cards", "right"), ("after", "left"), ("useful", "right")])
    for ph in r.phases:
        p.add_row(escape(ph.name), ph.kind, str(ph.runs), f"{ph.hours:,.2f}", ph.hours_how, str(ph.cards),
                  escape(", ".join(ph.after)) or "-", str(ph.useful))
    console.print(p)
    if r.schedule is not None:
        _gantt(r)
    if r.cut_first:
        c = table(f"Cut first (then {escape(r.cut_for)} fits)", [("phase", "left"), ("runs cut", "right"),
                                                                  ("runs left", "right"), ("card-hours saved", "right")])
        for cut in r.cut_first:
            c.add_row(escape(cut.phase), str(cut.runs_cut), str(cut.runs_left), f"{cut.card_hours_saved:,.1f}")
        console.print(c)
    if r.estimates:
        e = table("Hours estimated from FLOPs (an estimate: time a few steps to replace it)",
                  [("phase", "left"), ("card", "left"), ("model", "left"), ("tokens", "right"), ("PFLOPs", "right"),
                   ("MFU", "right"), ("h/run", "right"), ("memory", "left"), ("max batch", "right")])
        for x in r.estimates:
            e.add_row(escape(x.phase), escape(x.card), escape(x.model), f"{x.tokens:,}", f"{x.flops / 1e15:,.0f}",
                      f"{x.mfu:.0%}", f"{x.hours:,.2f}", x.memory_verdict, "-" if x.max_batch is None
                      else str(x.max_batch))
        console.print(e)
    checks(r.checks)
    if r.plot:
        console.print(f"Plot: {escape(r.plot)}")
    notes(r.notes, escaped=True)


def _gantt(r: Any) -> None:
    s = r.schedule
    pk = next(o for o in r.packages if o.name == r.recommended and o.card == r.recommended_card)
    span = pk.window_hours or s.makespan_hours
    g = table(f"Schedule: {escape(r.recommended_card)} {escape(r.recommended)}, {s.cards} card(s); each mark "
              f"{span / BAR:,.1f} h of {span:,.0f} h", [("phase", "left"), ("start h", "right"), ("end h", "right"),
                                                         ("", "left")])
    for sp in s.spans:
        a = min(BAR, int(sp.start_hours / span * BAR))
        b = max(a + 1, min(BAR, round(sp.end_hours / span * BAR)))
        g.add_row(escape(sp.phase), f"{sp.start_hours:,.1f}", f"{sp.end_hours:,.1f}",
                  "·" * a + "█" * (b - a) + "·" * (BAR - b))
    console.print(g)
