"""campaign budget on plans scheduled by hand: which package fits (the critical path, not only the total hours),
slack, utilization, exact cents, what to cut, and the bad inputs refused in one line."""
from __future__ import annotations

import json
import re

import pytest

from campaign.plan.budget import budget


def _plan(*phases, margin="0%", **extra):
    return {"name": "t", "card": "H100-SXM-80GB", "margin": margin, "phases": list(phases), **extra}


def _by(rep, name):
    return next(o for o in rep.packages if o.name == name)


# a (1 x 10 h) -> b (4 runs x 20 h) -> c (1 x 5 h), one card each, no margin:
# on one card 10 + 4 x 20 + 5 = 95 h; critical path 10 + 20 + 5 = 35 h.
SEVEN_NOT_THREE = _plan({"name": "a", "kind": "baseline", "hours": 10},
                        {"name": "b", "runs": 4, "hours": 20, "after": ["a"]},
                        {"name": "c", "kind": "export", "hours": 5, "after": ["b"]})


def test_a_plan_that_fits_seven_days_but_not_three(write_yaml, prices):
    rep = budget(write_yaml(SEVEN_NOT_THREE), prices=prices, combine=False)   # packages alone (test_billing combines)
    three, seven, four = _by(rep, "3-day"), _by(rep, "7-day"), _by(rep, "3-day-4x")
    assert (three.hours, three.critical_path_hours, three.fits) == (95, 35, False)
    assert "95.0 card-hours of work > 1 card(s) x 72 h" in three.why
    assert seven.fits and seven.slack_hours == 168 - 95 and seven.utilization == pytest.approx(95 / 168)
    # four cards: a 10 h, then b's 4 runs side by side 20 h, then c 5 h = 35 h, busy 10 + 80 + 5 = 95 card-hours
    assert four.fits and four.hours == 35 and four.utilization == pytest.approx(95 / (4 * 72))
    # on demand: one card, 95 started hours x $2.50 = $237.50, more than the 7-day's $200.00
    od = _by(rep, "on-demand")
    assert (od.cost_cents, od.cost_usd, od.fits) == (23_750, 237.5, True)
    assert (rep.recommended, rep.recommended_card) == ("7-day", "H100-SXM-80GB")
    # useful results: b's 4 runs (an experiment); $200.00 / 4 = $50.00
    assert seven.useful == 4 and seven.cost_per_useful_cents == 5_000
    assert "3-day does not fit" in rep.why and rep.passed


def test_total_hours_fit_three_days_but_the_critical_path_does_not(write_yaml, prices):
    chain = _plan({"name": "a", "kind": "baseline", "hours": 40}, {"name": "b", "hours": 40, "after": ["a"]})
    rep = budget(write_yaml(chain), prices=prices, packages=["3-day-4x"], combine=False)  # the package alone
    four = _by(rep, "3-day-4x")
    # 80 card-hours fit 4 cards x 72 h = 288, but a -> b takes 80 h > 72 h whatever the cards
    assert four.card_hours == 80 and four.critical_path_hours == 80 and not four.fits
    assert "critical path alone (a -> b) takes 80.0 h > the 72 h window" in four.why
    assert rep.recommended is None and not rep.passed


def test_the_margin_lengthens_every_run(write_yaml, prices):
    rep = budget(write_yaml(_plan({"name": "a", "kind": "baseline", "hours": 10, "runs": 2}, margin="20%")),
                 prices=prices, packages=["7-day"])
    assert _by(rep, "7-day").hours == pytest.approx(2 * 10 * 1.2)
    runs = rep.schedule.runs
    assert [(r.start_hours, r.end_hours) for r in runs] == \
        [(0, pytest.approx(12)), (pytest.approx(12), pytest.approx(24))]


