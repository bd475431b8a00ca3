"""The memory family's renderers: memory and trace (an estimate with its card fits), kv, measure, explain."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from ...units import fmt_count, fmt_gib
from . import VERDICT_STYLE, Scale, console, gib

if TYPE_CHECKING:  # the result types, for the annotations only: a renderer imports no library module it does not run
    from rich.console import JustifyMethod

    from ...memory.breakdown import MemoryEstimate
    from ...memory.explain import Explanation
    from ...memory.fit import Fit
    from ...memory.kv import KVEstimate
    from ...memory.measurement import Measurement
    from ...memory.plan import MemoryPlan
    from ...memory.trace_module import ModulePlan


def describe(est: MemoryEstimate) -> str:
    w = est.workload
    if w.training:
        what = f"train {w.method} ({w.dtype}{', mixed precision' if w.mixed_precision else ''}, {w.optimizer})"
        ckpt = ("" if not w.grad_checkpointing else ", selective (op) checkpointing" if w.checkpoint_ops else
                f", grad checkpointing every {w.checkpoint_every} layers" if w.checkpoint_every > 1 else
                ", grad checkpointing")
        shape = f"batch {w.batch} x {w.seq_len} tokens" + ckpt + (f", {w.loss} loss" if w.loss != "full" else "") \
            + (f", Liger {w.liger_kernels}" if w.liger_kernels else "")
        if w.grad_accumulation > 1:
            shape += f", {w.grad_accumulation} micro-batches a step"
    else:
        what = f"inference ({w.dtype} weights, {w.cache_dtype} KV)"
        shape = f"{w.batch} sequence{'s' if w.batch > 1 else ''} x {w.seq_len} tokens"
    cards = f"{w.gpus} cards, {w.shard}" if w.gpus > 1 else "1 card"
    if w.device_map != "none":
        cards = f"{w.gpus} card{'s' if w.gpus > 1 else ''}, device_map {w.device_map}"
    return f"{est.model} · {what} · {shape} · {cards} · {w.attention}"


def plan(p: MemoryPlan, *, sources: bool = False) -> None:
    """An estimate (memory or trace) with its card fits; `sources`: each item's source in the breakdown."""
    family = next((c for c in p.checks if c.id == "memory.family"), None)
    memory(p.estimate, p.fits, p.card, sources=sources,
           unverified=f"{p.estimate.model}'s family is not one the formulas model (the generic activation model "
           f"guesses its activations); {family.fix}" if family else "")
    if p.device_map is not None:
        device_map(p)
    if p.host is not None:
        host(p)
    if p.frontier is not None:
        edge(p)
    if p.recipe:
        recipe(p)


