"""The plan figures, checked through matplotlib's objects (offsets, line data, texts), not by eye: the half-normal
plot of an unreplicated two-level ablation (Daniel 1959) with Lenth's (1989) ME and SME, and the budget's Gantt
chart with the package's rental window."""
from __future__ import annotations

import json
import math

import pytest

from campaign.plan.effects import analyze_ablation

# an unreplicated 2^3 (A, B, C), one run per cell, responses in Yates order
Y = {"(1)": 10.0, "a": 20.0, "b": 11.5, "ab": 21.0, "c": 14.0, "ac": 30.0, "bc": 13.5, "abc": 30.0}
# by hand, effect = contrast / 4 (signs from Yates' table):
#   A   = (20 + 21 + 30 + 30 - 10 - 11.5 - 14 - 13.5) / 4 = 52 / 4  = 13
#   B   = (11.5 + 21 + 13.5 + 30 - 10 - 20 - 14 - 30) / 4 = 2 / 4   = 0.5
#   C   = (14 + 30 + 13.5 + 30 - 10 - 20 - 11.5 - 21) / 4 = 25 / 4  = 6.25
#   AB  = (10 + 21 + 14 + 30 - 20 - 11.5 - 30 - 13.5) / 4 = 0
#   AC  = (10 + 11.5 + 30 + 30 - 20 - 21 - 14 - 13.5) / 4 = 13 / 4  = 3.25
#   BC  = (10 + 20 + 13.5 + 30 - 11.5 - 21 - 14 - 30) / 4 = -3 / 4  = -0.75
#   ABC = (20 + 11.5 + 14 + 30 - 10 - 21 - 30 - 13.5) / 4 = 1 / 4   = 0.25
EFFECTS = {"A": 13.0, "B": 0.5, "C": 6.25, "AB": 0.0, "AC": 3.25, "BC": -0.75, "ABC": 0.25}
# Lenth: |c| sorted 0, .25, .5, .75, 3.25, 6.25, 13; s0 = 1.5 x .75 = 1.125; below 2.5 s0 = 2.8125: 0 .. .75,
# median .375, PSE = 1.5 x .375 = 0.5625
PSE = 0.5625


def _unreplicated(tmp_path):
    factors = tmp_path / "f.yaml"
    factors.write_text(json.dumps({"hours_per_run": 1, "metric": "loss", "factors": [
        {"name": n, "levels": ["low", "high"]} for n in "ABC"]}), encoding="utf-8")
    lines = ["A,B,C,seed,loss"] + [",".join("high" if c in label else "low" for c in "abc") + f",0,{y}"
                                   for label, y in Y.items()]
    results = tmp_path / "r.csv"
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return results, factors


def _margins(m, alpha=0.05):
    from scipy import stats

    d = m / 3
    gamma = (1 + (1 - alpha) ** (1 / m)) / 2
    return stats.t.ppf(1 - alpha / 2, d) * PSE, stats.t.ppf(gamma, d) * PSE


def test_the_half_normal_plot_draws_each_effect_at_its_quantile_with_lenths_margins(tmp_path):
    from matplotlib.collections import PathCollection
    from scipy import stats

    from campaign import plots

    rep = analyze_ablation(*_unreplicated(tmp_path))
    assert {e.effect: e.estimate for e in rep.effects} == pytest.approx(EFFECTS)
    assert rep.pse == pytest.approx(PSE)
    fig = plots.half_normal(rep.to_dict())
    ax = fig.axes[0]
    # the i-th smallest |effect| at the half-normal quantile of (i - 0.5) / m (scipy's halfnorm, a second method)
    ranked = sorted(EFFECTS, key=lambda k: abs(EFFECTS[k]))
    want = [(stats.halfnorm.ppf((i - 0.5) / 7), abs(EFFECTS[k])) for i, k in enumerate(ranked, start=1)]
    scatter = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(scatter) == 1
    assert scatter[0].get_offsets().tolist() == [[pytest.approx(x), pytest.approx(y)] for x, y in want]
    # each point labelled with its effect's name, at the point
    labels = {t.get_text(): tuple(t.xy) for t in ax.texts if t.get_text() in EFFECTS}
    assert labels == {k: (pytest.approx(x), pytest.approx(y)) for k, (x, y) in zip(ranked, want, strict=True)}
    # Lenth's ME and SME as horizontal lines at t(0.975; 7/3) PSE and t(gamma; 7/3) PSE, labelled with their values
    me, sme = _margins(7)
    assert PSE * 3.182 < me < PSE * 4.303 and sme > me     # t(0.975; 7/3) between t(0.975; 3) and t(0.975; 2)
    flat = [ln for ln in ax.lines if len(set(ln.get_ydata())) == 1 and tuple(ln.get_xdata()) == (0, 1)]
    assert sorted(ln.get_ydata()[0] for ln in flat) == [pytest.approx(me), pytest.approx(sme)]
    texts = [t.get_text() for t in ax.texts]
    assert f"ME = {me:,.4g}" in texts and f"SME = {sme:,.4g}" in texts
    # the null line through the origin of slope PSE, and labelled axes
    null = next(ln for ln in ax.lines if ln.get_xdata()[0] == 0 and ln.get_ydata()[0] == 0)
    assert null.get_ydata()[1] / null.get_xdata()[1] == pytest.approx(PSE)
    assert "half-normal" in ax.get_xlabel() and "|effect|" in ax.get_ylabel()


