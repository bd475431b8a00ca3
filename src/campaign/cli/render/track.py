"""Renderers of runs: the list, one manifest, two runs side by side."""
from __future__ import annotations

import json
from typing import Any

from . import checks, console, escape, table

STATUS = {"completed": "green", "running": "cyan", "planned": "white", "stopped": "yellow", "failed": "red",
          "invalid": "red"}


def _status(s: str) -> str:
    style = STATUS.get(s, "white")
    return f"[{style}]{s}[/{style}]"


def _metrics(m: dict[str, Any], n: int = 3) -> str:
    shown = [(k, v) for k, v in m.items() if k not in ("t", "step")][:n]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)


def runs_table(listed: Any) -> None:
    rows = listed.runs
    if not rows:
        wanted = " and ".join(f for f in (f"status {listed.run_status}" if listed.run_status else "",
                                          f"tag {listed.tag}" if listed.tag else "") if f)
        console.print(f"no runs with {wanted}" if wanted else "no runs yet (campaign run start NAME)")
        return
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    console.print(f"{len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    t = table("", (("id", "left"), ("status", "left"), ("decision", "left"), ("baseline", "left"),
                   ("last metrics", "left"), ("reason", "left")))
    for column in t.columns[:1] + t.columns[3:4]:
        column.overflow = "fold"            # ids are what users copy: never cut with an ellipsis
    for r in rows:
        t.add_row(escape(r.id), _status(r.status), r.decision or "-", escape(r.baseline or "-"),
                  escape(_metrics(r.metrics)), escape(r.reason))
    console.print(t)


def changed(m: Any) -> None:
    """One line after a run was changed (ended, decided, an artifact recorded): where it stands now."""
    decision = f", {m.decision.decision}" if m.decision else ""
    last = f", {len(m.artifacts)} artifact(s)" if m.artifacts else ""
    console.print(f"{escape(m.id)}: {_status(m.status)}{decision}{last}" + (f" — {escape(m.reason)}" if m.reason
                                                                            else ""))


def manifest(m: Any) -> None:
    console.print(f"{escape(m.id)}: {_status(m.status)}" + (f" — {escape(m.reason)}" if m.reason else ""))
    if m.hypothesis:
        console.print(f"hypothesis: {escape(m.hypothesis)}")
    if m.guards:
        console.print(f"guards: {escape(', '.join(m.guards))}")
    if m.baseline:
        change = ", ".join(m.change) or "nothing"
        console.print(f"baseline: {escape(m.baseline)}; changed: {escape(change)}"
                      + (" [yellow](more than one set)[/yellow]" if len(m.change) > 1 else ""))
    console.print(f"params: {escape(json.dumps(m.params))}")
    code = m.code
    if code.get("commit"):
        console.print(f"code: {code['commit'][:12]} on {code.get('branch') or 'a detached HEAD'}"
                      + (" (dirty: diff saved)" if code.get("diff_sha256") else "")
                      + (f", {len(code.get('untracked', []))} untracked files" if code.get("untracked") else ""))
    env = m.environment
    gpus = env.get("gpus") or []
    console.print(f"environment: python {env.get('python')}, torch {env.get('torch') or '-'}, "
                  f"cuda {env.get('cuda') or '-'}, driver {env.get('driver') or '-'}, "
                  f"{len(gpus)} GPU(s){' ' + gpus[0]['name'] if gpus else ''}")
    for d in m.data:
        console.print(f"data: {escape(d.path)} sha256 {d.sha256[:12]} ({d.bytes:,} bytes)")
    if m.metrics:
        console.print(f"metrics: {escape(_metrics(m.metrics, 10))}")
    for a in m.artifacts:
        console.print(f"artifact: {escape(a.path)} {a.kind or ''} sha256 {a.sha256[:12]}")
    if m.decision:
        console.print(f"decision: {m.decision.decision} — {escape(m.decision.why)} ({m.decision.at})")


def run_diff(d: Any) -> None:
    console.print(f"{escape(d.a)} -> {escape(d.b)}: {len(d.differences)} differences")
    if d.differences:
        t = table("", (("part", "left"), ("key", "left"), ("a", "left"), ("b", "left")))
        for x in d.differences:
            t.add_row(x.part, escape(x.key), escape(x.a), escape(x.b))
        console.print(t)
    checks(d.checks)
