"""Renderers of the plan family: budget (rentals compared, the schedule as a text Gantt), ablate plan, ablate
analyze."""
from __future__ import annotations

from typing import Any

from . import checks, console, escape, notes, table

BAR = 48        # characters of the text Gantt's time axis


def usd(amount_cents: int | None) -> str:
    from ...plan.money import usd as fmt

    return "-" if amount_cents is None else fmt(amount_cents)


def _h(hours: float | None) -> str:
    return "-" if hours is None else f"{hours:,.1f}"


def _card(card: str, offer: str | None) -> str:
    """A card with its offer as --card names it ('H100-SXM-80GB@community'); the card alone without one."""
    from ...plan.prices import offer_label

    return offer_label(card, offer)


def budget(r: Any) -> None:
    """A budget: the verdict and why, every rental, the phases on the chosen card, its schedule, cuts, checks."""
    phases = len(r.phases) + sum(len(x.phases) for x in r.rentals)
    console.print(f"[bold]{escape(r.plan)}[/bold] · {escape(r.name)} · {phases} phases, recovery margin "
                  f"{r.margin:.0%} on every run")
    if r.recommended and r.status == "not verified":  # a check did not run: no go (the checks below say which)
        console.print(f"[yellow]NOT VERIFIED[/yellow] {escape(_card(r.recommended_card, r.recommended_offer))} "
                      f"{escape(r.recommended)} would be {escape(r.why)}, once the skipped checks below have run")
    elif r.recommended:
        console.print(f"[green]TAKE[/green] {escape(_card(r.recommended_card, r.recommended_offer))} "
                      f"{escape(r.recommended)} — {escape(r.why)}")
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
        t.add_row(escape(_card(o.card, o.offer)), escape(o.name), str(o.cards), _h(o.window_hours), _h(o.hours),
                  _h(o.critical_path_hours), _h(o.slack_hours),
                  "-" if o.utilization is None else f"{o.utilization:.0%}", usd(o.cost_cents),
                  usd(o.cost_per_useful_cents), mark)
    console.print(t)
    for o in r.packages:
        if not o.fits:
            console.print(f"[dim]{escape(_card(o.card, o.offer))} {escape(o.name)} does not fit: "
                          f"{escape(o.why)}[/dim]")
    if r.rentals:
        own = table("Phases with a card of their own: a rental each, started when the phases they wait for end",
                    [("card", "left"), ("phases", "left"), ("rental", "left"), ("cards", "right"),
                     ("starts h", "right"), ("ends h", "right"), ("cost", "right")])
        for x in r.rentals:
            o = x.option
            own.add_row(escape(_card(x.card, x.offer)), escape(", ".join(ph.name for ph in x.phases)),
                        escape(o.name) if o else "[red]none fits[/red]", str(o.cards) if o else "-",
                        _h(x.start_hours), _h(x.end_hours), usd(o.cost_cents) if o else "-")
        console.print(own)
        for x in r.rentals:
            if x.option is None:
                console.print(f"[dim]{escape(_card(x.card, x.offer))}: {escape(x.why)}[/dim]")
        if r.total_cents is not None:
            console.print(f"[bold]TOTAL[/bold] {usd(r.total_cents)} for the campaign (each rental's bill rounded "
                          f"to the cent), its last run ending at {_h(r.campaign_hours)} h")
    card = r.recommended_card or (r.packages[0].card if r.packages else "")
    p = table(f"Phases on {escape(card)} (hours per run before the margin)",
              [("phase", "left"), ("kind", "left"), ("runs", "right"), ("h/run", "right"), ("hours", "left"),
               ("cards", "right"), ("after", "left"), ("useful", "right")])
    for ph in r.phases:
        p.add_row(escape(ph.name), ph.kind, str(ph.runs), f"{ph.hours:,.2f}", ph.hours_how, str(ph.cards),
                  escape(", ".join(ph.after)) or "-", str(ph.useful))
    console.print(p)
    if r.schedule is not None:
        if any(x.schedule is not None for x in r.rentals):
            _gantt_rentals(r)
        else:
            _gantt(r)
    runs = [x for x in r.stop_rules if x.scope == "run"]
    if runs:
        st = table("Stop rules: a run past its hours + margin",
                   [("phase", "left"), ("stop a run past h", "right"), ("its card time", "right")])
        for x in runs:
            st.add_row(escape(x.phase or ""), _h2(x.hours), usd(x.cents))
        console.print(st)
    for x in r.stop_rules:
        if x.scope == "campaign":
            console.print(f"[bold]STOP[/bold] {escape(x.rule)}")
    if r.cut_first:
        c = table(f"Cut first (then {escape(r.cut_for)} fits)",
                  [("phase", "left"), ("runs cut", "right"), ("runs left", "right"), ("card-hours saved", "right")])
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


