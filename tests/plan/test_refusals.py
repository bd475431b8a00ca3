"""Plan, factors, cost and price files refused in one line: unknown keys with the nearest valid one (naming the
file and the phase by its name), YAML alias bombs, designs too large to plan, absurd hours and responses, unknown
cards; and an underpowered ablation plan never passes."""
from __future__ import annotations

import re
import time

import pytest

from campaign.errors import InputError
from campaign.plan.ablate import plan_ablation
from campaign.plan.budget import budget, read_plan
from campaign.plan.prices import example_prices_path, load_prices

PLAN = {"name": "t", "card": "H100-SXM-80GB", "phases": [
    {"name": "base", "kind": "baseline", "hours": 1}, {"name": "exp", "hours": 2, "after": ["base"]},
    {"name": "checks", "kind": "checks", "hours": 1, "afer": ["exp"]}]}
FACTORS = {"hours_per_run": 1, "seeds_sd": 0.6, "factors": [{"name": n, "levels": [0, 1]} for n in "wxyz"]}
COST = {"metric": "f1", "target": 1, "configurations": [{"name": "c", "card": "h100", "runs": [
    {"seed": 0, "hours_to_target": 1}]}]}
PRICES = {"cards": [{"card": "H100-SXM-80GB", "hourly": "2.00", "pakages": []}]}


@pytest.mark.parametrize("kind, doc, want", [
    ("plan", PLAN, "plan.yaml: phase 'checks': unknown key 'afer': did you mean 'after'?"),
    ("factors", FACTORS, "f.yaml: unknown key 'seeds_sd': did you mean 'seed_sd'?"),
    ("cost", {**COST, "targte": 2}, "c.yaml: unknown key 'targte': did you mean 'target'?"),
    ("price", PRICES, "p.yaml: card 'H100-SXM-80GB': unknown key 'pakages': did you mean 'packages'?"),
])
def test_an_unknown_key_is_refused_with_the_nearest_valid_one(write_yaml, cli, kind, doc, want):
    name = {"plan": "plan.yaml", "factors": "f.yaml", "cost": "c.yaml", "price": "p.yaml"}[kind]
    path = write_yaml(doc, name)
    args = {"plan": ["budget", str(path)], "factors": ["ablate", "plan", str(path)],
            "cost": ["bench", str(path)], "price": ["budget", str(write_yaml(PLAN | {"phases": PLAN["phases"][:2]},
                                                                               "ok.yaml")), "--prices", str(path)]}
    r = cli(*args[kind])
    assert r.code == 2 and r.err.count("\n") == 1 and want in r.err, r.err


def test_an_optimizer_in_a_phase_estimate_reaches_the_memory_plan(write_yaml, monkeypatch):
    import sys

    budget_module = sys.modules["campaign.plan.budget"]     # the package exports the function under that name
    seen = {}

    def fake(model, workload, **kw):
        seen["optimizer"] = workload.optimizer
        raise InputError("stop")

    monkeypatch.setattr(budget_module, "estimate_runtime", fake)
    plan = {"name": "t", "phases": [{"name": "x", "estimate": {"model": "llama-3.1-8b", "tokens": 1000,
                                                               "optimizer": "adamw-8bit"}}]}
    with pytest.raises(InputError, match="stop"):
        budget(write_yaml(plan), cards=["H100-SXM-80GB"])
    assert seen == {"optimizer": "adamw-8bit"}
    bad = {"name": "t", "phases": [{"name": "x", "estimate": {"model": "m", "tokens": 1, "optimiser": "sgd"}}]}
    with pytest.raises(InputError, match="phase 'x': estimate: unknown key 'optimiser': did you mean 'optimizer'"):
        read_plan(write_yaml(bad, "bad.yaml"))


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize("command", [["budget"], ["bench"], ["ablate", "plan"], ["budget", "ok", "--prices"]])
def test_a_yaml_alias_bomb_is_refused_in_one_line(write_yaml, cli, command):
    # nine levels of ten aliases: 10^9 values from 10 lines
    bomb = write_yaml(BOMB, "bomb.yaml")
    args = command[:-2] + [str(write_yaml({"name": "t", "card": "h100", "phases": [{"name": "a", "hours": 1}]}))] + \
        ["--prices", str(bomb)] if command[-1] == "--prices" else command + [str(bomb)]
    start = time.perf_counter()
    r = cli(*args)
    assert r.code == 2 and r.err.count("\n") == 1 and "a YAML alias (*" in r.err, r.err
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("command", [["budget"], ["bench"], ["ablate", "plan"]])
def test_a_yaml_alias_that_refers_to_itself_is_refused_not_followed(tmp_path, cli, command):
    # `phases: &x [*x]`: a cycle, which the old alias counter followed until the time limit
    plan = tmp_path / "plan.yaml"
    plan.write_text("phases: &x [*x]\n", encoding="utf-8")
    start = time.perf_counter()
    r = cli(*command, str(plan))
    assert r.code == 2 and r.err.count("\n") == 1 and "a YAML alias (*x)" in r.err and str(plan) in r.err, r.err
    assert time.perf_counter() - start < 10


