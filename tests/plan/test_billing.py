"""One billing model (plan/billing.py) for budget, bench and ablate plan: exact cents rounded once, the margin,
started units (hour, minute, second), on-demand cards billed only while they run, and the same work costing the
same in all three commands. Every figure is worked out by hand in the comments."""
from __future__ import annotations

from decimal import Decimal

import pytest

from campaign.plan.ablate import plan_ablation
from campaign.plan.bench import bench
from campaign.plan.billing import on_demand_cents, round_cents, started_units
from campaign.plan.budget import budget


def _prices(write_yaml, hourly, billing=None, packages=()):
    doc = {"cards": [{"card": "H100-SXM-80GB", "hourly": hourly, "packages": list(packages)}]}
    if billing:
        doc["billing"] = billing
    return write_yaml(doc, "p.yaml")


def _one(hours, margin="0%", **extra):
    return {"name": "t", "card": "H100-SXM-80GB", "margin": margin,
            "phases": [{"name": "a", "kind": "baseline", "hours": hours}], **extra}


def test_a_fraction_of_a_cent_is_kept_to_the_total_and_rounded_once(write_yaml):
    # 82 h x $0.347 = $28.454 = 2,845.4 cents -> 2,845 (half up); rounding the hourly price first gave 35 x 82 = 2,870
    rep = budget(write_yaml(_one(82)), prices=_prices(write_yaml, "0.347"))
    od = next(o for o in rep.packages if o.name == "on-demand")
    assert (od.cost_cents, Decimal(od.cost_exact_cents)) == (2_845, Decimal("2845.4"))
    assert any("rounded once at the total, half up" in n for n in rep.notes)
    assert round_cents(Decimal("0.5")) == 1 and round_cents(Decimal("2845.4999")) == 2_845


@pytest.mark.parametrize("billing, cents", [(None, 600), ("per-hour", 600), ("per-minute", 305),
                                            ("per-second", 303)])
def test_billing_per_started_hour_minute_or_second(write_yaml, billing, cents):
    # one run of 1.01 h at $3.00/h: 2 started hours = 600 cents; 60.6 -> 61 started minutes x 300/60 = 305;
    # 3,636 seconds x 300/3,600 = 303
    rep = budget(write_yaml(_one(1.01)), prices=_prices(write_yaml, "3.00", billing), packages=["on-demand"])
    (od,) = rep.packages
    assert od.cost_cents == cents and od.billing == f"per started {(billing or 'per-hour')[4:]}"
    assert started_units(1.01, "minute") == 61 and on_demand_cents(Decimal(300), [1.01], "second") == Decimal(303)


def test_package_on_demand_filters_the_packages_out(write_yaml):
    prices = _prices(write_yaml, "2.50", packages=[{"name": "3-day", "days": 3, "price": "100"}])
    rep = budget(write_yaml(_one(10)), prices=prices, packages=["on-demand"])
    assert [o.name for o in rep.packages] == ["on-demand"] and rep.recommended == "on-demand"


def test_on_demand_cards_are_billed_only_while_their_phases_run(write_yaml):
    # checks 2 h (1 card) -> 2 runs x 10 h side by side -> export 1 h; on_demand_cards 2:
    # card 1 runs 0 -> 13 h (13 started hours), card 2 only the second run, 2 -> 12 h (10): 23 x $2.50 = $57.50,
    # where billing both cards for the whole 13 h gave 26 x $2.50 = $65.00
    plan = {"name": "t", "card": "H100-SXM-80GB", "margin": "0%", "on_demand_cards": 2,
            "phases": [{"name": "checks", "kind": "checks", "hours": 2},
                       {"name": "x", "runs": 2, "hours": 10, "after": ["checks"]},
                       {"name": "export", "kind": "export", "hours": 1, "after": ["x"]}]}
    rep = budget(write_yaml(plan), prices=_prices(write_yaml, "2.50"), packages=["on-demand"])
    (od,) = rep.packages
    assert (od.cards, od.hours, od.cost_cents) == (2, 13, 5_750)


