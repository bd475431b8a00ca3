"""Exports never destroy what they do not own: `campaign export` and `campaign runs to-mlflow --mlflow` refuse the
current folder, the run store and recorded artifacts as destinations, --force replaces only an earlier export, a
kill at any step of the replacement leaves the previous export or the complete new one, and the hidden folders a
killed export leaves are removed by the next."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder (code, data, a git folder, the run store) with an accepted run: an adapter saved 0600 and
    two prediction files that share their name."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CAMPAIGN_ROOT")  # the default store: .campaign in the current folder
    (tmp_path / "train.py").write_text("lr = 1e-3\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    base = start_run("baseline", with_torch=False)
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    run = start_run("lora", baseline=base.id, with_torch=False)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    os.chmod(adapter / "adapter_model.safetensors", 0o600)
    (adapter / "adapter_config.json").write_text('{"r": 16}')
    record_artifact(run.id, adapter, "adapter")
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "preds.jsonl").write_text((EXAMPLES / "data" / "candidate.jsonl").read_text())
        record_artifact(run.id, tmp_path / sub / "preds.jsonl", f"predictions:{sub}")
    end_run(run.id, "completed")
    decide_run(run.id, "accepted", "better")
    return tmp_path


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("dest", [".", "..", ".campaign", ".campaign/runs", "adapter", "adapter/inner"])
def test_export_refuses_the_project_the_store_and_the_artifacts(cli, project, dest):
    before = _listing(project)
    r = cli("export", dest, "--force")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "current folder" in r.err or "campaign keeps" in r.err
    assert _listing(project) == before  # nothing removed, nothing added


@pytest.mark.parametrize("dest", [".", "..", ".campaign", "adapter"])
def test_mlflow_export_refuses_the_project_the_store_and_the_artifacts(cli, project, dest):
    pytest.importorskip("mlflow")
    before = _listing(project)
    r = cli("runs", "to-mlflow", "--mlflow", dest, "--force")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert _listing(project) == before


def test_force_replaces_an_earlier_export_and_nothing_else(cli, project):
    notes = project / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep me\n")
    r = cli("export", "notes", "--force")
    assert r.code == 2 and "not an earlier campaign export" in r.err
    assert (notes / "mine.txt").read_text() == "keep me\n"
    assert cli("export", "handover").code == 0
    (project / "handover" / "stray.txt").write_text("from the earlier export's folder\n")
    assert cli("export", "handover").code == 2  # exists, no --force
    assert cli("export", "handover", "--force").code == 0
    assert not (project / "handover" / "stray.txt").exists()  # the earlier export was replaced as a whole
    assert not [p for p in project.iterdir() if p.name.startswith(".handover")]


def test_mlflow_force_replaces_only_an_earlier_mlflow_export(cli, project, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    (project / "mine").mkdir()
    (project / "mine" / "x.txt").write_text("keep\n")
    assert cli("runs", "to-mlflow", "--mlflow", "mine", "--force").code == 2
    assert (project / "mine" / "x.txt").read_text() == "keep\n"
    assert cli("runs", "to-mlflow", "--mlflow", "ml").code == 0
    assert cli("runs", "to-mlflow", "--mlflow", "ml", "--force").code == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(project / "ml").resolve().as_uri())
    experiment = client.get_experiment_by_name("campaign")
    assert len(client.search_runs([experiment.experiment_id])) == 2  # the two runs, read back after the swap


def test_same_named_artifacts_keep_apart_and_modes_follow_the_umask(cli, project):
    assert cli("export", "handover").code == 0
    out = project / "handover"
    a, b = out / "artifacts" / "a" / "preds.jsonl", out / "artifacts" / "b" / "preds.jsonl"
    assert a.is_file() and b.is_file()
    readme = (out / "README.md").read_text()
    assert "artifacts/a/preds.jsonl" in readme and "artifacts/b/preds.jsonl" in readme
    mask = os.umask(0)
    os.umask(mask)
    weights = out / "artifacts" / "adapter" / "adapter_model.safetensors"
    assert stat.S_IMODE(weights.stat().st_mode) == 0o666 & ~mask  # the source was 0600
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask  # not mkdtemp's 0700


def test_a_run_without_model_or_adapter_says_so(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    run = start_run("evaluation only", with_torch=False)
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed")
    decide_run(run.id, "accepted", "fine")
    r = cli("export", "handover", "--json")
    assert r.code == 0
    limits = r.json()["limits"]
    assert any("no model, adapter or checkpoint was recorded" in line for line in limits)
    assert "no model, adapter or checkpoint" in (tmp_path / "handover" / "README.md").read_text()


# a child process that exports with --force and dies (os._exit: no finally, no cleanup) at one file-system step
CHILD = r"""
import os, shutil, sys
import campaign.io as io
from campaign.cli import main

