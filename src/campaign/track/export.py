"""Runs exported to an MLflow tracking store (`campaign runs to-mlflow --mlflow DIR`), written with MLflow's own client
so any MLflow tool reads them: one MLflow run per campaign run, in the experiment 'campaign', with the parameters
flattened to dotted keys, every numeric metric record at its step and time, the run's end figures (`run end
--metric`) the stream does not end on, after its last step, the status (completed -> FINISHED,
failed -> FAILED, stopped and invalid -> KILLED), tags for what MLflow has no field for (the campaign id, the
hypothesis, the guards, the baseline, the reason, the decision, the git commit and branch, the seeds, the Python,
torch and CUDA versions), the data files as dataset inputs with their digests and the context training or
evaluation (track/evidence.py: the held-out split and the files used for evaluation), the artifacts' files, and the
packages as environment/packages.txt. The held-out comparison of a run's predictions (its saved regress or errors
record) is logged as metrics heldout.NAME (the candidate's figures, the baseline's as heldout.baseline.NAME, the
difference with its interval and p-value, McNemar's p) with the record as evaluation/<file>.json. A decision is the
run's description and decision.json; an accepted run's adapter, model or checkpoint folder becomes an MLflow logged
model of its files, registered as a version of the model named after the run with the alias 'accepted'.

MLflow 3 keeps its file store in maintenance mode behind MLFLOW_ALLOW_FILE_STORE=true, which is set for the export
and which a reader needs too (the command says so). The folder is written beside its destination and swapped into
place when complete (io.export_folder).
"""
from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..io import atomic_write_json, export_folder, load_json
from .evidence import HeldOut, data_files, held_out
from .manifest import Manifest, flatten, parse_time
from .records import SavedRecord, load_records
from .store import Store

STATUS = {"completed": "FINISHED", "failed": "FAILED", "stopped": "KILLED", "invalid": "KILLED",
          "running": "RUNNING", "planned": "SCHEDULED"}
MAX_PARAM = 6000              # MLflow's limit on a parameter value's length


def _key(name: str) -> str:
    """A name MLflow accepts (letters, digits, _ - . space /): campaign's 'f1[refund]' becomes 'f1_refund_'."""
    return re.sub(r"[^\w\-. /]", "_", name)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ms(text: str) -> int:
    return int(parse_time(text).timestamp() * 1000)


def export_mlflow(out_dir: str | Path, *, root: str | Path | None = None, force: bool = False,
                  progress: Callable[[str], None] | None = None) -> int:
    """Write every run of the store into a new MLflow file store at out_dir; returns the runs exported. progress:
    called with 'runs 3/120' as each run is written.

    Raises:
        InputError: out_dir exists (unless force) or is not a folder.
        MissingDependencyError: mlflow is not installed (the mlflow extra).
    """
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise MissingDependencyError("mlflow", "mlflow") from None
    out = Path(out_dir)
    store = Store(root)
    rows = store.list()
    manifests = {row.id: store.read(row.id) for row in rows
                 if not (row.status == "invalid" and row.name == row.id and not row.created)}  # unreadable: no id
    protect: list[str | Path] = [store.root, *(a.path for m in manifests.values() for a in m.artifacts)]
    with export_folder(out, force=force, is_export=_is_mlflow_export, protect=protect,
                       what="MLflow export") as stage:
        atomic_write_json(stage / MARK, {"schema": MARK_SCHEMA, "runs": len(rows)})
        uri = stage.resolve().as_uri()
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        experiment = client.create_experiment("campaign")
        records = load_records(root)
        for i, row in enumerate(rows, 1):
            if progress is not None:
                progress(f"runs {i:,}/{len(rows):,}")
            if row.id in manifests:
                _one(client, experiment, store, manifests[row.id], row.status, row.reason, records)
        _relocate(stage, out)
    return len(rows)


def _relocate(stage: Path, out: Path) -> None:
    """MLflow's file store writes absolute artifact locations in each meta.yaml: point them at where the store
    will be once swapped into place (the stage folder is gone by then)."""
    was, now = stage.resolve().as_uri(), out.resolve().as_uri()
    for meta in stage.rglob("meta.yaml"):
        text = meta.read_text(encoding="utf-8")
        if was in text:
            meta.write_text(text.replace(was, now), encoding="utf-8")


