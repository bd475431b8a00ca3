"""One set of runs costs the same in `campaign budget`, `campaign bench` and `campaign ablate plan` when the card is
rented under several offers: all three price every offer of the card through the one billing function
(billing.offer_rentals), name the cheapest with its offer, and take `CARD@OFFER` to keep to one. And a minimum
billed written in minutes, exact. Every figure worked out by hand in the comments."""
from __future__ import annotations

import pytest

from campaign.errors import InputError
from campaign.plan.ablate import plan_ablation
from campaign.plan.bench import bench
from campaign.plan.budget import budget
from campaign.plan.prices import load_prices

# the L40S under two offers. The first, per started hour at $1.00/h, no package; the second per second at $0.90/h,
# with a 3-day package of one card for $50.00. A card's first entry used to be all bench and ablate plan priced.
TWO = {"cards": [
    {"card": "L40S-48GB", "offer": "hourly", "hourly": "1.00", "billing": "per-hour"},
    {"card": "L40S-48GB", "offer": "spot", "hourly": "0.90", "billing": "per-second",
     "packages": [{"name": "3-day", "days": 3, "cards": 1, "price": "50.00"}]}]}

# 12 runs x 5.5 h on one card, 15% recovery margin: each run 6.325 h, one after another 75.9 h.
#   hourly offer, on demand: 76 started hours x $1.00 = $76.00.
#   spot offer, on demand: 75.9 h = 273,240 s x 90 / 3,600 cents = 6,831 cents = $68.31.
#   spot 3-day alone: 75.9 h > the 72 h window, does not hold the runs.
#   spot 3-day topped up on demand: the 12th run goes from 69.575 h to 75.9 h, so 3.9 h past the window
#   = 14,040 s x 90 / 3,600 = 351 cents; $50.00 + $3.51 = $53.51. Two 3-day in a row or side by side: $100.
# The cheapest: the spot offer's 3-day + on-demand at $53.51 (the first offer alone: $76.00 on demand).
CHEAPEST = ("spot", "3-day + on-demand", 5_351)
# Kept to the hourly offer (CARD@OFFER): on demand, $76.00.
HOURLY = ("hourly", "on-demand", 7_600)


def _budget(write_yaml, prices, card):
    plan = {"name": "t", "card": "L40S-48GB", "compare": [card], "margin": "15%",
            "phases": [{"name": "runs", "kind": "experiment", "runs": 12, "hours": 5.5}]}
    rep = budget(write_yaml(plan), prices=prices)
    return rep.recommended_offer, rep.recommended, rep.total_cents


def _bench(write_yaml, prices, card):
    cost = {"name": "t", "metric": "f1", "target": 70, "repeats": 12, "margin": "15%",
            "configurations": [{"name": "l40s", "card": card, "runs": [{"seed": 0, "hours_to_target": 5.5}]}]}
    rep = bench(write_yaml(cost, "cost.yaml"), prices=prices)
    [c] = rep.configurations
    assert (rep.cheapest_offer, rep.cheapest_rental, rep.cheapest_cents) == (c.offer, c.cheapest, c.cheapest_cents)
    return c.offer, c.cheapest, c.cheapest_cents


def _ablate(write_yaml, prices, card):
    # a full factorial of two two-level factors, 3 seeds a cell: 4 cells x 3 = 12 runs of 5.5 h
    factors = {"name": "t", "metric": "f1", "design": "full", "seeds": 3, "hours_per_run": 5.5, "margin": "15%",
               "card": card, "factors": [{"name": "a", "levels": [1, 2]}, {"name": "b", "levels": [1, 2]}]}
    rep = plan_ablation(write_yaml(factors, "factors.yaml"), prices=str(prices))
    assert rep.design.runs == 12
    return rep.design.offer, rep.design.rental, rep.design.cost_cents


@pytest.mark.parametrize("card, expected", [("L40S-48GB", CHEAPEST), ("L40S-48GB@hourly", HOURLY),
                                            ("l40s@spot", CHEAPEST)])
def test_the_same_runs_cost_the_same_in_budget_bench_and_ablate_plan(write_yaml, card, expected):
    prices = write_yaml(TWO, "two.yaml")
    assert _budget(write_yaml, prices, card) == expected
    assert _bench(write_yaml, prices, card) == expected
    assert _ablate(write_yaml, prices, card) == expected


