"""campaign report shows the numbers behind questions 4 and 5 (issue 49, item 1): after `--record ablate analyze`,
`--record bench` and `--record ablate plan`, each record's section holds every top-level figure of its JSON: the
effects with their p-values and aliases (and the half-normal plot of an unreplicated design), the recommendation,
the bench's configurations with their costs, the plan's design; the plan lands under question 4. The records are
written by the real commands on files this test writes."""
from __future__ import annotations

import csv
import html
import itertools
import json
import re
from pathlib import Path

import pytest

PRICES = {
    "source": "test prices", "date": "2026-01-01", "example": False, "currency": "USD",
    "cards": [{"card": "H100-SXM-80GB", "hourly": "2.50",
               "packages": [{"name": "3-day", "days": 3, "cards": 1, "price": "100.00"}]},
              {"card": "L40S-48GB", "hourly": "1.10", "packages": []}],
}
BENCH = {
    "name": "t at f1 72", "metric": "f1", "target": 72, "repeats": 4, "margin": "0%",
    "protocol": {"data": "heldout.jsonl", "evaluation": "macro F1", "timing": "wall clock"},
    "configurations": [
        {"name": "h100-lora", "card": "H100-SXM-80GB", "method": "lora", "precision": "bf16",
         "runs": [{"seed": 0, "hours_to_target": 5.0}, {"seed": 1, "hours_to_target": 6.0}]},
        {"name": "l40s-qlora", "card": "L40S-48GB", "method": "qlora", "precision": "nf4",
         "runs": [{"seed": 0, "hours_to_target": 9.5}, {"seed": 1, "hours_to_target": 11.0}]},
    ],
}
WOBBLE = [0.12, -0.31, 0.05, 0.22, -0.17, -0.04, 0.28, -0.09, 0.15, -0.26, 0.01, 0.19, -0.13, 0.07, -0.21, 0.11]
NAMES = [("lr", ["1e-4", "3e-4"]), ("rank", ["8", "32"]), ("targets", ["attention", "all-linear"])]


def _text(block: str) -> str:
    block = re.sub(r"<svg.*?</svg>", "", block, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", block)))


def _signed(v: float) -> str:
    return f"{v:+,.4g}"


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}" if v >= 1e-4 else f"{v:.1e}"


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None else f"[{_signed(low)}, {_signed(high)}]"