MARK = "campaign-export.json"  # at the store's root, beside MLflow's experiment folders (which MLflow lists)
MARK_SCHEMA = "campaign.mlflow-export/1"


def _is_mlflow_export(folder: Path) -> bool:
    """An earlier `runs to-mlflow --mlflow`: its campaign-export.json names this schema (what --force may replace)."""
    try:
        return load_json(folder / MARK, "export manifest").get("schema") == MARK_SCHEMA
    except (InputError, AttributeError):
        return False


def _one(client: Any, experiment: str, store: Store, m: Manifest, status: str, reason: str,
         records: list[SavedRecord]) -> None:
    from mlflow.entities import Metric, Param

    tags = {"campaign.id": m.id, "campaign.status": status, "mlflow.runName": m.name}
    extra = {"campaign.hypothesis": m.hypothesis, "campaign.guards": "; ".join(m.guards),
             "campaign.baseline": m.baseline or "", "campaign.reason": reason,
             "campaign.decision": m.decision.decision if m.decision else "",
             "campaign.decision_why": m.decision.why if m.decision else "",
             "mlflow.source.git.commit": m.code.get("commit") or "", "campaign.tags": ",".join(m.tags)}
    env = m.environment if isinstance(m.environment, dict) else {}
    extra.update({"campaign.seeds": ",".join(str(x) for x in m.seeds), "campaign.python": str(env.get("python") or ""),
                  "campaign.torch": str(env.get("torch") or ""), "campaign.cuda": str(env.get("cuda") or ""),
                  "mlflow.source.git.branch": m.code.get("branch") or "",
                  "campaign.code_dirty": "true" if m.code.get("dirty") else ""})
    tags.update({k: v for k, v in extra.items() if v})
    run = client.create_run(experiment, start_time=_ms(m.created), tags=tags)
    run_id = run.info.run_id
    params = [Param(_key(k), str(v)[:MAX_PARAM]) for k, v in sorted(flatten(m.params).items())]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])
    metrics = []
    last: dict[str, float] = {}
    for n, rec in enumerate(store.metrics(m.id)):
        step = rec.get("step", n)
        stamp = _ms(rec["t"]) if isinstance(rec.get("t"), str) else _ms(m.created)
        for k, v in rec.items():
            if k not in ("t", "step") and _number(v):
                metrics.append(Metric(_key(k), float(v), stamp, int(step) if isinstance(step, int) else n))
                last[_key(k)] = float(v)
    # the run's end figures (`run end --metric`, the last logged values with them): those the stream does not end
    # on, at the run's end and after its last step
    end = _ms(m.ended) if m.ended else int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    after = max((x.step for x in metrics), default=-1) + 1
    metrics += [Metric(_key(k), float(v), end, after) for k, v in sorted(flatten(m.metrics).items())
                if k not in ("t", "step") and _number(v) and last.get(_key(k)) != float(v)]
    for i in range(0, len(metrics), 1000):                 # MLflow's batch limit
        client.log_batch(run_id, metrics=metrics[i:i + 1000])
    _inputs_and_artifacts(client, run_id, m)
    _held_out(client, run_id, held_out(m, records))
    _decision(client, experiment, run_id, m)
    if status == "planned":
        client.update_run(run_id, status="SCHEDULED")
    elif status != "running":
        client.set_terminated(run_id, status=STATUS[status], end_time=end)