def device_map(p: MemoryPlan) -> None:
    """--device-map: one row per card (the layers accelerate places there, its weights, KV cache and requirement),
    the card that decides marked, and what goes to the CPU or disk."""
    dm = p.device_map
    assert dm is not None
    table = Table(title=f"Per card (device_map {dm.policy}, {dm.gpus} x {gib(dm.card_bytes)} GiB; the largest "
                  "decides)", title_justify="left")
    for name, justify in (("card", "right"), ("layers", "left"), ("holds", "left"), ("weights GiB", "right"),
                          ("KV GiB", "right"), ("peak GiB", "right"), ("required GiB", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in dm.cards:
        layers = "-" if s.layers is None else f"{s.layers[0]}-{s.layers[1]} ({s.layer_count})"
        holds = ", ".join(x for x, on in (("embedding", s.embedding), ("lm_head", s.head)) if on)
        need = gib(s.required_bytes) + (" *" if s.card == dm.deciding else "")
        table.add_row(str(s.card), layers, holds, gib(s.weights_bytes), gib(s.kv_bytes), gib(s.peak_allocated_bytes),
                      need)
    console.print(table)
    if dm.offloaded:
        console.print(f"[red]offloaded[/red]: accelerate puts {', '.join(dm.offloaded)} on the CPU or disk "
                      f"({dm.offloaded_layers} decoder layers): the cards cannot hold the weights", highlight=False)


def host(p: MemoryPlan) -> None:
    """CPU offload (ZeRO-Offload, ZeRO-3 or FSDP parameter offload): the host RAM each process holds, item by item."""
    assert p.host is not None
    console.print(f"[bold]Host RAM per process (CPU offload)[/bold]: {fmt_gib(p.host.bytes)}"
                  + (" (no --host-memory: not checked)" if p.host_memory_bytes is None else
                     f" of --host-memory {fmt_gib(p.host_memory_bytes)}: "
                     + ("fits" if p.host.bytes <= p.host_memory_bytes else "[red]does not fit[/red]")))
    for i in p.host.items:
        console.print(f"  {i.name}: {fmt_gib(i.bytes)}  ({i.formula})", markup=False, highlight=False)


def module_plan(p: ModulePlan) -> None:
    """campaign trace FILE.py:FACTORY: the user's model, its traced micro-batch and optimizer, then as trace."""
    from . import escape

    inputs = ", ".join(f"{n} {t}" for n, t in p.inputs) or "no tensor"
    title = escape(f"{p.setup} · {p.model_class.rsplit('.', 1)[-1]} · train ({p.estimate.workload.dtype}, "
                   f"{p.optimizer.rsplit('.', 1)[-1]}) · inputs {inputs} · 1 card")
    memory(p.estimate, p.fits, p.card, title=title)


def recipe(p: MemoryPlan) -> None:
    """--config: every key of the user's files, by use (modelled, no memory, off, not modelled), per file; the
    keys not modelled one per line with what they do, and the verdict that follows."""
    from . import escape

    console.print("[bold]Read from your recipe[/bold]")
    files = list(dict.fromkeys(k.file for k in p.recipe))
    for file in files:
        keys = [k for k in p.recipe if k.file == file]
        parts = []
        for use in ("modelled", "no memory", "off"):
            names = [k.key for k in keys if k.use == use]
            if names:
                parts.append(f"{use}: {', '.join(names)}")
        console.print(f"  {escape(file)} — " + escape("; ".join(parts) or "no key counted"))
        for k in keys:
            if k.unmodelled:
                console.print(f"  [yellow]{k.use}[/yellow]: {escape(k.key)} = {escape(k.value)}"
                              + (f" ({escape(k.why)})" if k.why else ""))
    missing = sum(k.unmodelled for k in p.recipe)
    if missing:
        console.print(f"[yellow]not verified[/yellow]: {missing} key{'s' if missing > 1 else ''} not modelled, so the "
                      "estimate is a bound (an upper bound where a key only lowers memory)")


def edge(p: MemoryPlan) -> None:
    """--frontier: the largest batch per context length on the card, each with the command that runs it, and what
    each change modelled saves at the workload as given."""
    f, w = p.frontier, p.estimate.workload
    assert f is not None
    table = Table(title=f"What fits {f.card} ({gib(f.memory_bytes)} GiB), with the reserve", title_justify="left")
    for name in ("seq len", "max batch", "needs GiB", "run"):
        table.add_column(name, justify="right" if name != "run" else "left")
    for n, most, need in f.rows:
        table.add_row(f"{n:,}", f"{most:,}", gib(need), f"--seq-len {n} --batch {most}")
    console.print(table if f.rows else f"not even one sequence of 256 tokens fits {f.card}")
    for name, flag, need, saved in f.what_if:
        console.print(f"what if {name} ({flag}): needs {gib(need)} GiB, saves {saved / 2**20:,.0f} MiB")
    if w.training:
        console.print("[dim]not modelled as a what-if: a chunked or fused loss (the logits are counted whole)[/dim]")


def memory(est: MemoryEstimate, fits: Sequence[Fit], card_name: str | None, *, sources: bool = False,
           title: str | None = None, unverified: str = "") -> None:
    """Verdict, breakdown at the peak, phases, card fit, notes; for a traced estimate, the modules whose activations
    are alive at the peak. `sources`: a column with where each item's formula comes from (the --json's `source`);
    `title`: the first line in place of the workload's description (a traced setup: what was run); `unverified`:
    why the card's fit is not verified, said under it."""
    console.print(f"[bold]{title or describe(est)}[/bold]"
                  + (" [dim](traced)[/dim]" if est.method == "traced" else ""))
    params = f"{fmt_count(est.params)} params"
    if est.workload.training:
        params += f", {fmt_count(est.trainable_params)} trainable"
    console.print(f"{params}. Peak [bold]{fmt_gib(est.peak_allocated_bytes)}[/bold] allocated in the "
                  f"[bold]{est.peak_phase}[/bold]; [bold]{fmt_gib(est.device_bytes)}[/bold] on the device; "
                  f"[bold]{fmt_gib(est.required_bytes)}[/bold] with the reserve (per card).")
    if fits and not card_name:
        groups = {v: [f.card for f in fits if f.verdict == v] for v in VERDICT_STYLE}

        def short(names: list[str]) -> str:
            return ", ".join(names) if len(names) <= 6 else ", ".join(names[:5]) + f" and {len(names) - 5} more"

        parts = [f"[{VERDICT_STYLE[v]}]{label}: {short(names)}"
                 f"[/{VERDICT_STYLE[v]}]" for v, label in (("fits", "fits"), ("tight", "tight (inside the reserve)"),
                                                           ("does not fit", "does not fit")) if (names := groups[v])]
        console.print("; ".join(parts))
    if card_name and fits:
        f = fits[0]
        style = VERDICT_STYLE[f.verdict]
        console.print(f"[{style}]{f.card}: {f.verdict}[/{style}] — {gib(f.usable_bytes)} GiB usable"
                      + (f" (vLLM holds {gib(f.vllm_bytes)})" if f.vllm_bytes else "") + ", headroom "
                      f"{gib(f.headroom_bytes)} GiB" + (f", max batch {f.max_batch or '-'}, max seq "
                                                     f"{f'{f.max_seq_len:,}' if f.max_seq_len else '-'}"
                                                     if f.max_batch is not None else ""))
        if unverified:
            console.print(f"[yellow]not verified[/yellow]: {unverified}", highlight=False)
        if f.verdict == "tight":
            left = est.reserve_bytes + f.headroom_bytes
            console.print(f"[{style}]tight[/{style}]: the device total fits, the reserve does not: "
                          f"{gib(left)} of its {gib(est.reserve_bytes)} GiB are left, so an estimate more than "
                          f"{left / est.device_bytes:.1%} low would run out of memory; take a larger card, a smaller "
                          "batch, or a smaller --reserve if you have measured the margin (campaign explain)")
    table = Table(title=f"Breakdown at the peak ({est.peak_phase})", title_justify="left")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("formula", overflow="fold", max_width=90)
    if sources:
        table.add_column("source", overflow="fold", max_width=60)
    source = (lambda item: (item.source,)) if sources else (lambda item: ())  # noqa: E731
    blank = ("",) if sources else ()
    # the tensors, then the allocator overhead, what lies outside the allocator (the context, NCCL's buffers on
    # several cards) and the reserve (estimate.py finish_estimate); a subtotal follows each level
    first = next(k for k, item in enumerate(est.items) if item.category == "overhead")
    tensors, allocator, outside, reserve = est.items[:first], est.items[first], est.items[first + 1:-1], est.items[-1]
    levels = ((tensors, "peak allocated", est.peak_allocated_bytes), ([allocator], "peak reserved",
              est.peak_reserved_bytes), (outside, "device (nvidia-smi)", est.device_bytes))
    for items, label, subtotal in levels:
        for item in items:
            table.add_row(item.name, gib(item.bytes), item.formula, *source(item))
        table.add_row(f"[dim]= {label}[/dim]", f"[dim]{gib(subtotal)}[/dim]", "", *blank, end_section=True)
    table.add_row(reserve.name, gib(reserve.bytes), reserve.formula, *source(reserve))
    table.add_row("[bold]required[/bold]", f"[bold]{gib(est.required_bytes)}[/bold]", "", *blank)
    console.print(table)
    phases = "  ".join(f"{p.name} {gib(p.bytes)}" + (" [bold]<- peak[/bold]" if p.name == est.peak_phase else "")
                       for p in est.phases)
    console.print(f"Phases (allocated GiB): {phases}")
    if fits and not card_name:
        fit_table(fits)
    for note in est.notes:
        console.print(f"[dim]- {note}[/dim]")
    holders = [(m, b) for m, b in est.top_modules if b >= 2**20]  # none when the peak is the optimizer step
    if holders:
        console.print(f"Activations alive at the {est.peak_phase} peak, by the module that made them (all layers): "
                      + ", ".join(f"{m} {b / 2**30:.2f} GiB" for m, b in holders[:6]))


def fit_table(fits: Sequence[Fit]) -> None:
    table = Table(title="Fit per card (per-card figures, reserve included)", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("card", "left"), ("usable GiB", "right"), ("verdict", "left"), ("headroom GiB", "right"),
        ("max batch", "right"), ("max seq", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for f in fits:
        style = VERDICT_STYLE[f.verdict]
        table.add_row(f.card, gib(f.usable_bytes), f"[{style}]{f.verdict}[/{style}]", gib(f.headroom_bytes),
                      "-" if not f.max_batch else str(f.max_batch), "-" if not f.max_seq_len else f"{f.max_seq_len:,}")
    console.print(table)


def kv(est: KVEstimate) -> None:
    """The cache size and how it was reached; with a card, what fits it beside the weights."""
    console.print(f"[bold]{est.model}[/bold] · KV cache ({est.kind.upper()}, {est.dtype}) · {est.sequences} "
                  f"sequence{'s' if est.sequences > 1 else ''} x {est.context:,} tokens"
                  + (" · static" if est.static else " · dynamic") + (f" · tp {est.tp}" if est.tp > 1 else ""))
    console.print(f"[bold]{fmt_gib(est.bytes)}[/bold] — {est.bytes_per_token:,.0f} bytes per token "
                  f"({est.bytes_per_token / 1024:,.1f} KiB) over {est.layers_full + est.layers_sliding} layers"
                  + (f"; {est.layers_sliding} sliding layers capped at {est.window:,}" if est.layers_sliding else ""))
    if (c := est.card) is not None:
        console.print(f"{c.name}: {c.verdict} — {fmt_gib(c.required_bytes)} required with {c.weights_dtype} weights, "
                      f"temporaries, context and reserve, of {fmt_gib(c.memory_bytes)}; longest context at "
                      f"{est.sequences} sequence(s): {c.max_context:,}"
                      f"{' (the model maximum)' if c.max_context == c.model_max_context else ''}; most sequences at "
                      f"{est.context:,} tokens: {c.max_sequences:,}")
    for note in est.notes:
        console.print(f"[dim]- {note}[/dim]")


def measurement(m: Measurement, saved: object = None) -> None:
    env = m.environment
    versions = ", ".join(x for x in (f"torch {env.torch}", f"CUDA {env.cuda}" if env.cuda else "",
                                     f"HIP {env.hip}" if env.hip else "",
                                     f"driver {env.driver}" if env.driver else "") if x)
    weights = f", weights {m.weights}" if m.weights else ""
    sc = Scale(m.peak_reserved_bytes, m.device_bytes)
    console.print(f"[bold]{m.label}[/bold] measured on {env.device_name} ({env.device}; {versions}){weights}")
    console.print(f"Peak [bold]{sc.with_unit(m.peak_allocated_bytes)}[/bold] allocated in the "
                  f"[bold]{m.peak_phase}[/bold], {sc.with_unit(m.peak_reserved_bytes)} reserved"
                  + (f", {sc.with_unit(m.device_bytes)} on the device" if m.device_bytes is not None else ""))
    table = Table(title=f"Per phase ({sc.unit}; peaks reset at each phase start)", title_justify="left")
    for col in ("phase", "allocated", "peak allocated", "reserved", "peak reserved", "device used", "seconds"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for p in m.phases:
        table.add_row(p.name + ("" if p.complete else " (did not end)"), sc(p.allocated_bytes),
                      sc(p.peak_allocated_bytes), sc(p.reserved_bytes), sc(p.peak_reserved_bytes),
                      sc(p.device_used_bytes), f"{p.seconds:.2f}")
    console.print(table)
    if env.device == "cpu":
        console.print("[dim]- CPU: no caching allocator (reserved = allocated) and no device context[/dim]")
    if saved:
        console.print(f"[dim]- saved to {saved}[/dim]")


def explanation(e: Explanation) -> None:
    sc = Scale(*(lv.analytic_bytes for lv in e.levels), *(lv.measured_bytes for lv in e.levels))
    if e.margin is None:
        console.print(f"[bold]{e.label}[/bold] on {e.device}: [red]the measured run failed[/red]; no margin from it")
    else:
        console.print(f"[bold]{e.label}[/bold] on {e.device}: plan with a [bold]{e.margin:.0%}[/bold] margin "
                      f"-> {sc.with_unit(e.planned_device_bytes or 0)} per card ({e.margin_reason})")
    table = Table(title=f"Per phase: peak allocated ({sc.unit})", title_justify="left")
    for col in ("phase", "analytic", "traced", "measured", "analytic / measured"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in e.rows:
        table.add_row(r.phase, sc(r.analytic_bytes), sc(r.traced_bytes), sc(r.measured_bytes),
                      "-" if r.ratio is None else f"{r.ratio:.2f}")
    console.print(table)
    levels = Table(title=f"At the peak ({sc.unit})", title_justify="left")
    for col in ("level", "analytic", "traced", "measured"):
        levels.add_column(col, justify="left" if col == "level" else "right")
    for lv in e.levels:
        levels.add_row(lv.name, sc(lv.analytic_bytes), sc(lv.traced_bytes), sc(lv.measured_bytes))
    console.print(levels)
    gaps = Table(title=f"The gap, measured - analytic: {sc(e.gap_bytes, signed=True)} {sc.unit}, attributed",
                 title_justify="left")
    for col in ("part", sc.unit, "what it is"):
        gaps.add_column(col, justify="right" if col == sc.unit else "left")
    for gap in e.gaps:
        gaps.add_row(gap.name, sc(gap.bytes, signed=True), gap.meaning)
    console.print(gaps)
    if e.verdicts:
        console.print("Verdict with this margin: " + "; ".join(
            f"[{VERDICT_STYLE[v]}]{c} {v}[/{VERDICT_STYLE[v]}]" for c, _m, v in e.verdicts))
    for note in e.notes:
        console.print(f"[dim]- {note}[/dim]")
