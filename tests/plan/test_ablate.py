"""Ablation designs checked against their known structure: one factor at a time, the full factorial, and the
2^(4-1) fraction with I = ABCD (resolution IV: mains aliased with three-factor interactions, two-factor
interactions in pairs; Montgomery, Design and Analysis of Experiments, section 8.2; Box, Hunter & Hunter,
Statistics for Experimenters, ch. 6); seeds by power; the choice under a budget; bad factors files."""
from __future__ import annotations

import pytest

from campaign.errors import InputError
from campaign.plan.ablate import (
    Factor,
    aliases,
    defining_relation,
    fractional,
    full_factorial,
    ofat,
    parse_generator,
    plan_ablation,
)


def _two(n):
    return tuple(Factor(f"f{i}", "ABCDEFGH"[i], ("lo", "hi"), "lo") for i in range(n))


def test_half_fraction_with_I_equals_ABCD_is_resolution_iv_with_its_aliases():
    d = fractional(_two(4), seeds=2, hours=1.0, generators=("D=ABC",))
    assert d.defining_relation == ("ABCD",) and d.resolution == 4 and len(d.cells) == 8
    got = {a.effect: a.aliases for a in d.aliases}
    # every effect times ABCD: A.ABCD = BCD, ..., AB.ABCD = CD, AC = BD, AD = BC
    assert got == {"A": ("BCD",), "B": ("ACD",), "C": ("ABD",), "D": ("ABC",), "AB": ("CD",), "AC": ("BD",),
                   "AD": ("BC",), "BC": ("AD",), "BD": ("AC",), "CD": ("AB",)}
    assert d.clear_interactions == () and d.aliased_interactions == ("AB = CD", "AC = BD", "AD = BC")
    # the 8 runs are the half of the 2^4 where the product ABCD = +1: an even number of factors at 'hi'
    assert sorted(c.label for c in d.cells) == sorted(["(1)", "ab", "ac", "ad", "bc", "bd", "cd", "abcd"])
    assert d.includes_control and d.runs == 16 and d.card_hours == 16


def test_the_other_half_and_a_resolution_iii_quarter():
    d = fractional(_two(4), seeds=1, hours=1.0, generators=("D=-ABC",))
    # I = -ABCD: an odd number of factors at 'hi'; the control (none) is not a run
    assert d.defining_relation == ("-ABCD",) and not d.includes_control
    assert sorted(c.label for c in d.cells) == sorted(["a", "b", "c", "d", "abc", "abd", "acd", "bcd"])
    q = fractional(_two(5), seeds=1, hours=1.0, p=2)
    # standard 2^(5-2): D = AB, E = AC -> I = ABD = ACE = BCDE (the product ABD.ACE = BCDE): resolution III
    assert sorted(w.lstrip("-") for w in q.defining_relation) == ["ABD", "ACE", "BCDE"] and q.resolution == 3
    assert {a.effect: tuple(x.lstrip("-") for x in a.aliases) for a in q.aliases}["A"] == ("BD", "CE")
    assert q.includes_control and len(q.cells) == 8


def test_defining_relation_and_aliases_from_the_algebra():
    gens = [parse_generator("E=ABC", "ABCDEF"), parse_generator("F=BCD", "ABCDEF")]
    words = sorted(w for _, w in [(s, "".join(sorted(x))) for s, x in defining_relation(gens)])
    # 2^(6-2) with E = ABC, F = BCD: I = ABCE = BCDF = ADEF (Montgomery's resolution IV 2^(6-2))
    assert words == ["ABCE", "ADEF", "BCDF"]
    al = {a.effect: a.aliases for a in aliases("ABCDEF", defining_relation(gens))}
    # A x ABCE = BCE, A x ADEF = DEF (A x BCDF = ABCDF, order 5, left out); AB x ABCE = CE, the others of order 4
    assert al["AB"] == ("CE",) and al["A"] == ("BCE", "DEF")


def test_full_factorial_and_ofat_counts():
    f = (Factor("lr", "A", ("1", "2", "3"), "1"), Factor("rank", "B", ("8", "16"), "8"))
    full = full_factorial(f, seeds=3, hours=2.0)
    assert len(full.cells) == 6 and full.runs == 18 and full.card_hours == 36
    one = ofat(f, seeds=3, hours=2.0)
    # control, lr=2, lr=3, rank=16: 1 + (3 - 1) + (2 - 1) cells
    assert [c.label for c in one.cells] == ["(1)", "a1", "a2", "b"] and one.runs == 12


def test_standard_order_and_run_first_leaves_a_clean_half(write_yaml):
    path = write_yaml({"hours_per_run": 1, "seeds": 2, "design": "full",
                       "factors": [{"name": n, "levels": [0, 1]} for n in ("x", "y", "z")]}, "f.yaml")
    rep = plan_ablation(path)
    assert [c.label for c in rep.design.cells] == ["(1)", "a", "b", "ab", "c", "ac", "bc", "abc"]
    # control, then the half with ABC = -1 (an even number of changes), then the other half
    assert rep.run_first == ("(1)", "ab", "ac", "bc", "a", "b", "c", "abc")