def test_bench_and_ablate_plan_show_the_offer_taken(cli, write_yaml):
    prices = str(write_yaml(TWO, "two.yaml"))
    cost = {"name": "t", "metric": "f1", "target": 70, "repeats": 12, "margin": "15%",
            "configurations": [{"name": "l40s", "card": "L40S-48GB", "runs": [{"seed": 0, "hours_to_target": 5.5}]}]}
    r = cli("bench", str(write_yaml(cost, "cost.yaml")), "--prices", prices)
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "1 x L40S-48GB@spot: $53.51 3-day + on-demand" in text
    # each offer's rentals in their own column: the hourly offer's on demand $76.00, the spot offer's $68.31
    assert "@hourly on-demand" in text and "@spot on-demand" in text and "$76.00" in text and "$68.31" in text
    factors = {"name": "t", "metric": "f1", "design": "full", "seeds": 3, "hours_per_run": 5.5, "margin": "15%",
               "card": "L40S-48GB", "budget_usd": "60",
               "factors": [{"name": "a", "levels": [1, 2]}, {"name": "b", "levels": [1, 2]}]}
    r = cli("ablate", "plan", str(write_yaml(factors, "factors.yaml")), "--prices", prices)
    text = " ".join(r.out.split())
    # $53.51 fits the $60 budget: a plan, not OVER BUDGET (the first offer alone, $76.00, would not)
    assert r.code == 0 and "PLAN" in text and "$53.51 on L40S-48GB@spot 3-day + on-demand" in text, r.out + r.err


def test_an_offer_the_card_lacks_is_one_line_in_bench_and_ablate_plan(cli, write_yaml):
    prices = str(write_yaml(TWO, "two.yaml"))
    cost = {"name": "t", "metric": "f1", "target": 70,
            "configurations": [{"name": "l40s", "card": "L40S-48GB@spto", "runs": [{"seed": 0, "hours_to_target": 1}]}]}
    r = cli("bench", str(write_yaml(cost, "cost.yaml")), "--prices", prices)
    assert r.code == 2 and "no offer 'spto'" in r.err and "L40S-48GB@spot" in r.err, r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
    factors = {"name": "t", "metric": "f1", "hours_per_run": 1, "card": "L40S-48GB@", "factors": [
        {"name": "a", "levels": [1, 2]}]}
    r = cli("ablate", "plan", str(write_yaml(factors, "factors.yaml")), "--prices", prices)
    assert r.code == 2 and "name the offer after '@'" in r.err and len(r.err.strip().splitlines()) == 1, r.err


def _one_run(write_yaml, seconds):
    return write_yaml({"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
                       "phases": [{"name": "train", "kind": "experiment", "hours": seconds / 3600}]}, "one.yaml")


def _per_second(write_yaml, **terms):
    # $36.00/h per second: 1 cent a second
    return write_yaml({"cards": [{"card": "H100-SXM-80GB", "hourly": "36.00", "billing": "per-second", **terms}]},
                      "min.yaml")


@pytest.mark.parametrize("terms", [{"minimum_minutes": 1}, {"minimum_hours": 1 / 60}])
@pytest.mark.parametrize("seconds, billed", [(30, 60), (61, 61), (60, 60)])
def test_a_one_minute_minimum_written_in_minutes_is_exact(write_yaml, terms, seconds, billed):
    # at 1 cent a second with a 1-minute minimum: a 30 s run pays the minute (60 cents); 61 s pays 61 s, per second
    rep = budget(_one_run(write_yaml, seconds), prices=_per_second(write_yaml, **terms), packages=["on-demand"])
    assert rep.packages[0].cost_cents == billed
    assert any("at least 1 min per card" in n for n in rep.notes)


def test_minimum_hours_of_0_0167_is_61_seconds_and_minutes_are_not(write_yaml):
    # 0.0167 h is 60.12 s, so a 30 s run pays 61 started seconds: the trap minimum_minutes avoids
    hours = budget(_one_run(write_yaml, 30), prices=_per_second(write_yaml, minimum_hours=0.0167),
                   packages=["on-demand"])
    assert hours.packages[0].cost_cents == 61
    # 1.5 minutes on a per-minute card bills 2 started minutes: 2 x 60 cents; 2.5 minutes at least, per second: 150 s
    per_minute = write_yaml({"cards": [{"card": "H100-SXM-80GB", "hourly": "36.00", "billing": "per-minute",
                                        "minimum_minutes": 1.5}]}, "m.yaml")
    assert budget(_one_run(write_yaml, 10), prices=per_minute, packages=["on-demand"]).packages[0].cost_cents == 120
    assert budget(_one_run(write_yaml, 10), prices=_per_second(write_yaml, minimum_minutes=2.5),
                  packages=["on-demand"]).packages[0].cost_cents == 150


def test_both_minimums_given_is_one_line(cli, write_yaml):
    bad = _per_second(write_yaml, minimum_minutes=1, minimum_hours=1)
    with pytest.raises(InputError, match="both 'minimum_hours' and 'minimum_minutes' are given; keep one"):
        load_prices(bad)
    r = cli("budget", str(_one_run(write_yaml, 30)), "--prices", str(bad))
    assert r.code == 2 and "minimum_minutes" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = cli("budget", str(_one_run(write_yaml, 30)), "--prices", str(_per_second(write_yaml, minimum_minutes=-1)))
    assert r.code == 2 and "minimum_minutes" in r.err and "Traceback" not in r.err, r.err
