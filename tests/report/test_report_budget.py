"""The report's budget section shows what a payer acts on: where each package ends and the set-up billed before
the first step (in the table and on the Gantt), the rentals of phases with a card of their own, the campaign's
total, and the money stop rules. The record is made by the real command (--record); every figure by hand."""
from __future__ import annotations

import html
import json
import re

import pytest


def _text(page: str) -> str:
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_the_budget_section_shows_package_ends_set_up_stop_rules_and_the_total(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    prices = {"cards": [
        {"card": "H100-SXM-80GB", "hourly": "2.50", "setup_hours": 0.5,
         "packages": [{"name": "3-day", "days": 3, "price": "100"}]},
        {"card": "L40S-48GB", "hourly": "1.00"}]}
    plan = {"name": "long run", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
            "budget_usd": "150",
            "phases": [{"name": "train", "kind": "experiment", "hours": 80},
                       {"name": "eval", "kind": "evaluation", "hours": 1.5, "card": "L40S-48GB",
                        "after": ["train"]}]}
    (tmp_path / "p.yaml").write_text(json.dumps(prices))
    (tmp_path / "plan.yaml").write_text(json.dumps(plan))
    r = cli("--record", "budget", str(tmp_path / "plan.yaml"), "--prices", str(tmp_path / "p.yaml"))
    assert r.code == 0, r.err
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    text = _text(page)
    # the H100: 0.5 h set-up + 80 h = 80.5 h. On demand 81 started hours x $2.50 = $202.50; the 3-day ($100, 72 h)
    # topped up on demand: the run past 72 h - 0.5 h of set-up = 71.5 h of the schedule, 8.5 h -> 9 started hours
    # x $2.50 = $22.50: $122.50, the cheapest. The L40S evaluation: 1.5 h -> 2 started hours x $1.00 = $2.00, from
    # 80.5 h to 82 h. Total $122.50 + $2.00 = $124.50
    assert re.search(r"3-day \+ on-demand H100-SXM-80GB 1 80\.5 80\.5 72\.0 0\.5 \$122\.50 yes", text), text
    assert re.search(r"L40S-48GB eval on-demand 80\.5 82\.0 \$2\.00", text)
    assert "total: $124.50 for the campaign, its last run ending at 82.0 h" in text
    # the row of the table summing up many budget records (more than ONE_EACH): both rentals, the campaign's hours
    # and its total
    from campaign.report.build import _budget_row

    d = cli("budget", str(tmp_path / "plan.yaml"), "--prices", str(tmp_path / "p.yaml"), "--json").json()
    assert _budget_row(None, d)[:5] == ["long run", "3-day + on-demand + L40S-48GB on-demand", "H100-SXM-80GB",
                                        "82.0", "$124.50"]
    # stop rules: a training run past 80 h is $200.00 of H100 time at $2.50/h; the evaluation past 1.5 h, $1.50 of
    # L40S time. The cap of $150: $100 prepaid in the 3-day and $2.00 on the L40S leave $48.00, 19.2 H100
    # card-hours by the hour
    assert re.search(r"train 80\.00 \$200\.00 eval 1\.50 \$1\.50", text)
    assert "stop the campaign when the spend reaches $150.00 (budget_usd)" in text
    assert "$100.00 prepaid in 3-day; $2.00 on L40S-48GB on-demand; at most 19.2 H100-SXM-80GB card-hours" in text
    # the Gantt: where the 3-day ends, on demand after, and the set-up hatched before the first run
    assert "3-day ends at 72 h; on demand after" in page and "set-up: 0.5 h billed before the first step" in page
