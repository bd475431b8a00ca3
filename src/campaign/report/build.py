"""`campaign report`: one self-contained HTML file from the campaign's records (track/records.py) and runs
(track/store.py), with a section per question of the guide. Each figure says how it was obtained (estimated,
traced, measured, counted) and when; what is missing is said; a record that cannot be read is listed, never fatal.
No script, stylesheet, font or image is fetched: styles are inline and pictures are inline SVG.
"""
from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import atomic_write_text
from ..results import Information
from ..track.records import SavedRecord, load_records

SCHEMA = "campaign.report/1"
GiB = 2**30
CONFUSION_LABELS = 30   # a confusion matrix of more labels is not drawn in the report (its table says enough)
QUESTIONS = (
    (1, "My model has never run. Where do I start?",
     ("campaign.memory", "campaign.measurement", "campaign.explain", "campaign.kv")),
    (2, "The score goes up, but can I trust it?",
     ("campaign.split", "campaign.leaks", "campaign.usage", "campaign.errors", "campaign.regress", "campaign.seeds")),
    (3, "I am about to train. What must I check first?",
     ("campaign.check", "campaign.inspect", "campaign.batch", "campaign.runs")),
    (4, "Fine-tune or compress: which variant?", ("campaign.quant", "campaign.ablate")),
    (5, "My budget is limited. What do I run first?", ("campaign.budget", "campaign.bench")),
)
# What each question misses when nothing of that kind was recorded, and the command that records it.
EXPECTED = {
    "campaign.memory": "no memory estimate: campaign --record memory MODEL ...",
    "campaign.measurement": "no measurement on a card: campaign --record measure MODEL ... (on the rented card)",
    "campaign.leaks": "no leak check: campaign --record leaks TRAIN TEST",
    "campaign.errors": "no error analysis: campaign --record errors PREDICTIONS",
    "campaign.seeds": "no seed comparison: campaign --record seeds RESULTS.csv",
    "campaign.check": "no step check: campaign --record check setup.py:make_setup",
}


@dataclass(frozen=True)
class ReportResult(Information):
    path: str
    sections: tuple[str, ...]
    records: int
    unreadable: int
    runs: int
    figures: int
    missing: tuple[str, ...]
    schema: str = SCHEMA


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _gib(n: Any) -> str:
    return f"{n / GiB:,.2f} GiB" if isinstance(n, (int, float)) else "-"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>" if svg else ""


def _checks(checks: Any) -> str:
    rows = [[c.get("id", ""), c.get("status", ""), c.get("seen", "")] for c in checks or [] if isinstance(c, dict)]
    return _table(["check", "status", "seen"], rows) if rows else ""


