"""campaign bench: time to a fixed quality from given hours or curves, priced under each rental by hand, the
cheapest way to the target, configurations that never reach it, and the raw table with its protocol."""
from __future__ import annotations

import csv
import re

import pytest

from campaign.errors import InputError
from campaign.plan.bench import bench, crossing


def test_crossing_interpolates_between_evaluations():
    # 70 at 1 h, 74 at 3 h: 72 is half way, at 2 h; a point exactly at the target is its own time
    assert crossing([(1, 70), (3, 74)], 72, True) == 2.0
    assert crossing([(0.5, 71), (1, 72), (2, 73)], 72, True) == 1.0
    assert crossing([(1, 70), (2, 71)], 72, True) is None
    # a loss going down to 0.5: 0.8 at 1 h, 0.4 at 2 h -> 1.75 h
    assert crossing([(1, 0.8), (2, 0.4)], 0.5, False) == pytest.approx(1.75)


COST = {
    "name": "t", "metric": "f1", "target": 72, "repeats": 4, "margin": "0%",
    "protocol": {"data": "heldout.jsonl", "evaluation": "macro F1", "timing": "wall clock"},
    "configurations": [
        {"name": "fast", "card": "h100", "method": "lora", "precision": "bf16",
         "runs": [{"seed": 0, "hours_to_target": 5.0}, {"seed": 1, "hours_to_target": 6.0},
                  {"seed": 2, "hours_to_target": 7.0}]},
        {"name": "curve", "card": "h100", "cards": 4, "method": "full", "precision": "bf16",
         "runs": [{"seed": 0, "curve": [[1, 70], [3, 74]]}, {"seed": 1, "curve": [[1, 71], [2, 72.5]]}]},
        {"name": "never", "card": "h100", "runs": [{"seed": 0, "hours_to_target": None, "final": 71.0},
                                                    {"seed": 1, "hours_to_target": 3.0}]},
    ],
}


def test_costs_at_equal_quality_by_hand(write_yaml, prices, tmp_path):
    rep = bench(write_yaml(COST, "cost.yaml"), prices=prices, out=tmp_path / "out")
    fast, curve, never = rep.configurations
    # fast: mean (5 + 6 + 7) / 3 = 6 h, slowest 7 h; 4 runs of 7 h on one card
    assert (fast.status, fast.hours_mean, fast.hours_worst) == ("reaches", 6.0, 7.0)
    cost = {r.name: (r.fits, r.cost_cents) for r in fast.rentals}
    # on demand: 4 runs x 7 started hours x $2.50 = $70.00; 3-day (1 card): 4 x 7 = 28 h <= 72 h, $100.00;
    # 3-day-4x: the 4 runs side by side in 7 h, $500.00
    assert cost["on-demand"] == (True, 7_000) and cost["3-day"] == (True, 10_000) and cost["3-day-4x"] == (True,
                                                                                                            50_000)
    assert (fast.cheapest, fast.cheapest_cents) == ("on-demand", 7_000)
    # curve: 2.0 h and 1 + (72 - 71) / (72.5 - 71) = 1.667 h; slowest 2 h on 4 cards: a 1-card package cannot hold
    # it; on demand 4 runs x 2 h x 4 cards x $2.50 = $80.00; 3-day-4x holds one run at a time: 4 x 2 = 8 h, $500
    assert curve.hours_worst == 2.0 and curve.hours_mean == pytest.approx((2.0 + 1 + 1 / 1.5) / 2)
    cc = {r.name: (r.fits, r.cost_cents) for r in curve.rentals}
    assert cc["3-day"][0] is False and cc["on-demand"] == (True, 8_000) and cc["3-day-4x"] == (True, 50_000)
    assert never.status == "reaches in 1 of 2 runs" and never.cheapest is None and never.rentals == ()
    assert rep.cheapest == "fast" and rep.cheapest_rental == "on-demand" and rep.cheapest_cents == 7_000
    assert "next curve at $80.00" in rep.why and rep.passed
    rows = list(csv.DictReader((tmp_path / "out" / "raw.csv").open(encoding="utf-8")))
    assert len(rows) == 7 and rows[-2]["reached"] == "false" and rows[-2]["hours_to_target"] == ""
    assert rows[3]["hours_to_target"] == "2" and rows[3]["timed"] == "curve" and rows[3]["cards"] == "4"
    text = (tmp_path / "out" / "protocol.md").read_text(encoding="utf-8")
    assert "Target: f1 at least 72" in text and "Runs measured: fast 3, curve 2, never 2; costed for 4 run(s)" \
        in text and "wall clock" in text and "heldout.jsonl" in text


