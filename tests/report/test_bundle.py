"""campaign export: the accepted run's files re-hashed into a bundle with its manifests, the report and its limits."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def accepted(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    base = start_run("baseline", params={"lora": {"r": 8}}, with_torch=False)
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    run = start_run("lora-r16", params={"lora": {"r": 16}}, baseline=base.id, guards=["f1[refund]>=-0.01"],
                    hypothesis="r16 lifts macro F1", with_torch=False)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    (adapter / "adapter_config.json").write_text('{"r": 16}')
    record_artifact(run.id, adapter, "adapter")
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed")
    decide_run(run.id, "accepted", "+6 points accuracy, guards hold")
    return run, adapter


def test_the_bundle_holds_the_accepted_run_rehashed_with_its_limits(cli, accepted, tmp_path):
    run, adapter = accepted
    assert cli("--record", "regress", str(EXAMPLES / "data" / "baseline.jsonl"),
               str(EXAMPLES / "data" / "candidate.jsonl")).code in (0, 1)
    r = cli("export", str(tmp_path / "handover"), "--json")
    assert r.code == 0, r.err
    out = tmp_path / "handover"
    doc = json.loads((out / "bundle.json").read_text())
    assert doc["run"] == run.id and doc["baseline"] == run.baseline
    # every file listed, with the hash computed here
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                   if p.is_file() and p.name not in ("bundle.json", "bundle.json.sha256"))
    assert sorted(doc["sha256"]) == files
    assert all(doc["sha256"][f] == _sha(out / f) for f in files)
    assert (out / "artifacts" / "adapter" / "adapter_model.safetensors").read_bytes() == b"\x00" * 64
    assert {"run/manifest.json", "baseline/manifest.json", "report.html", "README.md",
            "artifacts/candidate.jsonl"} <= set(files)
    readme = (out / "README.md").read_text()
    assert "f1[refund]>=-0.01" in readme and "+6 points accuracy" in readme
    # the example candidate gains on every class's F1 but loses precision on 'other' (0.8472 -> 0.8442) and recall
    # on 'shipping' (0.8608 -> 0.8481), per scikit-learn on the two files: the README says so
    assert "precision[other] -0.0031" in readme and "recall[shipping] -0.0127" in readme
    # the guard evaluated at export on the two runs' predictions: refund's F1 rose by 0.0916 (scikit-learn, above)
    assert "guard f1[refund]>=-0.01 holds" in readme and "by 0.0916" in readme


def test_an_artifact_changed_after_it_was_recorded_is_refused(cli, accepted, tmp_path):
    _, adapter = accepted
    (adapter / "adapter_model.safetensors").write_bytes(b"\x01" * 64)
    r = cli("export", str(tmp_path / "handover"))
    assert r.code == 2 and "changed since it was recorded" in r.err
    assert not (tmp_path / "handover").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".handover")]      # no half-written bundle


def test_no_accepted_run_is_one_clear_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start_run("x", with_torch=False)
    r = cli("export", str(tmp_path / "b"))
    assert r.code == 2 and "no accepted run" in r.err and len(r.err.strip().splitlines()) == 1


def test_export_bundle_reports_its_phases(accepted, tmp_path):
    from campaign.report.bundle import export_bundle

    phases: list[str] = []
    result = export_bundle(tmp_path / "handover", progress=phases.append)
    assert phases[:2] == ["artifacts 1/2", "artifacts 2/2"]
    assert "report: writing" in phases and "limits" in phases
    assert phases[-1] == f"hashes {len(result.files)}/{len(result.files)}"          # every file but bundle.json
