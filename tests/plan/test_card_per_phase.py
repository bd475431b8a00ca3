"""Two kinds of card in one plan (a card per phase): a phase that names its card runs on a rental of that card of
its own, started when the phases it waits for have ended; the bills add up to the campaign's total, the deadline
holds for the campaign with every rental in its place, and the budget covers them all. Every figure by hand."""
from __future__ import annotations

import pytest

from campaign.plan.budget import budget

PRICES = {"cards": [
    {"card": "H100-SXM-80GB", "hourly": "3.00", "packages": [{"name": "3-day", "days": 3, "price": "100"}]},
    {"card": "L40S-48GB", "hourly": "1.00", "packages": [{"name": "3-day", "days": 3, "price": "40"}]}]}


def _plan(**extra):
    # two 10 h training runs on the card compared (the H100), then a 2.5 h evaluation on an L40S of its own
    return {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
            "phases": [{"name": "train", "kind": "experiment", "runs": 2, "hours": 10},
                       {"name": "eval", "kind": "evaluation", "hours": 2.5, "card": "L40S-48GB",
                        "after": ["train"]}], **extra}


def test_a_phase_on_a_card_of_its_own_is_billed_on_that_card(cli, write_yaml):
    # the H100 runs the two training runs one after the other: 20 h on demand x $3.00 = $60.00 (the 3-day: $100).
    # The evaluation's 2.5 h were taken on the L40S it names (not scaled by FLOP/s): 3 started hours x $1.00 =
    # $3.00 on demand (its 3-day: $40). Total $60.00 + $3.00 = $63.00; the L40S starts when training ends, at 20 h,
    # and ends at 22.5 h
    r = cli("budget", str(write_yaml(_plan())), "--prices", str(write_yaml(PRICES, "p.yaml")), "--json")
    assert r.code == 0, r.err
    rep = r.json()
    best = next(o for o in rep["packages"] if o["name"] == rep["recommended"])
    assert (rep["recommended_card"], rep["recommended"], best["cost_cents"]) == ("H100-SXM-80GB", "on-demand", 6_000)
    [own] = rep["rentals"]
    assert (own["card"], [ph["name"] for ph in own["phases"]]) == ("L40S-48GB", ["eval"])
    assert (own["option"]["name"], own["option"]["cost_cents"], own["phases"][0]["hours"]) == ("on-demand", 300, 2.5)
    assert (own["start_hours"], own["end_hours"]) == (pytest.approx(20), pytest.approx(22.5))
    assert (rep["total_cents"], rep["campaign_hours"]) == (6_300, pytest.approx(22.5))
    text = " ".join(cli("budget", str(write_yaml(_plan())), "--prices", str(write_yaml(PRICES, "p.yaml"))).out.split())
    assert "TOTAL $63.00 for the campaign" in text and "ending at 22.5 h" in text
    assert "eval on L40S-48GB" in text


def test_the_budget_and_the_deadline_cover_every_rental(cli, write_yaml):
    prices = str(write_yaml(PRICES, "p.yaml"))
    # budget $63.00: $3.00 on the L40S leaves $60.00 for the H100, exactly its on-demand bill: it fits
    ok = cli("budget", str(write_yaml(_plan(budget_usd="63"))), "--prices", prices, "--json")
    assert ok.code == 0 and ok.json()["total_cents"] == 6_300, ok.err
    # budget $62.99 leaves $59.99: the H100's $60.00 does not fit, nor its $100 3-day: nothing to take
    over = cli("budget", str(write_yaml(_plan(budget_usd="62.99"))), "--prices", prices, "--json")
    assert over.code == 1 and over.json()["recommended"] is None
    # a deadline of 0.9 day (21.6 h): each rental alone is shorter (20 h, 2.5 h), one after the other they end at
    # 22.5 h: the campaign misses it, and the verdict says so
    late = cli("budget", str(write_yaml(_plan(deadline_days=0.9))), "--prices", prices, "--json")
    assert late.code == 1, late.err
    rep = late.json()
    assert rep["recommended"] is None and "the campaign ends at 22.5 h > the 21.6 h deadline" in rep["why"]
    fits = next(c for c in rep["checks"] if c["id"] == "budget.fits")
    assert fits["status"] == "fail" and "22.5 h > the 21.6 h deadline" in fits["seen"]


