"""One billing model (plan/billing.py) for budget, bench and ablate plan: exact cents rounded once, the margin,
started units (hour, minute, second), on-demand cards billed only while they run, and the same work costing the
same in all three commands. Every figure is worked out by hand in the comments."""
from __future__ import annotations

import re
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


def _issue_prices(write_yaml):
    """The issue's L40S prices: $1.00 per card-hour, a 3-day package $60, a 7-day $126."""
    return write_yaml({"cards": [{"card": "L40S-48GB", "hourly": "1.00", "packages": [
        {"name": "3-day", "days": 3, "price": "60"}, {"name": "7-day", "days": 7, "price": "126"}]}]}, "p.yaml")


@pytest.mark.parametrize("margin, dollars, rental", [("0%", 60, "3-day"), ("15%", 64, "3-day + on-demand")])
def test_the_same_work_costs_the_same_in_budget_bench_and_ablate(cli, write_yaml, margin, dollars, rental):
    # 12 runs x 5.5 h on an L40S at the issue's prices ($1.00/h, 3-day $60, 7-day $126), through the three commands.
    # No margin: 66 h one after another, inside the 3-day's 72 h: $60.00. Margin 15%: each run 6.325 h, 75.9 h in
    # all; the 3-day alone ends 3.9 h late, so it is topped up on demand: the last run goes on from 72 h to 75.9 h,
    # 4 started hours x $1.00: $60 + $4 = $64.00, below on demand alone (76 started hours, $76.00), two 3-days
    # ($120.00) and the 7-day ($126.00). ablate plan's budget of $70 holds it (it used to bill $76 on demand only
    # and say OVER BUDGET).
    prices = str(_issue_prices(write_yaml))
    plan = {"name": "t", "card": "L40S-48GB", "margin": margin, "phases": [{"name": "x", "runs": 12, "hours": 5.5}]}
    b = cli("budget", str(write_yaml(plan, "plan.yaml")), "--prices", prices, "--json")
    cost = {"metric": "f1", "target": 1, "repeats": 12, "margin": margin,
            "configurations": [{"name": "l40s", "card": "L40S-48GB", "runs": [{"seed": 0, "hours_to_target": 5.5}]}]}
    c = cli("bench", str(write_yaml(cost, "cost.yaml")), "--prices", prices, "--json")
    # one factor at two levels, 6 seeds each, one factor at a time: 12 runs of 5.5 h
    factors = {"hours_per_run": 5.5, "seeds": 6, "design": "ofat", "card": "L40S-48GB", "margin": margin,
               "budget_usd": "70", "factors": [{"name": "lr", "levels": [1, 2]}]}
    a = cli("ablate", "plan", str(write_yaml(factors, "f.yaml")), "--prices", prices, "--json")
    assert (b.code, c.code, a.code) == (0, 0, 0), (b.err, c.err, a.err)
    b, c, a = b.json(), c.json(), a.json()
    assert (b["recommended"], next(o["cost_cents"] for o in b["packages"] if o["name"] == b["recommended"])) == \
        (rental, dollars * 100)
    assert (c["cheapest_rental"], c["cheapest_cents"]) == (rental, dollars * 100)
    d = a["design"]
    assert (d["runs"], d["card_hours"], d["rental"], d["cost_cents"], a["fits"]) == (12, 66, rental, dollars * 100,
                                                                                      True)
    by = {o["name"]: o["cost_cents"] for o in d["rentals"]}
    assert by["on-demand"] == (6_600 if margin == "0%" else 7_600) and by["7-day"] == 12_600
    assert any(f"margin {margin}" in n for n in a["notes"])
    # the same runs priced by budget and by ablate plan list the same rentals at the same cents
    assert {o["name"]: o["cost_cents"] for o in b["packages"]} == by


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
    # asked for named packages, only those are combined: the 3-day topped up on demand is still the cheapest
    only = budget(write_yaml(_one(80)), prices=_pk(write_yaml), packages=["3-day", "on-demand"])
    assert [o.name for o in only.packages] == ["3-day", "on-demand", "3-day + on-demand"]
    # without on-demand among them, nothing is billed by the hour: two 3-days in a row, $200.00
    packs = budget(write_yaml(_one(80)), prices=_pk(write_yaml), packages=["3-day"])
    assert [(o.name, o.cost_cents) for o in packs.packages] == [("3-day", 10_000), ("2 x 3-day in a row", 20_000)]
    assert packs.recommended == "2 x 3-day in a row"


