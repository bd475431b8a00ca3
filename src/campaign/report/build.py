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
    (4, "Fine-tune or compress: which variant?", ("campaign.quant", "campaign.ablate_plan", "campaign.ablate")),
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
    return f"{n / GiB:,.2f} GiB" if isinstance(n, (int, float)) and not isinstance(n, bool) else "-"


def _cell(value: Any) -> str:
    """A table cell as a reader writes it, never a Python repr: yes / no, '-' for nothing, a mapping as
    'k=v, ...' (nested keys dotted: {'lora': {'r': 8}} -> 'lora.r=8'), a list as 'a, b'."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, dict):
        flat = _flat(value)
        return ", ".join(f"{k}={_cell(v)}" for k, v in flat.items()) if flat else "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) if value else "-"
    return str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(_cell(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>" if svg else ""


def _list(v: Any) -> list[Any]:
    """A record's field as a list: [] when it is something else (a record of an unexpected shape)."""
    return v if isinstance(v, list) else []


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _dicts(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _rows(d: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A record's list of objects: [] when absent; a value of another type is an error the report lists (what
    could not be drawn), not a silent blank."""
    v = d.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise TypeError(f"{key!r} is {type(v).__name__}, not a list")
    return [x for x in v if isinstance(x, dict)]


def _obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise TypeError(f"{key!r} is {type(v).__name__}, not an object")
    return v


def _absent(what: str) -> str:
    """What a record does not hold, said rather than invented."""
    return f"<p class='missing'>{_e(what)}: not in this record</p>"


def _checks(checks: Any) -> str:
    rows = [[c.get("id", ""), c.get("status", ""), c.get("seen", "")] for c in _dicts(checks)]
    return _table(["check", "status", "seen"], rows) if rows else ""


def command_line(r: SavedRecord) -> str:
    """The command line a record was saved from (`campaign --record ...` keeps it)."""
    import shlex

    if r.argv:
        return "campaign " + shlex.join(r.argv)
    return f"campaign {r.command} (the command line was not recorded)"


INPUT_FILES = ("source", "input", "baseline", "candidate", "plan", "setup", "manifest", "ledger")


def inputs(d: dict[str, Any]) -> list[str]:
    """The inputs a record names: its files (with their sha256 where recorded), its setup, its model."""
    out = []
    for key in INPUT_FILES:
        v = d.get(key)
        if isinstance(v, dict) and isinstance(v.get("path"), str):
            sha = v.get("sha256")
            rows = v.get("rows", v.get("examples"))
            extra = ", ".join(x for x in (f"sha256 {sha[:12]}" if isinstance(sha, str) else "",
                                          f"{rows:,} rows" if isinstance(rows, int) else "") if x)
            out.append(f"{key} {v['path']}" + (f" ({extra})" if extra else ""))
        elif isinstance(v, str) and v and key in ("source", "plan", "setup", "manifest", "ledger"):
            out.append(f"{key} {v}")
    if isinstance(d.get("model"), str):
        out.append(f"model {d['model']}")
    return out


def _meta(r: SavedRecord) -> str:
    named = inputs(r.result or {})
    return (f"<p class='meta'>recorded {_e(r.created or '(no time)')} — {_e(Path(r.path).name)}<br>"
            f"<code>{_e(command_line(r))}</code>"
            + (f"<br>inputs: {_e('; '.join(named))}" if named else "") + "</p>")


# -- one block per kind of record ---------------------------------------------------------------------------------
def _memory(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import card_fit, memory_phases, svg as draw

    how = "traced (fake tensors)" if d.get("method") == "traced" else "estimated (formula)"
    fits = [f"{f.get('card')}: {f.get('verdict')}" for f in _rows(d, "fits")]
    body = _table(["model", "workload", "peak phase", "peak allocated", "device", "required (with reserve)"],
                  [[d.get("model"), _workload(d.get("workload")), d.get("peak_phase"),
                    _gib(d.get("peak_allocated_bytes")), _gib(d.get("device_bytes")), _gib(d.get("required_bytes"))]])
    body += f"<p>cards: {_e('; '.join(fits))}</p>" if fits else _absent("card fit (no --card)")
    when = f"{how}, recorded {r.created}"
    svg = draw(memory_phases(d, f"{d.get('model')}: memory per phase, {how}"))
    fit = draw(card_fit(d, f"{d.get('model')}: the cards against the {how.split(' ')[0]} total"))
    return (f"memory of {d.get('model')}, {how}, {_workload(d.get('workload'))}",
            body + _figure(svg, when) + _figure(fit, f"card fit, {when}"))


def _measurement(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import measured_phases, svg as draw

    env = _obj(d, "environment")
    rows = [[p.get("name"), _gib(p.get("peak_allocated_bytes")), _gib(p.get("peak_reserved_bytes")),
             _gib(p.get("device_used_bytes"))] for p in _rows(d, "phases")]
    body = _table(["phase", "peak allocated", "peak reserved", "device"], rows) if rows else _absent("phases")
    where = f"{env.get('device_name', '?')} ({env.get('device', '?')})"
    return (f"{d.get('label') or 'measurement'} measured on {where}",
            body + _figure(draw(measured_phases(d, f"measured on {where}")), f"measured, recorded {r.created}"))


def _name(source: Any) -> str:
    """A file's name from a record's source (a path, or {'path': ..., 'sha256': ...})."""
    path = source.get("path", "") if isinstance(source, dict) else source
    return Path(str(path or "")).name


def _number(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _usd(cents: Any) -> str:
    from ..plan.money import usd

    return usd(cents) if isinstance(cents, int) and not isinstance(cents, bool) else "-"


def _hours(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _count(v: Any) -> Any:
    return len(v) if isinstance(v, (list, tuple)) else v


def _errors(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import confusion, svg as draw

    averages = {k: v.get("f1") if isinstance(v, dict) else v for k, v in _obj(d, "averages").items()}
    body = _table(["examples", "errors", "accuracy", *[f"{k} F1" for k in averages]],
                  [[d.get("examples"), d.get("errors"), _number(d.get("accuracy")),
                    *[_number(v) for v in averages.values()]]])
    per_class = [[c.get("label"), c.get("support"), _number(c.get("precision")), _number(c.get("recall")),
                  _number(c.get("f1"))] for c in _rows(d, "per_class")]
    if per_class:
        body += _table(["class", "support", "precision", "recall", "F1"], per_class)
    labels = _list(d.get("labels"))
    # the title names the file and the time: two analyses never show two pictures under one title
    title = f"confusion of {_name(d.get('source')) or 'the predictions'} (counted), recorded {r.created}"
    svg = draw(confusion(d, title)) if len(labels) <= CONFUSION_LABELS else ""
    return f"errors of {_name(d.get('source'))}", body + _figure(svg, title)


def _seeds(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import seeds, svg as draw

    body = _table(["metric", "seeds", "mean difference", "interval", "t-test p", "verdict"],
                  [[d.get("metric"), d.get("n_seeds"), _number(d.get("mean_diff")),
                    f"[{_number(d.get('ci_low'))}, {_number(d.get('ci_high'))}]", _number(d.get("t_pvalue")),
                    d.get("verdict")]])
    return (f"{d.get('candidate')} vs {d.get('baseline')} over seeds",
            body + _figure(draw(seeds(d, f"per-seed differences and the useful-effect band, recorded {r.created}")),
                           f"measured, recorded {r.created}"))


def record_status(d: dict[str, Any]) -> str | None:
    """A saved result's status: pass | warn | fail | not verified, as every result writes it now. Records written
    before (on users' disks) said it their own way, read here once: regress and quant's `passed`, a measurement's
    `status` ok | failed, usage's `status` pass | fail, else the worst of the checks listed (a skipped check did
    not count then). None when the record says nothing of it (an old memory or seeds record: information)."""
    from ..checks import VERDICTS

    status = d.get("status")
    if isinstance(status, str) and status in VERDICTS:
        return str(status)
    if status in ("ok", "failed"):                  # a measurement before campaign_version
        return "pass" if status == "ok" else "fail"
    if isinstance(d.get("passed"), bool):           # regress, quant before campaign_version
        return "pass" if d["passed"] else "fail"
    listed = [c.get("status") for c in _dicts(d.get("checks"))]
    if listed:
        return "fail" if "fail" in listed else "warn" if "warn" in listed else "pass"
    return None


def _mcnemar(d: dict[str, Any]) -> str:
    m = d.get("mcnemar")
    if not isinstance(m, dict):
        return _absent("McNemar's test")
    p = m.get("p_value")
    return (f"<p>McNemar's test: p = {_e(_number(p) if isinstance(p, float) else p)} (right to wrong b = "
            f"{_e(m.get('b'))}, wrong to right c = {_e(m.get('c'))}; {_e(m.get('method', 'method not recorded'))})"
            "</p>")


def _delta_f1(c: dict[str, Any]) -> list[Any]:
    f1 = c.get("f1")
    before, after = (f1[0], f1[1]) if isinstance(f1, list) and len(f1) == 2 else ("-", "-")
    return [c.get("label"), c.get("support"), _number(before), _number(after), _number(c.get("delta_f1"))]


def _regress(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    guards = [[g.get("expression", g.get("metric", "")), _number(g.get("delta")), g.get("passed")]
              for g in _rows(d, "guards")]
    body = _table(["examples", "accuracy before", "after", "right to wrong", "wrong to right", "status"],
                  [[d.get("examples"), _number(d.get("accuracy_baseline")), _number(d.get("accuracy_candidate")),
                    _count(d.get("right_to_wrong")), _count(d.get("wrong_to_right")), record_status(d)]])
    body += _mcnemar(d)
    per_class = [_delta_f1(c) for c in _rows(d, "per_class")]
    body += (_table(["class", "support", "F1 before", "F1 after", "change"], per_class) if per_class
             else _absent("per-class deltas"))
    deltas = [[x.get("name"), _number(x.get("baseline")), _number(x.get("candidate")), _number(x.get("delta"))]
              for x in _rows(d, "deltas") if not str(x.get("name", "")).startswith(("f1[", "precision[",
                                                                                          "recall["))]
    if deltas:
        body += _table(["metric", "before", "after", "change"], deltas)
    body += _table(["guard", "change", "passed"], guards) if guards else "<p>guards: none given</p>"
    return f"{_name(d.get('candidate'))} against {_name(d.get('baseline'))}", body


def _split(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    source = _obj(d, "input")
    body = (f"<p>input: {_e(source.get('path'))} ({_e(source.get('format'))}, {_e(source.get('rows'))} rows, sha256 "
            f"{_e(str(source.get('sha256', ''))[:12])})</p>" if source else _absent("the input file"))
    rows = [[s.get("name"), s.get("rows"), _number(s.get("fraction")), _number(s.get("target_fraction")),
             s.get("path"), str(s.get("sha256") or "")[:12],
             ", ".join(f"{k} {v}" for k, v in _dict(s.get("labels")).items())] for s in _rows(d, "splits")]
    body += (_table(["split", "rows", "fraction", "target", "file", "sha256", "rows per label"], rows) if rows
             else _absent("the splits' rows"))
    dup = _obj(d, "duplicates")
    if dup:
        body += "<p>duplicates: " + _e(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in dup.items())) + "</p>"
    body += f"<p>manifest: {_e(d.get('manifest'))}</p>" if d.get("manifest") else _absent("the manifest")
    return f"split of {_name(source.get('path')) or '?'}", body + _checks(_rows(d, "checks"))


def _usage(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    counts = _obj(d, "counts")
    final = d.get("final_split")
    rows = [[f"{split} (final)" if split == final else split, *(_dict(c).get(k, 0) for k in
                                                              ("training", "model_selection", "final_test"))]
            for split, c in counts.items()]
    body = (f"<p>ledger: {_e(d.get('ledger'))} of {_e(d.get('manifest'))}; the final split may inform "
            f"{_e(d.get('max_final_uses'))} decision(s), it informed {_e(d.get('final_decisions'))}</p>")
    body += (_table(["split", "training", "model selection", "final test"], rows) if rows
             else _absent("the uses per split"))
    entries = [[e.get("time"), e.get("split"), e.get("purpose"), e.get("note") or "", e.get("run") or "-"]
               for e in _rows(d, "entries")]
    body += (_table(["time", "split", "purpose", "what it decided", "run"], entries) if entries
             else "<p>no use recorded in the ledger</p>")
    warnings = [w for w in _list(d.get("warnings")) if isinstance(w, str)]
    body += "".join(f"<p class='missing'>{_e(w)}</p>" for w in warnings)
    return f"usage ledger of {_name(d.get('manifest')) or '?'}", body + _checks(_rows(d, "checks"))


def _caveats(d: dict[str, Any]) -> list[str]:
    """What a budget's figures rest on: example prices, hours estimated from FLOPs, the recovery margin."""
    out = []
    prices = d.get("prices")
    if isinstance(prices, dict):
        if prices.get("example"):
            out.append(f"prices are the bundled example data ({prices.get('source')}, {prices.get('date')}): "
                       "pass --prices with your provider's")
        else:
            out.append(f"prices from {prices.get('path')} ({prices.get('source')}, {prices.get('date')})")
    else:
        out.append("where the prices came from: not in this record")
    estimated = sorted({str(e.get("phase")) for e in _rows(d, "estimates") if e.get("how") == "estimated"})
    if estimated:
        mfu = sorted({number(e.get("mfu")) for e in _rows(d, "estimates") if _real(e.get("mfu"))})
        out.append(f"hours of {', '.join(estimated)} estimated from FLOPs"
                   + (f" at MFU {', '.join(f'{m:.0%}' for m in mfu)}" if mfu else "") + ", not measured")
    elif "estimates" not in d:
        out.append("how the hours were obtained: not in this record")
    margin = d.get("margin")
    out.append(f"recovery margin {margin:.0%} on every run" if isinstance(margin, (int, float))
               and not isinstance(margin, bool) else "recovery margin: not in this record")
    return out


def _budget(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import gantt, svg as draw

    rows = [[p.get("name"), f"{p.get('card')}@{p['offer']}" if p.get("offer") else p.get("card"), p.get("cards"),
             _hours(p.get("hours")), _hours(p.get("critical_path_hours")),
             _hours(p.get("package_hours")), _hours(p.get("setup_hours")), _usd(p.get("cost_cents")),
             "yes" if p.get("fits") else "no", _hours(p.get("slack_hours"))]
            for p in _rows(d, "packages")]
    offer = f"@{d['recommended_offer']}" if d.get("recommended_offer") else ""
    body = (f"<p>recommended: {_e(d.get('recommended'))} on {_e(d.get('recommended_card'))}{_e(offer)} — "
            f"{_e(d.get('why', ''))}"
            "</p><p>caveats:</p><ul>" + "".join(f"<li>{_e(c)}</li>" for c in _caveats(d)) + "</ul>"
            + _table(["rental", "card", "cards", "hours", "critical path", "package ends h", "set-up h", "cost",
                      "fits", "slack h"], rows))
    own = [[_offered(x.get("card"), x.get("offer")), ", ".join(str(ph.get("name")) for ph in _rows(x, "phases")),
            _obj(x, "option").get("name") or "none fits", _hours(x.get("start_hours")), _hours(x.get("end_hours")),
            _usd(_obj(x, "option").get("cost_cents"))] for x in _rows(d, "rentals")]
    if own:
        body += ("<p>phases with a card of their own, each on a rental of that card:</p>"
                 + _table(["card", "phases", "rental", "starts h", "ends h", "cost"], own))
    if _real(d.get("total_cents")):
        body += (f"<p>total: <b>{_e(_usd(d.get('total_cents')))}</b> for the campaign, its last run ending at "
                 f"{_e(_hours(d.get('campaign_hours')))} h</p>")
    phases = [[p.get("name"), p.get("kind"), p.get("runs"), p.get("cards"), _hours(p.get("hours")),
               p.get("hours_how") or "-", ", ".join(str(a) for a in _list(p.get("after"))) or "-"]
              for p in _rows(d, "phases")]
    body += (_table(["phase", "kind", "runs", "cards", "hours per run", "hours from", "after"], phases) if phases
             else _absent("the phases"))
    rules = _rows(d, "stop_rules")
    runs = [[x.get("phase"), _hours2(x.get("hours")), _usd(x.get("cents"))] for x in rules if x.get("scope") == "run"]
    if runs:
        body += "<p>stop rules (money):</p>" + _table(["phase", "stop a run past h", "its card time"], runs)
    body += "".join(f"<p><b>stop</b> {_e(x.get('rule'))}</p>" for x in rules if x.get("scope") == "campaign")
    if "stop_rules" not in d:
        body += _absent("stop rules")
    body += _checks(_rows(d, "checks"))
    chosen = next((p for p in _rows(d, "packages") if p.get("name") == d.get("recommended")
                   and p.get("card") == d.get("recommended_card") and p.get("offer") == d.get("recommended_offer")), {})
    end, setup = chosen.get("package_hours"), chosen.get("setup_hours")
    name = str(chosen.get("name") or "").removesuffix(" + on-demand")
    label = None if not _real(end) else f"{name} ends at {end:,.4g} h" + \
        ("; on demand after" if chosen.get("window_hours") is None else "")
    if any(isinstance(x.get("schedule"), dict) for x in _rows(d, "rentals")):    # a card per phase: every rental
        from ..plan.plots import rentals_figure

        svg = draw(rentals_figure(d, "schedule of every rental on the campaign's clock"))
    else:
        svg = draw(gantt(_obj(d, "schedule"), f"schedule on the recommended rental ({d.get('recommended')})",
                         window=number(end) if _real(end) else None, label=label, setup_hours=number(setup)))
    return f"budget of {d.get('name') or _name(d.get('plan'))}", body + _figure(svg, f"planned, recorded {r.created}")


def _quant(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    from ..plots import quant, svg as draw

    rows = [[v.get("name"), _number(number(v.get("weight_bytes_stored")) / 2**20), _number(v.get("quality")),
             _number(v.get("delta")) if v.get("delta") is not None else "-", v.get("smallest_card") or "-",
             v.get("status")] for v in _rows(d, "variants")]
    evaluation = _obj(d, "evaluation")
    body = (f"<p>model: {_e(d.get('model') or '(not in this record)')} — setup {_e(d.get('setup') or '(not recorded)')}"
            f" — reference {_e(d.get('reference'))} — evaluated on {_e(evaluation.get('examples', '?'))} examples "
            f"(sha256 {_e(str(evaluation.get('sha256', ''))[:12])}) on {_e(d.get('device_name') or d.get('device'))}"
            "</p>")
    body += _table(["variant", "weights stored (MiB)", str(d.get("metric", "quality")), "change", "smallest card",
                    "status"], rows)
    where = f"{d.get('device_name') or d.get('device')}"
    return (f"quantization of {d.get('model')} on {where}",
            body + _figure(draw(quant(d, f"{d.get('model')}: memory against quality (measured)")),
                           f"measured, recorded {r.created}"))


def signed(v: Any) -> str:
    """An effect or a gain as the report prints it: signed, 4 significant digits ('+3.735', '-0.1125')."""
    return f"{v:+,.4g}" if _real(v) else "-"


def p_value(v: Any) -> str:
    """A p-value as the report prints it: 4 decimals, or 2 significant digits below 1e-4 ('0.0312', '5.1e-07')."""
    return (f"{v:.4f}" if v >= 1e-4 else f"{v:.1e}") if _real(v) else "-"


def _interval(low: Any, high: Any) -> str:
    return f"[{signed(low)}, {signed(high)}]" if _real(low) and _real(high) else "-"


def _notes(d: dict[str, Any]) -> str:
    lines = [n for n in _list(d.get("notes")) if isinstance(n, str)]
    return ("<p>notes:</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in lines) + "</ul>") if lines else ""


def _recommendation(d: dict[str, Any]) -> str:
    x = d.get("recommendation")
    if not isinstance(x, dict):
        return _absent("a recommendation (what to take)")
    setting = ", ".join(f"{k}={v}" for k, v in _dict(x.get("setting")).items())
    ci = _list(x.get("ci95"))
    take = "keep the control" if x.get("label") == "(1)" else "take"
    aliased = [str(a) for a in _list(x.get("aliased_with"))]
    return (f"<p class='recommendation'><b>{_e(take)}: {_e(setting)}</b> (cell {_e(x.get('label'))}): predicted "
            f"gain {_e(signed(x.get('predicted_gain')))} over the control, 95% interval "
            f"{_e(_interval(*ci) if len(ci) == 2 else 'none (no spread to give one)')}"
            + (f"; the design cannot separate {_e('; '.join(aliased))}" if aliased else "")
            + f"<br>{_e(x.get('basis'))}</p>")


def _ablate(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    """An ablation's analysis: what to take, the cells, the effects with their p-values and aliases, the half-normal
    plot (unreplicated designs), every cell against the control."""
    from ..plots import half_normal, svg as draw

    factors = [str(f.get("name")) for f in _rows(d, "factors")]
    variance, df, pse = d.get("error_variance"), d.get("error_df"), d.get("pse")
    body = _recommendation(d)
    body += (f"<p>{_e(d.get('runs'))} runs in {_e(len(_rows(d, 'cells')))} cells — {_e(d.get('design'))} — metric "
             f"{_e(d.get('metric'))} ({'higher' if d.get('higher_is_better', True) else 'lower'} is better) — error "
             f"{_e(d.get('error_method'))}: "
             + (f"pooled variance {variance:,.6g} on {_e(df)} df" if _real(variance) else "no pooled variance")
             + (f", Lenth's PSE {pse:,.4g}" if _real(pse) else "") + "</p>")
    cells = [[c.get("label"), *(_dict(c.get("levels")).get(f, "") for f in factors), c.get("n"),
              f"{number(c.get('mean')):,.4g}", f"{c['sd']:,.4g}" if _real(c.get("sd")) else "-"]
             for c in _rows(d, "cells")]
    body += _table(["cell", *factors, "n", "mean", "SD"], cells) if cells else _absent("the cells")
    effects = [[x.get("effect"), x.get("names"), " = ".join(str(a) for a in _list(x.get("aliases"))) or "-",
                signed(x.get("estimate")), f"{x['se']:,.4g}" if _real(x.get("se")) else "-",
                _interval(x.get("ci_low"), x.get("ci_high")), p_value(x.get("p_value"))] for x in _rows(d, "effects")]
    confidence = d.get("confidence", 0.95)
    level = f"{confidence:.0%}" if _real(confidence) else "?"
    body += (f"<p>effects (mean at the other level - mean at the control; {_e(level)} intervals):</p>"
             + _table(["effect", "factors", "aliased with", "estimate", "SE", "interval", "p"], effects)
             if effects else "<p>effects: none (not a two-level factorial; see the comparisons)</p>")
    if _rows(d, "half_normal"):
        body += _figure(draw(half_normal(d)), f"half-normal plot of the effects (Lenth), recorded {r.created}")
    comparisons = [[x.get("label"), x.get("test"), x.get("n"), signed(x.get("improvement")),
                    _interval(x.get("ci_low"), x.get("ci_high")), p_value(x.get("p_value")), p_value(x.get("p_holm")),
                    x.get("verdict")] for x in _rows(d, "comparisons")]
    if comparisons:
        body += (f"<p>every cell against the control ({_e(d.get('correction'))}):</p>"
                 + _table(["cell", "test", "n", "improvement", "interval", "p", "p Holm", "verdict"], comparisons))
    missing = [str(m) for m in _list(d.get("missing"))]
    if missing:
        body += f"<p class='missing'>cells of the design with no run: {_e(', '.join(missing))}</p>"
    return f"ablation of {_name(d.get('path')) or '?'} ({d.get('metric')})", body + _notes(d)


def _design_row(x: dict[str, Any]) -> list[Any]:
    return [x.get("kind"), len(_list(x.get("cells"))), x.get("seeds_per_cell"), x.get("runs"),
            _hours(x.get("card_hours")), _usd(x.get("cost_cents")), x.get("resolution") or "-"]


def _ablate_plan(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    """An ablation plan: the design chosen (cells, seeds, runs, card-hours, cost), its generators and aliases, the
    cells in the order to run them, the other designs costed, what is cut."""
    x = _obj(d, "design")
    budget = [b for b in (f"{d['budget_card_hours']:,.1f} GPU-hours" if _real(d.get("budget_card_hours")) else "",
                          _usd(d.get("budget_cents")) if _real(d.get("budget_cents")) else "") if b]
    body = (f"<p>verdict: <b>{'plan' if d.get('fits') else 'over budget'}</b> — {_e(len(_rows(d, 'factors')))} "
            f"factors, metric {_e(d.get('metric'))}, {_e(d.get('hours_per_run'))} h per run on "
            f"{_e(d.get('cards_per_run'))} card(s) of {_e(d.get('card') or '(no card: card-hours only)')}"
            f"; budget {_e(' and '.join(budget) or 'none given')}; seeds {_e(d.get('seeds_how'))}"
            + (f" (a paired comparison of two variants needs {_e(d.get('seeds_paired'))})"
               if d.get("seeds_paired") is not None else "") + "</p>")
    factors = [[f.get("letter"), f.get("name"), f.get("control"),
                ", ".join(str(v) for v in _list(f.get("levels")) if v != f.get("control"))]
               for f in _rows(d, "factors")]
    body += _table(["", "factor", "control", "other levels"], factors)
    heads = ["design", "cells", "seeds per cell", "runs", "GPU-hours", "cost", "resolution"]
    body += "<p>design chosen:</p>" + _table(heads, [_design_row(x)])
    if x.get("generators"):
        body += (f"<p>generators {_e(', '.join(str(g) for g in _list(x.get('generators'))))}; defining relation I = "
                 f"{_e(' = '.join(str(w) for w in _list(x.get('defining_relation'))))}</p>")
    aliases = [[a.get("effect"), " = ".join(str(w) for w in _list(a.get("aliases"))) or "-"]
               for a in _rows(x, "aliases")]
    if aliases:
        body += _table(["effect", "aliased with"], aliases)
    clear = ", ".join(str(i) for i in _list(x.get("clear_interactions"))) or "none"
    sums = "; ".join(str(i) for i in _list(x.get("aliased_interactions")))
    body += (f"<p>two-factor interactions clear: {_e(clear)}" + (f"; only as aliased sums: {_e(sums)}" if sums else "")
             + "</p>")
    names = [str(f.get("name")) for f in _rows(d, "factors")]
    order = {str(label): i for i, label in enumerate(_list(d.get("run_first")))}
    cells = sorted(_rows(x, "cells"), key=lambda c: order.get(str(c.get("label")), len(order)))
    body += "<p>cells, in the order to run them:</p>" + _table(
        ["#", "cell", *names, "seeds", "GPU-hours"],
        [[order.get(str(c.get("label")), 0) + 1, c.get("label"), *(_dict(c.get("levels")).get(n, "") for n in names),
          c.get("seeds"), _hours(c.get("card_hours"))] for c in cells])
    alternatives = [_design_row(a) for a in _rows(d, "alternatives")]
    if alternatives:
        body += "<p>other designs:</p>" + _table(heads, alternatives)
    body += "".join(f"<p>cut: {_e(c)}</p>" for c in _list(d.get("cut")))
    blocks = [[b.get("name"), len(_list(b.get("runs"))), ", ".join(str(x) for x in _list(b.get("runs")))]
              for b in _rows(d, "blocks")]
    if blocks:
        body += _table(["block", "runs", "runs in order"], blocks)
    return f"ablation plan {d.get('name') or _name(d.get('path'))}", body + _checks(_rows(d, "checks")) + _notes(d)


def _offered(card: Any, offer: Any) -> Any:
    """A card with its offer as --card names it ('L40S-48GB@spot'); the card alone without one."""
    return f"{card}@{offer}" if offer else card


def _rental(x: dict[str, Any]) -> str:
    """A rental with its offer when the card has several ('@spot 3-day'), as `campaign bench` prints it."""
    return f"@{x['offer']} {x.get('name')}" if x.get("offer") else str(x.get("name"))


def _bench(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    """A bench: the cheapest way to the target, every configuration with its hours and cost, each rental's cost."""
    direction = ">=" if d.get("higher_is_better", True) else "<="
    offer = f"@{d['cheapest_offer']} " if d.get("cheapest_offer") else ""
    head = (f"cheapest: <b>{_e(d.get('cheapest'))}</b> on {_e(offer)}{_e(d.get('cheapest_rental'))} at "
            f"{_e(_usd(d.get('cheapest_cents')))}" if d.get("cheapest")
            else "<b>no configuration reaches the target</b>")
    margin = d.get("margin")
    body = (f"<p>target {_e(d.get('metric'))} {direction} {_e(d.get('target'))}, {_e(d.get('repeats'))} run(s) to "
            f"the target costed, recovery margin {f'{margin:.0%}' if _real(margin) else '?'}"
            f" — {head} — {_e(d.get('why'))}</p>")
    rows = [[c.get("name"), _offered(c.get("card"), c.get("offer")), c.get("cards"),
             f"{c.get('method', '')} {c.get('precision', '')}".strip(),
             len(_list(c.get("runs"))), c.get("status"), _hours2(c.get("hours_mean")), _hours2(c.get("hours_worst")),
             c.get("cheapest") or "-", _usd(c.get("cheapest_cents")), p_value(c.get("quality_p"))]
            for c in _rows(d, "configurations")]
    body += _table(["configuration", "card", "cards", "method", "runs", "status", "mean h", "slowest h", "cheapest",
                    "cost", "quality p"], rows) if rows else _absent("the configurations")
    names = list(dict.fromkeys(_rental(x) for c in _rows(d, "configurations") for x in _rows(c, "rentals")))
    if names:
        costs = []
        for c in _rows(d, "configurations"):
            by = {_rental(x): x for x in _rows(c, "rentals")}
            if by:
                costs.append([c.get("name"), *(_usd(by[n].get("cost_cents")) if n in by and by[n].get("fits")
                                               else "-" for n in names)])
        body += ("<p>cost under each rental (-: the rental cannot hold the runs):</p>"
                 + _table(["configuration", *names], costs))
    protocol = _dict(d.get("protocol"))
    if protocol:
        body += "<p>protocol: " + _e("; ".join(f"{k}: {v}" for k, v in protocol.items())) + "</p>"
    prices = _dict(d.get("prices"))
    if prices:
        body += f"<p>prices: {_e(prices.get('path') or prices.get('source'))} ({_e(prices.get('date'))})</p>"
    body += "".join(f"<p>wrote {_e(f)}</p>" for f in _list(d.get("files")))
    return f"bench {d.get('name') or _name(d.get('path'))}", body + _checks(_rows(d, "checks")) + _notes(d)


def _hours2(v: Any) -> str:
    return f"{v:,.2f}" if _real(v) else "-"


def _check(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    setup = d.get("source") or d.get("setup")
    body = (f"<p>verdict: <b>{_e(record_status(d) or 'not in this record')}</b> — setup "
            f"{_e(setup or '(not in this record)')} — device {_e(d.get('device', '?'))}"
            + (f", micro-batch {_e(d.get('micro_batch'))} x {_e(d.get('sequence_length'))} tokens"
               if d.get("micro_batch") is not None else "") + "</p>")
    if d.get("loss") is not None:
        body += f"<p>first loss {_e(_number(d.get('loss')))} (expected about {_e(_number(d.get('expected_loss')))})</p>"
    return f"{r.command or 'check'} of {setup or '?'}", body + (_checks(_rows(d, "checks")) or _absent("checks"))


def _generic(r: SavedRecord, d: dict[str, Any]) -> tuple[str, str]:
    body = _checks(_rows(d, "checks"))
    status = record_status(d)
    setup = d.get("source") or d.get("setup")
    if isinstance(setup, str):
        body = f"<p>setup: {_e(setup)}</p>" + body
    if status is not None:
        body = f"<p>verdict: <b>{_e(status)}</b></p>" + body
    return f"{r.command or d.get('schema')}", body or "<p>recorded (see the JSON file)</p>"


HANDLERS: dict[str, Callable[[SavedRecord, dict[str, Any]], tuple[str, str]]] = {
    "campaign.memory": _memory, "campaign.measurement": _measurement, "campaign.errors": _errors,
    "campaign.seeds": _seeds, "campaign.regress": _regress, "campaign.budget": _budget, "campaign.quant": _quant,
    "campaign.split": _split, "campaign.usage": _usage, "campaign.check": _check, "campaign.inspect": _check,
    "campaign.batch": _check, "campaign.ablate": _ablate, "campaign.ablate_plan": _ablate_plan,
    "campaign.bench": _bench,
}


def _drawn_failed(e: Exception) -> str:
    return f"<p class='missing'>could not be drawn ({_e(type(e).__name__)}: {_e(e)})</p>"


def _block(r: SavedRecord) -> str:
    """One record: its heading, when and how it was recorded (command line, inputs), then its tables and figures;
    a record of an unexpected shape is listed with what could not be drawn, never fatal."""
    d = r.result or {}
    kind = _schema_kind(r.schema)
    try:
        name, body = HANDLERS.get(kind, _generic)(r, d)
    except Exception as e:  # noqa: BLE001 - a record of an unexpected shape is listed, never fatal
        try:
            name, body = _generic(r, d)
        except Exception:  # noqa: BLE001
            name, body = r.command or kind or "record", ""
        body = _drawn_failed(e) + body
    try:
        meta = _meta(r)
    except Exception as e:  # noqa: BLE001
        meta = _drawn_failed(e)
    return f"<article class='record'><h3>{_e(name)}</h3>{meta}{body}</article>"


# -- many records of one kind: one table of them all and one picture ---------------------------------------------
ONE_EACH = 8      # up to this many records of a kind are drawn one by one (their tables and figures); more: summed up


def _workload(w: Any) -> str:
    w = w if isinstance(w, dict) else {}
    return f"{w.get('mode', '')} {w.get('method', '')} batch {w.get('batch')} x {w.get('seq_len')} {w.get('dtype', '')}"


def _memory_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    fits = _rows(d, "fits")
    return [d.get("model"), _workload(d.get("workload")), "traced" if d.get("method") == "traced" else "estimated",
            d.get("peak_phase"), _gib(d.get("peak_allocated_bytes")), _gib(d.get("required_bytes")),
            "; ".join(f"{f.get('card')}: {f.get('verdict')}" for f in fits)]


def _memory_figure(rs: list[SavedRecord]) -> str:
    from ..plots import histogram, svg as draw

    by_verdict: dict[str, list[float]] = {}
    cards: dict[str, float] = {}
    for r in rs:
        d = r.result or {}
        fits = _dicts(d.get("fits"))
        need = d.get("required_bytes")
        if isinstance(need, (int, float)) and not isinstance(need, bool):
            verdict = str(fits[0].get("verdict")) if len(fits) == 1 else "required"
            by_verdict.setdefault(verdict, []).append(need / GiB)
        for f in fits:
            if isinstance(f.get("memory_bytes"), int) and len(cards) < 8:
                cards.setdefault(str(f.get("card")), f["memory_bytes"] / GiB)
    return draw(histogram(by_verdict, "GiB required, with the reserve (lines: the cards' memory)",
                          f"{len(rs):,} memory estimates: what each requires", lines=cards))


def _measurement_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    env = _obj(d, "environment")
    phases = _rows(d, "phases")
    return [d.get("label"), _workload(d.get("workload")), f"{env.get('device_name', '?')} ({env.get('device', '?')})",
            _gib(max((number(p.get("peak_allocated_bytes")) for p in phases), default=None)),
            _gib(max((number(p.get("peak_reserved_bytes")) for p in phases), default=None))]


def _measurement_figure(rs: list[SavedRecord]) -> str:
    from ..plots import histogram, svg as draw

    peaks = []
    for r in rs:
        phases = _dicts((r.result or {}).get("phases"))
        if phases:
            peaks.append(max(number(p.get("peak_reserved_bytes")) for p in phases) / GiB)
    return draw(histogram({"measured": peaks}, "GiB, peak reserved over the phases", f"{len(rs):,} measurements"))


def _errors_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    macro = _obj(d, "averages").get("macro")
    return [_name(d.get("source")), d.get("examples"), d.get("errors"), _number(d.get("accuracy")),
            _number(macro.get("f1") if isinstance(macro, dict) else macro)]


def _errors_figure(rs: list[SavedRecord]) -> str:
    from ..plots import histogram, svg as draw

    accuracy = [number(d.get("accuracy")) for d in (r.result or {} for r in rs) if _real(d.get("accuracy"))]
    return draw(histogram({"accuracy": accuracy}, "accuracy (counted)", f"{len(rs):,} error analyses"))


def _seeds_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    return [f"{d.get('candidate')} vs {d.get('baseline')}", d.get("metric"), d.get("n_seeds"),
            _number(d.get("mean_diff")), f"[{_number(d.get('ci_low'))}, {_number(d.get('ci_high'))}]",
            _number(d.get("t_pvalue")), d.get("verdict")]


def _seeds_figure(rs: list[SavedRecord]) -> str:
    from ..plots import histogram, svg as draw

    by_verdict: dict[str, list[float]] = {}
    effects = set()
    for r in rs:
        d = r.result or {}
        if _real(d.get("mean_diff")):
            by_verdict.setdefault(str(d.get("verdict")), []).append(d["mean_diff"])
            effects.add(d.get("min_effect") if _real(d.get("min_effect")) else None)
    band = next(iter(effects)) if len(effects) == 1 else None
    return draw(histogram(by_verdict, "mean difference, candidate - baseline (grey: not a useful effect)",
                          f"{len(rs):,} seed comparisons, by verdict", band=band or None))


def _regress_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    guards = [f"{g.get('expression', g.get('metric', ''))} {_number(g.get('delta'))}"
              + ("" if g.get("passed") else " BROKEN") for g in _rows(d, "guards")]
    m = _obj(d, "mcnemar")
    worst = sorted((c for c in _rows(d, "per_class") if _real(c.get("delta_f1"))), key=lambda c: c["delta_f1"])
    return [_name(d.get("candidate")), _name(d.get("baseline")), d.get("examples"),
            _number(d.get("accuracy_baseline")), _number(d.get("accuracy_candidate")),
            _count(d.get("right_to_wrong")), _count(d.get("wrong_to_right")),
            _number(m["p_value"]) if "p_value" in m else "not recorded",
            f"{worst[0].get('label')} {worst[0]['delta_f1']:+.4f}" if worst else "not recorded",
            "; ".join(guards), record_status(d)]


def _regress_figure(rs: list[SavedRecord]) -> str:
    from ..plots import histogram, svg as draw

    by_passed: dict[str, list[float]] = {}
    for r in rs:
        d = r.result or {}
        before, after = d.get("accuracy_baseline"), d.get("accuracy_candidate")
        if _real(before) and _real(after):
            passed = "passed" if record_status(d) in ("pass", "warn") else "failed"
            by_passed.setdefault(passed, []).append(number(after) - number(before))
    return draw(histogram(by_passed, "accuracy, candidate - baseline",
                          f"{len(rs):,} regressions, by whether they passed"))


def _budget_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    best = next((p for p in _rows(d, "packages") if p.get("name") == d.get("recommended")), {})
    own = [f"{x.get('card')} {_obj(x, 'option').get('name')}" for x in _rows(d, "rentals")]
    return [d.get("name") or _name(d.get("plan")), " + ".join([str(d.get("recommended")), *own]),
            d.get("recommended_card"), _hours(d.get("campaign_hours") if own else best.get("hours")),
            _usd(d.get("total_cents") if own else best.get("cost_cents")), "; ".join(_caveats(d))]


def _quant_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    return [d.get("model"), d.get("setup"), d.get("device_name") or d.get("device"),
            "; ".join(f"{v.get('name')} {_number(number(v.get('weight_bytes_stored')) / 2**20)} MiB "
                      f"{d.get('metric', 'quality')} {_number(v.get('quality'))} {v.get('status')}"
                      for v in _rows(d, "variants"))]


def _split_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    source = _obj(d, "input")
    return [source.get("path"), source.get("rows"),
            ", ".join(f"{s.get('name')} {s.get('rows')}" for s in _rows(d, "splits")), d.get("manifest"),
            record_status(d)]


def _usage_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    return [d.get("manifest"), "; ".join(f"{split}: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                                                  for k, v in _dict(c).items())
                                         for split, c in _obj(d, "counts").items()),
            len(_list(d.get("entries"))), record_status(d)]


def _ablate_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    x = _obj(d, "recommendation")
    ci = _list(x.get("ci95"))
    effects = sorted((e for e in _rows(d, "effects") if _real(e.get("p_value"))), key=lambda e: e["p_value"])
    return [_name(d.get("path")), d.get("design"), d.get("runs"),
            ", ".join(f"{k}={v}" for k, v in _dict(x.get("setting")).items()) or "-", signed(x.get("predicted_gain")),
            _interval(*ci) if len(ci) == 2 else "-",
            f"{effects[0].get('effect')} {signed(effects[0].get('estimate'))} (p {p_value(effects[0]['p_value'])})"
            if effects else "-"]


def _ablate_plan_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    x = _obj(d, "design")
    return [d.get("name") or _name(d.get("path")), "plan" if d.get("fits") else "over budget", x.get("kind"),
            x.get("runs"), _hours(x.get("card_hours")), _usd(x.get("cost_cents"))]


def _bench_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    return [d.get("name") or _name(d.get("path")), d.get("cheapest") or "none reaches", d.get("cheapest_rental") or "-",
            _usd(d.get("cheapest_cents")),
            "; ".join(f"{c.get('name')} {c.get('status')} {_usd(c.get('cheapest_cents'))}"
                      for c in _rows(d, "configurations"))]


def _generic_row(r: SavedRecord, d: dict[str, Any]) -> list[Any]:
    checks = _dicts(d.get("checks"))
    counted: dict[str, int] = {}
    for c in checks:
        counted[str(c.get("status"))] = counted.get(str(c.get("status")), 0) + 1
    failed = [str(c.get("id")) for c in checks if c.get("status") in ("fail", "warn")]
    setup = d.get("source") or d.get("setup")
    return [r.command or d.get("schema"), setup if isinstance(setup, str) else "", record_status(d),
            ", ".join(f"{n} {s}" for s, n in counted.items()), ", ".join(failed)]


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# kind: (headers, one row per record, the one picture of them all or None)
SUMMARIES: dict[str, tuple[list[str], Callable[[SavedRecord, dict[str, Any]], list[Any]],
                           Callable[[list[SavedRecord]], str] | None]] = {
    "campaign.memory": (["model", "workload", "how", "peak phase", "peak allocated", "required (with reserve)",
                         "cards"], _memory_row, _memory_figure),
    "campaign.measurement": (["model", "workload", "device", "peak allocated", "peak reserved"], _measurement_row,
                             _measurement_figure),
    "campaign.errors": (["predictions", "examples", "errors", "accuracy", "macro F1"], _errors_row, _errors_figure),
    "campaign.seeds": (["compared", "metric", "seeds", "mean difference", "interval", "t-test p", "verdict"],
                       _seeds_row, _seeds_figure),
    "campaign.regress": (["candidate", "baseline", "examples", "accuracy before", "after", "right to wrong",
                          "wrong to right", "McNemar p", "worst class F1 change", "guards", "status"], _regress_row,
                         _regress_figure),
    "campaign.budget": (["plan", "recommended", "card", "hours", "cost", "caveats"], _budget_row, None),
    "campaign.quant": (["model", "setup", "device", "variants"], _quant_row, None),
    "campaign.split": (["input", "rows", "rows per split", "manifest", "status"], _split_row, None),
    "campaign.usage": (["manifest", "uses per split", "ledger entries", "status"], _usage_row, None),
    "campaign.ablate": (["results", "design", "runs", "take", "predicted gain", "95% interval",
                         "most significant effect"], _ablate_row, None),
    "campaign.ablate_plan": (["plan", "verdict", "design", "runs", "GPU-hours", "cost"], _ablate_plan_row, None),
    "campaign.bench": (["bench", "cheapest", "rental", "cost", "configurations (cheapest cost)"], _bench_row, None),
}
GENERIC = (["command", "setup", "verdict", "checks", "failed or warned"], _generic_row, None)


def _summary(kind: str, rs: list[SavedRecord]) -> str:
    """More than ONE_EACH records of one kind: one table with a row each (its time, file and command line) and one
    picture of them all. A record whose row cannot be read is listed with the generic row and the error."""
    headers, row, picture = SUMMARIES.get(kind, GENERIC)
    rows, notes = [], []
    for r in rs:
        d = r.result or {}
        try:
            cells = row(r, d)
        except Exception as e:  # noqa: BLE001 - a record of an unexpected shape is listed, never fatal
            notes.append(f"{Path(r.path).name}: could not be drawn ({type(e).__name__}: {e})")
            try:
                cells = _generic_row(r, d)
            except Exception:  # noqa: BLE001
                cells = [r.command]
            cells = (cells + [""] * len(headers))[:len(headers)]
        rows.append([*cells, r.created, Path(r.path).name, command_line(r)])
    svg = ""
    if picture is not None:
        try:
            svg = picture(rs)
        except Exception as e:  # noqa: BLE001
            notes.append(f"the picture of them all could not be drawn ({type(e).__name__}: {e})")
    return (f"<h3>{len(rs):,} {_e(kind.split('.')[-1])} records</h3><p class='meta'>every record, one row each, "
            "newest first (the JSON files hold every detail)</p>"
            + "".join(f"<p class='missing'>{_e(n)}</p>" for n in notes)
            + _figure(svg, f"{len(rs):,} records, as recorded")
            + _table([*headers, "recorded", "file", "command line"], rows))


CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;
font-size:.9em}th{background:#f3f3f3}.missing{color:#9d0208}.meta{color:#666;font-size:.85em}
.meta code{font-size:1em;color:#333;word-break:break-all}
figure{margin:.5em 0}figcaption{color:#666;font-size:.85em}svg{max-width:100%;height:auto}
h2,h3,.meta{break-after:avoid;page-break-after:avoid}
figure,tr,.record>p{break-inside:avoid;page-break-inside:avoid}
@media print{body{max-width:none;margin:0}section+section{break-before:page;page-break-before:always}
table{break-inside:auto}thead{display:table-header-group}}
"""
# Print: the first question starts under the title (no page holding the title alone), each later question on a
# new page; a heading and its line of provenance stay with what follows them; a figure or a table row is never cut.


def number(v: Any, default: float = 0.0) -> float:
    """A record's value as a float: a number as it is, anything else as `default`."""
    return float(v) if _real(v) else default


def _workload_key(model: Any, w: Any) -> tuple[str, ...] | None:
    if not isinstance(w, dict):
        return None
    return tuple(str(x) for x in (model, w.get("mode"), w.get("method"), w.get("batch"), w.get("seq_len"),
                                  w.get("dtype")))


SOURCE_ORDER = ("estimated", "traced", "measured")


def _sources(by_kind: dict[str, list[SavedRecord]]) -> dict[tuple[Any, ...], list[tuple[str, dict[str, float]]]]:
    """Each model and workload recorded from two or more sources (estimated, traced, measured): its sources (the
    newest record of each, in that order), each with every phase's peak allocated bytes."""
    groups: dict[tuple[Any, ...], dict[str, dict[str, float]]] = {}
    for r in by_kind.get("campaign.memory", []):           # newest first: the first of each source is kept
        d = r.result or {}
        key = _workload_key(d.get("model"), d.get("workload"))
        how = "traced" if d.get("method") == "traced" else "estimated"
        values = {str(p.get("name")): number(p.get("bytes")) for p in _dicts(d.get("phases"))}
        if key is not None and values:
            groups.setdefault(key, {}).setdefault(how, values)
    for r in by_kind.get("campaign.measurement", []):
        d = r.result or {}
        key = _workload_key(d.get("label"), d.get("workload"))
        values = {str(p.get("name")): number(p.get("peak_allocated_bytes")) for p in _dicts(d.get("phases"))}
        if key in groups and values:
            groups[key].setdefault(f"measured on {_dict(d.get('environment')).get('device_name', '?')}", values)
    return {key: sorted(series.items(), key=lambda kv: SOURCE_ORDER.index(kv[0].split(" ")[0]))
            for key, series in groups.items() if len(series) >= 2}


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


RUN_CURVES = 100     # more runs than ONE_EACH: the loss curves of the newest this many in one picture


def _flat(params: Any, prefix: str = "") -> dict[str, Any]:
    """Nested parameters as dotted keys, floats to 6 significant digits: {'lora': {'r': 8}, 'lr': 0.1 * 3} ->
    {'lora.r': 8, 'lr': '0.3'}."""
    out: dict[str, Any] = {}
    for k, v in _dict(params).items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = f"{v:.6g}" if isinstance(v, float) else v
    return out


def _baseline_value(change: dict[str, Any], key: str, value: Any) -> Any:
    """The baseline's value of one dotted parameter where it differs from the run's ('' where it does not): the
    change records the baseline's whole set under the top-level key ({'lora': {'baseline': {'r': 8, ...}}})."""
    top, _, rest = key.partition(".")
    if top not in change:
        return ""
    was = _dict(change.get(top)).get("baseline", "")
    if rest and isinstance(was, dict):
        flat = _flat(was)
        if rest not in flat:
            return "(not set)"
        was = flat[rest]
    elif isinstance(was, float):
        was = f"{was:.6g}"
    return "" if was == value else was


def _losses(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each loss logged (a metric whose name holds 'loss'), as (step, value); a record without a step counts as
    the next one."""
    out: dict[str, list[tuple[float, float]]] = {}
    for i, rec in enumerate(rows):
        step = number(rec.get("step"), float(i))
        for k, v in rec.items():
            if "loss" in str(k).lower() and _real(v):
                out.setdefault(str(k), []).append((step, number(v)))
    return out


def _runs(root: str | Path | None, runs: list[Any], say: Callable[[str], None]) -> tuple[str, int]:
    """The runs, newest first: up to ONE_EACH each with its hypothesis, baseline, parameters, last metrics and loss
    curves; more in one table and one picture of their losses. Then all of them over time. (html, figures)"""
    from ..plots import curves, runs_over_time, svg as draw
    from ..track.store import Store

    store = Store(root)
    details = []
    for i, x in enumerate(runs, 1):
        if i % 250 == 0:
            say(f"runs {i:,}/{len(runs):,}")
        try:
            m = store.read(x.id)
            params, change, ended = m.params, m.change, m.ended
        except Exception as e:  # noqa: BLE001 - a run whose manifest cannot be read is listed, never fatal
            params, change, ended = {"(manifest)": f"could not be read: {e}"}, {}, None
        try:
            logged = store.metrics(x.id)
        except Exception:  # noqa: BLE001
            logged = []
        details.append((x, _flat(params), change, ended, logged))
    figures, parts = 0, []
    if len(runs) <= ONE_EACH:
        for x, params, change, ended, logged in details:
            body = (f"<p class='meta'>{_e(x.status)}{' (' + _e(x.reason) + ')' if x.reason else ''} — started "
                    f"{_e(x.created)}{', ended ' + _e(ended) if ended else ''} — baseline {_e(x.baseline or 'none')}"
                    f" — decision {_e(x.decision or 'none')}</p>")
            body += (f"<p>hypothesis: {_e(x.hypothesis)}</p>" if x.hypothesis
                     else "<p class='missing'>hypothesis: none recorded (run start --hypothesis)</p>")
            body += (_table(["parameter", "value", "baseline's, where it differs"],
                            [[k, v, _baseline_value(change, k, v)] for k, v in params.items()]) if params
                     else "<p class='missing'>parameters: none recorded</p>")
            body += (_table(["metric", "last value"], [[k, _number(v)] for k, v in x.metrics.items()])
                     if x.metrics else "<p class='missing'>metrics: none logged</p>")
            svg = draw(curves(_losses(logged), "loss", f"{x.name}: loss per step (logged)"))
            figures += bool(svg)
            body += _figure(svg, f"logged by campaign run log, {len(logged):,} records") if svg else \
                "<p class='missing'>loss curve: no loss logged</p>"
            parts.append(f"<article class='record'><h3>run {_e(x.name)} ({_e(x.id)})</h3>{body}</article>")
    else:
        rows = [[x.id, x.status, x.decision or "-", x.baseline or "-", x.hypothesis or "(none)",
                 ", ".join(f"{k}={v}" for k, v in params.items()),
                 ", ".join(f"{k}={_number(v)}" for k, v in x.metrics.items()), x.reason]
                for x, params, _, _, _ in details]
        newest = details[:RUN_CURVES]
        series = {f"{x.name}: {k}": v for x, _, _, _, logged in newest for k, v in _losses(logged).items()}
        svg = draw(curves(series, "loss", f"loss per step of the newest {len(newest):,} of {len(runs):,} runs"))
        figures += bool(svg)
        parts.append(f"<h3>{len(runs):,} runs</h3><p class='meta'>every run, newest first</p>"
                     + _figure(svg, f"logged by campaign run log (the newest {len(newest):,} runs)")
                     + _table(["id", "status", "decision", "baseline", "hypothesis", "parameters", "last metrics",
                               "reason"], rows))
    svg = draw(runs_over_time([{"created": x.created, "status": x.status, "decision": x.decision, "name": x.name}
                               for x in runs]))
    figures += bool(svg)
    parts.append(_figure(svg, "every run at its start time, recorded by campaign run"))
    return "<h3>runs</h3>" + "".join(parts), figures


def _kind_blocks(kind: str, shown: list[SavedRecord], say: Callable[[str], None]) -> list[str]:
    if len(shown) > ONE_EACH:
        say(f"{kind.split('.')[-1]}: {len(shown):,} records in one table")
        return [_summary(kind, shown)]
    blocks = []
    for i, r in enumerate(shown, 1):
        say(f"{kind.split('.')[-1]} {i:,}/{len(shown):,}")
        blocks.append(_block(r))
    return blocks


def build_report(out: str | Path = "report.html", *, root: str | Path | None = None,
                 title: str = "Campaign report", progress: Callable[[str], None] | None = None) -> ReportResult:
    """Write the report of the record folder and runs under `root` to `out` (atomically). Every record is shown,
    grouped by kind, newest first, each with its command line and inputs: up to ONE_EACH records of a kind are
    drawn one by one; more become one table (a row each) and one picture. progress: called with what is being done
    ('records 3,000/10,000', 'runs', 'memory 2/5', 'writing')."""
    import datetime as dt

    from ..track.store import list_runs

    say = progress or (lambda _phase: None)
    records = load_records(root, progress=say)
    say("runs")
    runs = sorted(list_runs(root=root).runs, key=lambda x: str(x.created), reverse=True)
    by_kind: dict[str, list[SavedRecord]] = {}
    for r in sorted((r for r in records if r.result is not None), key=lambda r: (r.created, r.path), reverse=True):
        by_kind.setdefault(_schema_kind(r.schema) or f"campaign.{r.command or 'record'}", []).append(r)
    listed = {k for _, _, kinds in QUESTIONS for k in kinds}
    others = tuple(k for k in sorted(by_kind) if k not in listed)
    parts, sections, figures, missing = [], [], 0, []
    for number_, question, kinds in (*QUESTIONS, (6, "Other records", others)):
        if number_ == 6 and not others:
            continue
        blocks = []
        for kind in kinds:                  # campaign.runs: the records of `runs list`; the runs themselves follow
            blocks += _kind_blocks(kind, by_kind.get(kind, []), say)
        if number_ == 1:
            say("side by side")
            try:
                groups = _sources(by_kind)
                if len(groups) > ONE_EACH:
                    blocks.append(_compared_summary(groups))
                else:
                    blocks += [block for _, block in _compared(by_kind)]
            except Exception as e:  # noqa: BLE001 - records of an unexpected shape are listed, never fatal
                blocks.append(f"<h3>side by side</h3>{_drawn_failed(e)}")
        if number_ == 3 and runs:
            say(f"runs: {len(runs):,}")
            try:
                block, _ = _runs(root, runs, say)
            except Exception as e:  # noqa: BLE001
                block = f"<h3>runs</h3>{_drawn_failed(e)}"
            blocks.append(block)
        absent = [EXPECTED[k] for k in kinds if k in EXPECTED and not by_kind.get(k)]
        missing += absent
        miss = "".join(f"<li class='missing'>{_e(m)}</li>" for m in absent)
        body = "".join(blocks)
        figures += body.count("<svg")
        sections.append(f"{number_}. {question}" if number_ <= len(QUESTIONS) else question)
        heading = f"{number_}. {_e(question)}" if number_ <= len(QUESTIONS) else _e(question)
        parts.append(f"<section id='q{number_}'><h2>{heading}</h2>"
                     + (body or "<p class='missing'>nothing recorded for this question yet</p>")
                     + (f"<ul>{miss}</ul>" if miss else "") + "</section>")
    bad = [r for r in records if r.result is None]
    if bad:
        parts.append("<section id='unreadable'><h2>Records that could not be read</h2>"
                     + _table(["file", "error"], [[r.path, r.error] for r in bad]) + "</section>")
    say("writing")
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    counted = ", ".join(f"{len(v):,} {k.split('.')[-1]}" for k, v in sorted(by_kind.items()))
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body>"
            f"<h1>{_e(title)}</h1><p class='meta'>written {when} from {len(records)} records ({_e(counted or 'none')}"
            f"{f', {len(bad)} unreadable' if bad else ''}) and {len(runs)} runs; every record is shown, grouped "
            "by kind, newest first</p>" + "".join(parts) + "</body></html>\n")
    path = atomic_write_text(out, page)
    return ReportResult(str(path), tuple(sections), len(records), len(bad), len(runs), figures, tuple(missing))


__all__ = ["ReportResult", "build_report"]