def _chosen(r: Any) -> Any:
    """The recommended option among the rentals compared (its card, its offer, its name)."""
    return next(o for o in r.packages if o.name == r.recommended and o.card == r.recommended_card
                and o.offer == r.recommended_offer)


def _bar(start: float, end: float, span: float) -> str:
    """One row of the text Gantt: '█' from start to end on BAR marks of span hours."""
    a = min(BAR, int(start / span * BAR))
    b = max(a + 1, min(BAR, round(end / span * BAR)))
    return "·" * a + "█" * (b - a) + "·" * (BAR - b)


def _gantt(r: Any) -> None:
    s = r.schedule
    pk = _chosen(r)
    span = pk.window_hours or s.makespan_hours
    ends = f"; the package ends at {pk.package_hours:,.1f} h, on demand after" \
        if pk.package_hours is not None and pk.window_hours is None else ""
    if pk.setup_hours:
        ends += f"; {pk.setup_hours:,.4g} h set-up billed before the first run (hours below from its end)"
    g = table(f"Schedule: {escape(_card(r.recommended_card, r.recommended_offer))} {escape(r.recommended)}, "
              f"{s.cards} card(s); each mark {span / BAR:,.1f} h of {span:,.0f} h{ends}",
              [("phase", "left"), ("start h", "right"), ("end h", "right"), ("", "left")])
    for sp in s.spans:
        g.add_row(escape(sp.phase), f"{sp.start_hours:,.1f}", f"{sp.end_hours:,.1f}",
                  _bar(sp.start_hours, sp.end_hours, span))
    console.print(g)


def _gantt_rentals(r: Any) -> None:
    """Every rental's schedule on the campaign's clock (a card per phase): each rental's phases on their own rows,
    labelled with its card, offer and rental, from where it starts (after the phases it waits for) and its set-up;
    the title says where each rental runs and where its package ends."""
    best = _chosen(r)
    lanes = [(f"{_card(best.card, best.offer)} {best.name}", best, r.start_hours or 0.0, r.schedule)]
    lanes += [(f"{_card(x.card, x.offer)} {x.option.name}", x.option, x.start_hours or 0.0, x.schedule)
              for x in r.rentals if x.option is not None and x.schedule is not None]
    lanes.sort(key=lambda lane: lane[2])
    span = max([r.campaign_hours or 0.0] + [start + (o.window_hours or o.hours or 0.0) for _, o, start, _ in lanes])
    said = []
    for name, o, start, _ in lanes:
        text = f"{name} from {start:,.1f} h to {start + (o.hours or 0.0):,.1f} h"
        if o.setup_hours:
            text += f" ({o.setup_hours:,.4g} h set-up first)"
        if o.package_hours is not None:
            text += f", its package ending at {start + o.package_hours:,.1f} h" + \
                ("; on demand after" if o.window_hours is None else "")
        said.append(text)
    g = table(f"Schedule of every rental, hours from the campaign's start; each mark {span / BAR:,.1f} h of "
              f"{span:,.1f} h: " + escape("; ".join(said)),
              [("phase", "left"), ("rental", "left"), ("start h", "right"), ("end h", "right"), ("", "left")])
    g.columns[1].no_wrap = True
    for name, o, start, s in lanes:
        for sp in s.spans:
            a, b = start + o.setup_hours + sp.start_hours, start + o.setup_hours + sp.end_hours
            g.add_row(escape(sp.phase), escape(name), f"{a:,.1f}", f"{b:,.1f}", _bar(a, b, span))
    console.print(g)


def _p(p: float | None) -> str:
    return "-" if p is None else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:+,.4g}"


