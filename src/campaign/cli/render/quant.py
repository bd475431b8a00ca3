"""Renderer of `campaign quant`: the verdict, one row per variant (memory estimated, stored and measured; quality
and its paired test against the reference; latency), the KV cache by precision, the broken guards, the notes."""
from __future__ import annotations

import math
from typing import Any

from ...plan.money import usd
from . import Scale, console, escape, notes, table


def render_quant(r: Any) -> None:
    ev = r.evaluation
    verdict = "[green]PASS[/green]" if r.passed else _verdict(r)
    console.print(f"{verdict} — {escape(r.model)}: {len(r.variants)} variants on the same {ev.examples:,} examples "
                  f"({ev.tokens:,} tokens, sha256 {ev.sha256[:12]}), reference {r.reference}, on {r.device}")
    for c in r.calibrations or ((r.calibration,) if r.calibration is not None else ()):
        console.print(f"calibration: {escape(c.name)}, {c.examples:,} examples ({c.tokens:,} tokens), sha256 "
                      f"{c.sha256[:12]}")
    scale = Scale(*(x for v in r.variants for x in (v.weight_bytes_stored, v.weight_bytes_estimated,
                                                    v.weight_bytes_measured, v.kv_bytes_estimated)))
    quality = "perplexity" if r.metric == "perplexity" else "accuracy"
    t = table(f"Variants ({scale.unit}; weights: campaign memory's estimate, stored in the tensors, measured loaded; "
              f"KV in {r.reference})",
              (("variant", "left"), ("weights est.", "right"), ("stored", "right"), ("measured", "right"),
               ("KV est.", "right"), (quality, "right"), ("change", "right"),
               ("p" if r.metric == "perplexity" else "flips, p", "right"), ("smallest card", "left"),
               ("status", "left")))
    for v in r.variants:
        status = {"reference": "reference", "pass": "[green]pass[/green]", "flagged": "[red]flagged[/red]"}[v.status]
        if v.flips is not None:
            test = f"-{v.flips[0]} +{v.flips[1]}, {v.p_value:.3g}"
        else:
            test = "-" if v.p_value is None else f"{v.p_value:.3g}"
        t.add_row(v.name, scale(v.weight_bytes_estimated), scale(v.weight_bytes_stored), scale(v.weight_bytes_measured),
                  scale(v.kv_bytes_estimated), _q(v.quality, r.metric),
                  "-" if v.delta is None else _d(v.delta, r.metric), test, v.smallest_card or "-", status)
    console.print(t)
    priced = [v for v in r.variants if v.cheapest_card]
    if priced:
        console.print("cheapest card by the hour among those each variant fits: " + "; ".join(
            f"{v.name} {v.cheapest_card} {usd(v.hourly_cents)}/h" for v in priced))
    if r.kv:
        kscale = Scale(*(k.bytes for k in r.kv))
        measured = any(k.measured for k in r.kv)
        columns = [("dtype", "left"), ("bytes/token", "right"), (f"{r.context:,} x {r.sequences} ({kscale.unit})",
                                                                  "right")]
        if measured:
            columns += [(quality, "right"), ("change", "right"), ("p", "right")]
        t = table("KV cache: bytes estimated" + (", quality measured on the same examples (K and V rounded)"
                                                 if measured else ", effect on quality not measured"), columns)
        for k in r.kv:
            cells = [k.dtype, f"{k.bytes_per_token:,.0f}", kscale(k.bytes)]
            if measured:
                cells += ["-" if k.quality is None else _q(k.quality, r.metric),
                          "-" if k.delta is None else _d(k.delta, r.metric),
                          "-" if k.p_value is None else f"{k.p_value:.3g}"]
            t.add_row(*cells)
        console.print(t)
    for c in r.calibration_comparisons:
        p = "-" if c.p_value is None else f"{c.p_value:.3g}"
        console.print(f"{c.format} calibrated on {escape(c.second)} against {escape(c.first)}: "
                      f"{_q(c.quality_second, r.metric)} "
                      f"vs {_q(c.quality_first, r.metric)}, change {_d(c.delta, r.metric)} ({escape(c.test)}, p {p})")
    for v in r.variants:
        if v.equivalence is not None:
            console.print(_equivalence(v, r.margin, r.metric))
    for v in r.variants:
        for g in v.guards:
            if not g.passed:
                console.print(f"[red]{v.name}[/red]: guard {escape(g.expression)} broken — {escape(g.describe())}")
    timed = [f"{v.name} {v.ms_per_token:.3f}" for v in r.variants if v.ms_per_token is not None]
    if timed:
        console.print(f"forward ms per token (first batch, fastest of 5, on {r.device}): " + ", ".join(timed))
    notes(r.notes, escaped=True)


def _verdict(r: Any) -> str:
    """FAILED when a quality is NaN or inf (nothing was compared), else FLAGGED, with what failed."""
    failed = {c.id: c for c in r.checks if c.status in ("fail", "skipped")}
    parts = []
    if "quant.finite" in failed:
        parts.append(f"{r.metric} not finite: " + ", ".join(v.name for v in r.variants if not v.finite))
    broke = [v.name for v in r.variants if any(not g.passed for g in v.guards)]
    if broke:
        parts.append(f"{', '.join(broke)} broke a guard")
    if "equivalence.within_margin" in failed:
        out = [v.name for v in r.variants if v.equivalence is not None and not v.equivalence.equivalent]
        if out:
            parts.append(f"{', '.join(out)} not shown within +/-{_margin(r.margin, r.metric)}")
    word = "[red]FAILED[/red]" if "quant.finite" in failed else "[red]FLAGGED[/red]"
    return f"{word} ({'; '.join(parts) or 'a check failed'})"


def _margin(m: float, metric: str) -> str:
    if metric == "perplexity":
        return f"{m:g} nats of per-example NLL"
    points = m * 100
    return f"{points:g} point{'' if points == 1 else 's'}"


def _equivalence(v: Any, margin: float, metric: str) -> str:
    e = v.equivalence
    word = "[green]equivalent[/green]" if e.equivalent else "[red]not shown equivalent[/red]"
    unit = (lambda x: f"{x:+.4f}") if metric == "perplexity" else (lambda x: f"{x * 100:+.2f} pts")
    return (f"{escape(v.name)}: {word} within ±{_margin(margin, metric)} (TOST p = {e.p_value:.3g}; difference "
            f"{unit(e.difference)}, {1 - 2 * e.alpha:.0%} interval [{unit(e.interval[0])}, {unit(e.interval[1])}])")


def _q(x: float, metric: str) -> str:
    return f"{x:,.2f}" if metric == "perplexity" else f"{x:.2%}"


def _d(x: float, metric: str) -> str:
    if not math.isfinite(x):
        return str(x)             # nan or inf: no sign, no unit (quant.finite says why)
    return f"{x:+,.3f}" if metric == "perplexity" else f"{x * 100:+.2f} pts"
