"""An ended run's artifacts are what it reported: changed contents are refused, or recorded as an amendment with
its reason that the manifest and the hand-over bundle show."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from campaign.track.run import decide_run, end_run, record_artifact, start_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    preds = tmp_path / "preds.jsonl"
    preds.write_text((EXAMPLES / "data" / "candidate.jsonl").read_text())
    run = start_run("r", with_torch=False)
    record_artifact(run.id, preds, "predictions")
    end_run(run.id, "completed")
    decide_run(run.id, "accepted", "better")
    return run, preds


def test_a_changed_artifact_of_an_ended_run_is_refused(cli, accepted):
    run, preds = accepted
    recorded = hashlib.sha256(preds.read_bytes()).hexdigest()
    preds.write_text(preds.read_text().replace('"refund"', '"other"', 1))  # one prediction edited after acceptance
    r = cli("run", "artifact", run.id, str(preds), "--kind", "predictions")
    assert r.code == 2 and "changed since run" in r.err and "--amend" in r.err
    shown = cli("runs", "show", run.id, "--json").json()
    assert [a["sha256"] for a in shown["artifacts"]] == [recorded] and shown["amendments"] == []


def test_an_amendment_is_kept_with_both_hashes_and_shown_in_the_bundle(cli, accepted):
    pytest.importorskip("matplotlib")
    run, preds = accepted
    recorded = hashlib.sha256(preds.read_bytes()).hexdigest()
    preds.write_text(preds.read_text().replace('"refund"', '"other"', 1))
    now = hashlib.sha256(preds.read_bytes()).hexdigest()
    r = cli("run", "artifact", run.id, str(preds), "--kind", "predictions", "--amend", "a label fixed by hand")
    assert r.code == 0, r.err
    shown = cli("runs", "show", run.id, "--json").json()
    [amended] = shown["amendments"]
    assert (amended["was_sha256"], amended["sha256"], amended["reason"]) == (recorded, now, "a label fixed by hand")
    assert [a["sha256"] for a in shown["artifacts"]] == [now]
    assert cli("export", "handover").code == 0
    readme = Path("handover/README.md").read_text()
    assert "Amended after the run ended" in readme and "a label fixed by hand" in readme
    assert json.loads(Path("handover/bundle.json").read_text())["run"] == run.id


def test_the_same_contents_recorded_again_change_nothing(cli, accepted):
    run, preds = accepted
    before = cli("runs", "show", run.id, "--json").json()
    assert cli("run", "artifact", run.id, str(preds), "--kind", "predictions").code == 0
    after = cli("runs", "show", run.id, "--json").json()
    assert after["artifacts"] == before["artifacts"] and after["amendments"] == []
