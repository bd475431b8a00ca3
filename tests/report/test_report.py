"""campaign report: one self-contained HTML file from real records, opened in a real headless browser."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUESTIONS = ("1. My model has never run. Where do I start?", "2. The score goes up, but can I trust it?",
             "3. I am about to train. What must I check first?", "4. Fine-tune or compress: which variant?",
             "5. My budget is limited. What do I run first?")


@pytest.fixture
def campaign_records(cli, tmp_path, monkeypatch):
    """Records made by the real commands (--record), one run, and one record broken by hand."""
    pytest.importorskip("matplotlib")
    root = tmp_path / "records-root"
    monkeypatch.setenv("CAMPAIGN_ROOT", str(root))
    data = EXAMPLES / "data"
    for argv in (["memory", "gpt2", "--card", "rtx-4090"], ["errors", str(data / "candidate.jsonl")],
                 ["seeds", str(data / "seeds.csv"), "--min-effect", "0.5"],
                 ["regress", str(data / "baseline.jsonl"), str(data / "candidate.jsonl")],
                 ["budget", str(EXAMPLES / "plan" / "plan.yaml")]):
        assert cli("--record", *argv).code in (0, 1), argv
    started = cli("run", "start", "baseline", "--param", "lr=0.001")
    assert cli("run", "end", started.out.strip(), "--status", "failed", "--reason", "CUDA out of memory").code == 0
    broken = root / "records" / "seeds" / "20990101T000000000000Z-0badf00d.json"
    broken.write_text('{"record": "campaign.record/1", "result": ')
    return root


def test_the_report_holds_every_question_the_records_and_what_is_missing(cli, campaign_records, tmp_path):
    out = tmp_path / "report.html"
    r = cli("report", "--out", str(out), "--json")
    assert r.code == 0
    summary = r.json()
    assert summary["records"] == 6 and summary["unreadable"] == 1 and summary["runs"] == 1
    page = out.read_text(encoding="utf-8")
    for q in QUESTIONS:
        assert f">{q}</h2>" in page.replace("&#x27;", "'")
    # six pictures: memory per phase, the card fit, the confusion matrix, the seed differences, the budget's
    # schedule, the runs over time
    assert page.count("<svg") == summary["figures"] == 6
    budget = json.loads(sorted((campaign_records / "records" / "budget").glob("*.json"))[0].read_text())["result"]
    assert f"recommended: {budget['recommended']} on {budget['recommended_card']}" in page
    # the accuracy shown is the one counted here from the predictions file
    rows = [json.loads(line) for line in (EXAMPLES / "data" / "candidate.jsonl").read_text().splitlines()]
    accuracy = sum(x["gold"] == x["pred"] for x in rows) / len(rows)
    assert f"<td>{accuracy:.4f}</td>" in page
    assert "CUDA out of memory" in page and "0badf00d" in page                # the failed run, the broken record
    assert "no measurement on a card" in page and "no step check" in page    # what is missing is said


def test_the_report_fetches_nothing(cli, campaign_records, tmp_path):
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "<link" not in page and "<img" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", page)
    # the only URLs are XML namespace names, which a browser never fetches
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg",
                                                             "http://www.w3.org/1999/xlink"}


def chromium() -> str:
    """The headless browser the report is opened in: skipped without one, except on CI where it must exist."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return browser


def test_headless_chromium_renders_the_report(cli, campaign_records, tmp_path):
    browser = chromium()
    plt = pytest.importorskip("matplotlib.pyplot")
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    shot = tmp_path / "shot.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1200,2400",
                           f"--screenshot={shot}", out.resolve().as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert shot.is_file(), done.stderr[-2000:]
    pixels = plt.imread(str(shot))
    assert pixels.shape[:2] == (2400, 1200)
    ink = (pixels[..., :3].mean(axis=2) < 0.9).mean()      # share of pixels that are not (near) white
    assert 0.02 < ink < 0.6, ink
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          out.resolve().as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<section") == 6 and dom.count("<svg") == 6              # 5 questions + unreadable records


def test_a_record_of_an_unexpected_shape_is_listed_not_fatal(cli, campaign_records, tmp_path):
    path = sorted((campaign_records / "records" / "budget").glob("*.json"))[0]
    doc = json.loads(path.read_text())
    doc["result"]["packages"] = "not a list"
    doc["result"]["schedule"] = {"runs": [{"phase": "a", "start_hours": "soon", "end_hours": 1, "cards": [0]}]}
    path.write_text(json.dumps(doc))
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    assert "could not be drawn" in out.read_text(encoding="utf-8")


def test_one_workload_estimated_traced_and_measured_is_drawn_side_by_side(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    from campaign.report.build import _compared
    from campaign.track.records import load_records
    from tests.conftest import tiny_llama

    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(tiny_llama()))
    for argv in (["memory", str(model)], ["trace", str(model)], ["measure", str(model), "--weights", "random"]):
        assert cli("--record", *argv, "--batch", "2", "--seq-len", "64").code in (0, 1), argv
    assert cli("--record", "memory", str(model), "--batch", "4", "--seq-len", "64").code in (0, 1)  # another workload
    by_kind: dict = {}
    for r in load_records():
        by_kind.setdefault(r.schema.split("/")[0], []).append(r)
    groups = _compared(by_kind)
    assert len(groups) == 1                      # batch 4 was estimated only: nothing to set it beside
    assert groups[0][0][:2] == ("estimated", "traced") and groups[0][0][2].startswith("measured on ")