def test_cents_are_exact_over_a_thirty_day_schedule(write_yaml, tmp_path):
    # $2.49 an hour x 4 cards x 720 h: 2.49 * 4 * 720 in floats is 7171.200000000001; in cents 249 * 2880 = 717,120
    prices = write_yaml({"cards": [{"card": "H100-SXM-80GB", "hourly": 2.49,
                                    "packages": [{"name": "30-day-4x", "days": 30, "cards": 4, "price": "4999.99"}]}]},
                        "p.yaml")
    assert 2.49 * 4 * 720 != 7171.2
    month = _plan({"name": "a", "kind": "baseline", "hours": 10},
                  *({"name": f"x{i}", "runs": 4, "hours": 10, "after": ["a"] if i == 0 else [f"x{i - 1}"]}
                    for i in range(70)), {"name": "z", "kind": "export", "hours": 9.5, "after": ["x69"]},
                  on_demand_cards=4)
    rep = budget(write_yaml(month), prices=prices)
    od, pk = _by(rep, "on-demand"), _by(rep, "30-day-4x")
    # 10 + 70 x 10 + 9.5 = 719.5 h; card 1 runs a and z too: 720 started hours; cards 2-4 only the x phases,
    # from 10 h to 710 h: 700 h each; 249 x (720 + 3 x 700) = 249 x 2,820 = 702,180 cents
    assert od.hours == pytest.approx(719.5) and od.cost_cents == 702_180 and od.cost_usd == 7021.8
    assert pk.fits and pk.cost_cents == 499_999 and pk.slack_hours == pytest.approx(0.5)
    # 70 x 4 = 280 useful results: 499,999 / 280 = 1,785.71 cents -> 1,786 (half a cent up)
    assert pk.useful == 280 and pk.cost_per_useful_cents == 1_786
    assert rep.recommended == "30-day-4x"


def test_when_nothing_fits_the_lowest_priority_runs_are_cut_first(write_yaml, prices):
    # on one card for 72 h: 10 + 3 x 20 (sweep, priority 1) + 4 x 10 (extra, priority 2) = 110 h
    plan = _plan({"name": "a", "kind": "baseline", "hours": 10},
                 {"name": "sweep", "runs": 3, "hours": 20, "after": ["a"], "priority": 1},
                 {"name": "extra", "runs": 4, "hours": 10, "after": ["a"], "priority": 2})
    rep = budget(write_yaml(plan), prices=prices, packages=["3-day"], combine=False)   # one 3-day, not two
    assert rep.recommended is None
    # cut extra first, down to one run (-30 h: 80 h), then one sweep run (-20 h: 60 h <= 72)
    assert [(c.phase, c.runs_cut, c.runs_left, c.card_hours_saved) for c in rep.cut_first] == \
        [("extra", 3, 1, 30.0), ("sweep", 1, 2, 20.0)]
    assert rep.cut_for == "H100-SXM-80GB 3-day"


def test_a_budget_in_usd_is_a_limit(write_yaml, prices):
    rep = budget(write_yaml({**SEVEN_NOT_THREE, "budget_usd": "150"}), prices=prices)
    assert not _by(rep, "7-day").fits and "costs $200.00 > the budget of $150.00" in _by(rep, "7-day").why


def test_schedule_puts_runs_on_free_cards_critical_path_first(write_yaml, prices):
    # long (1 x 30 h) and short (3 x 10 h) both after a (5 h) on 4 cards: both start at 5 h; long ends at 35 h
    plan = _plan({"name": "a", "kind": "baseline", "hours": 5}, {"name": "short", "runs": 3, "hours": 10,
                                                                 "after": ["a"]},
                 {"name": "long", "hours": 30, "after": ["a"]})
    rep = budget(write_yaml(plan), prices=prices, packages=["3-day-4x"])
    s = rep.schedule
    assert s.makespan_hours == 35 and s.busy_card_hours == 5 + 30 + 30
    assert [(r.phase, r.cards, r.start_hours) for r in s.runs] == [
        ("a", (0,), 0), ("long", (0,), 5), ("short", (1,), 5), ("short", (2,), 5), ("short", (3,), 5)]


def test_hours_estimated_from_flops_say_so(write_yaml, prices):
    est = {"model": "llama-3.1-8b", "method": "lora", "tokens": 100_000_000, "batch": 4, "seq_len": 2048,
           "grad_checkpointing": True}
    plan = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": est})
    rep = budget(write_yaml(plan), prices=prices, packages=["7-day"], mfu=0.5)
    (e,) = rep.estimates
    # per token: 6 x LoRA params (41,943,040) + 4 x frozen base (8,030,261,248) + 2 x all params (the recomputed
    # forward of checkpointing) + 12 x 32 layers x 4096 x 2048 (attention)
    per_token = 6 * 41_943_040 + 4 * 8_030_261_248 + 2 * (8_030_261_248 + 41_943_040) + 12 * 32 * 4096 * 2048
    assert e.flops == per_token * 100_000_000
    assert e.hours == pytest.approx(per_token * 1e8 / (989.5e12 * 0.5) / 3600)
    assert e.how == "estimated" and e.memory_verdict == "fits" and e.max_batch >= 4 and e.phase == "ft"
    assert next(p for p in rep.phases if p.name == "ft").hours_how == "estimated"
    assert any(c.id == "budget.estimated_hours" and c.status == "warn" for c in rep.checks)
    assert _by(rep, "7-day").fits


