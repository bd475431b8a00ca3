"""What a campaign's records say about one run: the roles of its data files (training or held out, from the split
manifest beside each and its usage ledger) and the held-out figures of its predictions (the saved regress or errors
record of them). The hand-over's model card (report/card.py) and the MLflow export (track/export.py) both read a run
through these, so the two say the same.

A data file is held out when it is the held-out split (the one the usage ledger used for a final test or a model
selection and never for training, else the manifest's last, as `campaign usage` takes it) or a file the run recorded
for evaluation (`campaign usage --run`: kind evaluation:...). The held-out figures are the newest `campaign regress`
record whose candidate is one of the run's predictions files (by sha256), else the newest `campaign errors` record
of one: never the last values of the training log.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .manifest import Artifact, Manifest
from .records import SavedRecord


@dataclass(frozen=True)
class HeldOut:
    """The held-out figures of the run's predictions, from one saved record."""

    record: str                        # records/<command>/<file>.json, as shipped
    created: str
    examples: int | None
    metrics: dict[str, float]          # the candidate's (the run's) figures
    baseline: dict[str, float] = field(default_factory=dict)
    lines: tuple[str, ...] = ()        # the tests behind the comparison, one line each
    tests: dict[str, float] = field(default_factory=dict)  # difference, its 95% interval, difference_p, mcnemar_p
    result: dict[str, Any] | None = None                    # the record's result, as saved


@dataclass(frozen=True)
class DataFile:
    artifact: Artifact
    split: str | None                  # its split's name, when a manifest beside it lists its content
    manifest: str | None
    held_out: bool                     # the held-out split, or a file the run used for evaluation


def held_out(m: Manifest, records: list[SavedRecord]) -> HeldOut | None:
    """The newest regress record comparing one of the run's predictions files (by sha256) with a baseline, else the
    newest errors record of one (records: load_records(), oldest first); None when neither was saved."""
    mine = {a.sha256 for a in m.artifacts if a.kind.split(":")[0] == "predictions"}
    if not mine:
        return None
    regress, errors = None, None
    for r in records:                            # oldest first: the last match is the newest
        d = r.result or {}
        kind = (r.schema or "").split("/")[0]
        if kind == "campaign.regress" and _sha(d.get("candidate")) in mine:
            regress = r
        elif kind == "campaign.errors" and _sha(d.get("source")) in mine:
            errors = r
    chosen = regress or errors
    if chosen is None:
        return None
    d = chosen.result or {}
    where = f"records/{Path(chosen.path).parent.name}/{Path(chosen.path).name}"
    examples = d.get("examples") if isinstance(d.get("examples"), int) else None
    if chosen is regress:
        rows = [x for x in d.get("deltas") or [] if isinstance(x, dict) and "[" not in str(x.get("name"))
                and _num(x.get("candidate")) and _num(x.get("baseline"))]
        lines: list[str] = []
        tests: dict[str, float] = {}
        diff: dict[str, Any] = d["difference"] if isinstance(d.get("difference"), dict) else {}
        if _num(diff.get("estimate")) and _num(diff.get("p_value")):
            ci = diff.get("ci95") if isinstance(diff.get("ci95"), list) and len(diff["ci95"]) == 2 else None
            lines.append(f"{diff.get('metric', 'accuracy')} difference {diff['estimate']:+.4f}"
                         + (f" (95% CI {ci[0]:+.4f} to {ci[1]:+.4f})" if ci and all(map(_num, ci)) else "")
                         + f", p = {diff['p_value']:.3g} ({diff.get('method', 'paired test')})"
                         + (f": {diff['verdict']}" if diff.get("verdict") else ""))
            tests |= {"difference": float(diff["estimate"]), "difference_p": float(diff["p_value"])}
            if ci and all(map(_num, ci)):
                tests |= {"difference_ci95_low": float(ci[0]), "difference_ci95_high": float(ci[1])}
        mc: dict[str, Any] = d["mcnemar"] if isinstance(d.get("mcnemar"), dict) else {}
        if _num(mc.get("p_value")):
            lines.append(f"McNemar p = {mc['p_value']:.3g} (right to wrong {mc.get('b', '?')}, wrong to right "
                         f"{mc.get('c', '?')})")
            tests["mcnemar_p"] = float(mc["p_value"])
        return HeldOut(where, chosen.created, examples, {str(x["name"]): float(x["candidate"]) for x in rows},
                       {str(x["name"]): float(x["baseline"]) for x in rows}, tuple(lines), tests, d)
    metrics = {"accuracy": float(d["accuracy"])} if _num(d.get("accuracy")) else {}
    for avg, figures in (d.get("averages") or {}).items():
        for name, value in (figures or {}).items() if isinstance(figures, dict) else ():
            if _num(value):
                metrics[f"{avg}_{name}"] = float(value)
    return HeldOut(where, chosen.created, examples, metrics, result=d)


def data_files(m: Manifest) -> list[DataFile]:
    """The run's data files, each placed by the split manifest beside it (see the module docstring); the files the
    run recorded for evaluation (kind evaluation:...) are held out whatever their manifest says."""
    out: list[DataFile] = []
    evaluated = {a.sha256 for a in m.artifacts if a.kind.startswith("evaluation")}
    for a in (*m.data, *[a for a in m.artifacts if a.kind.startswith("evaluation")]):
        if any(x.artifact.sha256 == a.sha256 for x in out):
            continue
        split, manifest, final = _split_of(Path(a.path), a.sha256)
        out.append(DataFile(a, split, manifest, final or a.sha256 in evaluated))
    return out


def _split_of(path: Path, sha256: str) -> tuple[str | None, str | None, bool]:
    """(split name, manifest path, whether it is the held-out split) of a data file, by its content's sha256."""
    from ..data.split_manifest import MANIFEST_NAME, SHARDS_MANIFEST_NAME

    for manifest in (path.parent / MANIFEST_NAME, path.parent.parent / SHARDS_MANIFEST_NAME):
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        splits = [s for s in doc.get("splits") or [] if isinstance(s, dict) and isinstance(s.get("name"), str)] \
            if isinstance(doc, dict) else []
        names = [s["name"] for s in splits]
        mine = next((s["name"] for s in splits if s.get("sha256") == sha256), None)
        if mine is None:
            continue
        return mine, str(manifest), mine in _held_out_splits(manifest, names)
    return None, None, False


def _held_out_splits(manifest: Path, names: list[str]) -> set[str]:
    """The splits a ledger used only for evaluation (final test, model selection), and the manifest's last split
    (usage's final split by default)."""
    held = {names[-1]} if names else set()
    try:
        from ..track.usage import read_ledger

        entries, _ = read_ledger(manifest)
    except (InputError, OSError, ValueError):
        return held
    uses: dict[str, set[str]] = {}
    for e in entries:
        uses.setdefault(e.split, set()).add(e.purpose)
    held |= {s for s, p in uses.items() if p and "training" not in p}
    return held - {s for s, p in uses.items() if "training" in p}


def _sha(source: Any) -> str | None:
    return source.get("sha256") if isinstance(source, dict) and isinstance(source.get("sha256"), str) else None


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


__all__ = ["DataFile", "HeldOut", "data_files", "held_out"]