def test_a_full_factorial_of_twenty_factors_is_refused_with_the_fix(write_yaml, cli):
    factors = {"hours_per_run": 1, "seeds": 1, "factors": [{"name": f"f{i}", "levels": [0, 1]} for i in range(20)]}
    r = cli("ablate", "plan", str(write_yaml({**factors, "design": "full"}, "f.yaml")))
    assert r.code == 2 and r.err.count("\n") == 1 and "has 1,048,576 cells, more than 4,096" in r.err \
        and "use design: fractional" in r.err, r.err
    # auto leaves the full factorial out and says so, and screens the 20 factors in a 24-run Plackett-Burman
    rep = plan_ablation(write_yaml(factors, "g.yaml"))
    assert rep.design.kind == "pb" and len(rep.design.cells) == 24
    assert any("1,048,576 cells) is above the 4,096 cells planned" in n for n in rep.notes)


def test_absurd_hours_are_one_line(write_yaml, cli):
    # YAML reads 1.0e+300 as a float (JSON's 1e+300 is a string to YAML 1.1)
    r = cli("ablate", "plan", str(write_yaml("hours_per_run: 1.0e+300\nfactors: [{name: a, levels: [0, 1]}]\n",
                                             "f.yaml")))
    assert r.code == 2 and r.err.count("\n") == 1 and "'hours_per_run' is 1e+300" in r.err, r.err
    r = cli("budget", str(write_yaml("name: t\ncard: h100\nphases: [{name: a, hours: 1.0e+300}]\n")))
    assert r.code == 2 and r.err.count("\n") == 1 and "phase 'a': field 'hours' is 1e+300" in r.err, r.err


def test_an_underpowered_plan_fails_with_its_power():
    # the example factors under 30 GPU-hours: one factor at a time with 2 seeds; a paired t on 2 seeds detects
    # 1.0 at SD 0.6 with power 0.147 (campaign seeds' power; 6 seeds give 80%)
    rep = plan_ablation("examples/plan/factors.yaml", budget_gpu_hours=30)
    seeds = next(c for c in rep.checks if c.id == "ablate.seeds")
    assert rep.design.kind == "ofat" and rep.design.seeds_per_cell == 2
    assert seeds.status == "fail" and "power 0.147 at n = 2" in seeds.seen and rep.status == "fail"
    # the 2^(4-1) at 2 seeds: 16 runs, each effect from all of them (n = 8 pairs): power 0.98, a pass
    ok = plan_ablation("examples/plan/factors.yaml", budget_gpu_hours=50)
    assert next(c for c in ok.checks if c.id == "ablate.seeds").status == "pass"


def test_messages_name_real_files_and_fields(write_yaml, cli):
    r = cli("budget", str(write_yaml({"name": "t", "card": "h1000", "phases": [{"name": "a", "hours": 1}]})))
    assert r.code == 2 and "plan.yaml: field 'card': unknown card 'h1000'" in r.err, r.err
    r = cli("bench", str(write_yaml({**COST, "configurations": [{**COST["configurations"][0], "card": "h1000"}]},
                                    "c.yaml")))
    assert r.code == 2 and "configuration 'c': field 'card': unknown card 'h1000'" in r.err, r.err
    with pytest.raises(InputError) as e:
        load_prices(write_yaml({"cards": []}, "p.yaml"))
    shown = re.search(r"see (\S+) for the format", str(e.value)).group(1)
    assert shown == str(example_prices_path()) and example_prices_path().is_file()
    r = cli("budget", str(write_yaml("a: [", "broken.yaml")))
    assert r.code == 2 and "plan file file" not in r.err and "(the plan file): not valid YAML" in r.err, r.err
    r = cli("budget", "missing.yaml")
    assert r.code == 2 and "plan file file" not in r.err and "the plan file was not found" in r.err, r.err


def test_work_too_large_to_schedule_is_one_line(write_yaml, cli):
    # 100,000 runs of 4,096 cards each: 409,600,000 card slots to assign, refused before scheduling
    r = cli("budget", str(write_yaml({"name": "t", "card": "h100", "phases": [
        {"name": "a", "hours": 1, "runs": 100_000, "cards": 4096}]})))
    assert r.code == 2 and r.err.count("\n") == 1 and "409,600,000 run-cards" in r.err, r.err
    cost = {"metric": "f1", "target": 1, "repeats": 100_000, "configurations": [
        {"name": "c", "card": "h100", "cards": 64, "runs": [{"seed": 0, "hours_to_target": 1}]}]}
    r = cli("bench", str(write_yaml(cost, "c.yaml")))
    assert r.code == 2 and r.err.count("\n") == 1 and "more than 1,000,000 run-cards" in r.err, r.err
    r = cli("bench", str(write_yaml("metric: f1\ntarget: 1\nconfigurations: [{name: c, card: h100, runs: "
                                    "[{seed: 0, hours_to_target: 1.0e+300}]}]\n", "d.yaml")))
    assert r.code == 2 and r.err.count("\n") == 1 and "'hours_to_target' is 1e+300" in r.err, r.err


def test_refusals_from_deeper_name_the_file(write_yaml, cli):
    plan = {"name": "t", "phases": [{"name": "a", "estimate": {"model": "llama-3.1-8b", "tokens": 10,
                                                               "optimizer": "adam"}}]}
    r = cli("budget", str(write_yaml(plan)))
    assert r.code == 2 and "plan.yaml: phase 'a': estimate: optimizer 'adam' is unknown" in r.err, r.err
    three = {"hours_per_run": 1, "design": "pb", "factors": [{"name": "a", "levels": [0, 1, 2]}]}
    r = cli("ablate", "plan", str(write_yaml(three, "f.yaml")))
    assert r.code == 2 and "f.yaml: a Plackett-Burman design needs two levels per factor" in r.err, r.err