def test_lenths_margins_against_his_table_for_15_effects():
    # Lenth (1989): 15 effects, alpha 0.05, d = 5: ME = 2.57 PSE, SME = 5.22 PSE
    from scipy import stats

    from campaign.plots.plan import lenth_margins

    me, sme = lenth_margins(1.0, 15, 0.05, stats)
    assert (round(me, 2), round(sme, 2)) == (2.57, 5.22)


def test_ablate_analyze_writes_the_half_normal_plot(cli, tmp_path):
    results, factors = _unreplicated(tmp_path)
    out = tmp_path / "hn.svg"
    r = cli("ablate", "analyze", str(results), "--factors", str(factors), "--plot", str(out))
    assert r.code == 0, r.err
    assert out.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))


def test_ablate_analyze_plot_of_a_replicated_design_is_one_line(cli, tmp_path):
    results, factors = _unreplicated(tmp_path)
    text = results.read_text(encoding="utf-8").splitlines()
    results.write_text("\n".join(text + [ln.replace(",0,", ",1,") for ln in text[1:]]) + "\n", encoding="utf-8")
    out = tmp_path / "hn.png"
    r = cli("ablate", "analyze", str(results), "--factors", str(factors), "--plot", str(out))
    assert r.code == 2 and "unreplicated" in r.err and "Traceback" not in r.err and not out.exists()
    bad = cli("ablate", "analyze", str(results), "--factors", str(factors), "--plot", str(tmp_path / "hn.txt"))
    assert bad.code == 2 and ".png, .svg or .pdf" in bad.err


def test_the_gantt_chart_draws_a_7_day_packages_window_at_168_hours():
    from campaign import plots

    schedule = {"cards": 1, "runs": [{"phase": "sweep", "cards": [0], "start_hours": 0, "end_hours": 150},
                                     {"phase": "final", "cards": [0], "start_hours": 150, "end_hours": 190}]}
    fig = plots.gantt(schedule, "t", window=7 * 24.0)
    ax = fig.axes[0]
    assert any(tuple(ln.get_xdata()) == (168, 168) for ln in ax.lines)
    assert "rental window: 168 h" in [t.get_text() for t in ax.get_legend().get_texts()]
    # the hours past the window (168 to the schedule's 190) shaded
    spans = [p for p in ax.patches if getattr(p, "get_facecolor", None) and p.get_alpha() is not None
             and p.get_alpha() < 1]
    xs = [p.get_path().transformed(p.get_patch_transform()).vertices[:, 0] for p in spans]
    assert any(math.isclose(min(x), 168) and max(x) >= 190 for x in xs)
    fig3 = plots.gantt(schedule, "t", window=3 * 24.0)
    assert "rental window: 72 h" in [t.get_text() for t in fig3.axes[0].get_legend().get_texts()]


def test_the_gantt_chart_draws_the_set_up_before_the_first_run():
    from campaign import plots

    # 0.5 h of set-up billed before the first step, then a 10 h run on each of 2 cards: on the rental's clock the
    # runs go from 0.5 h to 10.5 h, the set-up from 0 to 0.5 h on both cards; the 3-day ends at 72 h
    schedule = {"cards": 2, "runs": [{"phase": "sweep", "cards": [0], "start_hours": 0, "end_hours": 10},
                                     {"phase": "sweep", "cards": [1], "start_hours": 0, "end_hours": 10}]}
    fig = plots.gantt(schedule, "t", window=72.0, label="3-day ends at 72 h", setup_hours=0.5)
    ax = fig.axes[0]
    bars = [(round(p.get_x(), 9), round(p.get_width(), 9), p.get_hatch()) for p in ax.patches
            if hasattr(p, "get_hatch") and hasattr(p, "get_x")]
    assert bars.count((0.5, 10, None)) == 2 and bars.count((0, 0.5, "//")) == 2, bars
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "set-up: 0.5 h billed before the first step" in legend and "3-day ends at 72 h" in legend
    # no set-up: the runs start at 0 and nothing is hatched
    bare = [(p.get_x(), p.get_hatch()) for p in plots.gantt(schedule, "t").axes[0].patches if hasattr(p, "get_x")]
    assert sorted(bare) == [(0, None), (0, None)]
