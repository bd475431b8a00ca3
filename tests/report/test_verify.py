"""campaign verify: the receiver's check of a bundle finds a flipped byte in any file (bundle.json and its own hash
included), a file missing or added, an adapter without its binding or bound to another base."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from campaign.report.verify import check_bundle
from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _adapter(folder: Path, *, config_base: str = "org/tiny", bound_base: str = "org/tiny",
             binding: bool = True) -> Path:
    """An adapter folder as save_adapter writes it: the peft files and campaign_binding.json with their sha256."""
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(bytes(range(64)))
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": config_base}))
    if binding:
        files = {p.name: _sha(p) for p in sorted(folder.iterdir())}
        (folder / "campaign_binding.json").write_text(json.dumps({
            "schema": "campaign.adapter_binding/1", "base": bound_base, "revision": "abc123",
            "weights_sha256": "0" * 64, "tensors": 2, "dtypes": ["float32"], "values": None, "files": files}))
    return folder


def _export(cli, tmp_path: Path, **adapter: str | bool) -> Path:
    base = start_run("baseline", with_torch=False)
    record_artifact(base.id, EXAMPLES / "data" / "baseline.jsonl", "predictions")
    end_run(base.id, "completed")
    run = start_run("lora", baseline=base.id, with_torch=False)
    record_artifact(run.id, _adapter(tmp_path / "adapter", **adapter), "adapter")  # type: ignore[arg-type]
    record_artifact(run.id, EXAMPLES / "data" / "candidate.jsonl", "predictions")
    end_run(run.id, "completed", metrics={"accuracy": 0.87})
    decide_run(run.id, "accepted", "better on the held-out split")
    r = cli("export", "bundle")
    assert r.code == 0, r.err
    return tmp_path / "bundle"


@pytest.fixture
def bundle(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    return _export(cli, tmp_path)


def test_a_whole_bundle_is_verified(cli, bundle):
    # bundle.json.sha256 is what sha256sum prints for bundle.json (so `sha256sum -c` checks it without campaign)
    assert (bundle / "bundle.json.sha256").read_text() == f"{_sha(bundle / 'bundle.json')}  bundle.json\n"
    r = cli("verify", str(bundle))
    assert r.code == 0 and r.out.startswith("VERIFIED"), r.out
    doc = cli("verify", str(bundle), "--json").json()
    assert doc["status"] == "pass" and doc["damaged"] == doc["missing"] == doc["extra"] == []
    listed = json.loads((bundle / "bundle.json").read_text())["sha256"]
    assert doc["files"] == len(listed) == len([p for p in bundle.rglob("*") if p.is_file()]) - 2
    binding = next(c for c in doc["checks"] if c["id"] == "bundle.binding")
    assert binding["status"] == "pass" and "org/tiny @ abc123" in binding["seen"]


def test_a_flipped_byte_in_any_file_is_found(cli, bundle, tmp_path):
    files = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())
    assert {"bundle.json", "bundle.json.sha256", "README.md", "report.html", "run/manifest.json",
            "artifacts/adapter/adapter_model.safetensors", "artifacts/adapter/campaign_binding.json"} <= set(files)
    for name in files:
        copy = tmp_path / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(bundle, copy)
        data = bytearray((copy / name).read_bytes())
        data[len(data) // 2] ^= 0x01                  # one bit of one byte, in the middle of the file
        if name == "bundle.json.sha256":                # a hex digit that stays a hex digit ('0' <-> '1'...)
            data[len(data) // 2] ^= 0x01
            data[0] = ord("0") if data[0] != ord("0") else ord("1")
        (copy / name).write_bytes(bytes(data))
        result = check_bundle(copy)
        assert result.status == "fail", name
        assert name in result.failing, (name, result.failing)
    r = cli("verify", str(copy))                      # the last one through the CLI: exit 1, the file named
    assert r.code == 1 and r.out.startswith("FAILED") and name in r.out


def test_a_missing_and_an_added_file_are_named(cli, bundle):
    (bundle / "run" / "manifest.json").unlink()
    (bundle / "artifacts" / "adapter" / "extra.bin").write_bytes(b"x")
    doc = cli("verify", str(bundle), "--json")
    assert doc.code == 1
    d = doc.json()
    assert d["missing"] == ["run/manifest.json"] and d["extra"] == ["artifacts/adapter/extra.bin"]
    assert d["damaged"] == []


def test_not_a_bundle_is_one_line_exit_2(cli, tmp_path):
    (tmp_path / "folder").mkdir()
    for target in (tmp_path / "folder", tmp_path / "nowhere"):
        r = cli("verify", str(target))
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "campaign export" in r.err


def test_an_adapter_bound_to_another_base_fails(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    bundle = _export(cli, tmp_path, config_base="org/other")        # every hash right, the binding contradicted
    d = cli("verify", str(bundle), "--json")
    assert d.code == 1
    [binding] = [c for c in d.json()["checks"] if c["id"] == "bundle.binding"]
    assert binding["status"] == "fail" and "org/other" in binding["seen"] and "org/tiny" in binding["seen"]
    assert all(c["status"] == "pass" for c in d.json()["checks"] if c["id"] != "bundle.binding")


def test_an_adapter_changed_after_its_binding_was_written_fails(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    adapter = _adapter(tmp_path / "kept")
    (adapter / "adapter_model.safetensors").write_bytes(bytes(64))  # weights saved again; binding not
    base = start_run("lora", with_torch=False)
    record_artifact(base.id, adapter, "adapter")
    end_run(base.id, "completed")
    decide_run(base.id, "accepted", "only run")
    assert cli("export", "bundle").code == 0
    [binding] = [c for c in check_bundle(tmp_path / "bundle").checks if c.id == "bundle.binding"]
    assert binding.status == "fail" and "adapter_model.safetensors" in binding.seen


def test_an_adapter_without_binding_is_not_verified(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    bundle = _export(cli, tmp_path, binding=False)
    r = cli("verify", str(bundle))
    assert r.code == 1 and r.out.startswith("NOT VERIFIED")
    assert check_bundle(bundle).status == "not verified"


def test_a_bundle_without_its_own_hash_is_not_verified(bundle):
    (bundle / "bundle.json.sha256").unlink()          # a bundle exported before campaign verify existed
    result = check_bundle(bundle)
    assert result.status == "not verified"
    assert next(c for c in result.checks if c.id == "bundle.manifest").status == "skipped"


def test_a_manifest_that_lists_a_file_outside_the_bundle_fails(bundle, tmp_path):
    # bundle.json rewritten with its own hash made to match: the list itself names a file outside the folder
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("x")
    doc = json.loads((bundle / "bundle.json").read_text())
    doc["sha256"]["../elsewhere.txt"] = _sha(outside)
    (bundle / "bundle.json").write_text(json.dumps(doc))
    (bundle / "bundle.json.sha256").write_text(f"{_sha(bundle / 'bundle.json')}  bundle.json\n")
    result = check_bundle(bundle)
    assert result.status == "fail" and "outside the bundle" in result.checks[0].seen


def test_an_artifact_replaced_and_rehashed_in_bundle_json_still_fails_against_the_run(bundle):
    # the predictions swapped and bundle.json (and its own hash) rewritten to match: the run's manifest still
    # holds the hash the run recorded, so the swap is found
    swapped = bundle / "artifacts" / "candidate.jsonl"
    swapped.write_text(swapped.read_text().replace('"pred": "refund"', '"pred": "billing"', 1))
    doc = json.loads((bundle / "bundle.json").read_text())
    doc["sha256"]["artifacts/candidate.jsonl"] = _sha(swapped)
    (bundle / "bundle.json").write_text(json.dumps(doc))
    (bundle / "bundle.json.sha256").write_text(f"{_sha(bundle / 'bundle.json')}  bundle.json\n")
    checks = {c.id: c for c in check_bundle(bundle).checks}
    assert checks["bundle.files"].status == checks["bundle.manifest"].status == "pass"
    recorded = checks["bundle.artifacts_recorded.run"]
    assert recorded.status == "fail" and "artifacts/candidate.jsonl" in recorded.seen
    assert checks["bundle.artifacts_recorded.baseline"].status == "pass"