def test_cli_exit_1_when_nothing_reaches_and_bad_input_exit_2(cli, write_yaml, prices):
    never = {**COST, "configurations": [COST["configurations"][2]]}
    r = cli("bench", str(write_yaml(never, "never.yaml")), "--prices", str(prices))
    assert r.code == 1 and "NONE REACHES" in r.out
    r = cli("bench", str(write_yaml(COST, "cost.yaml")), "--prices", str(prices), "--json")
    assert r.code == 0 and r.json()["schema"] == "campaign.bench/1" and r.json()["cheapest"] == "fast"
    bad = {**COST, "configurations": [{"name": "x", "card": "h100", "runs": [{"hours_to_target": -2}]}]}
    r = cli("bench", str(write_yaml(bad, "bad.yaml")), "--prices", str(prices))
    assert r.code == 2 and "field 'hours_to_target' is -2" in r.err and "bad.yaml" in r.err, r.err
    bad = {**COST, "configurations": [{"name": "x", "card": "h100", "runs": [{"curve": [[2, 70], [1, 72]]}]}]}
    r = cli("bench", str(write_yaml(bad, "bad2.yaml")), "--prices", str(prices))
    assert r.code == 2 and "hours must start at 0 or more and increase" in r.err, r.err
    bad = {**COST, "configurations": [{"name": "x", "card": "a100-80gb", "runs": [{"hours_to_target": 1}]}]}
    r = cli("bench", str(write_yaml(bad, "bad3.yaml")), "--prices", str(prices))
    assert r.code == 2 and "no prices for card 'A100-SXM-80GB'" in r.err, r.err


