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
    base = start_run("baseline", with_torch=False, data=["splits/test.jsonl"])
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    run = start_run("lora", baseline=base.id, with_torch=False, data=["splits/test.jsonl"])
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 16, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    record_artifact(run.id, adapter, "adapter")
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed", metrics={"accuracy": 0.8733})
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
    assert meta["model-index"][0]["results"][0]["metrics"] == [{"type": "accuracy", "value": 0.8733,
                                                                "name": "accuracy"}]
    assert "license" not in meta  # left for the user: a comment says so
    for heading in ("## Intended use", "## Training data", "## Evaluation", "## Limitations", "## How to load"):
        assert heading in text
    assert "McNemar p =" in text and "not measured on a card" in text
    hub = pytest.importorskip("huggingface_hub")
    card = hub.ModelCard(text)  # the Hub's own parser: front matter, model-index into eval results
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B"
    assert [r.metric_value for r in card.data.eval_results] == [0.8733]


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