# -- one block per kind of record ---------------------------------------------------------------------------------
def _memory(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import card_fit, memory_phases, svg as draw

    how = "traced (fake tensors)" if d.get("method") == "traced" else "estimated (formula)"
    w = d.get("workload") or {}
    fits = [f"{f.get('card')}: {f.get('verdict')}" for f in d.get("fits") or [] if isinstance(f, dict)]
    body = _table(["model", "workload", "peak phase", "peak allocated", "device", "required (with reserve)"],
                  [[d.get("model"), f"{w.get('mode', '')} {w.get('method', '')} batch {w.get('batch')} x "
                                     f"{w.get('seq_len')} {w.get('dtype', '')}", d.get("peak_phase"),
                    _gib(d.get("peak_allocated_bytes")), _gib(d.get("device_bytes")), _gib(d.get("required_bytes"))]])
    if fits:
        body += f"<p>cards: {_e('; '.join(fits))}</p>"
    svg = draw(memory_phases(d, f"{d.get('model')}: memory per phase, {how}"))
    fit = draw(card_fit(d, f"{d.get('model')}: the cards against the {how.split(' ')[0]} total"))
    return (f"memory of {d.get('model')}, {how}",
            body + _figure(svg, f"{how}, {r.created}") + _figure(fit, f"card fit, {how}, {r.created}"))


def _measurement(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import measured_phases, svg as draw

    env = d.get("environment") or {}
    rows = [[p.get("name"), _gib(p.get("peak_allocated_bytes")), _gib(p.get("peak_reserved_bytes")),
             _gib(p.get("device_used_bytes"))] for p in d.get("phases") or [] if isinstance(p, dict)]
    body = _table(["phase", "peak allocated", "peak reserved", "device"], rows)
    where = f"{env.get('device_name', '?')} ({env.get('device', '?')})"
    return (f"measured on {where}",
            body + _figure(draw(measured_phases(d, f"measured on {where}")), f"measured, {r.created}"))


def _name(source: Any) -> str:
    """A file's name from a record's source (a path, or {'path': ..., 'sha256': ...})."""
    path = source.get("path", "") if isinstance(source, dict) else source
    return Path(str(path or "")).name


def _number(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _usd(cents: Any) -> str:
    from ..plan.money import usd

    return usd(cents) if isinstance(cents, int) else "-"


def _hours(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"


def _count(v: Any) -> Any:
    return len(v) if isinstance(v, (list, tuple)) else v


def _errors(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import confusion, svg as draw

    averages = {k: v.get("f1") if isinstance(v, dict) else v for k, v in (d.get("averages") or {}).items()}
    body = _table(["examples", "errors", "accuracy", *[f"{k} F1" for k in averages]],
                  [[d.get("examples"), d.get("errors"), _number(d.get("accuracy")),
                    *[_number(v) for v in averages.values()]]])
    labels = d.get("labels") if isinstance(d.get("labels"), list) else []
    svg = draw(confusion(d, "confusion matrix (counted)")) if len(labels) <= CONFUSION_LABELS else ""
    return f"errors of {_name(d.get('source'))}", body + _figure(svg, f"counted, {r.created}")


def _seeds(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import seeds, svg as draw

    body = _table(["metric", "seeds", "mean difference", "interval", "verdict"],
                  [[d.get("metric"), d.get("n_seeds"), _number(d.get("mean_diff")),
                    f"[{_number(d.get('ci_low'))}, {_number(d.get('ci_high'))}]", d.get("verdict")]])
    return (f"{d.get('candidate')} vs {d.get('baseline')} over seeds",
            body + _figure(draw(seeds(d, "per-seed differences and the useful-effect band")),
                           f"measured, {r.created}"))


def record_status(d: dict[str, Any]) -> str | None:
    """A saved result's status: pass | warn | fail | not verified, as every result writes it now. Records written
    before (on users' disks) said it their own way, read here once: regress and quant's `passed`, a measurement's
    `status` ok | failed, usage's `status` pass | fail, else the worst of the checks listed (a skipped check did
    not count then). None when the record says nothing of it (an old memory or seeds record: information)."""
    from ..checks import VERDICTS

    status = d.get("status")
    if status in VERDICTS:
        return str(status)
    if status in ("ok", "failed"):                  # a measurement before campaign_version
        return "pass" if status == "ok" else "fail"
    if isinstance(d.get("passed"), bool):           # regress, quant before campaign_version
        return "pass" if d["passed"] else "fail"
    listed = [c.get("status") for c in d.get("checks") or [] if isinstance(c, dict)]
    if listed:
        return "fail" if "fail" in listed else "warn" if "warn" in listed else "pass"
    return None


def _regress(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    guards = [[g.get("expression", g.get("metric", "")), _number(g.get("delta")), g.get("passed")] for g in d.get("guards") or []
              if isinstance(g, dict)]
    body = _table(["examples", "accuracy before", "after", "right to wrong", "wrong to right", "status"],
                  [[d.get("examples"), _number(d.get("accuracy_baseline")), _number(d.get("accuracy_candidate")),
                    _count(d.get("right_to_wrong")), _count(d.get("wrong_to_right")), record_status(d)]])
    if guards:
        body += _table(["guard", "change", "passed"], guards)
    return f"{_name(d.get('candidate'))} against {_name(d.get('baseline'))}", body


def _budget(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import gantt, svg as draw

    rows = [[p.get("name"), p.get("card"), p.get("cards"), _hours(p.get("hours")), _hours(p.get("critical_path_hours")),
             _usd(p.get("cost_cents")), "yes" if p.get("fits") else "no", _hours(p.get("slack_hours"))]
            for p in d.get("packages") or [] if isinstance(p, dict)]
    body = (f"<p>recommended: {_e(d.get('recommended'))} on {_e(d.get('recommended_card'))} — {_e(d.get('why', ''))}"
            "</p>" + _table(["rental", "card", "cards", "hours", "critical path", "cost", "fits", "slack h"], rows))
    svg = draw(gantt(d.get("schedule") or {}, f"schedule on the recommended rental ({d.get('recommended')})"))
    return f"budget of {d.get('name') or _name(d.get('plan'))}", body + _figure(svg, f"planned, {r.created}")


def _quant(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import quant, svg as draw

    rows = [[v.get("name"), _number((v.get("weight_bytes_stored") or 0) / 2**20), _number(v.get("quality")),
             _number(v.get("delta")) if v.get("delta") is not None else "-", v.get("smallest_card") or "-",
             v.get("status")] for v in d.get("variants") or [] if isinstance(v, dict)]
    body = _table(["variant", "weights stored (MiB)", str(d.get("metric", "quality")), "change", "smallest card",
                   "status"], rows)
    where = f"{d.get('device_name') or d.get('device')}"
    return (f"quantization of {d.get('model')} on {where}",
            body + _figure(draw(quant(d, "memory against quality (measured)")), f"measured, {r.created}"))


def _generic(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    body = _checks(d.get("checks"))
    status = record_status(d)
    if status is not None:
        body = f"<p>status: {_e(status)}</p>" + body
    return f"{r.command or d.get('schema')}", body or "<p>recorded (see the JSON file)</p>"


HANDLERS: dict[str, Callable[[SavedRecord, dict[str, Any]], tuple[str, str]]] = {
    "campaign.memory": _memory, "campaign.measurement": _measurement, "campaign.errors": _errors,
    "campaign.seeds": _seeds, "campaign.regress": _regress, "campaign.budget": _budget, "campaign.quant": _quant,
}

# -- many records of one kind: one table of them all and one picture ---------------------------------------------
ONE_EACH = 8      # up to this many records of a kind are drawn one by one (their tables and figures); more: summed up


def _workload(w: Any) -> str:
    w = w if isinstance(w, dict) else {}
    return f"{w.get('mode', '')} {w.get('method', '')} batch {w.get('batch')} x {w.get('seq_len')} {w.get('dtype', '')}"


def _memory_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    from ..plots import histogram, svg as draw

    by_verdict: dict[str, list[float]] = {}
    cards: dict[str, float] = {}
    rows = []
    for r in rs:
        d = r.result or {}
        fits = [f for f in d.get("fits") or [] if isinstance(f, dict)]
        rows.append([d.get("model"), _workload(d.get("workload")), "traced" if d.get("method") == "traced" else
                     "estimated", d.get("peak_phase"), _gib(d.get("peak_allocated_bytes")), _gib(d.get("required_bytes")),
                     "; ".join(f"{f.get('card')}: {f.get('verdict')}" for f in fits), r.created, Path(r.path).name])
        need = d.get("required_bytes")
        if isinstance(need, (int, float)):
            verdict = str(fits[0].get("verdict")) if len(fits) == 1 else "required"
            by_verdict.setdefault(verdict, []).append(need / GiB)
        for f in fits:
            if isinstance(f.get("memory_bytes"), int) and len(cards) < 8:
                cards.setdefault(str(f.get("card")), f["memory_bytes"] / GiB)
    svg = draw(histogram(by_verdict, "GiB required, with the reserve (lines: the cards' memory)",
                         f"{len(rs):,} memory estimates: what each requires", lines=cards))
    return (["model", "workload", "how", "peak phase", "peak allocated", "required (with reserve)", "cards",
             "recorded", "file"], rows, svg)


def _measurement_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    from ..plots import histogram, svg as draw

    rows, peaks = [], []
    for r in rs:
        d = r.result or {}
        env = d.get("environment") or {}
        phases = [p for p in d.get("phases") or [] if isinstance(p, dict)]
        peak = max((p.get("peak_reserved_bytes") or 0 for p in phases), default=None)
        rows.append([d.get("label"), _workload(d.get("workload")), f"{env.get('device_name', '?')} "
                     f"({env.get('device', '?')})", _gib(max((p.get("peak_allocated_bytes") or 0 for p in phases),
                                                            default=None)), _gib(peak), r.created, Path(r.path).name])
        if isinstance(peak, (int, float)):
            peaks.append(peak / GiB)
    svg = draw(histogram({"measured": peaks}, "GiB, peak reserved over the phases", f"{len(rs):,} measurements"))
    return ["model", "workload", "device", "peak allocated", "peak reserved", "recorded", "file"], rows, svg


def _errors_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    from ..plots import histogram, svg as draw

    rows, accuracy = [], []
    for r in rs:
        d = r.result or {}
        averages = d.get("averages") or {}
        macro = averages.get("macro") if isinstance(averages, dict) else None
        rows.append([_name(d.get("source")), d.get("examples"), d.get("errors"), _number(d.get("accuracy")),
                     _number(macro.get("f1") if isinstance(macro, dict) else macro), r.created, Path(r.path).name])
        if isinstance(d.get("accuracy"), (int, float)):
            accuracy.append(d["accuracy"])
    svg = draw(histogram({"accuracy": accuracy}, "accuracy (counted)", f"{len(rs):,} error analyses"))
    return ["predictions", "examples", "errors", "accuracy", "macro F1", "recorded", "file"], rows, svg


def _seeds_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    from ..plots import histogram, svg as draw

    rows, by_verdict, effects = [], {}, set()
    for r in rs:
        d = r.result or {}
        rows.append([_name(d.get("source")), f"{d.get('candidate')} vs {d.get('baseline')}", d.get("metric"),
                     d.get("n_seeds"), _number(d.get("mean_diff")),
                     f"[{_number(d.get('ci_low'))}, {_number(d.get('ci_high'))}]", d.get("verdict"), r.created,
                     Path(r.path).name])
        if isinstance(d.get("mean_diff"), (int, float)):
            by_verdict.setdefault(str(d.get("verdict")), []).append(d["mean_diff"])
            effects.add(d.get("min_effect"))
    band = effects.pop() if len(effects) == 1 and isinstance(next(iter(effects)), (int, float)) else None
    svg = draw(histogram(by_verdict, "mean difference, candidate - baseline (grey: not a useful effect)",
                         f"{len(rs):,} seed comparisons, by verdict", band=band or None))
    return (["results", "compared", "metric", "seeds", "mean difference", "interval", "verdict", "recorded", "file"],
            rows, svg)


def _regress_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    from ..plots import histogram, svg as draw

    rows, by_passed = [], {}
    for r in rs:
        d = r.result or {}
        guards = [f"{g.get('expression', g.get('metric', ''))} {_number(g.get('delta'))}"
                  + ("" if g.get("passed") else " BROKEN") for g in d.get("guards") or [] if isinstance(g, dict)]
        rows.append([_name(d.get("candidate")), _name(d.get("baseline")), d.get("examples"),
                     _number(d.get("accuracy_baseline")), _number(d.get("accuracy_candidate")),
                     _count(d.get("right_to_wrong")), _count(d.get("wrong_to_right")), "; ".join(guards),
                     record_status(d), r.created, Path(r.path).name])
        before, after = d.get("accuracy_baseline"), d.get("accuracy_candidate")
        if isinstance(before, (int, float)) and isinstance(after, (int, float)):
            by_passed.setdefault("passed" if record_status(d) in ("pass", "warn") else "failed", []).append(after - before)
    svg = draw(histogram(by_passed, "accuracy, candidate - baseline",
                         f"{len(rs):,} regressions, by whether they passed"))
    return (["candidate", "baseline", "examples", "accuracy before", "after", "right to wrong", "wrong to right",
             "guards", "status", "recorded", "file"], rows, svg)


def _budget_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    rows = []
    for r in rs:
        d = r.result or {}
        best = next((p for p in d.get("packages") or [] if isinstance(p, dict)
                     and p.get("name") == d.get("recommended")), {})
        rows.append([d.get("name") or _name(d.get("plan")), d.get("recommended"), d.get("recommended_card"),
                     _hours(best.get("hours")), _usd(best.get("cost_cents")), r.created, Path(r.path).name])
    return ["plan", "recommended", "card", "hours", "cost", "recorded", "file"], rows, ""


def _quant_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    rows = []
    for r in rs:
        d = r.result or {}
        for v in d.get("variants") or []:
            if isinstance(v, dict):
                rows.append([d.get("model"), v.get("name"), _number((v.get("weight_bytes_stored") or 0) / 2**20),
                             _number(v.get("quality")), v.get("status"), r.created, Path(r.path).name])
    return ["model", "variant", "weights stored (MiB)", "quality", "status", "recorded", "file"], rows, ""


def _generic_rows(rs: list[SavedRecord]) -> tuple[list[str], list[list[Any]], str]:
    rows = []
    for r in rs:
        d = r.result or {}
        listed = d.get("checks")
        checks = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        counted: dict[str, int] = {}
        for c in checks:
            counted[str(c.get("status"))] = counted.get(str(c.get("status")), 0) + 1
        failed = [str(c.get("id")) for c in checks if c.get("status") in ("fail", "warn")]
        rows.append([r.command or d.get("schema"), record_status(d), ", ".join(f"{n} {s}" for s, n in counted.items()),
                     ", ".join(failed), r.created, Path(r.path).name])
    return ["command", "status", "checks", "failed or warned", "recorded", "file"], rows, ""


SUMMARIES: dict[str, Callable[[list[SavedRecord]], tuple[list[str], list[list[Any]], str]]] = {
    "campaign.memory": _memory_rows, "campaign.measurement": _measurement_rows, "campaign.errors": _errors_rows,
    "campaign.seeds": _seeds_rows, "campaign.regress": _regress_rows, "campaign.budget": _budget_rows,
    "campaign.quant": _quant_rows,
}


def _summary(kind: str, rs: list[SavedRecord]) -> str:
    """More than ONE_EACH records of one kind: one table with a row each and one picture of them all."""
    try:
        headers, rows, svg = SUMMARIES.get(kind, _generic_rows)(rs)
        note = ""
    except Exception as e:  # noqa: BLE001 - records of an unexpected shape are listed, never fatal
        headers, rows, svg = _generic_rows(rs)
        note = f"<p class='missing'>could not be drawn ({_e(type(e).__name__)}: {_e(e)})</p>"
    return (f"<h3>{len(rs):,} {_e(kind.split('.')[-1])} records</h3><p class='meta'>one row each, oldest first; "
            f"the latest of each subject (the JSON files hold every detail)</p>{note}"
            + _figure(svg, f"{len(rs):,} records, as recorded") + _table(headers, rows))


CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;
font-size:.9em}th{background:#f3f3f3}.missing{color:#9d0208}.meta{color:#666;font-size:.85em}
figure{margin:.5em 0}figcaption{color:#666;font-size:.85em}svg{max-width:100%;height:auto}
@media print{body{max-width:none;margin:0}h2{page-break-before:always}figure,table{page-break-inside:avoid}}
"""


def _workload_key(model: Any, w: Any) -> tuple[Any, ...] | None:
    if not isinstance(w, dict):
        return None
    return (model, w.get("mode"), w.get("method"), w.get("batch"), w.get("seq_len"), w.get("dtype"))


def _sources(by_kind: dict[str, list[SavedRecord]]) -> dict[tuple[Any, ...], list[tuple[str, dict[str, float]]]]:
    """Each model and workload recorded from two or more sources (estimated, traced, measured): its sources, each
    with every phase's peak allocated bytes."""
    groups: dict[tuple[Any, ...], list[tuple[str, dict[str, float]]]] = {}
    for r in by_kind.get("campaign.memory", []):
        d = r.result or {}
        key = _workload_key(d.get("model"), d.get("workload"))
        how = "traced" if d.get("method") == "traced" else "estimated"
        values = {str(p.get("name")): float(p.get("bytes", 0)) for p in d.get("phases") or [] if isinstance(p, dict)}
        if key is not None and values:
            groups.setdefault(key, []).append((how, values))
    for r in by_kind.get("campaign.measurement", []):
        d = r.result or {}
        key = _workload_key(d.get("label"), d.get("workload"))
        values = {str(p.get("name")): float(p.get("peak_allocated_bytes", 0)) for p in d.get("phases") or []
                  if isinstance(p, dict)}
        if key in groups and values:
            groups[key].append((f"measured on {(d.get('environment') or {}).get('device_name', '?')}", values))
    return {key: series for key, series in groups.items() if len(series) >= 2}


def _compared(by_kind: dict[str, list[SavedRecord]]) -> list[tuple[tuple[str, ...], str]]:
    """For each model and workload recorded from two or more sources (estimated, traced, measured), one picture of
    each phase's peak allocated side by side."""
    from ..plots import side_by_side, svg as draw

    out = []
    for key, series in _sources(by_kind).items():
        svg = draw(side_by_side(series, f"{key[0]}: {key[1]} {key[2]} batch {key[3]} x {key[4]}, peak per phase"))
        if svg:
            out.append((tuple(label for label, _ in series),
                        f"<h3>{_e(key[0])}: {_e(', '.join(label for label, _ in series))}, side by side</h3>"
                        + _figure(svg, "each source as recorded; bars of one phase are the same phase's peak")))
    return out


def _compared_summary(groups: dict[tuple[Any, ...], list[tuple[str, dict[str, float]]]]) -> str:
    """More than ONE_EACH workloads from several sources: one table of their peaks and one picture of every
    source's peak against the first's (the estimate)."""
    from ..plots import against, svg as draw

    pairs: dict[str, list[tuple[float, float]]] = {}
    rows = []
    for key, series in groups.items():
        peaks = [(label, max(values.values())) for label, values in series]
        for label, peak in peaks[1:]:
            pairs.setdefault(f"{label.split(' on ')[0]} against {peaks[0][0]}", []).append((peaks[0][1] / GiB,
                                                                                         peak / GiB))
        rows.append([key[0], _workload({"mode": key[1], "method": key[2], "batch": key[3], "seq_len": key[4],
                                        "dtype": key[5]}), "; ".join(f"{label}: {_gib(p)}" for label, p in peaks)])
    svg = draw(against(pairs, "GiB, highest phase peak: the first source (estimated or traced)",
                       "GiB, highest phase peak: the other source", f"{len(groups):,} workloads from several sources"))
    return (f"<h3>{len(groups):,} workloads recorded from several sources, side by side</h3>"
            + _figure(svg, "each dot: one workload's highest phase peak; on the line, the sources agree")
            + _table(["model", "workload", "highest phase peak by source"], rows))


def _schema_kind(schema: str | None) -> str:
    return (schema or "").split("/")[0]


def build_report(out: str | Path = "report.html", *, root: str | Path | None = None,
                 title: str = "Campaign report", progress: Callable[[str], None] | None = None) -> ReportResult:
    """Write the report of the record folder and runs under `root` to `out` (atomically). Up to ONE_EACH records of a
    kind are drawn one by one; more become one table and one picture. progress: called with what is being done
    ('records 3,000/10,000', 'runs', 'memory 2/5', 'writing')."""
    import datetime as dt

    from ..track.store import list_runs
    from ..plots import runs_over_time, svg as draw

    say = progress or (lambda _phase: None)
    records = load_records(root, progress=say)
    say("runs")
    runs = list_runs(root=root).runs
    latest: dict[tuple[str, str, str], SavedRecord] = {}
    for r in records:                           # oldest first: the latest of each kind, command and subject wins
        if r.result is not None:
            d = r.result
            subject = str(d.get("model") or d.get("source") or d.get("candidate") or d.get("label") or "")
            latest[(_schema_kind(r.schema), r.command, subject)] = r
    by_kind: dict[str, list[SavedRecord]] = {}
    for (kind, _, _), r in sorted(latest.items(), key=lambda kv: kv[1].created):
        by_kind.setdefault(kind, []).append(r)
    parts, sections, figures, missing = [], [], 0, []
    for number, question, kinds in QUESTIONS:
        blocks = []
        for kind in kinds:
            if kind == "campaign.runs":
                continue
            shown = by_kind.get(kind, [])
            if len(shown) > ONE_EACH:
                say(f"{kind.split('.')[-1]}: {len(shown):,} records in one table")
                body = _summary(kind, shown)
                figures += body.count("<svg")
                blocks.append(body)
                continue
            for i, r in enumerate(shown, 1):
                say(f"{kind.split('.')[-1]} {i:,}/{len(shown):,}")
                try:
                    name, body = HANDLERS.get(kind, _generic)(r, r.result or {})
                except Exception as e:  # noqa: BLE001 - a record of an unexpected shape is listed, never fatal
                    name, body = _generic(r, r.result or {})
                    body = f"<p class='missing'>could not be drawn ({_e(type(e).__name__)}: {_e(e)})</p>" + body
                figures += body.count("<svg")
                blocks.append(f"<h3>{_e(name)}</h3><p class='meta'>{_e(r.command)} — recorded {_e(r.created)} — "
                              f"{_e(Path(r.path).name)}</p>{body}")
        if number == 1:
            say("side by side")
            groups = _sources(by_kind)
            if len(groups) > ONE_EACH:
                block = _compared_summary(groups)
                figures += block.count("<svg")
                blocks.append(block)
            else:
                compared = [block for _, block in _compared(by_kind)]
                figures += len(compared)
                blocks += compared
        if number == 3 and runs:
            say(f"runs: {len(runs):,}")
            rows = [[x.id, x.status, x.decision or "-", x.baseline or "-", x.reason] for x in runs]
            svg = draw(runs_over_time([{"created": x.created, "status": x.status, "decision": x.decision,
                                        "name": x.name} for x in runs]))
            figures += bool(svg)
            blocks.append("<h3>runs</h3>" + _table(["id", "status", "decision", "baseline", "reason"], rows)
                          + _figure(svg, "recorded by campaign run"))
        absent = [EXPECTED[k] for k in kinds if k in EXPECTED and not by_kind.get(k)]
        missing += absent
        miss = "".join(f"<li class='missing'>{_e(m)}</li>" for m in absent)
        sections.append(f"{number}. {question}")
        parts.append(f"<section id='q{number}'><h2>{number}. {_e(question)}</h2>"
                     + ("".join(blocks) or "<p class='missing'>nothing recorded for this question yet</p>")
                     + (f"<ul>{miss}</ul>" if miss else "") + "</section>")
    bad = [r for r in records if r.result is None]
    if bad:
        parts.append("<section id='unreadable'><h2>Records that could not be read</h2>"
                     + _table(["file", "error"], [[r.path, r.error] for r in bad]) + "</section>")
    say("writing")
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body>"
            f"<h1>{_e(title)}</h1><p class='meta'>written {when} from {len(records)} records and {len(runs)} runs"
            "</p>" + "".join(parts) + "</body></html>\n")
    path = atomic_write_text(out, page)
    return ReportResult(str(path), tuple(sections), len(records), len(bad), len(runs), figures, tuple(missing))


__all__ = ["ReportResult", "build_report"]
