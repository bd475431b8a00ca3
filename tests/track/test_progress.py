"""The long track calls report what they are doing through a `progress` callable (the CLI's spinner)."""
from __future__ import annotations

import json

import pytest

from campaign.track.compare import check_run
from campaign.track.records import load_records, save_record
from campaign.track.run import end_run, record_artifact, start_run


def test_check_run_reports_its_phases(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("b.jsonl", "c.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps({"id": i, "gold": "ab"[i % 2], "pred": "ab"[i % 2]}) + "\n"
                                             for i in range(4)))
    base = start_run("base", with_torch=False)
    record_artifact(base.id, tmp_path / "b.jsonl", "predictions")
    cand = start_run("cand", baseline=base.id, guards=["accuracy>=-0.05"], with_torch=False)
    record_artifact(cand.id, tmp_path / "c.jsonl", "predictions")
    phases: list[str] = []
    assert check_run(cand.id, progress=phases.append).passed
    assert phases == ["predictions of the baseline", "predictions of the run", "regress"]


def test_load_records_counts_what_it_read(tmp_path, monkeypatch):
    from campaign.track import records

    monkeypatch.setattr(records, "PROGRESS_EVERY", 3)
    for i in range(7):
        save_record({"schema": "campaign.test/1", "i": i}, command="test", root=tmp_path)
    phases: list[str] = []
    assert len(load_records(tmp_path, progress=phases.append)) == 7
    assert phases == ["records 3/7", "records 6/7", "records 7/7"]


def test_export_mlflow_counts_the_runs(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from campaign.track.export import export_mlflow

    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        end_run(start_run(name, with_torch=False).id, "completed")
    phases: list[str] = []
    assert export_mlflow(tmp_path / "mlruns", progress=phases.append) == 2
    assert phases == ["runs 1/2", "runs 2/2"]


def test_the_long_track_commands_hand_the_spinner_to_the_library_unless_json(cli, tmp_path, monkeypatch):
    from contextlib import contextmanager

    import campaign.cli.render as render

    shown: list[tuple[str, str]] = []

    @contextmanager
    def reporter(label, *, enabled=True):
        yield (lambda phase: shown.append((label, phase))) if enabled else (lambda _phase: None)

    monkeypatch.setattr(render, "progress_reporter", reporter)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("{}\n")
    assert cli("run", "start", "x", "--data", "d.jsonl").code == 0
    assert [p for label, p in shown if label == "run start"] == ["code", "data 1/1", "environment", "manifest"]
    shown.clear()
    assert cli("run", "start", "y", "--json").code == 0
    assert shown == []