def ablate_plan(r: Any) -> None:
    """An ablation plan: the verdict, the design and its cells, aliases, what runs first and what is cut."""
    d = r.design
    on = _card(r.card.partition("@")[0], d.offer) if d.offer is not None else r.card
    cost = f", {usd(d.cost_cents)} on {escape(on)} {escape(d.rental or '')}" if d.cost_cents is not None else ""
    budget = []
    if r.budget_card_hours is not None:
        budget.append(f"{r.budget_card_hours:,.1f} GPU-hours")
    if r.budget_cents is not None:
        budget.append(usd(r.budget_cents))
    head = f"[bold]{escape(r.path)}[/bold] · {escape(r.name)} · {len(r.factors)} factors, metric {escape(r.metric)}"
    console.print(head + (f" · budget {' and '.join(budget)}" if budget else ""))
    verdict = "[green]PLAN[/green]" if r.fits else "[red]OVER BUDGET[/red]"
    console.print(f"{verdict} {d.name}: {len(d.cells)} cells x {d.seeds_per_cell} seeds = {d.runs} runs, "
                  f"{d.card_hours:,.1f} GPU-hours{cost}")
    f = table("Factors (the control is coded -1)",
              [("", "left"), ("factor", "left"), ("control", "left"), ("other levels", "left")])
    for x in r.factors:
        f.add_row(x.letter, escape(x.name), escape(x.control), escape(", ".join(v for v in x.levels
                                                                                 if v != x.control)))
    console.print(f)
    if d.kind == "fractional":
        console.print(f"Generators {', '.join(d.generators)}; defining relation I = {' = '.join(d.defining_relation)}"
                      f"; resolution {_roman(d.resolution)}")
        a = table("Aliases", [("effect", "left"), ("aliased with", "left")])
        for al in d.aliases:
            a.add_row(al.effect, " = ".join(al.aliases) or "-")
        console.print(a)
    console.print("Two-factor interactions estimable clear of main effects and each other: "
                  + (", ".join(d.clear_interactions) or "none")
                  + ("; only as aliased sums: " + "; ".join(d.aliased_interactions) if d.aliased_interactions else ""))
    order = {label: i for i, label in enumerate(r.run_first)}
    c = table("Cells, in the order to run them", [("#", "right"), ("cell", "left")]
              + [(escape(x.name), "left") for x in r.factors] + [("seeds", "right"), ("GPU-h", "right")])
    for cell in sorted(d.cells, key=lambda x: order.get(x.label, len(order))):
        c.add_row(str(order.get(cell.label, 0) + 1), cell.label, *(escape(cell.levels[x.name]) for x in r.factors),
                  str(cell.seeds), f"{cell.card_hours:,.1f}")
    console.print(c)
    alt = table("Other designs", [("design", "left"), ("cells", "right"), ("seeds", "right"), ("runs", "right"),
                                  ("GPU-h", "right"), ("cost", "right")])
    for x in r.alternatives:
        alt.add_row(x.name, str(len(x.cells)), str(x.seeds_per_cell), str(x.runs), f"{x.card_hours:,.1f}",
                    usd(x.cost_cents))
    if r.alternatives:
        console.print(alt)
    for line in r.cut:
        console.print(f"cut: {escape(line)}")
    checks(r.checks)
    notes(r.notes, escaped=True)


def _roman(n: int | None) -> str:
    from ...plan.ablate import roman

    return roman(n or 0)