def test_several_packages_of_one_kind_side_by_side(cli, write_yaml):
    # the issue's case: 8 runs x 13 h, no margin, 104 card-hours. One card: 104 h, past the 3-day's 72 h; the
    # 7-day holds it for $126.00 (64 h slack). Two 3-day packages side by side: 4 runs each, 52 h, 20 h slack, for
    # 2 x $60 = $120.00, the cheapest (two 3-days in a row cost the same but end at 104 h)
    plan = {"name": "t", "card": "L40S-48GB", "margin": "0%", "phases": [{"name": "x", "runs": 8, "hours": 13}]}
    r = cli("budget", str(write_yaml(plan)), "--prices", str(_issue_prices(write_yaml)), "--package", "3-day",
            "--package", "7-day", "--json")
    assert r.code == 0, r.err
    rep = r.json()
    by = {o["name"]: o for o in rep["packages"]}
    assert rep["recommended"] == "2 x 3-day side by side"
    best = by["2 x 3-day side by side"]
    assert (best["cards"], best["hours"], best["slack_hours"], best["cost_cents"]) == (2, 52, 20, 12_000)
    assert (by["7-day"]["cost_cents"], by["7-day"]["slack_hours"], by["3-day"]["fits"]) == (12_600, 64, False)
    assert "on-demand" not in by


def test_as_many_packages_side_by_side_as_the_work_needs():
    from campaign.plan.billing import combinations
    from campaign.plan.prices import Package
    from campaign.plan.schedule import Phase

    # 10 runs of 30 h: a 3-day (72 h) holds 2 per card, so 5 cards: five 3-day packages side by side, 5 x $60 =
    # $300.00, ending at 60 h; four would end at 90 h. No cheaper single rental given: the five are kept.
    runs = (Phase("x", "experiment", 10, 30.0, useful=10),)
    pk = Package("3-day", 3, 1, 6_000, Decimal(6_000))
    got = {o.name: (o.cards, o.hours, o.cost_cents) for o in combinations(runs, card="L40S-48GB", packages=(pk,),
                                                                          hourly=None, margin=0.0)}
    assert got["5 x 3-day side by side"] == (5, 60, 30_000) and "4 x 3-day side by side" not in got


def test_ablate_prices_each_cell_at_its_own_hours(write_yaml):
    # two cells, one seed each, no margin: the control 2 h, the other level's epochs x 2 = 4 h: 6 h one after
    # another. On demand at $2.50: 6 started hours, $15.00 (not 2 x 2 h = $10.00); the 3-day ($100) holds them too
    factors = {"hours_per_run": 2, "seeds": 1, "design": "ofat", "card": "H100-SXM-80GB", "margin": "0%",
               "factors": [{"name": "epochs", "levels": [1, 2], "hours_scale": [1, 2]}]}
    a = plan_ablation(write_yaml(factors, "f.yaml"), prices=_pk(write_yaml))
    by = {o.name: (o.hours, o.cost_cents) for o in a.design.rentals}
    assert by["on-demand"] == (6, 1_500) and by["3-day"] == (6, 10_000)
    assert (a.design.rental, a.design.cost_cents, a.design.card_hours) == ("on-demand", 1_500, 6)


def test_the_gantt_marks_where_a_topped_up_package_ends(cli, write_yaml, tmp_path):
    from campaign import plots

    # one 80 h run on the 3-day topped up on demand: the package ends at 72 h, the last 8 h are billed by the hour
    out = tmp_path / "g.svg"
    r = cli("budget", str(write_yaml(_one(80))), "--prices", str(_pk(write_yaml)), "--plot", str(out), "--json")
    assert r.code == 0 and out.exists(), r.err
    rep = r.json()
    best = next(o for o in rep["packages"] if o["name"] == rep["recommended"])
    assert (best["name"], best["window_hours"], best["package_hours"]) == ("3-day + on-demand", None, 72)
    text = cli("budget", str(write_yaml(_one(80))), "--prices", str(_pk(write_yaml)))
    assert "the package ends at 72.0 h, on demand after" in " ".join(text.out.split())
    fig = plots.gantt(rep["schedule"], "t", window=best["package_hours"], label="3-day ends at 72 h; on demand after")
    ax = fig.axes[0]
    assert any(tuple(ln.get_xdata()) == (72, 72) for ln in ax.lines)
    assert "3-day ends at 72 h; on demand after" in [t.get_text() for t in ax.get_legend().get_texts()]


