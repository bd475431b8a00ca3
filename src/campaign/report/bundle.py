"""`campaign export BUNDLE_DIR`: what is handed over at the end of a rental, in one folder: the accepted run's
model or adapter files (with the adapter's binding to its exact base), its manifest and its baseline's (with the
uncommitted code diffs), the report, and a README of the limits observed (guards, slices that regressed, the memory
margin measured). Every file is listed in bundle.json with its sha256.

The bundle is built in a sibling folder and renamed into place when complete; every copied artifact is hashed
again and must match the hash its run recorded, so a checkpoint changed after it was recorded is refused, not
shipped.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_json, atomic_write_text, export_folder, sha256_file
from ..results import Information
from ..track.manifest import SHIPPED_KINDS, Manifest, file_artifact
from ..track.records import load_records
from ..track.store import Store

SCHEMA = "campaign.bundle/1"
SHIPPED = SHIPPED_KINDS


@dataclass(frozen=True)
class BundleResult(Information):
    path: str
    run: str
    baseline: str | None
    files: tuple[str, ...]
    bytes: int
    limits: tuple[str, ...]
    schema: str = SCHEMA


def _accepted(store: Store, run_id: str | None) -> Manifest:
    if run_id is not None:
        m = store.read(run_id)
        if m.decision is None or m.decision.decision != "accepted":
            raise InputError(f"run {run_id} is not accepted (decision: {m.decision.decision if m.decision else 'none'})"
                             f"; decide it first: campaign run decide {run_id} accepted --why ...")
        return m
    accepted = [r for r in store.list() if r.decision == "accepted"]
    if not accepted:
        raise InputError(f"no accepted run in {store.runs}; accept one (campaign run decide ID accepted --why ...) or "
                         "give --run ID")
    return store.read(accepted[0].id)                     # newest first


def _limits(m: Manifest, root: str | Path | None) -> list[str]:
    """What the hand-over must say it was not shown to do: guards, slices that fell, the memory margin measured."""
    out = []
    if not any(a.kind.split(":")[0] in ("model", "adapter", "checkpoint") for a in m.artifacts):
        out.append(f"no model, adapter or checkpoint was recorded for run {m.id}: this bundle hands over its records "
                   f"only (campaign run artifact {m.id} PATH --kind adapter, then export again)")
    if m.guards:
        out.append(f"guards stated before the run (what must not regress): {'; '.join(m.guards)}")
        out += _guards_checked(m, root)
    else:
        out.append("no guards were stated for this run: nothing was checked for regressions")
    for r in load_records(root):
        d = r.result or {}
        kind = (r.schema or "").split("/")[0]
        if kind == "campaign.regress":
            fell = [f"{x.get('name')} {x['delta']:+.4f}" for x in d.get("deltas") or []
                    if isinstance(x, dict) and isinstance(x.get("delta"), (int, float)) and x["delta"] < 0]
            fell += [f"F1[{x.get('label')}] {x['delta_f1']:+.4f}" for x in d.get("per_class") or []
                     if isinstance(x, dict) and isinstance(x.get("delta_f1"), (int, float)) and x["delta_f1"] < 0]
            if fell:
                out.append(f"regressed against the baseline ({r.created}): {', '.join(fell[:8])}")
        elif kind == "campaign.explain" and isinstance(d.get("margin"), (int, float)):
            out.append(f"memory: plan with a {d['margin']:.0%} margin over the measured peak ({r.created})")
        elif kind == "campaign.measurement":
            peak = max((p.get("peak_reserved_bytes", 0) for p in d.get("phases") or []), default=0)
            env = d.get("environment") or {}
            out.append(f"memory measured on {env.get('device_name', '?')}: peak reserved {peak / 2**30:.2f} GiB "
                       f"({r.created})")
    return out


def _guards_checked(m: Manifest, root: str | Path | None) -> list[str]:
    """The run's guards evaluated now on its recorded predictions against its baseline's (campaign runs check), and
    the metrics that fell; or why they could not be."""
    from ..track.compare import check_run

    try:
        report = check_run(m.id, root=root)
    except InputError as e:
        return [f"guards not evaluated: {e}"]
    out = [f"guard {g.expression} {'holds' if g.passed else 'BROKEN'}: {g.describe()}" for g in report.guards]
    fell = [f"{d.name} {d.delta:+.4f}" for d in getattr(report, "deltas", ()) if d.delta < 0]
    if fell:
        out.append(f"fell against the baseline on its predictions: {', '.join(fell[:8])}")
    return out


def export_bundle(out_dir: str | Path, *, run: str | None = None, root: str | Path | None = None,
                  force: bool = False, progress: Callable[[str], None] | None = None) -> BundleResult:
    """Write the hand-over bundle of the accepted run (see the module docstring). progress: called with each phase
    as it begins ('artifacts 1/3', 'report: records 250/1,000', 'limits', 'hashes 2/9').

    Raises:
        InputError: no accepted run, out_dir exists (unless force), an artifact missing or changed since recorded.
    """
    from .build import build_report

    say = progress or (lambda _phase: None)
    store = Store(root)
    m = _accepted(store, run)
    base = store.read(m.baseline) if m.baseline else None
    out = Path(out_dir)
    protect = [store.root, *(a.path for r in (m, base) if r is not None for a in r.artifacts)]
    with export_folder(out, force=force, is_export=_is_bundle, protect=protect, what="export") as stage:
        shipped = [a for a in m.artifacts if a.kind.split(":")[0] in SHIPPED]
        names = shipped_names([a.path for a in shipped])
        for i, a in enumerate(shipped, 1):
            say(f"artifacts {i:,}/{len(shipped):,}")
            src = Path(a.path)
            if not src.exists():
                raise InputError(f"{src}: recorded as the run's {a.kind} but gone; restore it or record it again")
            dest = stage / "artifacts" / names[a.path]
            dest.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
            _umask_modes(dest)
            if file_artifact(dest, a.kind).sha256 != a.sha256:
                raise InputError(f"{src}: changed since it was recorded for run {m.id} (sha256 differs); record it "
                                 "again (campaign run artifact) or restore the recorded version")
        for tag, manifest in (("run", m), ("baseline", base)):
            if manifest is None:
                continue
            folder = store.folder(manifest.id)
            for name in ("manifest.json", "code.diff"):
                if (folder / name).is_file():
                    (stage / tag).mkdir(exist_ok=True)
                    shutil.copy2(folder / name, stage / tag / name)
        build_report(stage / "report.html", root=root, title=f"Campaign report: {m.name}",
                     progress=lambda phase: say(f"report: {phase}"))
        say("limits")
        limits = _limits(m, root)
        atomic_write_text(stage / "README.md", _readme(m, base, limits))
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        hashes = {}
        for i, f in enumerate(files, 1):
            say(f"hashes {i:,}/{len(files):,}")
            hashes[f] = sha256_file(stage / f)
        atomic_write_json(stage / "bundle.json", {
            "schema": SCHEMA, "run": m.id, "baseline": m.baseline,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "sha256": hashes})
    size = sum((out / f).stat().st_size for f in files)
    return BundleResult(str(out), m.id, m.baseline, tuple(files), size, tuple(limits))


def _is_bundle(folder: Path) -> bool:
    """An earlier export: its bundle.json names this schema (what `export --force` may replace)."""
    try:
        from ..io import load_json

        schema = load_json(folder / "bundle.json", "bundle manifest").get("schema", "")
        return str(schema).startswith("campaign.bundle/")
    except (InputError, AttributeError):
        return False


def shipped_names(paths: list[str]) -> dict[str, str]:
    """Each artifact's path inside artifacts/: its file or folder name, or where two share a name, the shortest
    tail of its path that tells it apart (a/preds.jsonl, b/preds.jsonl)."""
    parts = {p: Path(p).parts for p in paths}
    out = {}
    for p, tail in parts.items():
        for k in range(1, len(tail) + 1):
            name = tail[-k:]
            if all(other == p or parts[other][-k:] != name for other in paths):
                break
        out[p] = str(Path(*name))
    return out


def _umask_modes(path: Path) -> None:
    """Copied files and folders get the modes a new file gets here (the umask), not the source's (a checkpoint
    saved 0600 would reach the receiver unreadable)."""
    mask = os.umask(0)
    os.umask(mask)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _readme(m: Manifest, base: Manifest | None, limits: list[str]) -> str:
    lines = [f"# {m.name}: hand-over", "", f"Run `{m.id}`, accepted: {m.decision.why if m.decision else ''}", ""]
    if m.hypothesis:
        lines += [f"Hypothesis: {m.hypothesis}", ""]
    if base is not None:
        change = ", ".join(m.change) or "nothing"
        lines += [f"Baseline `{base.id}`; what changed: {change}.", ""]
    code = m.code
    if code.get("commit"):
        lines += [f"Code: commit {code['commit']}" + (" plus the uncommitted diff in run/code.diff"
                                                      if code.get("diff_sha256") else ""), ""]
    shipped = [a for a in m.artifacts if a.kind.split(":")[0] in SHIPPED]
    names = shipped_names([a.path for a in shipped])
    for a in shipped:
        lines.append(f"- artifacts/{names[a.path]} ({a.kind}, sha256 {a.sha256})")
        if (Path(a.path) / "campaign_binding.json").is_file():
            lines.append("  bound to its base model by campaign_binding.json: load it with "
                         "campaign.load_adapter(base, folder), which refuses another base")
    if m.amendments:
        lines += ["", "## Amended after the run ended", ""] + [
            f"- {Path(a.path).name}: {a.reason} ({a.at}; sha256 {a.was_sha256[:12]}... -> {a.sha256[:12]}...)"
            for a in m.amendments]
    lines += ["", "## Limits observed", ""] + [f"- {limit}" for limit in limits]
    lines += ["", "Every file is listed with its sha256 in bundle.json; report.html is the campaign's report.", ""]
    return "\n".join(lines)


def verify_bundle(folder: str | Path) -> list[str]:
    """Files of a bundle whose sha256 no longer matches bundle.json (empty when intact)."""
    from ..io import load_json

    doc = load_json(Path(folder) / "bundle.json", "bundle")
    hashes: dict[str, Any] = doc.get("sha256", {}) if isinstance(doc, dict) else {}
    return [f for f, h in hashes.items() if not (Path(folder) / f).is_file() or sha256_file(Path(folder) / f) != h]


__all__ = ["BundleResult", "export_bundle", "verify_bundle"]
