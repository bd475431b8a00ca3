"""The bundle is enough to audit and reproduce: the baseline's predictions (the comparison made again from the
bundle alone gives the bundle's figures), the comparison records, the split manifest with its usage ledger, the
untracked training script, the packages; its README is a Hugging Face model card."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def handover(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)
    assert cli("split", str(EXAMPLES / "data" / "tickets.jsonl"), "--out", "splits").code in (0, 1)
    assert cli("usage", "splits", "--use", "test", "--purpose", "final-test").code in (0, 1)   # the ledger
    oom = start_run("lora-r64", with_torch=False)
    end_run(oom.id, "failed", "CUDA out of memory at step 3")
    base = start_run("baseline", with_torch=False, data=["splits/test.jsonl"])
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    run = start_run("lora", baseline=base.id, with_torch=False, data=["splits/train.jsonl", "splits/test.jsonl"])
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 16, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B",
                                                           "revision": "060db6499f32faf8b98477b0a26969ef7d8b9987"}))
    record_artifact(run.id, adapter, "adapter")
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed", metrics={"accuracy": 0.99, "step": 120})   # the training log's last values
    decide_run(run.id, "accepted", "better on the held-out split")
    assert cli("--record", "regress", str(EXAMPLES / "data" / "baseline.jsonl"),
               str(EXAMPLES / "data" / "candidate.jsonl")).code in (0, 1)
    assert cli("export", "bundle").code == 0
    return tmp_path / "bundle"


def test_the_comparison_is_made_again_from_the_bundle_alone(cli, handover):
    [kept] = list((handover / "records").glob("*/*.json"))
    recorded = json.loads(kept.read_text())["result"]
    again = cli("regress", str(handover / "baseline" / "artifacts" / "baseline.jsonl"),
                str(handover / "artifacts" / "candidate.jsonl"), "--json")
    assert again.code in (0, 1)
    now = again.json()
    for key in ("examples", "accuracy_baseline", "accuracy_candidate", "right_to_wrong", "wrong_to_right", "mcnemar"):
        assert now[key] == recorded[key], key


def test_the_bundle_holds_the_split_the_code_and_the_packages(handover):
    hashed = json.loads((handover / "bundle.json").read_text())["sha256"]
    split = [f for f in hashed if f.startswith("split/")]
    assert any(f.endswith("split_manifest.json") for f in split)
    assert "environment/packages.txt" in hashed
    packages = (handover / "environment" / "packages.txt").read_text()
    assert any(line.startswith("pyyaml==") or line.startswith("numpy==") for line in packages.splitlines())
    assert any(f.startswith("records/") for f in hashed)


def test_the_readme_is_a_model_card(handover):
    text = (handover / "README.md").read_text()
    assert text.startswith("---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B" and meta["library_name"] == "peft"
    # the model-index holds the held-out comparison's figures of the run's predictions (scikit-learn on the
    # candidate file), not the training log's last values, and no step
    from sklearn.metrics import accuracy_score, f1_score

    rows = [json.loads(line) for line in (EXAMPLES / "data" / "candidate.jsonl").read_text().splitlines()]
    gold, pred = [r["gold"] for r in rows], [r["pred"] for r in rows]
    found = {x["type"]: x["value"] for x in meta["model-index"][0]["results"][0]["metrics"]}
    assert found["accuracy"] == pytest.approx(accuracy_score(gold, pred), abs=1e-12)
    assert found["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro"), abs=1e-12)
    assert "step" not in found and "step" not in meta["metrics"] and 0.99 not in found.values()
    assert meta["model-index"][0]["results"][0]["dataset"]["name"] == "test split (test.jsonl)"
    assert "license" not in meta  # left for the user: a comment says so
    for heading in ("## Intended use", "## Training data", "## Evaluation", "## Limitations", "## How to load"):
        assert heading in text
    assert "McNemar p =" in text and "not measured on a card" in text
    hub = pytest.importorskip("huggingface_hub")
    card = hub.ModelCard(text)  # the Hub's own parser: front matter, model-index into eval results
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B"
    assert [r.metric_value for r in card.data.eval_results][0] == pytest.approx(accuracy_score(gold, pred))


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_card_places_the_test_split_under_evaluation_data(handover):
    text = (handover / "README.md").read_text()
    training, evaluation = _section(text, "## Training data"), _section(text, "## Evaluation data")
    assert "train.jsonl" in training and "test.jsonl" not in training
    assert "test.jsonl" in evaluation and "the test split of split_manifest.json" in evaluation


def test_the_card_keeps_the_base_revision_and_names_the_failed_run(handover):
    text = (handover / "README.md").read_text()
    load = _section(text, "## How to load")
    assert "from_pretrained('Qwen/Qwen2.5-0.5B', revision='060db6499f32faf8b98477b0a26969ef7d8b9987')" in load
    limits = _section(text, "## Limitations")
    assert "failed: CUDA out of memory at step 3" in limits and "lora-r64" in limits
    evaluation = _section(text, "## Evaluation")
    # the training log's values are named as such, apart from the held-out figures
    assert "not held-out figures): accuracy 0.99, step 120" in evaluation
    assert "McNemar p = 0.0605" in evaluation        # b=32, c=50: (|32-50|-1)^2/82 = 3.524, chi2(1) sf = 0.0605


def test_the_usage_ledger_the_card_names_is_in_the_bundle(handover):
    hashed = json.loads((handover / "bundle.json").read_text())["sha256"]
    ledger = [f for f in hashed if f.endswith("split_manifest.usage.jsonl")]
    assert len(ledger) == 1
    assert json.loads((handover / ledger[0]).read_text().splitlines()[0])["purpose"] == "final_test"
    assert any(".usage.rows." in f for f in hashed)                   # the rows that use saw
    assert f"usage ledger: {ledger[0].rsplit('/', 1)[0]}/" in (handover / "README.md").read_text()


def test_the_card_names_the_base_by_its_binding_before_peft_s_snapshot_path(cli, tmp_path, monkeypatch):
    """A base loaded from an HF cache snapshot: peft writes the snapshot's path into adapter_config.json, campaign's
    binding names it by its repo id and commit (train/adapters.py); the card's base_model is the repo id."""
    monkeypatch.chdir(tmp_path)
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    run = start_run("lora", with_torch=False)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": str(snapshot)}))
    (adapter / "campaign_binding.json").write_text(json.dumps({"base": "org/tiny", "revision": "abc123"}))
    record_artifact(run.id, adapter, "adapter")
    end_run(run.id, "completed", metrics={"accuracy": 0.5})
    decide_run(run.id, "accepted", "the only run")
    assert cli("export", "bundle").code == 0
    meta = yaml.safe_load((tmp_path / "bundle" / "README.md").read_text().split("---\n")[1])
    assert meta["base_model"] == "org/tiny"