def _termed(write_yaml, **terms):
    card = {"card": "H100-SXM-80GB", "hourly": "3.00", "packages": [{"name": "3-day", "days": 3, "price": "100"},
                                                                    {"name": "7-day", "days": 7, "price": "300"}]}
    return write_yaml({"cards": [{**card, **terms}]}, "terms.yaml")


def test_a_minimum_billing_increment_and_a_cards_own_billing(write_yaml):
    # a 6-minute run (0.1 h) at $3.00/h: per second 360 s x 300/3,600 = 30 cents; with a 1-hour minimum the hour is
    # billed: $3.00. The card bills per minute while the file bills per hour: 1.01 h is 61 minutes x 5 cents = $3.05
    short = write_yaml(_one(0.1), "short.yaml")
    per_second = budget(short, prices=_termed(write_yaml, billing="per-second"), packages=["on-demand"])
    assert per_second.packages[0].cost_cents == 30
    minimum = budget(short, prices=_termed(write_yaml, billing="per-second", minimum_hours=1), packages=["on-demand"])
    assert minimum.packages[0].cost_cents == 300 and any("at least 1 h per card" in n for n in minimum.notes)
    own = budget(write_yaml(_one(1.01)), prices=_termed(write_yaml, billing="per-minute"), packages=["on-demand"])
    assert (own.packages[0].cost_cents, own.packages[0].billing) == (305, "per started minute")


def test_set_up_time_is_billed_before_the_first_step(write_yaml):
    # 0.5 h of set-up before a 10 h run: 10.5 h on demand, 11 started hours x $3.00 = $33.00 (no set-up: $30.00).
    # A 71.8 h run fits the 3-day's 72 h alone, not after 0.5 h of set-up (72.3 h): of the two packages alone, the
    # 7-day then holds it.
    rep = budget(write_yaml(_one(10)), prices=_termed(write_yaml, setup_hours=0.5), packages=["on-demand"])
    assert (rep.packages[0].hours, rep.packages[0].cost_cents) == (10.5, 3_300)
    long = write_yaml(_one(71.8), "long.yaml")
    bare = budget(long, prices=_termed(write_yaml), packages=["3-day", "7-day"])
    assert bare.recommended == "3-day"
    setup = budget(long, prices=_termed(write_yaml, setup_hours=0.5), packages=["3-day", "7-day"], combine=False)
    three = next(o for o in setup.packages if o.name == "3-day")
    assert not three.fits and setup.recommended == "7-day" and setup.packages[1].hours == pytest.approx(72.3)


def test_storage_is_billed_while_the_campaign_lasts_on_every_rental(write_yaml):
    # storage at $0.10/h over the 80 h the run takes: $8.00 on every rental. On demand 80 x $3.00 + $8 = $248.00;
    # the 7-day $300 + $8 = $308.00; the 3-day topped up: $100 + 8 h x $3.00 + $8 = $132.00, the cheapest
    rep = budget(write_yaml(_one(80)), prices=_termed(write_yaml, storage_hourly="0.10"))
    by = {o.name: o.cost_cents for o in rep.packages}
    assert (by["on-demand"], by["7-day"], by["3-day + on-demand"]) == (24_800, 30_800, 13_200)
    assert rep.recommended == "3-day + on-demand"
    # a storage price of a tenth of a cent an hour is kept exact: 80 h x 0.1 cent = 8 cents on the 7-day
    tiny = budget(write_yaml(_one(80)), prices=_termed(write_yaml, storage_hourly="0.001"), packages=["7-day"])
    assert Decimal(tiny.packages[0].cost_exact_cents) == Decimal("30008.0")


def test_the_same_terms_bill_the_same_in_budget_bench_and_ablate(write_yaml):
    # 2 runs x 3 h, no margin, set-up 0.25 h, storage $0.50/h, per-second billing, hourly $3.00:
    # one after another 6 h + 0.25 h = 6.25 h: 6.25 x $3.00 = $18.75 + storage 6.25 x $0.50 = $3.125: $21.875,
    # rounded once: $21.88 (the 3-day at $100 costs more)
    prices = _termed(write_yaml, billing="per-second", setup_hours=0.25, storage_hourly="0.50")
    plan = {"name": "t", "card": "H100-SXM-80GB", "margin": "0%", "phases": [{"name": "x", "runs": 2, "hours": 3}]}
    b = budget(write_yaml(plan), prices=prices)
    cost = {"metric": "f1", "target": 1, "repeats": 2, "margin": "0%",
            "configurations": [{"name": "h", "card": "H100-SXM-80GB", "runs": [{"seed": 0, "hours_to_target": 3}]}]}
    c = bench(write_yaml(cost, "cost.yaml"), prices=prices)
    factors = {"hours_per_run": 3, "seeds": 1, "design": "ofat", "card": "H100-SXM-80GB", "margin": "0%",
               "factors": [{"name": "lr", "levels": [1, 2]}]}
    a = plan_ablation(write_yaml(factors, "f.yaml"), prices=prices)
    assert (b.recommended, next(o.cost_cents for o in b.packages if o.name == "on-demand")) == ("on-demand", 2_188)
    assert (c.cheapest_rental, c.cheapest_cents) == ("on-demand", 2_188)
    assert (a.design.rental, a.design.cost_cents) == ("on-demand", 2_188)