def test_seeds_from_power_and_the_design_chosen_under_a_budget(write_yaml):
    from campaign.evaluate.stats import seeds_for_power

    factors = [{"name": n, "levels": ["a", "b"]} for n in ("p", "q", "r", "s")]
    path = write_yaml({"hours_per_run": 2.5, "seed_sd": 0.6, "min_effect": 1.0, "card": "h100",
                       "budget_gpu_hours": 50, "factors": factors}, "f.yaml")
    n = seeds_for_power(1.0, 0.6)
    rep = plan_ablation(path)
    assert rep.seeds_paired == n and rep.seeds_how == "power"
    # full 2^4: 16 cells x max(2, ceil(2n/16)) seeds x 2.5 h = 80 h > 50; the 2^(4-1): 8 x 2 x 2.5 = 40 h fits
    assert n <= 16
    assert rep.design.kind == "fractional" and rep.design.seeds_per_cell == 2 and rep.design.card_hours == 40
    assert rep.fits and any("over the budget" in c for c in rep.cut)
    ofat_ = next(d for d in rep.alternatives if d.kind == "ofat" and d.seeds_per_cell == max(n, 2))
    assert ofat_.runs == 5 * max(n, 2)
    # billed as campaign budget bills: 40 card-hours x 1.15 (the default margin) = 46 started hours x $2.99
    # (the example prices) = $137.54
    assert rep.design.cost_cents == 13_754 and rep.margin == 0.15


def test_over_budget_cuts_factors_from_the_end(write_yaml, cli):
    factors = [{"name": n, "levels": ["a", "b"]} for n in ("p", "q", "r", "s")]
    path = write_yaml({"hours_per_run": 1, "seeds": 2, "budget_gpu_hours": 5, "factors": factors}, "f.yaml")
    rep = plan_ablation(path)
    # the smallest design, OFAT over 4 factors, is 5 cells x 2 = 10 h > 5; OFAT over p only: 2 x 2 = 4 h
    assert not rep.fits and any("factors q, r, s" in c for c in rep.cut)
    r = cli("ablate", "plan", str(path))
    assert r.code == 1 and "OVER BUDGET" in r.out
    r = cli("ablate", "plan", str(path), "--budget-gpu-hours", "100", "--json")
    assert r.code == 0 and r.json()["design"]["kind"] == "full" and r.json()["schema"] == "campaign.ablate_plan/1"


@pytest.mark.parametrize("factors, fragment", [
    ([{"name": "lr", "levels": [0.1]}], "factor 'lr' has 1 level(s); a factor needs at least two"),
    ([{"name": "lr", "levels": [1, 2], "control": 3}], "control '3' of factor 'lr' is not one of its levels"),
    ([{"name": "lr", "levels": [1, 1]}], "lists a level twice"),
    ([], "field 'factors' is empty"),
])
def test_bad_factors_files_are_one_line_and_exit_2(cli, write_yaml, factors, fragment):
    path = write_yaml({"hours_per_run": 1, "factors": factors}, "f.yaml")
    r = cli("ablate", "plan", str(path))
    assert r.code == 2 and r.err.count("\n") == 1 and fragment in r.err and "f.yaml" in r.err, r.err


def test_bad_generators_and_designs_are_refused(cli, write_yaml):
    base = {"hours_per_run": 1, "factors": [{"name": n, "levels": [0, 1]} for n in "wxyz"]}
    r = cli("ablate", "plan", str(write_yaml({**base, "design": "fractional", "generators": ["D=AD"]}, "f.yaml")))
    assert r.code == 2 and "generator 'D=AD' is not of the form" in r.err, r.err
    three = {"hours_per_run": 1, "design": "fractional", "factors": [{"name": "a", "levels": [1, 2, 3]},
                                                                     {"name": "b", "levels": [1, 2]}]}
    r = cli("ablate", "plan", str(write_yaml(three, "g.yaml")))
    assert r.code == 2 and "needs two levels per factor; 'a' has more" in r.err, r.err
    r = cli("ablate", "plan", str(write_yaml({**base, "budget_usd": "10"}, "h.yaml")))
    assert r.code == 2 and "needs the 'card'" in r.err, r.err


def test_hours_scale_per_level_prices_each_cell(write_yaml):
    factors = [{"name": n, "levels": ["a", "b"]} for n in ("p", "q", "r")] + \
        [{"name": "epochs", "levels": [1, 2], "hours_scale": [1, 2]}]
    rep = plan_ablation(write_yaml({"hours_per_run": 2, "seeds": 2, "design": "fractional", "factors": factors},
                                   "f.yaml"))
    # 2^(4-1): 4 cells at 1 epoch x 2 seeds x 2 h + 4 cells at 2 epochs x 2 seeds x 4 h = 16 + 32 = 48 h
    assert sum(c.levels["epochs"] == "2" for c in rep.design.cells) == 4 and rep.design.card_hours == 48
    bad = write_yaml({"hours_per_run": 2, "factors": [{"name": "e", "levels": [1, 2], "hours_scale": [1]}]}, "g.yaml")
    with pytest.raises(Exception, match="one number above 0 .at most 1,000. per level"):
        plan_ablation(bad)


