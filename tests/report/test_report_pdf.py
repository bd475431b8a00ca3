"""The report printed to PDF by headless Chromium, as a reader prints it: no page holds a heading alone (a heading
cut from what it heads), and every page has text. A small campaign of every question's records (memory, errors,
regress, budget, an ablation's plan and analyses, a bench, a failed run) is recorded by the real commands.

Needs chromium and poppler's pdftotext (Debian: apt-get install chromium poppler-utils); skipped without either."""
from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.report.test_report_plan_records import write_inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tools() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    pdftotext = shutil.which("pdftotext")
    if browser is None or pdftotext is None:
        pytest.skip("needs chromium and pdftotext (apt-get install chromium poppler-utils)")
    return browser, pdftotext


def _pages(pdftotext: str, pdf: Path) -> list[str]:
    """The text of each page (pdftotext separates pages with a form feed)."""
    done = subprocess.run([pdftotext, "-layout", str(pdf), "-"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pages = done.stdout.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_no_printed_page_holds_a_heading_alone(cli, tmp_path, monkeypatch):
    browser, pdftotext = _tools()
    pytest.importorskip("matplotlib")
    pytest.importorskip("scipy")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    data = EXAMPLES / "data"
    f, p = write_inputs(tmp_path)
    for argv in (["memory", "gpt2", "--card", "rtx-4090"], ["errors", str(data / "candidate.jsonl")],
                 ["regress", str(data / "baseline.jsonl"), str(data / "candidate.jsonl")],
                 ["budget", str(EXAMPLES / "plan" / "plan.yaml")], ["ablate", "plan", f, "--prices", p],
                 ["ablate", "analyze", str(tmp_path / "single.csv"), "--factors", f],
                 ["bench", str(tmp_path / "bench.yaml"), "--prices", p]):
        assert cli("--record", *argv).code in (0, 1), argv
    started = cli("run", "start", "lora-r64", "--param", "lora.r=64")
    assert cli("run", "end", started.out.strip(), "--status", "failed", "--reason", "CUDA out of memory").code == 0
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    pdf = tmp_path / "report.pdf"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--host-resolver-rules=MAP * ~NOTFOUND", "--no-pdf-header-footer",
                           f"--print-to-pdf={pdf}", out.resolve().as_uri()], capture_output=True, text=True,
                          timeout=180)
    assert pdf.is_file() and pdf.stat().st_size > 0, done.stderr[-2000:]
    page = out.read_text(encoding="utf-8")
    headings = sorted({_words(html.unescape(re.sub(r"<[^>]+>", " ", h)))
                       for h in re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", page, flags=re.S)}, key=len, reverse=True)
    assert len(headings) >= 6
    pages = _pages(pdftotext, pdf)
    assert len(pages) >= 5                                   # a section per question begins a page
    alone = []
    for number, text in enumerate(pages, 1):
        rest = _words(text)
        assert rest, f"page {number} is empty"
        for h in headings:
            rest = rest.replace(h, " ")
        if not _words(rest):
            alone.append((number, _words(text)[:120]))
    assert alone == [], alone