def _usd(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _write_results(path, seeds: int, effects: dict[int, float]) -> None:
    """A 2^3 factorial: f1 = 70 + the planted half-effects (by factor index) + a deterministic seed wobble."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([n for n, _ in NAMES] + ["seed", "f1"])
        for i, x in enumerate(itertools.product((-1, 1), repeat=3)):
            for s in range(seeds):
                y = 70 + sum(e * x[k] for k, e in effects.items()) + WOBBLE[(i * 2 + s) % len(WOBBLE)]
                w.writerow([NAMES[k][1][(x[k] + 1) // 2] for k in range(3)] + [s, round(y, 4)])


def write_inputs(tmp_path: Path) -> tuple[str, str]:
    """factors.yaml, prices.yaml, bench.yaml and single.csv (one replicate) in tmp_path; (factors, prices) paths."""
    factors = {"name": "lora ablation", "metric": "f1", "hours_per_run": 2, "card": "H100-SXM-80GB",
               "seeds": 2, "budget_usd": "100", "margin": "0%",
               "factors": [{"name": n, "levels": levels, "control": levels[0]} for n, levels in NAMES]}
    (tmp_path / "factors.yaml").write_text(json.dumps(factors), encoding="utf-8")
    (tmp_path / "prices.yaml").write_text(json.dumps(PRICES), encoding="utf-8")
    (tmp_path / "bench.yaml").write_text(json.dumps(BENCH), encoding="utf-8")
    _write_results(tmp_path / "single.csv", 1, {0: 1.5, 1: -0.8})
    return str(tmp_path / "factors.yaml"), str(tmp_path / "prices.yaml")


@pytest.fixture
def campaign(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("scipy")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    f, p = write_inputs(tmp_path)
    _write_results(tmp_path / "replicated.csv", 2, {0: 0.9, 2: 0.4})
    for argv in (["ablate", "plan", f, "--prices", p], ["ablate", "analyze", str(tmp_path / "replicated.csv"),
                                                        "--factors", f],
                 ["ablate", "analyze", str(tmp_path / "single.csv"), "--factors", f],
                 ["bench", str(tmp_path / "bench.yaml"), "--prices", p]):
        r = cli("--record", *argv)
        assert r.code in (0, 1), (argv, r.err)
    out = tmp_path / "report.html"
    assert cli("report", "--out", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    records = {}
    for path in sorted((tmp_path / "root" / "records").glob("*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        records[path.name] = doc["result"]
    articles = {name: next(a for a in re.findall(r"<article class='record'>.*?</article>", page, flags=re.S)
                           if name in a) for name in records}
    return {"page": page, "records": records, "articles": articles}


def _of(campaign, schema: str) -> list[tuple[dict, str]]:
    return [(d, campaign["articles"][name]) for name, d in campaign["records"].items() if d["schema"] == schema]


def test_an_ablation_shows_its_effects_p_values_aliases_and_what_to_take(campaign):
    found = _of(campaign, "campaign.ablate/1")
    assert len(found) == 2
    for d, article in found:
        text = _text(article)
        assert len(d["effects"]) == 7                        # a 2^3 full factorial: A, B, C, AB, AC, BC, ABC
        for e in d["effects"]:
            row = re.search(rf"\b{e['effect']} {re.escape(e['names'])} (\S+) (\S+) (\S+) (\[.*?\]) (\S+)", text)
            assert row, e["effect"]
            assert row.group(2) == _signed(e["estimate"]) and row.group(5) == _p(e["p_value"])
            assert row.group(1) == (" = ".join(e["aliases"]) or "-")
        for c in d["cells"]:
            assert f"{c['label']} " in text and f"{c['mean']:,.4g}" in text
        for c in d["comparisons"]:
            assert (f"{c['label']} {c['test']} {c['n']} {_signed(c['improvement'])} {_ci(c['ci_low'], c['ci_high'])} "
                    f"{_p(c['p_value'])} {_p(c['p_holm'])} {c['verdict']}") in text
        rec = d["recommendation"]
        setting = ", ".join(f"{k}={v}" for k, v in rec["setting"].items())
        assert f"take: {setting} (cell {rec['label']}): predicted gain {_signed(rec['predicted_gain'])}" in text
        assert f"[{_signed(rec['ci95'][0])}, {_signed(rec['ci95'][1])}]" in text and rec["basis"] in text
        assert d["design"] in text and f"{d['runs']} runs" in text and d["correction"] in text
        assert all(n in text for n in d["notes"]) and d["notes"]
    replicated = next(d for d, _ in found if d["error_method"] == "pooled")
    single, single_article = next((d, a) for d, a in found if d["error_method"] == "lenth")
    # planted: lr +0.9 and targets +0.4 (half-effects): take both, leave rank at its control
    assert replicated["recommendation"]["setting"] == {"lr": "3e-4", "rank": "8", "targets": "all-linear"}
    assert f"pooled variance {replicated['error_variance']:,.6g} on {replicated['error_df']} df" in \
        _text(campaign["articles"][next(n for n, d in campaign["records"].items() if d is replicated)])
    # the unreplicated one: Lenth's PSE and its half-normal plot, one point per effect
    assert f"Lenth's PSE {single['pse']:,.4g}" in _text(single_article)
    assert len(single["half_normal"]) == 7 and "<svg" in single_article and "half-normal plot" in single_article


def test_a_bench_shows_every_configuration_with_its_costs(campaign):
    [(d, article)] = _of(campaign, "campaign.bench/1")
    text = _text(article)
    # by hand: on demand, each run billed per started hour, 4 runs of the slowest, margin 0%:
    # h100 4 x 6 h x $2.50 = $60.00; l40s 4 x 11 h x $1.10 = $48.40; the 3-day package (72 h, $100) holds 4 x 6 h
    costs = {c["name"]: {x["name"]: x["cost_cents"] for x in c["rentals"] if x["fits"]} for c in d["configurations"]}
    assert costs["h100-lora"]["on-demand"] == 6_000 and costs["l40s-qlora"]["on-demand"] == 4_840
    assert costs["h100-lora"]["3-day"] == 10_000
    assert f"cheapest: {d['cheapest']} on {d['cheapest_rental']} at {_usd(d['cheapest_cents'])}" in text
    assert d["cheapest"] == "l40s-qlora" and d["why"] in text
    for c in d["configurations"]:
        assert (f"{c['name']} {c['card']} {c['cards']} {c['method']} {c['precision']} {len(c['runs'])} {c['status']}"
                f" {c['hours_mean']:,.2f} {c['hours_worst']:,.2f} {c['cheapest']} {_usd(c['cheapest_cents'])}"
                in text)
        row = re.search(rf"{re.escape(c['name'])} ((?:\S+ ?)+?)(?= l40s-qlora | protocol|$)",
                        text.split("cost under each rental")[1])
        assert row, c["name"]
        for cents in costs[c["name"]].values():
            assert _usd(cents) in row.group(1)
    for k, v in d["protocol"].items():
        assert f"{k}: {v}" in text
    assert f"target {d['metric']} >= {d['target']}, {d['repeats']} run(s)" in text and "recovery margin 0%" in text
    assert all(n in text for n in d["notes"])


def test_an_ablation_plan_shows_its_design_under_question_4(campaign):
    [(d, article)] = _of(campaign, "campaign.ablate_plan/1")
    page = campaign["page"]
    q4 = page[page.index("<section id='q4'>"):page.index("<section id='q5'>")]
    assert article in q4 and "Other records" not in page
    text = _text(article)
    x = d["design"]
    # by hand: 8 cells x 2 seeds x 2 h = 32 card-hours; at $2.50 an hour, no margin: $80.00
    assert (x["kind"], x["runs"], x["card_hours"], x["cost_cents"]) == ("full", 16, 32.0, 8_000)
    assert f"{x['kind']} {len(x['cells'])} {x['seeds_per_cell']} {x['runs']} {x['card_hours']:,.1f} " \
           f"{_usd(x['cost_cents'])}" in text
    assert "verdict: plan" in text and d["fits"]
    for i, label in enumerate(d["run_first"], 1):
        cell = next(c for c in x["cells"] if c["label"] == label)
        assert f"{i} {label} {' '.join(cell['levels'][n] for n, _ in NAMES)} {cell['seeds']}" in text
    for a in d["alternatives"]:
        assert f"{a['kind']} {len(a['cells'])} {a['seeds_per_cell']} {a['runs']} {a['card_hours']:,.1f} " \
               f"{_usd(a['cost_cents'])}" in text
    for c in d["checks"]:
        assert f"{c['id']} {c['status']}" in text
    assert "two-factor interactions clear: " + ", ".join(x["clear_interactions"]) in text
    assert f"{d['hours_per_run']} h per run" in text and f"budget {_usd(d['budget_cents'])}" in text
    assert all(n in text for n in d["notes"]) and all(c in text for c in d["cut"])