def test_plackett_burman_designs_match_the_published_table():
    import collections
    import itertools

    from campaign.plan.ablate import PB_ROWS, plackett_burman_rows

    # Plackett & Burman (1946) / Montgomery Table 8.23: the first rows of the 12- and 20-run designs
    assert PB_ROWS[12] == "++-+++---+-" and PB_ROWS[20] == "++--++++-+-+----++-"
    for k in range(2, 24):
        rows = plackett_burman_rows(k)
        n = len(rows)
        # runs: the smallest multiple of 4 above k (pyDOE3's pbdesign gives the same: 8 for 7, 12 for 11, 16 for
        # 12 and 15, 20 for 19); every column balanced and orthogonal to every other
        assert n == 4 * -(-(k + 1) // 4)
        cols = list(zip(*rows, strict=True))
        assert all(sum(c) == 0 for c in cols)
        assert all(sum(x * y for x, y in zip(a, b, strict=True)) == 0 for a, b in itertools.combinations(cols, 2))
    # the 12-run design projects onto any three factors as a full 2^3 plus a half fraction (counts 1,1,1,1,2,2,2,2),
    # as pyDOE3's pbdesign(11) does; the control (all minus) is a run
    rows = plackett_burman_rows(11)
    shapes = {tuple(sorted(collections.Counter(tuple(r[i] for i in c) for r in rows).values()))
              for c in itertools.combinations(range(11), 3)}
    assert shapes == {(1, 1, 1, 1, 2, 2, 2, 2)} and [-1] * 11 in rows
    with pytest.raises(InputError, match="tabulated ones go to 24 runs"):
        plackett_burman_rows(24)


def test_plackett_burman_agrees_with_pydoe3():
    pydoe3 = pytest.importorskip("pyDOE3")
    import numpy as np

    from campaign.plan.ablate import plackett_burman_rows

    for k in (7, 11, 12, 15, 19, 23):
        theirs, ours = pydoe3.pbdesign(k), np.array(plackett_burman_rows(k))
        assert theirs.shape == ours.shape
        assert (ours.T @ ours == theirs.T @ theirs).all()          # both orthogonal: N on the diagonal


def test_a_pb_plan_screens_many_factors(write_yaml):
    factors = [{"name": f"f{i}", "levels": [0, 1]} for i in range(11)]
    rep = plan_ablation(write_yaml({"hours_per_run": 1, "seeds": 2, "design": "pb", "factors": factors}, "f.yaml"))
    assert rep.design.kind == "pb" and rep.design.runs == 24
    assert rep.design.name == "Plackett-Burman screening, 12 cells"
    assert "(1)" in [c.label for c in rep.design.cells]
    assert next(c for c in rep.checks if c.id == "ablate.resolution").status == "warn"


def test_runs_randomized_with_their_seed_and_blocked_over_cards(write_yaml):
    base = {"hours_per_run": 1, "seeds": 1, "design": "full", "factors": [{"name": n, "levels": [0, 1]}
                                                                            for n in "wxyz"]}
    a = plan_ablation(write_yaml({**base, "randomize_seed": 7}, "a.yaml"))
    b = plan_ablation(write_yaml({**base, "randomize_seed": 7}, "b.yaml"))
    c = plan_ablation(write_yaml({**base, "randomize_seed": 8}, "c.yaml"))
    plain = plan_ablation(write_yaml(base, "d.yaml"))
    assert a.run_order == b.run_order != c.run_order and a.order_seed == 7 and plain.order_seed is None
    assert sorted(a.run_order) == sorted(plain.run_order) and len(a.run_order) == 16
    assert plain.run_order[0] == "(1)#1" and any("randomized with seed 7" in n for n in a.notes)
    # a 2^4 in four blocks: block words ABC and ABD, so ABC, ABD and their product CD are confounded with the cards
    # (Box, Hunter & Hunter, Statistics for Experimenters, 2nd ed., section 5.15); four cells per card
    four = plan_ablation(write_yaml({**base, "blocks": 4}, "e.yaml"))
    assert four.block_confounded == ("CD", "ABC", "ABD") and [len(x.runs) for x in four.blocks] == [4, 4, 4, 4]
    # two blocks: the four-factor interaction ABCD; with two seeds each card runs one whole replicate instead
    two = plan_ablation(write_yaml({**base, "blocks": 2}, "f.yaml"))
    assert two.block_confounded == ("ABCD",)
    reps = plan_ablation(write_yaml({**base, "seeds": 2, "blocks": 2}, "g.yaml"))
    assert reps.block_confounded == () and all(r.endswith("#1") for r in reps.blocks[0].runs)
    # randomized within each block
    mixed = plan_ablation(write_yaml({**base, "blocks": 2, "randomize_seed": 3}, "h.yaml"))
    assert [sorted(x.runs) for x in mixed.blocks] == [sorted(x.runs) for x in two.blocks]
    with pytest.raises(InputError, match="blocks: 3 needs at least 3 seeds per cell"):
        plan_ablation(write_yaml({**base, "blocks": 3}, "i.yaml"))
