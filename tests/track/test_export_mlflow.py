"""campaign runs to-mlflow: the accepted run carries its held-out comparison (figures and p-values), its datasets
with the context training or evaluation, its decision as a description, a decision.json and a registered model
version aliased 'accepted' whose source holds the adapter's files; read back with MLflow's own client."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def exported(cli, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert cli("split", str(EXAMPLES / "data" / "tickets.jsonl"), "--out", "splits").code in (0, 1)
    base = start_run("baseline", with_torch=False)
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    rejected = start_run("lora-r4", with_torch=False)
    end_run(rejected.id, "completed")
    decide_run(rejected.id, "rejected", "no gain")
    run = start_run("lora", baseline=base.id, with_torch=False, data=["splits/train.jsonl", "splits/test.jsonl"])
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(bytes(range(64)))
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 16, "base_model_name_or_path": "org/tiny"}))
    record_artifact(run.id, adapter, "adapter")
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed", metrics={"accuracy": 0.99})       # the training log's last value
    decide_run(run.id, "accepted", "+6 points accuracy on the held-out split")
    assert cli("--record", "regress", str(EXAMPLES / "data" / "baseline.jsonl"),
               str(EXAMPLES / "data" / "candidate.jsonl")).code in (0, 1)
    assert cli("runs", "to-mlflow", "--mlflow", "ml").code == 0
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "ml").resolve().as_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("campaign")
    found = {x.data.tags["campaign.id"]: x for x in client.search_runs([experiment.experiment_id])}
    return client, found, run, rejected


def test_the_accepted_run_carries_the_held_out_comparison(exported):
    client, found, run, _ = exported
    mine = found[run.id].data
    # the example files: 300 items, 262 right after vs 244 before (scikit-learn's accuracy_score gives 0.8733 and
    # 0.8133); flips b=32 right-to-wrong, c=50 wrong-to-right: McNemar with continuity (|32-50|-1)^2/82 = 3.5244,
    # chi-square(1) upper tail 0.0605 (scipy.stats.chi2.sf)
    assert mine.metrics["heldout.accuracy"] == pytest.approx(262 / 300)
    assert mine.metrics["heldout.baseline.accuracy"] == pytest.approx(244 / 300)
    assert mine.metrics["heldout.mcnemar_p"] == pytest.approx(0.060472, abs=1e-6)
    assert mine.metrics["heldout.difference"] == pytest.approx(18 / 300)
    # the difference's p: a paired t-test on the per-item right/wrong of the two files (scipy.stats.ttest_rel)
    stats = pytest.importorskip("scipy.stats")
    rows = {name: {r["id"]: r["gold"] == r["pred"] for r in map(json.loads, (EXAMPLES / "data" / f"{name}.jsonl")
                                                                .read_text().splitlines())}
            for name in ("baseline", "candidate")}
    ids = sorted(rows["baseline"])
    t = stats.ttest_rel([float(rows["candidate"][i]) for i in ids], [float(rows["baseline"][i]) for i in ids])
    assert mine.metrics["heldout.difference_p"] == pytest.approx(t.pvalue, rel=1e-9)
    record = mine.tags["campaign.heldout_record"]
    assert record.startswith("records/regress/")
    logged = {a.path for a in client.list_artifacts(found[run.id].info.run_id, "evaluation")}
    assert logged == {f"evaluation/{Path(record).name}"}


def test_datasets_carry_the_context_training_or_evaluation(exported):
    _, found, run, _ = exported
    contexts = {i.dataset.name: [t.value for t in i.tags if t.key == "mlflow.data.context"]
                for i in found[run.id].inputs.dataset_inputs}
    assert contexts == {"train.jsonl": ["training"], "test.jsonl": ["evaluation"]}


def test_the_decision_is_a_description_a_file_and_a_registered_version(exported, tmp_path):
    client, found, run, rejected = exported
    mine = found[run.id]
    assert mine.data.tags["mlflow.note.content"].startswith("accepted: +6 points accuracy")
    decision = json.loads(Path(client.download_artifacts(mine.info.run_id, "decision.json", str(tmp_path)))
                          .read_text())
    assert decision["decision"] == "accepted" and decision["baseline"] == run.baseline
    version = client.get_model_version_by_alias("lora", "accepted")
    assert version.run_id == mine.info.run_id and version.description.startswith("accepted: ")
    # the version's source is the logged model's folder, inside the exported store, holding the adapter's files
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    source = Path(url2pathname(urlparse(version.source).path))
    assert source.is_relative_to((tmp_path / "ml").resolve())
    assert sorted(p.name for p in source.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert (source / "adapter_model.safetensors").read_bytes() == bytes(range(64))
    assert client.get_logged_model(version.model_id).source_run_id == mine.info.run_id
    # a rejected run keeps its decision as a description and a file, and registers nothing
    other = found[rejected.id]
    assert other.data.tags["mlflow.note.content"].startswith("rejected: no gain")
    assert [m.name for m in client.search_registered_models()] == ["lora"]


def test_the_run_end_figures_are_exported_after_the_logged_stream(cli, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from campaign.track.run import log_run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run = start_run("lora", with_torch=False)
    log_run(run.id, [{"step": 10, "loss": 2.5}, {"step": 20, "loss": 1.75}])
    # the end figures: the last logged loss again (no second point), a held-out F1 only given at the end
    end_run(run.id, "completed", metrics={"loss": 1.75, "eval_f1": 0.905})
    bare = start_run("no-log", with_torch=False)
    end_run(bare.id, "completed", metrics={"accuracy": 0.8})
    assert cli("runs", "to-mlflow", "--mlflow", "ml").code == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "ml").resolve().as_uri())
    experiment = client.get_experiment_by_name("campaign")
    found = {x.data.tags["campaign.id"]: x for x in client.search_runs([experiment.experiment_id])}
    mlrun = found[run.id].info.run_id
    assert [(m.step, m.value) for m in client.get_metric_history(mlrun, "loss")] == [(10, 2.5), (20, 1.75)]
    assert [(m.step, m.value) for m in client.get_metric_history(mlrun, "eval_f1")] == [(21, 0.905)]
    assert found[run.id].data.metrics == {"loss": 1.75, "eval_f1": 0.905}     # the step is no metric
    assert found[bare.id].data.metrics == {"accuracy": 0.8}