def test_the_raw_table_and_protocol_are_written_all_or_nothing(write_yaml, prices, tmp_path, monkeypatch):
    import sys

    bench_module = sys.modules["campaign.plan.bench"]     # the package exports the function under the same name

    out = tmp_path / "out"
    bench(write_yaml(COST, "cost.yaml"), prices=prices, out=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    changed = {**COST, "target": 71.5}

    def fail(report):
        raise RuntimeError("killed while writing the protocol")

    monkeypatch.setattr(bench_module, "protocol_text", fail)
    with pytest.raises(RuntimeError):
        bench(write_yaml(changed, "cost2.yaml"), prices=prices, out=out)
    # the raw table of the second run was staged, never swapped in: the folder holds the first set, whole
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(before) == ["protocol.md", "raw.csv"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_time_to_target_from_recorded_runs(write_yaml, prices, monkeypatch, tmp_path):
    import campaign.track.run as run_module
    import campaign.track.store as store_module
    from campaign.track.run import end_run, start_run
    from campaign.track.store import Store

    def at(stamp):
        monkeypatch.setattr(run_module, "now", lambda: stamp)
        monkeypatch.setattr(store_module, "now", lambda: stamp)

    # seed 0: f1 70 at 1 h, 74 at 3 h -> 72 at 2 h; seed 1 (stopped): 71 at 1 h, never 72
    at("2026-01-01T00:00:00.000Z")
    a = start_run("a", seeds=[0], tags=["h100"], code_dir=tmp_path, with_torch=False)
    b = start_run("b", seeds=[1], tags=["h100"], code_dir=tmp_path, with_torch=False)
    at("2026-01-01T01:00:00.000Z")
    Store().log(a.id, [{"step": 10, "f1": 70}])
    Store().log(b.id, [{"step": 10, "f1": 71}])
    at("2026-01-01T03:00:00.000Z")
    Store().log(a.id, [{"step": 30, "f1": 74}])
    end_run(a.id, "completed")
    end_run(b.id, "stopped", "preempted")
    cost = {"metric": "f1", "target": 72, "configurations": [{"name": "x", "card": "h100", "runs_tag": "h100"}]}
    rep = bench(write_yaml(cost, "c.yaml"), prices=prices)
    (c,) = rep.configurations
    assert [(r.seed, r.hours_to_target, r.final) for r in c.runs] == [("0", 2.0, 74.0), ("1", None, 71.0)]
    assert c.status == "reaches in 1 of 2 runs" and c.runs[0].how == f"run {a.id}" and not rep.passed


def test_a_curve_that_falls_back_below_the_target_is_flagged(write_yaml, prices):
    cost = {"metric": "f1", "target": 72, "margin": "0%", "configurations": [
        {"name": "x", "card": "h100", "runs": [{"seed": 0, "curve": [[1, 70], [2, 72.5], [3, 71.0]]},
                                               {"seed": 1, "curve": [[1, 71], [2, 73]]}]}]}
    rep = bench(write_yaml(cost, "c.yaml"), prices=prices)
    holds = next(c for c in rep.checks if c.id == "bench.holds")
    # seed 0 crosses 72 at 1 + 2/2.5 = 1.8 h, then ends at 71.0: flagged, not silently priced as a success
    assert rep.configurations[0].runs[0].falls_back and not rep.configurations[0].runs[1].falls_back
    assert holds.status == "warn" and "x seed 0" in holds.seen and rep.status == "warn"


@pytest.mark.parametrize("runs, fragment", [
    ([{"seed": 0, "hours_to_target": 2, "final": 70}], "hours_to_target is 2 but final 70 does not reach"),
    ([{"seed": 0, "hours_to_target": None, "final": 73}], "hours_to_target is null (never reached) but final 73"),
    ([{"seed": 0, "hours_to_target": 2}, {"seed": 0, "hours_to_target": 3}], "seed '0' is given twice"),
    ([{"seed": 0, "hours": 2}], "unknown key 'hours': the keys here are seed, hours_to_target"),
])
def test_inconsistent_runs_are_refused(write_yaml, prices, runs, fragment):
    cost = {"metric": "f1", "target": 72, "configurations": [{"name": "x", "card": "h100", "runs": runs}]}
    with pytest.raises(InputError, match=re.escape(fragment)):
        bench(write_yaml(cost, "c.yaml"), prices=prices)


def test_the_protocol_says_the_same_data_only_when_the_hashes_say_so(write_yaml, prices, tmp_path):
    def protocol(doc, name):
        rep = bench(write_yaml(doc, f"{name}.yaml"), prices=prices, out=tmp_path / name)
        text = (tmp_path / name / "protocol.md").read_text(encoding="utf-8")
        return rep, next(line for line in text.splitlines() if line.startswith("- Data:"))

    rep, line = protocol(COST, "none")
    assert "the same data for every configuration" not in line and "no data hash given" in line
    assert next(c for c in rep.checks if c.id == "bench.same_data").status == "warn"
    same = {**COST, "protocol": {**COST["protocol"], "data_sha256": "ab12"}}
    rep, line = protocol(same, "same")
    assert line == "- Data: heldout.jsonl (sha256 ab12: the same data for every configuration)."
    differ = {**same, "configurations": [{**COST["configurations"][0], "data_sha256": "cd34"},
                                         *COST["configurations"][1:]]}
    rep, line = protocol(differ, "differ")
    assert "hashes differ: ab12, cd34" in line
    assert next(c for c in rep.checks if c.id == "bench.same_data").status == "fail"


def test_quality_margin_tests_the_final_quality_of_the_cheapest_configuration(write_yaml, prices):
    """Every run crossing the target prices a configuration; with quality_margin the runs' final quality must also be
    shown past target - margin beyond seed noise: a one-sided t-test, checked against statsmodels."""
    from statsmodels.stats.weightstats import DescrStatsW

    steady = [72.4, 72.9, 72.6]       # every run ends well past 72 - 0.5
    shaky = [72.1, 74.0, 70.2]        # crosses 72 in each run's curve timing, but its finals spread around 71.5
    cost = {"name": "q", "metric": "f1", "target": 72, "margin": "0%", "quality_margin": 0.5, "configurations": [
        {"name": "steady", "card": "h100", "runs": [{"seed": i, "hours_to_target": 6.0, "final": f}
                                                    for i, f in enumerate(steady)]},
        {"name": "shaky", "card": "h100", "runs": [{"seed": i, "hours_to_target": 5.0 + i / 10, "final": f}
                                                   for i, f in enumerate(shaky)]}]}
    cost["configurations"][1]["runs"][2] = {"seed": 2, "curve": [[1, 70], [5.2, 72], [6, 70.2]]}
    rep = bench(write_yaml(cost, "cost.yaml"), prices=prices)
    by = {c.name: c for c in rep.configurations}
    want_steady = DescrStatsW(steady).ttest_mean(71.5, alternative="larger")[1]
    want_shaky = DescrStatsW(shaky).ttest_mean(71.5, alternative="larger")[1]
    assert by["steady"].quality_p == pytest.approx(want_steady, rel=1e-9) and want_steady < 0.05
    assert by["shaky"].quality_p == pytest.approx(want_shaky, rel=1e-9) and want_shaky > 0.05
    # shaky is the cheaper (slowest run 5.2 h against 6 h): it is recommended, and its quality is flagged
    assert rep.cheapest == "shaky"
    quality = {c.id: c for c in rep.checks}["bench.quality"]
    assert quality.status == "warn" and "not shown" in quality.seen
    # without the key no such check: the verdict is what it was
    del cost["quality_margin"]
    assert "bench.quality" not in {c.id for c in bench(write_yaml(cost, "cost2.yaml"), prices=prices).checks}
    # lower is better (a loss): the bound is target + margin
    loss = {"name": "l", "metric": "loss", "target": 1.0, "higher_is_better": False, "quality_margin": 0.1,
            "margin": "0%", "configurations": [{"name": "a", "card": "h100", "runs": [
                {"seed": i, "hours_to_target": 2.0, "final": f} for i, f in enumerate([0.95, 0.97, 0.99])]}]}
    a = bench(write_yaml(loss, "loss.yaml"), prices=prices).configurations[0]
    assert a.quality_p == pytest.approx(DescrStatsW([0.95, 0.97, 0.99]).ttest_mean(1.1, alternative="smaller")[1])


@pytest.mark.parametrize("value", ["1", -0.5, True, float("inf")])
def test_a_bad_quality_margin_is_refused(write_yaml, prices, value):
    cost = {**COST, "quality_margin": value}
    with pytest.raises(InputError, match="quality_margin"):
        bench(write_yaml(cost, "cost.yaml"), prices=prices)