def test_a_micro_batch_that_does_not_fit_the_card_refuses_it(write_yaml, prices):
    # without checkpointing, 4 x 2048 tokens of Llama-3.1-8B LoRA need more than an H100's 80 GB (campaign memory)
    est = {"model": "llama-3.1-8b", "method": "lora", "tokens": 1_000_000, "batch": 4, "seq_len": 2048}
    plan = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": est})
    rep = budget(write_yaml(plan), prices=prices, packages=["7-day"])
    assert rep.estimates[0].memory_verdict != "fits"
    assert not _by(rep, "7-day").fits and "does not fit H100-SXM-80GB at this micro-batch" in _by(rep, "7-day").why


def test_the_baseline_first_check(write_yaml, prices):
    loose = _plan({"name": "a", "kind": "checks", "hours": 1}, {"name": "b", "hours": 1})
    rep = budget(write_yaml(loose), prices=prices, packages=["7-day"])
    assert next(c for c in rep.checks if c.id == "budget.baseline_first").status == "warn"
    rep = budget(write_yaml(SEVEN_NOT_THREE), prices=prices, packages=["7-day"])
    assert next(c for c in rep.checks if c.id == "budget.baseline_first").status == "pass"


# ------------------------------------------------------------------------------------------ CLI


def test_cli_json_has_the_packages_and_the_recommendation(cli, write_yaml, prices, tmp_path):
    r = cli("budget", str(write_yaml(SEVEN_NOT_THREE)), "--prices", str(prices), "--json", "--plot",
            str(tmp_path / "g.svg"))
    assert r.code == 0, r.err
    d = r.json()
    # the 3-day topped up on demand: $100 + 23 h x $2.50 = $157.50, below the 7-day's $200.00
    assert d["schema"] == "campaign.budget/1" and d["recommended"] == "3-day + on-demand"
    topped = next(p for p in d["packages"] if p["name"] == "3-day + on-demand")
    assert (topped["cost_cents"], topped["hours"], topped["margin"]) == (15_750, 95.0, 0.0)
    seven = next(p for p in d["packages"] if p["name"] == "7-day")
    assert {k: seven[k] for k in ("card", "hours", "cost_usd", "fits", "slack_hours")} == \
        {"card": "H100-SXM-80GB", "hours": 95.0, "cost_usd": 200.0, "fits": True, "slack_hours": 73.0}
    assert (tmp_path / "g.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_cli_human_output_and_exit_1_when_nothing_fits(cli, write_yaml, prices):
    r = cli("budget", str(write_yaml(SEVEN_NOT_THREE)), "--prices", str(prices))
    assert r.code == 0 and "TAKE H100-SXM-80GB 3-day + on-demand" in r.out and "Schedule" in r.out
    # the 3-day alone ($100) ends at 95 h; two of them ($200: in a row, or side by side) are over a $150 budget
    capped = write_yaml({**SEVEN_NOT_THREE, "budget_usd": "150"})
    r = cli("budget", str(capped), "--prices", str(prices), "--package", "3-day")
    assert r.code == 1 and "NOTHING FITS" in r.out and "Cut first" in r.out


@pytest.mark.parametrize("phases, fragment", [
    ([{"name": "a", "hours": 1, "after": ["b"]}, {"name": "b", "hours": 1, "after": ["a"]}],
     "cycle (a -> b -> a)"),
    ([{"name": "a", "hours": -3}], "field 'hours' is -3; a duration must be a number of hours above 0"),
    ([{"name": "a", "hours": 0}], "above 0"),
    ([{"name": "a", "hours": "ten"}], "field 'hours' is 'ten'"),
    ([{"name": "a", "hours": 1, "after": ["nope"]}], "comes after 'nope', which is not a phase"),
    ([{"name": "a", "hours": 1}, {"name": "a", "hours": 2}], "listed twice"),
    ([{"name": "a", "hours": 1, "kind": "party"}], "kind"),
    ([{"name": "a"}], "give 'hours'"),
    ([{"name": "a", "hours": 1, "runs": 0}], "field 'runs' must be between 1"),
])
def test_bad_plans_are_one_line_and_exit_2(cli, write_yaml, prices, phases, fragment):
    r = cli("budget", str(write_yaml(_plan(*phases))), "--prices", str(prices))
    assert r.code == 2 and r.err.count("\n") == 1 and fragment in r.err, r.err
    assert "plan.yaml" in r.err


def test_a_package_or_card_missing_from_the_price_file_is_one_line(cli, write_yaml, prices):
    plan = str(write_yaml(SEVEN_NOT_THREE))
    r = cli("budget", plan, "--prices", str(prices), "--package", "14-day")
    assert r.code == 2 and "prices.yaml: card 'H100-SXM-80GB' has no package '14-day'" in r.err, r.err
    r = cli("budget", plan, "--prices", str(prices), "--card", "a100-80gb")
    assert r.code == 2 and "prices.yaml: no prices for card 'A100-SXM-80GB'" in r.err, r.err


@pytest.mark.parametrize("change, fragment", [
    ({"hourly": "two"}, "field 'hourly' is not an amount"),
    ({"hourly": "-1"}, "field 'hourly' must be an amount from 0"),
    ({"packages": [{"name": "3-day", "days": 0, "price": "1"}]}, "field 'days' must be between 1"),
    ({"packages": [{"name": "3-day", "days": 3}]}, "missing field 'price'"),
    ({"packages": [{"name": "x", "days": 3, "price": 1}, {"name": "x", "days": 7, "price": 2}]}, "repeat"),
])
def test_a_malformed_price_file_names_the_file_and_field(cli, write_yaml, change, fragment):
    from .conftest import PRICES

    bad = json.loads(json.dumps(PRICES))
    bad["cards"][0].update(change)
    r = cli("budget", str(write_yaml(SEVEN_NOT_THREE)), "--prices", str(write_yaml(bad, "bad.yaml")))
    assert r.code == 2 and r.err.count("\n") == 1 and fragment in r.err and "bad.yaml" in r.err, r.err


def test_the_bundled_example_prices_are_marked_as_example_data():
    from campaign.plan.prices import example_prices_path, load_prices

    p = load_prices()
    assert p.example and p.date and "example" in p.source
    assert "EXAMPLE DATA" in example_prices_path().read_text(encoding="utf-8")


def test_hours_measured_from_a_recorded_run(write_yaml, prices, monkeypatch, tmp_path):
    import campaign.track.run as run_module
    from campaign.track.run import end_run, start_run

    monkeypatch.setattr(run_module, "now", lambda: "2026-01-01T08:00:00.000Z")
    m = start_run("sweep-0", code_dir=tmp_path, with_torch=False)
    monkeypatch.setattr(run_module, "now", lambda: "2026-01-01T14:30:00.000Z")
    end_run(m.id, "completed")
    plan = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "b", "runs": 2, "measured": m.id,
                                                                 "after": ["a"]})
    rep = budget(write_yaml(plan), prices=prices, packages=["7-day"])
    b = next(p for p in rep.phases if p.name == "b")
    # 08:00 to 14:30: 6.5 h per run; 1 + 2 x 6.5 = 14 h on one card
    assert (b.hours, b.hours_how) == (6.5, "measured") and _by(rep, "7-day").hours == 14
    running = start_run("sweep-1", code_dir=tmp_path, with_torch=False)
    plan["phases"][1]["measured"] = running.id
    with pytest.raises(Exception, match="has not ended"):
        budget(write_yaml(plan), prices=prices, packages=["7-day"])