@pytest.mark.parametrize("terms, fragment", [
    ({"storage_per_hour": "0.1"}, "unknown key 'storage_per_hour': did you mean 'storage_hourly'?"),
    ({"setup_hours": -1}, "field 'setup_hours' must be a finite number >= 0"),
    ({"minimum_hours": 10_000}, "field 'minimum_hours' is 10000; at most 8,784 hours"),
    ({"billing": "per-day"}, "field 'billing' is 'per-day'"),
    ({"storage_hourly": "lots"}, "field 'storage_hourly' is not an amount")])
def test_bad_billing_terms_are_one_line(cli, write_yaml, terms, fragment):
    r = cli("budget", str(write_yaml(_one(1))), "--prices", str(_termed(write_yaml, **terms)))
    assert r.code == 2 and fragment in r.err and "Traceback" not in r.err, r.err


def test_stop_rules_derived_from_the_plan_and_the_cap(cli, write_yaml):
    # one 80 h run, margin 10%: a run may take 88 h; at $2.50/h that card time is $220.00. The 3-day topped up on
    # demand: $100 + 16 started hours past 72 h x $2.50 = $140.00. A cap of $150 (budget_usd): $100 prepaid in the
    # 3-day, so $50 / $2.50 = 20 card-hours billed by the hour at most
    plan = _one(80, margin="10%", budget_usd="150")
    r = cli("budget", str(write_yaml(plan)), "--prices", str(_pk(write_yaml)), "--json")
    assert r.code == 0, r.err
    rep = r.json()
    assert (rep["recommended"], next(o["cost_cents"] for o in rep["packages"] if o["name"] == rep["recommended"])) \
        == ("3-day + on-demand", 14_000)
    run, campaign = rep["stop_rules"]
    assert (run["scope"], run["phase"], run["hours"], run["cents"]) == ("run", "a", pytest.approx(88), 22_000)
    assert (campaign["scope"], campaign["hours"], campaign["cents"]) == ("campaign", pytest.approx(20), 15_000)
    text = " ".join(cli("budget", str(write_yaml(plan)), "--prices", str(_pk(write_yaml))).out.split())
    assert re.search(r"│ a +│ +88\.00 │ +\$220\.00 │", text) and "$100.00 prepaid in 3-day; at most" in text
    assert "at most 20.0 card-hours billed by the hour" in text
    # no budget: the per-run rules only
    free = cli("budget", str(write_yaml(_one(80, margin="10%"))), "--prices", str(_pk(write_yaml)), "--json").json()
    assert [x["scope"] for x in free["stop_rules"]] == ["run"]


def test_the_schedule_says_the_set_up_before_the_first_run(cli, write_yaml, tmp_path):
    # 0.5 h of set-up then a 10 h run on demand: 10.5 h, 11 started hours x $3.00 = $33.00; the text schedule and
    # the Gantt (--plot) say the set-up comes first
    out = tmp_path / "g.png"
    r = cli("budget", str(write_yaml(_one(10))), "--prices", str(_termed(write_yaml, setup_hours=0.5)), "--package",
            "on-demand", "--plot", str(out))
    text = " ".join(r.out.split())
    assert r.code == 0 and out.exists(), r.err
    assert "$33.00" in text and "0.5 h set-up billed before the first run (hours below from its end)" in text
    rep = cli("budget", str(write_yaml(_one(10))), "--prices", str(_termed(write_yaml, setup_hours=0.5)), "--package",
              "on-demand", "--json").json()
    assert [(o["name"], o["setup_hours"], o["hours"]) for o in rep["packages"]] == [("on-demand", 0.5, 10.5)]
