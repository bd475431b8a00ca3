"""A card rented under several offers (a provider's secure and community cloud, two providers in one file), each
with its own price, billing and terms: `budget` prices every offer of the card and names the offer it takes;
`--card CARD@OFFER` and a phase's `card: CARD@OFFER` keep to one. And the text Gantt with a card per phase: every
rental's phases on their own rows, on the campaign's clock. Every figure worked out by hand in the comments."""
from __future__ import annotations

from decimal import Decimal

import pytest

from campaign.plan.budget import budget

# the same H100 under two offers: one per second at $2.69/h with a 1-minute minimum, one per started hour at $2.49/h
TWO = [{"card": "H100-SXM-80GB", "offer": "per-second", "hourly": "2.69", "billing": "per-second",
        "minimum_hours": 1 / 60},
       {"card": "H100-SXM-80GB", "offer": "hourly", "hourly": "2.49", "billing": "per-hour"}]


def _one(hours, **extra):
    return {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
            "phases": [{"name": "train", "kind": "experiment", "hours": hours}], **extra}


def _one_line_refusal(r, fragment):
    assert r.code == 2 and fragment in r.err, r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.parametrize("minutes, per_second, per_hour, take", [
    # 10 h 20 min = 37,200 s: 269 cents x 37,200 / 3,600 = 2,779.67 cents -> $27.80 (rounded once, half up); per
    # started hour: 11 x $2.49 = $27.39. The hourly offer is cheaper
    (20, 2_780, 2_739, "hourly"),
    # 10 h 01 min = 36,060 s: 269 x 36,060 / 3,600 = 2,694.48 cents -> $26.94; per started hour still 11 x $2.49 =
    # $27.39. The per-second offer is cheaper
    (1, 2_694, 2_739, "per-second")])
def test_every_offer_of_the_card_is_priced_and_the_cheaper_one_named(cli, write_yaml, minutes, per_second, per_hour,
                                                                     take):
    plan, prices = str(write_yaml(_one(10 + minutes / 60))), str(write_yaml({"cards": TWO}, "p.yaml"))
    r = cli("budget", plan, "--prices", prices, "--json")
    assert r.code == 0, r.err
    rep = r.json()
    cost = {o["offer"]: (o["card"], o["name"], o["cost_cents"]) for o in rep["packages"]}
    assert cost == {"per-second": ("H100-SXM-80GB", "on-demand", per_second),
                    "hourly": ("H100-SXM-80GB", "on-demand", per_hour)}
    assert (rep["recommended_card"], rep["recommended_offer"], rep["recommended"]) == ("H100-SXM-80GB", take,
                                                                                       "on-demand")
    text = " ".join(cli("budget", plan, "--prices", prices).out.split())
    assert f"TAKE H100-SXM-80GB@{take} on-demand" in text
    assert "H100-SXM-80GB@per-second │ on-demand" in text and "H100-SXM-80GB@hourly │ on-demand" in text


def test_the_exact_amount_is_kept_per_offer_and_rounded_once(write_yaml):
    # 10 h 20 min per second: 10,006,800 / 3,600 = 2,779.666... cents, kept exact until the total; the stop rule
    # prices a run at the offer taken (hourly: 10 h 20 min x $2.49 = 2,573.0 cents), not at the card's first entry
    rep = budget(write_yaml(_one(10 + 20 / 60)), prices=write_yaml({"cards": TWO}, "p.yaml"))
    second = next(o for o in rep.packages if o.offer == "per-second")
    assert Decimal(second.cost_exact_cents).quantize(Decimal("0.0001")) == Decimal("2779.6667")
    [run] = [x for x in rep.stop_rules if x.scope == "run"]
    assert (rep.recommended_offer, run.cents) == ("hourly", 2_573)
    # the per-second offer's 1-minute minimum is said in its own words, on its own offer
    assert any(n.startswith("H100-SXM-80GB@per-second bills per started second; at least 1 min per card")
               for n in rep.notes), rep.notes


def test_a_one_minute_minimum_bills_a_short_run_a_minute(write_yaml):
    # a 30-second run: per second it is billed the minimum, 60 s x 269 / 3,600 = 4.483 cents -> 4 cents; per
    # started hour it pays the hour, 249 cents
    rep = budget(write_yaml(_one(30 / 3600)), prices=write_yaml({"cards": TWO}, "p.yaml"))
    assert {o.offer: o.cost_cents for o in rep.packages} == {"per-second": 4, "hourly": 249}
    assert rep.recommended_offer == "per-second"