def test_a_run_too_big_for_one_card_says_how_many_cards_hold_it(write_yaml, prices):
    # full fine-tuning of Llama-3.1-8B with AdamW, all in bf16: weights, gradients and two states are 8 B per
    # parameter, 8.03e9 x 8 = 64 GB before activations and the reserve: campaign memory does not fit it on one H100
    # (80 GB, 10% reserve), and ZeRO-3 over more cards does
    est = {"model": "llama-3.1-8b", "method": "full", "tokens": 1_000_000, "batch": 1, "seq_len": 512,
           "grad_checkpointing": True}
    plan = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": est})
    rep = budget(write_yaml(plan), prices=prices, packages=["7-day"])
    why = _by(rep, "7-day").why
    assert "does not fit H100-SXM-80GB" in why and "with ZeRO-3 (set cards:" in why, why
    # and what else would make it fit, each with campaign memory's figure against the card's
    assert re.search(r"it fits on 2 cards with ZeRO-3 \(set cards: 2, shard: zero3; [\d.]+ of [\d.]+ GiB per card\)",
                     why), why
    assert re.search(r"an 8-bit optimizer fits \(optimizer: adamw-8bit; [\d.]+ of [\d.]+ GiB\)", why), why
    assert re.search(r"QLoRA fits \(method: qlora; [\d.]+ of [\d.]+ GiB\)", why), why
    # no card compared holds it: the smallest rental card of the catalog above the 79.2 GiB an H100 offers is the
    # H100 NVL (93.0 GiB usable; the GH200 has 94.98, the H200 139.80), named for the user to price
    assert re.search(r"it fits H100-NVL-94GB, the smallest rental card of the catalog that holds it \([\d.]+ of "
                     r"93.0 GiB\); add its price to the price file and compare it \(--card H100-NVL-94GB\)", why), why