def test_the_same_work_costs_the_same_in_budget_bench_and_ablate(write_yaml):
    # 12 runs x 5.5 h on an L40S (example prices: $0.99/h, 3-day $62, 7-day $136), the default margin 15%:
    # each run 6.325 h, one after another 75.9 h. On demand: 76 started hours x $0.99 = $75.24 in all three. The
    # 3-day (72 h) alone does not hold them; topped up on demand, the last run's 3.9 h past 72 h are 4 started
    # hours: $62 + $3.96 = $65.96, the cheapest, in budget and bench alike; the 7-day holds them for $136.00
    plan = {"name": "t", "card": "L40S-48GB", "phases": [{"name": "x", "runs": 12, "hours": 5.5}]}
    b = budget(write_yaml(plan, "plan.yaml"), cards=["L40S-48GB"])
    by = {o.name: o for o in b.packages}
    assert (by["on-demand"].cost_cents, by["on-demand"].margin, by["on-demand"].hours) == (7_524, 0.15,
                                                                                          pytest.approx(75.9))
    assert not by["3-day"].fits and by["7-day"].fits and by["7-day"].cost_cents == 13_600
    assert (b.recommended, by["3-day + on-demand"].cost_cents) == ("3-day + on-demand", 6_596)
    cost = {"metric": "f1", "target": 1, "repeats": 12,
            "configurations": [{"name": "l40s", "card": "L40S-48GB", "runs": [{"seed": 0, "hours_to_target": 5.5}]}]}
    c = bench(write_yaml(cost, "cost.yaml"))
    rentals = {r.name: (r.fits, r.cost_cents) for r in c.configurations[0].rentals}
    assert (c.cheapest_rental, c.cheapest_cents, c.margin) == ("3-day + on-demand", 6_596, 0.15)
    assert rentals["on-demand"] == (True, 7_524) and rentals["3-day"] == (False, 6_200)
    assert rentals["7-day"] == (True, 13_600)
    # ablate plan bills on demand: one factor at two levels, 6 seeds each, one factor at a time: 12 runs of 5.5 h
    factors = {"hours_per_run": 5.5, "seeds": 6, "design": "ofat", "card": "L40S-48GB",
               "factors": [{"name": "lr", "levels": [1, 2]}]}
    a = plan_ablation(write_yaml(factors, "f.yaml"))
    assert (a.design.runs, a.design.card_hours, a.design.cost_cents) == (12, 66, 7_524) and a.margin == 0.15
    assert any("margin 15%" in n for n in a.notes)


def _pk(write_yaml, hourly="2.50"):
    return write_yaml({"cards": [{"card": "H100-SXM-80GB", "hourly": hourly, "packages": [
        {"name": "3-day", "days": 3, "price": "100"}, {"name": "7-day", "days": 7, "price": "300"}]}]}, "p.yaml")


def test_packages_combined_in_a_row_side_by_side_and_topped_up(write_yaml):
    from campaign.plan.billing import combinations
    from campaign.plan.prices import load_prices
    from campaign.plan.schedule import Phase

    (card,) = load_prices(_pk(write_yaml)).cards
    # two runs of 70 h, no margin: one card 140 h > the 3-day's 72 h. In a row: 2 x 3-day = 144 h for $200.00;
    # side by side: 2 cards, both runs at once in 70 h, $200.00; topped up: the 3-day + the second run's last
    # 68 h on demand (72 -> 140 h) = $100 + 68 x $2.50 = $270.00; on demand alone: 140 x $2.50 = $350.00
    two = (Phase("x", "experiment", 2, 70.0, useful=2),)
    got = {o.name: (o.cards, o.window_hours, o.hours, o.cost_cents, o.fits)
           for o in combinations(two, card=card.card, packages=card.packages[:1], hourly=card.hourly_exact,
                                 margin=0.0)}
    assert got == {"2 x 3-day in a row": (1, 144, 140, 20_000, True),
                   "2 x 3-day side by side": (2, 72, 70, 20_000, True),
                   "3-day + on-demand": (1, None, 140, 27_000, True)}


def test_budget_recommends_a_package_topped_up_on_demand(write_yaml):
    # one 80 h run: the 3-day alone ends 8 h late; topped up: $100 + 8 x $2.50 = $120.00, below the 7-day ($300),
    # two 3-days in a row ($200) and on demand (80 x $2.50 = $200); two side by side cannot split one run
    rep = budget(write_yaml(_one(80)), prices=_pk(write_yaml))
    assert rep.recommended == "3-day + on-demand" and rep.passed
    best = next(o for o in rep.packages if o.name == rep.recommended)
    assert (best.cost_cents, best.hours) == (12_000, 80)
    # asked for named packages, nothing is combined
    only = budget(write_yaml(_one(80)), prices=_pk(write_yaml), packages=["3-day", "on-demand"])
    assert [o.name for o in only.packages] == ["3-day", "on-demand"]