def ablate_analysis(r: Any) -> None:
    """An ablation's analysis: cell means, effects with intervals, comparisons with the control."""
    console.print(f"[bold]{escape(r.path)}[/bold] · {r.runs} runs in {len(r.cells)} cells · {escape(r.design)} · "
                  f"metric {escape(r.metric)}" + ("" if r.higher_is_better else " (lower is better)"))
    _recommendation(r)
    if r.error_variance is not None:
        console.print(f"Spread between seeds: pooled variance {r.error_variance:,.6g} on {r.error_df} df (SD "
                      f"{r.error_variance ** 0.5:,.4g})")
    c = table("Cells", [("cell", "left")] + [(escape(f.name), "left") for f in r.factors]
              + [("n", "right"), ("mean", "right"), ("SD", "right")])
    for cell in r.cells:
        c.add_row(cell.label, *(escape(cell.levels[f.name]) for f in r.factors), str(cell.n), f"{cell.mean:,.4g}",
                  "-" if cell.sd is None else f"{cell.sd:,.4g}")
    console.print(c)
    if r.effects:
        e = table(f"Effects (mean at the other level - mean at the control; {r.confidence:.0%} intervals)",
                  [("effect", "left"), ("factors", "left"), ("aliased with", "left"), ("estimate", "right"),
                   ("SE", "right"), ("interval", "right"), ("p", "right")])
        for x in r.effects:
            e.add_row(x.effect, escape(x.names), " = ".join(x.aliases) or "-", _x(x.estimate),
                      "-" if x.se is None else f"{x.se:,.4g}",
                      "-" if x.ci_low is None else f"[{_x(x.ci_low)}, {_x(x.ci_high)}]", _p(x.p_value))
        console.print(e)
    if r.comparisons:
        k = table(f"Against the control (improvement; {r.confidence:.0%} intervals; {escape(r.correction)})",
                  [("cell", "left"), ("test", "left"), ("n", "right"), ("improvement", "right"),
                   ("interval", "right"), ("p", "right"), ("p Holm", "right"), ("verdict", "left")])
        for x in r.comparisons:
            k.add_row(x.label, x.test, str(x.n), _x(x.improvement),
                      "-" if x.ci_low is None else f"[{_x(x.ci_low)}, {_x(x.ci_high)}]", _p(x.p_value),
                      _p(x.p_holm), x.verdict)
        console.print(k)
    notes(r.notes, escaped=True)


def _recommendation(r: Any) -> None:
    """The headline of an analysis: the setting to take, its predicted gain over the control and how it was got."""
    x = getattr(r, "recommendation", None)
    if x is None:
        console.print("[yellow]NO RECOMMENDATION[/yellow] — no control cell and no factorial fit to compare with")
        return
    setting = ", ".join(f"{k}={v}" for k, v in x.setting.items())
    ci = "" if x.ci95 is None else f" [{_x(x.ci95[0])}, {_x(x.ci95[1])}] (95%)"
    head = "[green]TAKE[/green]" if x.label != "(1)" else "[yellow]KEEP THE CONTROL[/yellow]"
    console.print(f"{head} {escape(setting)} (cell {x.label}): predicted gain {_x(x.predicted_gain)}{ci} over the "
                  "control")
    console.print(f"[dim]{escape(x.basis)}[/dim]")


def bench(r: Any) -> None:
    """Cost at equal quality: the cheapest way to the target, every configuration, the files written."""
    direction = ">=" if r.higher_is_better else "<="
    console.print(f"[bold]{escape(r.path)}[/bold] · {escape(r.name)} · target {escape(r.metric)} {direction} "
                  f"{r.target:g} · {r.repeats} run(s) to the target costed")
    head = "[green]CHEAPEST[/green]" if r.cheapest else "[red]NONE REACHES[/red]"
    console.print(f"{head} — {escape(r.why)}")
    t = table("Configurations (hours to the target: mean and slowest run; cost of the slowest x runs)",
              [("configuration", "left"), ("card", "left"), ("cards", "right"), ("method", "left"), ("runs", "right"),
               ("status", "left"), ("mean h", "right"), ("slowest h", "right"), ("cheapest", "left"),
               ("cost", "right")])
    t.columns[0].no_wrap = t.columns[1].no_wrap = True
    for c in r.configurations:
        t.add_row(escape(c.name), escape(_card(c.card, c.offer)), str(c.cards),
                  escape(f"{c.method} {c.precision}".strip()),
                  str(len(c.runs)), c.status, _h2(c.hours_mean), _h2(c.hours_worst), escape(c.cheapest or "-"),
                  usd(c.cheapest_cents))
    console.print(t)
    names = list(dict.fromkeys(x.label for c in r.configurations for x in c.rentals))
    if names:
        p = table("Cost under each rental (- : the rental's window or cards do not hold the runs)",
                  [("configuration", "left")] + [(escape(n), "right") for n in names])
        for c in r.configurations:
            if c.rentals:
                by = {x.label: x for x in c.rentals}
                p.add_row(escape(c.name), *(usd(by[n].cost_cents) if n in by and by[n].fits else "-" for n in names))
        console.print(p)
    checks(c for c in r.checks if c.id == "bench.quality")
    for f in r.files:
        console.print(f"Wrote {escape(f)}")
    notes(r.notes, escaped=True)


def _h2(hours: float | None) -> str:
    return "-" if hours is None else f"{hours:,.2f}"