def test_a_card_ruled_out_by_memory_names_a_compared_card_that_fits(write_yaml):
    # Llama-3.1-8B serving 40 x 8,192 tokens: 16 GB of weights + a bf16 KV cache of 128 KiB a token (32 layers x
    # 8 KV heads x 128 x 2 x 2 B) x 327,680 tokens = 40 GiB: too big for an L40S (48 GB), well inside an H100
    est = {"model": "llama-3.1-8b", "mode": "infer", "tokens": 1_000_000, "batch": 40, "seq_len": 8192}
    plan = {**_plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": est}),
            "compare": ["L40S-48GB", "H100-SXM-80GB"]}
    rep = budget(write_yaml(plan), packages=["7-day"])
    why = _by(rep, "7-day").why
    assert rep.recommended_card == "H100-SXM-80GB"
    l40s = next(o for o in rep.packages if o.card == "L40S-48GB")
    assert re.search(r"does not fit L40S-48GB .*; it fits H100-SXM-80GB \([\d.]+ of [\d.]+ GiB\)", l40s.why), why


def test_an_estimated_phase_of_a_family_the_formulas_do_not_know_is_not_verified(write_yaml, prices, tmp_path, cli):
    """campaign memory's memory.family, in the budget: the fit of a generic-family model is a guess, so the budget
    cannot be a go on it; a known family adds no such check."""
    pytest.importorskip("transformers")
    opt = tmp_path / "opt"
    opt.mkdir()
    (opt / "config.json").write_text(json.dumps({
        "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "ffn_dim": 256, "vocab_size": 1000, "word_embed_proj_dim": 64,
        "max_position_embeddings": 128}))
    est = {"model": str(opt), "tokens": 1_000_000, "batch": 1, "seq_len": 64}
    plan = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": est})
    rep = budget(write_yaml(plan), prices=prices, packages=["7-day"])
    (e,) = rep.estimates
    assert e.memory_verdict == "fits" and e.memory_generic
    check = next(c for c in rep.checks if c.id == "budget.memory_family")
    assert check.status == "skipped" and "ft:" in check.seen and f"campaign trace {opt}" in check.fix
    assert rep.status == "not verified"
    r = cli("budget", str(write_yaml(plan)), "--prices", str(prices), "--package", "7-day")
    assert r.code == 1 and "NOT VERIFIED" in r.out and "TAKE" not in r.out
    known = _plan({"name": "a", "kind": "baseline", "hours": 1}, {"name": "ft", "after": ["a"], "estimate": {
        "model": "llama-3.2-1b", "tokens": 1_000_000, "batch": 1, "seq_len": 64}})
    assert all(c.id != "budget.memory_family" for c in budget(write_yaml(known), prices=prices,
                                                                packages=["7-day"]).checks)
