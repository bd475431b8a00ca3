"""The record folder: `campaign --record` saves exactly what --json prints, where the report will look."""
from __future__ import annotations

import json
from pathlib import Path

from campaign.track.records import load_records

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_record_saves_what_json_prints_and_a_broken_file_is_listed_not_fatal(cli, tmp_path, monkeypatch):
    root = tmp_path / "records-root"
    monkeypatch.setenv("CAMPAIGN_ROOT", str(root))
    printed = cli("errors", str(EXAMPLES / "data" / "candidate.jsonl"), "--json")
    assert printed.code == 0 and not (root / "records").exists()          # nothing saved unless asked
    saved = cli("--record", "errors", str(EXAMPLES / "data" / "candidate.jsonl"), "--json")
    monkeypatch.setenv("CAMPAIGN_RECORD", "1")
    assert cli("runs", "list").code == 0
    records = load_records()
    assert [r.command for r in records] == ["errors", "runs list"]
    expected = json.loads(saved.out)
    assert records[0].result == expected and records[0].schema == expected["schema"]
    assert records[1].schema == "campaign.runs/1"
    broken = root / "records" / "errors" / "20990101T000000000000Z-deadbeef.json"
    broken.write_text("{ not json")
    after = load_records()
    assert len(after) == 3 and after[-1].error and after[-1].result is None