def _inputs_and_artifacts(client: Any, run_id: str, m: Manifest) -> None:
    """The run's data files as MLflow dataset inputs (name, sha256 digest, local source), its artifacts' files
    logged under artifacts/<kind>/ (those still on disk with the recorded hash; a changed or missing one is
    tagged, not logged), the package versions it recorded as environment/packages.txt."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = [DatasetInput(Dataset(Path(d.artifact.path).name, d.artifact.sha256[:32], "local",
                                   Path(d.artifact.path).resolve().as_uri()),
                           [InputTag("mlflow.data.context", "evaluation" if d.held_out else "training")])
              for d in data_files(m)]
    if inputs:
        client.log_inputs(run_id, datasets=inputs)
    from .manifest import file_artifact

    skipped = []
    for a in m.artifacts:
        path = Path(a.path)
        if not path.exists() or file_artifact(path, a.kind).sha256 != a.sha256:
            skipped.append(path.name)
            continue
        where = f"artifacts/{a.kind.replace(':', '-') or 'other'}"
        if path.is_dir():
            client.log_artifacts(run_id, str(path), f"{where}/{path.name}")
        else:
            client.log_artifact(run_id, str(path), where)
    if skipped:
        client.set_tag(run_id, "campaign.artifacts_not_logged", ", ".join(skipped)[:MAX_PARAM])
    env = m.environment if isinstance(m.environment, dict) else {}
    packages = env.get("installed") or env.get("packages")
    if isinstance(packages, dict) and packages:
        listing = "".join(f"{k}=={v}\n" for k, v in sorted(packages.items(), key=lambda kv: kv[0].lower()))
        client.log_text(run_id, listing, "environment/packages.txt")


def _held_out(client: Any, run_id: str, held: HeldOut | None) -> None:
    """The held-out comparison of the run's predictions (track/evidence.py): its figures as metrics heldout.NAME,
    the paired tests' p-values as heldout.difference_p and heldout.mcnemar_p (with the difference and its interval),
    the record itself as evaluation/<its file>, and the record's path as a tag."""
    if held is None:
        return
    from mlflow.entities import Metric

    try:
        stamp = _ms(held.created)
    except ValueError:                  # a record without a readable time: when exported
        stamp = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    figures = {f"heldout.{_key(k)}": v for k, v in held.metrics.items()}
    figures |= {f"heldout.baseline.{_key(k)}": v for k, v in held.baseline.items()}
    figures |= {f"heldout.{k}": v for k, v in held.tests.items()}
    client.log_batch(run_id, metrics=[Metric(k, float(v), stamp, 0) for k, v in figures.items()])
    client.set_tag(run_id, "campaign.heldout_record", held.record)
    if held.result is not None:
        client.log_dict(run_id, held.result, f"evaluation/{Path(held.record).name}")


def _decision(client: Any, experiment: str, run_id: str, m: Manifest) -> None:
    """The decision as the run's description and a decision.json artifact (what, why, when, the guards); an accepted
    run's adapter, model or checkpoint folder as an MLflow logged model of its files, registered as a version of the
    model named after the run with the alias 'accepted' (its description the why). The files are logged as they are,
    with no MLflow flavor: a transformers or peft flavor would load the base model to log it, which an export of
    records must not need; load it with peft/transformers from the version's source folder."""
    if m.decision is None:
        return
    d = m.decision
    client.set_tag(run_id, "mlflow.note.content", f"{d.decision}: {d.why} ({d.at})")
    client.log_dict(run_id, {"decision": d.decision, "why": d.why, "at": d.at, "guards": list(m.guards),
                             "baseline": m.baseline}, "decision.json")
    if d.decision != "accepted":
        return
    from .manifest import file_artifact

    for a in m.artifacts:
        kind, path = a.kind.split(":")[0], Path(a.path)
        if kind not in ("adapter", "model", "checkpoint") or not path.is_dir() \
                or file_artifact(path, a.kind).sha256 != a.sha256:
            continue
        logged = client.create_logged_model(experiment, name=_key(path.name), source_run_id=run_id,
                                            tags={"campaign.kind": a.kind, "campaign.sha256": a.sha256},
                                            model_type=f"campaign-{kind}")
        client.log_model_artifacts(logged.model_id, str(path))
        client.finalize_logged_model(logged.model_id, "READY")
        name = _key(m.name)
        try:
            client.get_registered_model(name)
        except Exception:  # noqa: BLE001 - MLflow raises its own RESOURCE_DOES_NOT_EXIST for a new name
            client.create_registered_model(name, description=f"accepted runs of {m.name} (campaign export)")
        version = client.create_model_version(name, source=logged.artifact_location, run_id=run_id,
                                              model_id=logged.model_id, description=f"accepted: {d.why}",
                                              tags={"campaign.id": m.id})
        client.set_registered_model_alias(name, "accepted", version.version)


__all__ = ["export_mlflow"]
