"""Effects from results, against a textbook worked example: Montgomery, Design and Analysis of Experiments (8th ed.,
2013), section 6.3, the 2^3 plasma etch experiment (A gap, B C2F6 flow, C power; two replicates), where the effect
estimates are A = -101.625, B = 7.375, C = 306.125, AB = -24.875, AC = -153.625, BC = -2.125 and the error mean
square is 18,020.50 / 8 = 2,252.56. The figures below are recomputed by hand from the data in the test."""
from __future__ import annotations

import json
import math

import pytest

from campaign.plan.effects import analyze_ablation, holm

# etch rate per run, in Yates order, replicates I and II
ETCH = {"(1)": (550, 604), "a": (669, 650), "b": (633, 601), "ab": (642, 635),
        "c": (1037, 1052), "ac": (749, 868), "bc": (1075, 1063), "abc": (729, 860)}


@pytest.fixture
def etch(write_yaml, tmp_path):
    factors = write_yaml({"metric": "etch", "hours_per_run": 1,
                          "factors": [{"name": n, "levels": ["low", "high"]} for n in ("gap", "flow", "power")]},
                         "factors.yaml")
    lines = ["gap,flow,power,replicate,etch"]
    for label, ys in ETCH.items():
        levels = ["high" if c in label else "low" for c in "abc"]
        lines += [",".join(levels + [str(r + 1), str(y)]) for r, y in enumerate(ys)]
    results = tmp_path / "etch.csv"
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return results, factors


def test_the_plasma_etch_effects_and_error_variance(etch):
    from scipy import stats

    results, factors = etch
    rep = analyze_ablation(results, factors, seed_field="replicate")
    totals = {k: sum(v) for k, v in ETCH.items()}
    # contrast of A: a + ab + ac + abc - (1) - b - c - bc = 5802 - 6615 = -813; effect = -813 / (2 x 4)
    contrast_a = totals["a"] + totals["ab"] + totals["ac"] + totals["abc"] - totals["(1)"] - totals["b"] \
        - totals["c"] - totals["bc"]
    assert contrast_a == -813
    # the full 2^3 estimates the three-factor interaction too: ABC = 5.625 (Montgomery, Table 6.5)
    want = {"A": -101.625, "B": 7.375, "C": 306.125, "AB": -24.875, "AC": -153.625, "BC": -2.125, "ABC": 5.625}
    got = {e.effect: e.estimate for e in rep.effects}
    assert got == pytest.approx(want, abs=1e-9)
    # SS_E: sum over cells of (y1 - y2)^2 / 2 = 18,020.5 on 16 - 8 = 8 df
    ss_e = sum((y1 - y2) ** 2 / 2 for y1, y2 in ETCH.values())
    assert ss_e == 18_020.5 and rep.error_df == 8 and rep.error_variance == pytest.approx(ss_e / 8)
    a = next(e for e in rep.effects if e.effect == "A")
    se = 2 * math.sqrt(ss_e / 8) / math.sqrt(16)          # 2 s / sqrt(N)
    q = stats.t.ppf(0.975, 8)
    assert a.se == pytest.approx(se) and a.ci_low == pytest.approx(-101.625 - q * se)
    # F = SS_A / MS_E = 16 x (-101.625)^2 / 4 / 2252.5625 = 18.34 (Montgomery: P = 0.0027); t^2 = F
    f = 16 * 101.625 ** 2 / 4 / (ss_e / 8)
    assert a.p_value == pytest.approx(stats.f.sf(f, 1, 8)) and round(a.p_value, 4) == 0.0027
    assert rep.design == "full factorial" and all(e.aliases == () for e in rep.effects)


def test_comparisons_with_the_control_are_holm_corrected(etch):
    results, factors = etch
    rep = analyze_ablation(results, factors, seed_field="replicate")
    c = next(x for x in rep.comparisons if x.label == "c")
    # c - (1) per replicate: 1037 - 550 = 487, 1052 - 604 = 448: mean 467.5, paired t on 1 df
    assert c.improvement == 467.5 and c.test == "paired t" and c.n == 2
    assert len(rep.comparisons) == 7 and "Holm" in rep.correction
    ps = [x.p_value for x in rep.comparisons]
    assert [x.p_holm for x in rep.comparisons] == pytest.approx(holm(ps))


