"""`campaign export BUNDLE_DIR`: what is handed over at the end of a rental, in one folder: the accepted run's
model or adapter files (with the adapter's binding to its exact base), its manifest and its baseline's (with the
uncommitted code diffs), the report, and a README of the limits observed (guards, slices that regressed, the memory
margin measured). Every file is listed in bundle.json with its sha256, and bundle.json's own in bundle.json.sha256
(`campaign verify` checks both).

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
from ..track.evidence import held_out
from ..track.manifest import SHIPPED_KINDS, Artifact, Manifest, file_artifact
from ..track.records import load_records
from ..track.store import Store
from .card import UNTRACKED_MAX, base_revision, readme
from .names import shipped_names
from .verify import SELF, self_hash_line

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
    if any(a.kind.split(":")[0] in ("adapter", "model") for a in m.artifacts) and not _base_model(m):
        out.append("the base model is not named (no base_model_name_or_path in adapter_config.json, no binding, no "
                   "base_model parameter): the receiver cannot tell which base to load; record it with the run")
    if m.guards:
        out.append(f"guards stated before the run (what must not regress): {'; '.join(m.guards)}")
        out += _guards_checked(m, root)
    else:
        out.append("no guards were stated for this run: nothing was checked for regressions")
    said = " ".join(out)
    measured = False
    for r in load_records(root):
        d = r.result or {}
        kind = (r.schema or "").split("/")[0]
        if kind == "campaign.regress":
            fell = [f"{x.get('name')} {x['delta']:+.4f}" for x in d.get("deltas") or []
                    if isinstance(x, dict) and isinstance(x.get("delta"), (int, float)) and x["delta"] < 0]
            fell += [f"F1[{x.get('label')}] {x['delta_f1']:+.4f}" for x in d.get("per_class") or []
                     if isinstance(x, dict) and isinstance(x.get("delta_f1"), (int, float)) and x["delta_f1"] < 0]
            fell = [f for f in fell if f not in said]  # not the regressions the guards' line already gives
            if fell:
                out.append(f"regressed against the baseline ({r.created}): {', '.join(fell[:8])}")
            p = (d.get("mcnemar") or {}).get("p_value") if isinstance(d.get("mcnemar"), dict) else None
            if isinstance(p, (int, float)):
                out.append(f"the paired test behind the comparison: McNemar p = {p:.3g} on {d.get('examples', '?')} "
                           f"examples ({r.created})" + (": not significant at 0.05" if p >= 0.05 else ""))
        elif kind == "campaign.explain" and isinstance(d.get("margin"), (int, float)):
            out.append(f"memory: plan with a {d['margin']:.0%} margin over the measured peak ({r.created})")
        elif kind == "campaign.measurement":
            measured = True
            peak = max((p.get("peak_reserved_bytes", 0) for p in d.get("phases") or []), default=0)
            env = d.get("environment") or {}
            out.append(f"memory measured on {env.get('device_name', '?')}: peak reserved {peak / 2**30:.2f} GiB "
                       f"({r.created})")
    if not measured:
        out.append("memory was not measured on a card (no `campaign measure` record): its figures are estimates")
    out += _runs_not_completed(root)
    return out


def _runs_not_completed(root: str | Path | None) -> list[str]:
    """The campaign's runs that failed, stopped or are invalid (an out-of-memory run among them): what was tried
    and did not finish is a limit of what was shown."""
    rows = [r for r in Store(root).list() if r.status in ("failed", "stopped", "invalid")]
    return [f"run {r.id} {r.status}" + (f": {r.reason}" if r.reason else "") + f" ({r.created})" for r in rows[:20]] \
        + ([f"and {len(rows) - 20} more runs that did not complete (campaign runs list)"] if len(rows) > 20 else [])


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
    protect: list[str | Path] = [store.root, *(a.path for r in (m, base) if r is not None for a in r.artifacts)]
    with export_folder(out, force=force, is_export=_is_bundle, protect=protect, what="export") as stage:
        shipped = [a for a in m.artifacts if a.kind.split(":")[0] in SHIPPED]
        names = shipped_names([a.path for a in shipped])
        for i, a in enumerate(shipped, 1):
            say(f"artifacts {i:,}/{len(shipped):,}")
            _ship(a, stage / "artifacts" / names[a.path], m.id)
        if base is not None:  # the baseline's predictions: the comparison can be made again from the bundle alone
            theirs = [a for a in base.artifacts if a.kind.split(":")[0] == "predictions"]
            for i, (path, name) in enumerate(shipped_names([a.path for a in theirs]).items(), 1):
                say(f"baseline artifacts {i:,}/{len(theirs):,}")
                _ship(next(x for x in theirs if x.path == path), stage / "baseline" / "artifacts" / name, base.id)
        say("records")
        extras = _ship_extras(stage, m, root)
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
        atomic_write_text(stage / "README.md", readme(m, base, limits, extras, held=held_out(m, load_records(root)),
                                                      base_model=_base_model(m), revision=base_revision(m)))
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        hashes = {}
        for i, f in enumerate(files, 1):
            say(f"hashes {i:,}/{len(files):,}")
            hashes[f] = sha256_file(stage / f)
        atomic_write_json(stage / "bundle.json", {
            "schema": SCHEMA, "run": m.id, "baseline": m.baseline,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "sha256": hashes})
        atomic_write_text(stage / SELF, self_hash_line(sha256_file(stage / "bundle.json")))  # bundle.json's own
    size = sum((out / f).stat().st_size for f in files)
    return BundleResult(str(out), m.id, m.baseline, tuple(files), size, tuple(limits))


def _ship(a: Artifact, dest: Path, run_id: str) -> None:
    """Copy a recorded artifact into the bundle and hash it again: it must be what its run recorded."""
    src = Path(a.path)
    if not src.exists():
        raise InputError(f"{src}: recorded as run {run_id}'s {a.kind} but gone; restore it or record it again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
    _umask_modes(dest)
    if file_artifact(dest, a.kind).sha256 != a.sha256:
        raise InputError(f"{src}: changed since it was recorded for run {run_id} (sha256 differs); record it "
                         "again (campaign run artifact --amend REASON) or restore the recorded version")


def _ship_extras(stage: Path, m: Manifest, root: str | Path | None) -> dict[str, Any]:
    """What a receiver needs to audit and reproduce beside the artifacts: every saved comparison record
    (records/), the split manifest and its usage ledger of the run's data (split/), the untracked files the run's
    code named (code/untracked/, as they are now: the run recorded their names, not their contents) and the
    packages the run recorded (environment/packages.txt). Returns what was shipped, for the README."""
    shipped: dict[str, Any] = {"records": 0, "split": [], "untracked": [], "untracked_missing": [], "packages": 0}
    store_root = Path(root) if root is not None else Store().root
    for path in sorted((store_root / "records").glob("*/*.json")):
        dest = stage / "records" / path.parent.name / path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        shipped["records"] += 1
    from ..data.split_manifest import MANIFEST_NAME, SHARDS_MANIFEST_NAME

    found: list[Path] = []
    for a in (*m.data, *m.artifacts):  # a split's file or folder of shards, or its manifest itself
        here = Path(a.path)
        candidates = [here] if here.name in (MANIFEST_NAME, SHARDS_MANIFEST_NAME) else \
            [here / MANIFEST_NAME, here / SHARDS_MANIFEST_NAME] if here.is_dir() else [here.parent / MANIFEST_NAME]
        found += [c for c in candidates if c.is_file() and c not in found]
    for i, manifest in enumerate(found, 1):
        dest = stage / "split" / f"{i}-{manifest.parent.name}"
        dest.mkdir(parents=True, exist_ok=True)
        ledger = manifest.with_name(manifest.stem + ".usage.jsonl")  # and the row hashes each use saw
        rows = sorted(manifest.parent.glob(f"{ledger.name.removesuffix('.jsonl')}.rows.*.txt"))
        for kept in (manifest, ledger, *rows):
            if kept.is_file():
                shutil.copy2(kept, dest / kept.name)
        shipped["split"].append(str(dest.relative_to(stage)))
        if ledger.is_file():
            shipped.setdefault("ledgers", []).append(str(dest.relative_to(stage)))
    repo = m.code.get("repo") if isinstance(m.code, dict) else None
    for name in (m.code.get("untracked") or []) if isinstance(m.code, dict) else []:
        src = Path(repo or ".") / str(name)
        if src.is_file() and src.stat().st_size <= UNTRACKED_MAX and not src.is_symlink():
            dest = stage / "code" / "untracked" / str(name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            shipped["untracked"].append(str(name))
        else:
            shipped["untracked_missing"].append(str(name))
    packages, what = recorded_packages(m)
    if packages:
        lines = [f"# {what} of run {m.id}, as pip requirements", f"# python {m.environment.get('python', '?')}"] + [
            f"{k}=={v}" for k, v in sorted(packages.items(), key=lambda kv: kv[0].lower())]
        (stage / "environment").mkdir(exist_ok=True)
        atomic_write_text(stage / "environment" / "packages.txt", "\n".join(lines) + "\n")
        shipped["packages"] = len(packages)
    return shipped


def recorded_packages(m: Manifest) -> tuple[dict[str, str], str]:
    """The package versions a run recorded: every installed distribution (the lock a run started with torch
    records), else the packages that change results; and which of the two it is."""
    env = m.environment if isinstance(m.environment, dict) else {}
    for key, what in (("installed", "every package installed"), ("packages", "the packages that change results")):
        found = env.get(key)
        if isinstance(found, dict) and found:
            return {str(k): str(v) for k, v in found.items()}, what
    return {}, ""


def _is_bundle(folder: Path) -> bool:
    """An earlier export: its bundle.json names this schema (what `export --force` may replace)."""
    try:
        from ..io import load_json

        schema = load_json(folder / "bundle.json", "bundle manifest").get("schema", "")
        return str(schema).startswith("campaign.bundle/")
    except (InputError, AttributeError):
        return False


def _umask_modes(path: Path) -> None:
    """Copied files and folders get the modes a new file gets here (the umask), not the source's (a checkpoint
    saved 0600 would reach the receiver unreadable)."""
    mask = os.umask(0)
    os.umask(mask)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _base_model(m: Manifest) -> str:
    """The base model the run's adapter or model names (the binding's base first: it names a base loaded from an HF
    cache snapshot by its repo id, where peft's adapter_config.json holds the snapshot's path; then
    adapter_config.json's base_model_name_or_path), else a parameter naming it; '' when nothing names it."""
    for a in m.artifacts:
        folder = Path(a.path)
        for name, key in (("campaign_binding.json", "base"), ("adapter_config.json", "base_model_name_or_path")):
            try:
                from ..io import load_json

                value = load_json(folder / name, name).get(key) if (folder / name).is_file() else None
            except (InputError, AttributeError):
                value = None
            if isinstance(value, str) and value.strip():
                return value.strip()
    for key in ("base_model", "model", "model_name_or_path", "base"):
        value = m.params.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def verify_bundle(folder: str | Path) -> list[str]:
    """The files of a bundle that are changed, missing or not from it (empty when intact): check_bundle's list."""
    from .verify import check_bundle

    return list(check_bundle(folder).failing)


__all__ = ["BundleResult", "export_bundle", "verify_bundle"]