def test_card_at_offer_keeps_to_one_offer(cli, write_yaml):
    # 10 h 20 min: the hourly offer is the cheaper ($27.39), but --card h100@per-second prices that offer alone
    # ($27.80) and takes it; --card h100 (the alias) prices both
    plan, prices = str(write_yaml(_one(10 + 20 / 60))), str(write_yaml({"cards": TWO}, "p.yaml"))
    one = cli("budget", plan, "--prices", prices, "--card", "h100@per-second", "--json")
    assert one.code == 0, one.err
    rep = one.json()
    assert [(o["offer"], o["cost_cents"]) for o in rep["packages"]] == [("per-second", 2_780)]
    assert rep["recommended_offer"] == "per-second"
    both = cli("budget", plan, "--prices", prices, "--card", "h100", "--json").json()
    assert sorted(o["offer"] for o in both["packages"]) == ["hourly", "per-second"]


def test_package_keeps_the_offers_that_sell_it(write_yaml):
    # only the hourly offer sells a 1-day package ($30): --package 1-day prices that one rental (10 h fit in 24 h)
    offers = [TWO[0], {**TWO[1], "packages": [{"name": "1-day", "days": 1, "price": "30"}]}]
    rep = budget(write_yaml(_one(10)), prices=write_yaml({"cards": offers}, "p.yaml"), packages=["1-day"])
    assert [(o.offer, o.name, o.cost_cents) for o in rep.packages] == [("hourly", "1-day", 3_000)]


# a card per phase: training on the H100 compared, then an evaluation on an L40S of its own, sold as spot
# ($0.50/h) and on a secure cloud ($1.00/h)
L40S = [{"card": "L40S-48GB", "offer": "spot", "hourly": "0.50"},
        {"card": "L40S-48GB", "offer": "secure", "hourly": "1.00"}]


def _two_cards(eval_card, train_runs=2, train_hours=10):
    return {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
            "phases": [{"name": "train", "kind": "experiment", "runs": train_runs, "hours": train_hours},
                       {"name": "eval", "kind": "evaluation", "hours": 2.5, "card": eval_card, "after": ["train"]}]}


@pytest.mark.parametrize("eval_card, offer, cents", [
    # the evaluation's 2.5 h bill 3 started hours: spot 3 x $0.50 = $1.50, secure 3 x $1.00 = $3.00
    ("L40S-48GB", "spot", 150),               # no offer named: the cheapest of its offers that fits
    ("l40s@secure", "secure", 300)])          # the offer named, though dearer
def test_a_phase_names_its_cards_offer_the_same_way(write_yaml, eval_card, offer, cents):
    # training: 2 runs x 10 h one after the other on the H100 per started hour at $2.49: 20 x $2.49 = $49.80
    prices = write_yaml({"cards": [TWO[1], *L40S]}, "p.yaml")
    rep = budget(write_yaml(_two_cards(eval_card)), prices=prices)
    [own] = rep.rentals
    assert (own.card, own.offer, own.option.offer, own.option.cost_cents) == ("L40S-48GB", offer, offer, cents)
    assert rep.total_cents == 4_980 + cents


@pytest.mark.parametrize("cards, fragment", [
    ([{"card": "H100-SXM-80GB", "hourly": "2.49"}, {"card": "h100", "hourly": "2.69"}],
     "card 'H100-SXM-80GB' is listed twice without distinct offer names (cards[0] with no offer and cards[1] with "
     "no offer); give each entry of a card its own 'offer' name"),
    ([TWO[0], {**TWO[1], "offer": "per-second"}],
     "(cards[0] offer 'per-second' and cards[1] offer 'per-second')"),
    ([{"card": "H100-SXM-80GB", "hourly": "2.49"}, TWO[0]],
     "(cards[0] with no offer and cards[1] offer 'per-second')"),
    ([{**TWO[1], "ofer": "x"}], "unknown key 'ofer': did you mean 'offer'?"),
    ([{**TWO[1], "offer": "a@b"}], "field 'offer' is 'a@b'"),
    ([{**TWO[1], "card": "H100-SXM-80GB@hourly"}], "a card's name cannot hold '@'")])
def test_a_bad_offer_in_the_price_file_is_one_line(cli, write_yaml, cards, fragment):
    r = cli("budget", str(write_yaml(_one(1))), "--prices", str(write_yaml({"cards": cards}, "p.yaml")))
    _one_line_refusal(r, fragment)


@pytest.mark.parametrize("args, plan, fragment", [
    (["--card", "h100@per-secnd"], _one(1),
     "card 'H100-SXM-80GB' has no offer 'per-secnd' (its offers: per-second, hourly); did you mean "
     "'H100-SXM-80GB@per-second'?"),
    (["--card", "h100@"], _one(1), "name the offer after '@'"),
    ([], _two_cards("L40S-48GB@cheap"), "card 'L40S-48GB' has no offer 'cheap' (its offers: spot, secure)"),
    ([], {**_one(1), "compare": ["H100-SXM-80GB@"]}, "field 'compare' is 'H100-SXM-80GB@': name the offer"),
    # the plan's card is where the hours were taken: an offer does not change them
    ([], {**_one(1), "card": "H100-SXM-80GB@hourly"}, "field 'card' is 'H100-SXM-80GB@hourly': the card the hours "
     "were taken on, whatever the offer")])