def test_stop_rules_price_each_phase_on_its_own_card(write_yaml):
    # margin 0%: a training run may take 10 h, $30.00 of H100 time at $3.00/h; the evaluation 2.5 h, $2.50 of L40S
    # time at $1.00/h. A cap of $63: $3.00 planned on the L40S leaves $60.00, 20.0 H100 card-hours by the hour
    rep = budget(write_yaml(_plan(budget_usd="63")), prices=write_yaml(PRICES, "p.yaml"))
    runs = {x.phase: (x.hours, x.cents) for x in rep.stop_rules if x.scope == "run"}
    assert runs == {"train": (10, 3_000), "eval": (2.5, 250)}
    [cap] = [x for x in rep.stop_rules if x.scope == "campaign"]
    assert (cap.cents, cap.hours) == (6_300, pytest.approx(20))
    assert "$3.00 on L40S-48GB on-demand; at most 20.0 H100-SXM-80GB card-hours" in cap.rule


def test_when_every_phase_names_its_card_the_first_phases_card_is_compared(write_yaml):
    # prep 1 h on an L40S: $1.00; then train 10 h on an H100 of its own: $30.00, from 1 h to 11 h; total $31.00
    plan = {"name": "t", "margin": "0%", "phases": [
        {"name": "prep", "kind": "checks", "hours": 1, "card": "L40S-48GB"},
        {"name": "train", "kind": "experiment", "hours": 10, "card": "H100-SXM-80GB", "after": ["prep"]}]}
    rep = budget(write_yaml(plan), prices=write_yaml(PRICES, "p.yaml"))
    assert (rep.recommended_card, rep.rentals[0].card, rep.rentals[0].option.cost_cents) == \
        ("L40S-48GB", "H100-SXM-80GB", 3_000)
    assert (rep.total_cents, rep.rentals[0].start_hours, rep.campaign_hours) == (3_100, 1, 11)


@pytest.mark.parametrize("phases, fragment", [
    # the compared cards wait for the L40S, which waits for them: a rental would stop and start again
    ([{"name": "a", "hours": 1}, {"name": "b", "hours": 1, "card": "L40S-48GB", "after": ["a"]},
      {"name": "c", "hours": 1, "after": ["b"]}],
     "phase 'b' on L40S-48GB comes after 'a' on the cards compared, and phases on the two wait for each other"),
    ([{"name": "a", "hours": 1, "card": "H999-1GB"}], "phase 'a': field 'card':"),
    ([{"name": "a", "hours": 1, "card": "A100-SXM-80GB"}], "no prices for card 'A100-SXM-80GB'")])
def test_a_bad_card_per_phase_is_one_line(cli, write_yaml, phases, fragment):
    plan = {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "phases": phases}
    r = cli("budget", str(write_yaml(plan)), "--prices", str(write_yaml(PRICES, "p.yaml")))
    assert r.code == 2 and fragment in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, \
        r.err


def test_a_card_ruled_out_by_memory_names_the_cheapest_priced_card_that_holds_it(write_yaml):
    # full fine-tuning of Llama-3.1-8B (bf16 AdamW: 8 B a parameter, 64 GB before activations) does not fit the H100
    # compared (79.2 GiB usable). Of the price file's other cards, by the hour: the L40S ($0.99, 44.5 GiB) is
    # too small; the H200 ($3.00, 139.8 GiB) holds it and is cheaper than the H100 NVL ($3.50, 93.0 GiB), which the
    # catalog's smallest-first order would have named: the H200 is named with its price, to be compared
    prices = {"cards": [{"card": "H100-SXM-80GB", "hourly": "2.50"}, {"card": "L40S-48GB", "hourly": "0.99"},
                        {"card": "H100-NVL-94GB", "hourly": "3.50"}, {"card": "H200-SXM-141GB", "hourly": "3.00"}]}
    est = {"model": "llama-3.1-8b", "method": "full", "tokens": 1_000_000, "batch": 1, "seq_len": 512,
           "grad_checkpointing": True}
    plan = {"name": "t", "compare": ["H100-SXM-80GB"], "phases": [{"name": "ft", "estimate": est}]}
    rep = budget(write_yaml(plan), prices=write_yaml(prices, "p.yaml"))
    why = rep.packages[0].why
    assert "it fits H200-SXM-141GB, the cheapest by the hour of the price file's other cards ($3.00/h;" in why, why
    assert "compare it (--card H200-SXM-141GB)" in why and "H100-NVL-94GB" not in why
    # no other card priced: the catalog's smallest rental card that holds it is named, for its price to be added
    alone = budget(write_yaml(plan), prices=write_yaml({"cards": prices["cards"][:1]}, "q.yaml"))
    assert "it fits H100-NVL-94GB, the smallest rental card of the catalog" in alone.packages[0].why