def _memory_records(n: int) -> list[str]:
    """n memory estimates of distinct models saved as `campaign --record memory` saves them; their names."""
    from dataclasses import replace

    from campaign.memory import make_workload
    from campaign.memory.plan import plan_memory
    from campaign.track.records import save_record

    plan = plan_memory("gpt2", make_workload(batch=2, seq_len=256), card="rtx-4090")
    names = [f"checkpoints/step-{i:03d}" for i in range(n)]
    for name in names:
        save_record(replace(plan, estimate=replace(plan.estimate, model=name)), command="memory")
    return names


def test_many_records_of_one_kind_become_one_table_and_one_figure(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from campaign.report.build import ONE_EACH

    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    names = _memory_records(ONE_EACH + 1)
    assert cli("--record", "errors", str(EXAMPLES / "data" / "candidate.jsonl")).code in (0, 1)
    out = tmp_path / "report.html"
    r = cli("report", "--out", str(out), "--json")
    assert r.code == 0 and r.json()["records"] == ONE_EACH + 2
    page = out.read_text(encoding="utf-8")
    # one histogram for the memory estimates (not two figures each), the errors record's confusion matrix
    assert page.count("<svg") == r.json()["figures"] == 2
    assert f"{ONE_EACH + 1} memory records" in page and "memory estimates: what each requires" in page
    table = page.split(f"{ONE_EACH + 1} memory records")[1].split("</table>")[0]
    assert all(f"<td>{name}</td>" in table for name in names)                 # every record, one row each
    assert table.count("<td>RTX-4090-24GB: fits</td>") == ONE_EACH + 1
    assert "<figcaption>confusion of candidate.jsonl (counted)" in page     # a single record: drawn as before


def test_a_few_records_of_one_kind_are_each_drawn(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    _memory_records(2)
    out = tmp_path / "report.html"
    r = cli("report", "--out", str(out), "--json")
    assert r.json()["figures"] == 4                          # memory per phase and card fit, for each
    assert "records in one table" not in out.read_text(encoding="utf-8")


def test_build_report_calls_progress_with_counts(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from campaign.report.build import build_report
    from campaign.track import records

    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(records, "PROGRESS_EVERY", 2)
    _memory_records(5)
    phases: list[str] = []
    build_report(tmp_path / "report.html", progress=phases.append)
    assert phases[:3] == ["records 2/5", "records 4/5", "records 5/5"]
    assert "memory 1/5" in phases and "memory 5/5" in phases and phases[-1] == "writing"


def test_the_report_command_shows_progress_unless_json(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from contextlib import contextmanager

    import campaign.cli.render as render

    shown: list[tuple[str, str]] = []

    @contextmanager
    def reporter(label, *, enabled=True):
        yield (lambda phase: shown.append((label, phase))) if enabled else (lambda _phase: None)

    monkeypatch.setattr(render, "progress_reporter", reporter)
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    _memory_records(1)
    assert cli("report", "--out", str(tmp_path / "a.html")).code == 0
    assert ("report", "records 1/1") in shown and ("report", "writing") in shown
    shown.clear()
    assert cli("report", "--out", str(tmp_path / "b.html"), "--json").code == 0
    assert shown == []


def test_progress_is_drawn_on_a_terminal_only(tmp_path):
    pytest.importorskip("matplotlib")
    script = shutil.which("script")
    if script is None:
        pytest.skip("util-linux script (a pseudo-terminal) is not installed")
    import sys

    env = {**os.environ, "CAMPAIGN_ROOT": str(tmp_path / "root"), "TERM": "xterm"}
    command = f"{sys.executable} -m campaign report --out {tmp_path / 'r.html'}"
    on_tty = subprocess.run([script, "-qc", command, "/dev/null"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert "report: writing" in on_tty.stdout or "report: records" in on_tty.stdout, on_tty.stdout[-2000:]
    piped = subprocess.run([sys.executable, "-m", "campaign", "report", "--out", str(tmp_path / "p.html")],
                           capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""


def test_many_records_of_an_unexpected_shape_are_listed_not_fatal(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from campaign.report import build

    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(build, "ONE_EACH", 1)
    _memory_records(2)
    path = sorted((tmp_path / "root" / "records" / "memory").glob("*.json"))[0]
    doc = json.loads(path.read_text())
    doc["result"]["fits"] = 7                                 # not a list
    doc["result"]["checks"] = "not a list either"
    path.write_text(json.dumps(doc))
    result = build.build_report(tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "could not be drawn (TypeError" in page and result.records == 2
    assert all(p.name in page for p in (tmp_path / "root" / "records" / "memory").glob("*.json"))