def test_an_offer_that_is_not_in_the_price_file_is_one_line(cli, write_yaml, args, plan, fragment):
    prices = str(write_yaml({"cards": [*TWO, *L40S]}, "p.yaml"))
    _one_line_refusal(cli("budget", str(write_yaml(plan)), "--prices", prices, *args), fragment)


def _row(text: str, phase: str) -> list[str]:
    """The text Gantt's row of a phase: its cells (phase, rental, start h, end h, bar)."""
    line = next(x for x in text.splitlines() if x.startswith(f"│ {phase} ") and "█" in x)
    return [c.strip() for c in line.strip("│").split("│")]


def test_the_text_gantt_draws_every_rentals_schedule(cli, write_yaml):
    # training: 2 runs x 10 h on one H100, 0 -> 20 h (on demand, $2.49/h); the evaluation on the L40S (spot) starts
    # when training ends: 20 -> 22.5 h. One axis for the campaign: 22.5 h over 48 marks (0.47 h a mark); train from
    # mark 0 to round(20 / 22.5 x 48) = round(42.67) = 43; eval from int(42.67) = 42 to 48
    prices = str(write_yaml({"cards": [TWO[1], *L40S]}, "p.yaml"))
    out = cli("budget", str(write_yaml(_two_cards("L40S-48GB"))), "--prices", prices).out
    assert _row(out, "train") == ["train", "H100-SXM-80GB@hourly on-demand", "0.0", "20.0", "█" * 43 + "·" * 5]
    assert _row(out, "eval") == ["eval", "L40S-48GB@spot on-demand", "20.0", "22.5", "·" * 42 + "█" * 6]
    assert "each mark 0.5 h of 22.5 h" in " ".join(out.split())


def test_the_text_gantt_says_where_each_rentals_package_ends(cli, write_yaml):
    # training: 2 runs x 15 h, 0 -> 30 h on one H100. Its 1-day package ($50) alone is 24 h; topped up on demand
    # for 30 - 24 = 6 h x $2.49 = $14.94, $64.94 in all: cheaper than on demand alone (30 x $2.49 = $74.70) or two
    # 1-day packages ($100). The evaluation on the L40S (spot) then runs 30 -> 32.5 h
    h100 = {**TWO[1], "packages": [{"name": "1-day", "days": 1, "price": "50"}]}
    prices = str(write_yaml({"cards": [h100, *L40S]}, "p.yaml"))
    r = cli("budget", str(write_yaml(_two_cards("L40S-48GB", train_hours=15))), "--prices", prices)
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "TAKE H100-SXM-80GB@hourly 1-day + on-demand — the cheapest that fits: $64.94" in text
    assert "H100-SXM-80GB@hourly 1-day + on-demand from 0.0 h to 30.0 h, its package ending at 24.0 h; on demand " \
           "after; L40S-48GB@spot on-demand from 30.0 h to 32.5 h" in text
    assert _row(r.out, "eval")[1:4] == ["L40S-48GB@spot on-demand", "30.0", "32.5"]


def test_the_text_gantt_places_each_rental_after_what_it_waits_for_and_its_set_up(cli, write_yaml):
    # prep (2 h) on the L40S's secure offer, which bills 1 h of set-up first: the rental runs 0 -> 3 h, prep 1 -> 3 h.
    # The H100 starts when prep ends (3 h) and sets up for 0.5 h: train, 2 runs x 6 h on one card, 3.5 -> 15.5 h;
    # export 15.5 -> 16.5 h. Bills: L40S 3 started hours x $1.00 = $3.00; H100 on demand 13.5 h -> 14 x $3.00 =
    # $42.00 (its 1-day package: $50.00); $45.00 in all
    prices = {"cards": [{"card": "H100-SXM-80GB", "hourly": "3.00", "setup_hours": 0.5,
                         "packages": [{"name": "1-day", "days": 1, "price": "50"}]},
                        {**L40S[0], "setup_hours": 0}, {**L40S[1], "setup_hours": 1}]}
    plan = {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
            "phases": [{"name": "prep", "kind": "checks", "hours": 2, "card": "L40S-48GB@secure"},
                       {"name": "train", "kind": "experiment", "runs": 2, "hours": 6, "after": ["prep"]},
                       {"name": "export", "kind": "export", "hours": 1, "after": ["train"]}]}
    r = cli("budget", str(write_yaml(plan)), "--prices", str(write_yaml(prices, "p.yaml")))
    assert r.code == 0, r.err
    assert "TOTAL $45.00 for the campaign" in " ".join(r.out.split())
    assert [_row(r.out, ph)[:4] for ph in ("prep", "train", "export")] == [
        ["prep", "L40S-48GB@secure on-demand", "1.0", "3.0"], ["train", "H100-SXM-80GB on-demand", "3.5", "15.5"],
        ["export", "H100-SXM-80GB on-demand", "15.5", "16.5"]]