point = sys.argv[1]
die = lambda *a, **k: os._exit(9)
if point == "while-writing":        # the second artifact copied into the hidden stage folder
    real = shutil.copy2
    calls = []
    def copy2(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            die()
        return real(*a, **k)
    shutil.copy2 = copy2
elif point == "before-swap":
    io._exchange = die
elif point == "after-swap":          # swapped in; the previous export not yet removed
    real_exchange = io._exchange
    def exchange(a, b):
        real_exchange(a, b)
        die()
    io._exchange = exchange
elif point == "while-removing":      # half of the previous export removed
    real_rmtree = shutil.rmtree
    def rmtree(path, *a, **k):
        if ".campaign-new-" in str(path):
            for p in sorted(os.listdir(path))[: len(os.listdir(path)) // 2]:
                full = os.path.join(path, p)
                (real_rmtree if os.path.isdir(full) else os.unlink)(full)
            die()
        return real_rmtree(path, *a, **k)
    io.shutil.rmtree = rmtree
main(["export", "handover", "--force"])
"""


@pytest.mark.parametrize("point", ["while-writing", "before-swap", "after-swap", "while-removing"])
def test_a_kill_at_any_step_of_force_leaves_a_whole_export(cli, project, point):
    from campaign.report.bundle import verify_bundle

    assert cli("export", "handover").code == 0
    files = _listing(project / "handover")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run([sys.executable, "-c", CHILD, point], cwd=project, env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 9, child.stderr
    out = project / "handover"
    assert _listing(out) == files and verify_bundle(out) == []  # the previous export or the new one, whole
    json.loads((out / "bundle.json").read_text())
    assert cli("export", "handover", "--force").code == 0  # the next export removes what the killed one left
    assert not [p.name for p in project.iterdir() if p.name.startswith(".handover")]
    assert verify_bundle(out) == []


def test_mlflow_export_holds_data_inputs_artifacts_seeds_and_packages(cli, project, monkeypatch):
    # read back with MLflow's own client: the data as dataset inputs with their sha256, the artifacts' files, the
    # seeds and versions as tags, the recorded packages as a text artifact
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    data = project / "train.jsonl"
    data.write_text('{"text": "a", "label": "x"}\n')
    run = start_run("with data", with_torch=False, data=[data], seeds=[1, 2])
    record_artifact(run.id, project / "adapter", "adapter")
    end_run(run.id, "completed")
    r = cli("runs", "to-mlflow", "--mlflow", "ml")
    assert r.code == 0 and "MLFLOW_ALLOW_FILE_STORE=true" in r.out
    client = MlflowClient(tracking_uri=(project / "ml").resolve().as_uri())
    experiment = client.get_experiment_by_name("campaign")
    found = {x.data.tags["campaign.id"]: x for x in client.search_runs([experiment.experiment_id])}
    mine = found[run.id]
    assert mine.data.tags["campaign.seeds"] == "1,2" and mine.data.tags["campaign.python"]
    [used] = mine.inputs.dataset_inputs
    assert used.dataset.name == "train.jsonl" and used.dataset.digest == run.data[0].sha256[:32]
    logged = {a.path for a in client.list_artifacts(mine.info.run_id, "artifacts/adapter/adapter")}
    assert logged == {"artifacts/adapter/adapter/adapter_model.safetensors",
                      "artifacts/adapter/adapter/adapter_config.json"}
    packages = Path(client.download_artifacts(mine.info.run_id, "environment/packages.txt", str(project)))
    assert any(line.startswith("numpy==") for line in packages.read_text().splitlines())