def test_holm_by_hand():
    # p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_a_half_fraction_reports_its_aliases_from_the_data(write_yaml, tmp_path):
    factors = write_yaml({"hours_per_run": 1, "factors": [{"name": n, "levels": [0, 1]} for n in "pqrs"]}, "f.yaml")
    # the 2^(4-1) with D = ABC, y = 10 + 2 x A (coded) exactly, two seeds each -> effect of A = 4, others 0
    lines = ["p,q,r,s,seed,metric"]
    for i in range(8):
        a, b, c = [(i >> j) & 1 for j in range(3)]
        d = (a + b + c) % 2 == 1   # ABC = +1 when an odd number are at +1
        for seed in (0, 1):
            lines.append(f"{a},{b},{c},{int(d)},{seed},{10 + 2 * (2 * a - 1) + 0.1 * seed}")
    (tmp_path / "r.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep = analyze_ablation(tmp_path / "r.csv", factors)
    got = {e.effect: (e.aliases, round(e.estimate, 9)) for e in rep.effects}
    assert got["A"] == (("BCD",), 4.0) and got["AB"] == (("CD",), 0.0) and rep.design == "2^(4-1) fraction"
    assert "AC" in got and "BD" not in got                 # each aliased pair once


def test_results_that_do_not_match_the_factors_are_one_line(cli, etch, tmp_path):
    results, factors = etch
    bad = tmp_path / "bad.csv"
    bad.write_text("gap,flow,power,seed,etch\nwide,low,low,1,5\n", encoding="utf-8")
    r = cli("ablate", "analyze", str(bad), "--factors", str(factors))
    assert r.code == 2 and "gap = 'wide' is not one of its levels (low, high)" in r.err, r.err
    r = cli("ablate", "analyze", str(results), "--factors", str(factors))
    assert r.code == 2 and "no 'seed' field" in r.err and "--seed-field" in r.err, r.err
    r = cli("ablate", "analyze", str(results), "--factors", str(factors), "--seed-field", "replicate", "--json")
    assert r.code == 0 and r.json()["schema"] == "campaign.ablate/1"


def test_effects_from_recorded_runs(cli, write_yaml, tmp_path):
    from campaign.track.run import end_run, start_run

    factors = write_yaml({"metric": "acc", "hours_per_run": 1,
                          "factors": [{"name": "lora.r", "levels": [8, 32]}, {"name": "lr", "levels": [1, 3]}]},
                         "f.yaml")
    # acc = 70 + 2 (r = 32) + 1 (lr = 3) + 0.5 x seed: effects 2 and 1 exactly, no interaction
    for r in (8, 32):
        for lr in (1, 3):
            for seed in (0, 1):
                m = start_run(f"r{r}-lr{lr}-s{seed}", params={"lora": {"r": r}, "lr": lr}, seeds=[seed],
                              tags=["abl"], code_dir=tmp_path, with_torch=False)
                end_run(m.id, "completed", metrics={"acc": 70 + 2 * (r == 32) + (lr == 3) + 0.5 * seed})
    failed = start_run("broken", params={"lora": {"r": 8}, "lr": 1}, seeds=[9], tags=["abl"], code_dir=tmp_path,
                       with_torch=False)
    end_run(failed.id, "failed", "out of memory")              # not a result: left out
    r = cli("ablate", "analyze", "--runs", "abl", "--factors", str(factors), "--json")
    assert r.code == 0, r.err
    d = r.json()
    got = {e["effect"]: round(e["estimate"], 9) for e in d["effects"]}
    assert got == {"A": 2.0, "B": 1.0, "AB": 0.0} and d["runs"] == 8 and d["path"] == "runs tagged 'abl'"
    r = cli("ablate", "analyze", "--runs", "none", "--factors", str(factors))
    assert r.code == 2 and "no completed run is tagged 'none'" in r.err, r.err


# Montgomery, Design and Analysis of Experiments (8th ed.), Example 6.2: the filtration rate of a chemical, an
# unreplicated 2^4 (A temperature, B pressure, C concentration, D stirring rate), responses in standard order
FILTRATION = {"(1)": 45, "a": 71, "b": 48, "ab": 65, "c": 68, "ac": 60, "bc": 80, "abc": 65, "d": 43, "ad": 100,
              "bd": 45, "abd": 104, "cd": 75, "acd": 86, "bcd": 70, "abcd": 96}


def _filtration(tmp_path, drop=()):
    factors = tmp_path / "f.yaml"
    factors.write_text(json.dumps({"hours_per_run": 1, "metric": "rate", "factors": [
        {"name": n, "levels": ["low", "high"]} for n in "ABCD"]}), encoding="utf-8")
    lines = ["A,B,C,D,seed,rate"]
    for label, y in FILTRATION.items():
        if label not in drop:
            lines.append(",".join("high" if c in label else "low" for c in "abcd") + f",0,{y}")
    results = tmp_path / "filtration.csv"
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return results, factors


def test_an_unreplicated_two_level_design_is_analysed_with_lenths_pse(tmp_path):
    from scipy import stats

    rep = analyze_ablation(*_filtration(tmp_path))
    got = {e.effect: e.estimate for e in rep.effects}
    # Montgomery's Table 6.11: all 15 effects, the four-factor interaction included
    assert got == pytest.approx({"A": 21.625, "B": 3.125, "C": 9.875, "D": 14.625, "AB": 0.125, "AC": -18.125,
                                 "AD": 16.625, "BC": 2.375, "BD": -0.375, "CD": -1.125, "ABC": 1.875, "ABD": 4.125,
                                 "ACD": -1.625, "BCD": -2.625, "ABCD": 1.375})
    # by hand: median |c| of the 15 = 2.625, s0 = 3.9375; the |c| below 2.5 s0 = 9.84 are the ten smallest,
    # median (1.625 + 1.875) / 2 = 1.75, PSE = 1.5 x 1.75 = 2.625; d = 15 / 3 = 5; ME = t(0.975, 5) x 2.625 = 6.75
    assert rep.error_method == "lenth" and rep.pse == pytest.approx(2.625) and rep.error_variance is None
    me = stats.t.ppf(0.975, 5) * 2.625
    assert me == pytest.approx(6.748, abs=1e-3)
    a = next(e for e in rep.effects if e.effect == "A")
    assert (a.ci_low, a.ci_high) == (pytest.approx(21.625 - me), pytest.approx(21.625 + me))
    # the textbook's conclusion: A, C, D, AC and AD are active, nothing else
    active = {e.effect for e in rep.effects if e.p_value < 0.05}
    assert active == {"A", "C", "D", "AC", "AD"}
    assert any("Lenth's pseudo standard error (PSE 2.625 on 15 effects" in n for n in rep.notes)
    # the half-normal plot's points: the largest, A (21.625), at Phi^-1(0.5 + 0.5 x 14.5 / 15) = 2.128
    top = rep.half_normal[-1]
    assert (top.effect, top.abs_estimate) == ("A", 21.625) and top.quantile == pytest.approx(
        stats.norm.ppf(0.5 + 0.5 * 14.5 / 15)) and top.quantile == pytest.approx(2.128, abs=1e-3)
    assert [p.effect for p in rep.half_normal[-5:]] == ["C", "D", "AD", "AC", "A"]


def test_a_missing_run_names_its_cell(tmp_path):
    rep = analyze_ablation(*_filtration(tmp_path, drop=("abd",)))
    assert rep.missing == ("abd",) and any("cell(s) abd (no run)" in n for n in rep.notes)


def test_a_response_of_1e308_is_one_line(tmp_path, cli):
    results, factors = _filtration(tmp_path)
    results.write_text(results.read_text().replace(",45\n", ",1e308\n"), encoding="utf-8")
    r = cli("ablate", "analyze", str(results), "--factors", str(factors))
    assert r.code == 2 and r.err.count("\n") == 1 and "is 1e+308, beyond +-1e+100" in r.err, r.err


def test_plackett_burman_results_give_main_effects_only(tmp_path):
    from campaign.plan.ablate import plackett_burman_rows

    # 12 runs, 11 factors, one seed; the metric is 10 + 3 x A - 2 x D (coded), exactly: A = +6, D = -4 (an effect
    # is twice the coefficient), every other main effect 0; the 2FI columns are partly correlated with the main
    # effects, so none is reported
    names = [f"f{i}" for i in range(11)]
    factors = tmp_path / "f.yaml"
    factors.write_text(json.dumps({"hours_per_run": 1, "metric": "m", "factors": [
        {"name": n, "levels": ["lo", "hi"]} for n in names]}), encoding="utf-8")
    lines = [",".join(names) + ",seed,m"]
    for row in plackett_burman_rows(11):
        lines.append(",".join("hi" if v > 0 else "lo" for v in row) + f",0,{10 + 3 * row[0] - 2 * row[3]}")
    (tmp_path / "pb.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep = analyze_ablation(tmp_path / "pb.csv", factors)
    got = {e.effect: e.estimate for e in rep.effects}
    assert set(got) == set("ABCDEFGHJKL") and rep.design.startswith("two-level screening, non-regular")
    assert got["A"] == pytest.approx(6) and got["D"] == pytest.approx(-4)
    assert all(got[x] == pytest.approx(0, abs=1e-12) for x in "BCEFGHJKL")
