"""`campaign ablate analyze` says what to take (issue 49, item 2): the setting the fitted factorial model favours,
its predicted gain over the control with a 95% interval, checked against statsmodels' OLS on factorials the tests
write with planted effects; the headline comes from the factorial fit even when every cell is "inconclusive"
against the control; a setting resting on an aliased effect says so; multi-level factors fall back to the best cell
against the control (its interval checked with scipy)."""
from __future__ import annotations

import csv
import itertools
import json

import pytest

pytest.importorskip("scipy")

# three two-level factors; the control is each one's first level
FACTORS = [("lr", ["1e-4", "3e-4"]), ("rank", ["8", "32"]), ("targets", ["attention", "all-linear"]),
           ("epochs", ["1", "2"])]


def _write(tmp_path, k: int, rows: list[dict], *, name: str = "ablation", extra: dict | None = None):
    factors = {"name": name, "metric": "f1", "hours_per_run": 1,
               "factors": [{"name": n, "levels": levels, "control": levels[0]} for n, levels in FACTORS[:k]],
               **(extra or {})}
    fpath = tmp_path / f"{name}.yaml"
    fpath.write_text(json.dumps(factors), encoding="utf-8")
    rpath = tmp_path / f"{name}.csv"
    with rpath.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=[n for n, _ in FACTORS[:k]] + ["seed", "f1"])
        w.writeheader()
        w.writerows(rows)
    return rpath, fpath


def _factorial(k: int, seeds: int, truth, noise: float, rng_seed: int, *, keep=lambda x: True):
    """Rows of a 2^k factorial: coded x (-1 control, +1 other), f1 = truth(x) + seed noise."""
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    rows, coded = [], []
    for x in itertools.product((-1, 1), repeat=k):
        if not keep(x):
            continue
        for s in range(seeds):
            y = truth(x) + rng.normal(0, noise)
            rows.append({**{FACTORS[i][0]: FACTORS[i][1][(x[i] + 1) // 2] for i in range(k)}, "seed": s, "f1": y})
            coded.append((*x, y))
    return rows, coded


def _ols(coded, k: int, formula: str):
    import pandas as pd
    import statsmodels.formula.api as smf

    letters = "ABCD"[:k]
    df = pd.DataFrame(coded, columns=[*letters, "y"])
    return smf.ols(formula, data=df).fit(), letters


def test_the_recommended_setting_is_the_planted_best_and_its_gain_is_statsmodels_prediction(cli, tmp_path):
    pytest.importorskip("statsmodels")
    # y = 70 + 0.8 A - 0.6 B + 0.3 C + 0.5 AB (coded half-effects). Worked out by hand over the 8 settings:
    # A=+1, B=-1 gives 0.8 + 0.6 - 0.5 = 0.9, the best pair; C=+1 adds 0.3: 1.2. The control (all -1):
    # -0.8 + 0.6 - 0.3 + 0.5 = 0. True best: cell 'ac' (lr 3e-4, rank 8, all-linear), true gain 1.2.

    def truth(x):
        a, b, c = x
        return 70 + 0.8 * a - 0.6 * b + 0.3 * c + 0.5 * a * b

    rows, coded = _factorial(3, 2, truth, 0.15, 7)
    results, factors = _write(tmp_path, 3, rows)
    r = cli("ablate", "analyze", str(results), "--factors", str(factors), "--json")
    assert r.code == 0, r.err
    rec = r.json()["recommendation"]
    assert rec["setting"] == {"lr": "3e-4", "rank": "8", "targets": "all-linear"} and rec["label"] == "ac"
    fit, _ = _ols(coded, 3, "y ~ (A + B + C) ** 2")
    import pandas as pd

    at = pd.DataFrame({"A": [1, -1], "B": [-1, -1], "C": [1, -1]})
    pred = fit.predict(at)
    assert rec["predicted_gain"] == pytest.approx(pred[0] - pred[1], abs=1e-9)
    # the interval of the prediction difference: statsmodels' t test of the contrast, 16 - 7 = 9 residual df
    # each model term at (A, B, C) = (1, -1, 1) minus at the control (-1, -1, -1): A 2, B 0, C 2, AB -1 - 1 = -2,
    # AC 1 - 1 = 0, BC -1 - 1 = -2
    row = {"Intercept": 0, "A": 2, "B": 0, "C": 2, "A:B": -2, "A:C": 0, "B:C": -2}
    names = fit.model.exog_names
    contrast = [[row[n] for n in names]]
    low, high = fit.t_test(contrast).conf_int(alpha=0.05)[0]
    assert rec["ci95"] == pytest.approx([low, high], abs=1e-9)
    assert rec["ci95"][0] < 1.2 < rec["ci95"][1]          # it covers the planted gain
    assert rec["aliased_with"] == [] and "factorial fit" in rec["basis"] and "9 residual df" in rec["basis"]
    # the terms whose column differs between 'ac' and the control (A, C, AB, BC): those not told apart from zero are
    # named, the others not
    effects = {e["effect"]: e for e in r.json()["effects"]}
    weak = [effects[t] for t in ("A", "C", "AB", "BC") if effects[t]["p_value"] >= 0.05]
    assert rec["basis"].split("; ")[-2] == "it also rests on effects not told apart from zero at 5%: " + ", ".join(
        f"{e['names']} (p {e['p_value']:.2g})" for e in weak)
    assert effects["BC"]["p_value"] >= 0.05 and effects["A"]["p_value"] < 0.05     # both cases are exercised
    text = cli("ablate", "analyze", str(results), "--factors", str(factors)).out
    assert "TAKE lr=3e-4, rank=8, targets=all-linear (cell ac): predicted gain " \
           f"{rec['predicted_gain']:+,.4g}" in " ".join(text.split())


def test_a_lower_is_better_metric_recommends_the_lowest_predicted_setting(cli, tmp_path):
    pytest.importorskip("statsmodels")
    # loss = 2 - 0.3 A + 0.2 B: lowest at A=+1, B=-1 (cell 'a'): 2 - 0.3 - 0.2 = 1.5; the control (-1, -1) is
    # 2 + 0.3 - 0.2 = 2.1: a gain (reduction) of 0.6
    rows, coded = _factorial(2, 3, lambda x: 2 - 0.3 * x[0] + 0.2 * x[1], 0.05, 3)
    results, factors = _write(tmp_path, 2, rows)
    r = cli("ablate", "analyze", str(results), "--factors", str(factors), "--lower-is-better", "--json")
    assert r.code == 0, r.err
    rec = r.json()["recommendation"]
    fit, _ = _ols(coded, 2, "y ~ (A + B) ** 2")
    import pandas as pd

    pred = fit.predict(pd.DataFrame({"A": [1, -1], "B": [-1, -1]}))
    assert rec["label"] == "a" and rec["predicted_gain"] == pytest.approx(pred[1] - pred[0], abs=1e-9)
    assert rec["ci95"][0] < 0.6 < rec["ci95"][1]


def test_every_cell_inconclusive_against_the_control_the_headline_comes_from_the_factorial_fit(cli, tmp_path):
    # the case: a 2^4 full factorial on 2 seeds. Against the control each cell has a paired t on 1 df
    # (t 12.7) and Holm over 15 comparisons: inconclusive; the factorial effects use all 32 runs (16 df).
    # Planted: A +1.0, C +0.6 (half-effects), the rest null; best: A and C changed ('ac'), gain 2 x 1.0 + 2 x 0.6
    rows, _ = _factorial(4, 2, lambda x: 70 + 1.0 * x[0] + 0.6 * x[2], 0.35, 11)
    results, factors = _write(tmp_path, 4, rows)
    d = cli("ablate", "analyze", str(results), "--factors", str(factors), "--json").json()
    assert {c["verdict"] for c in d["comparisons"]} == {"inconclusive"}             # the situation
    p = {e["effect"]: e["p_value"] for e in d["effects"]}
    assert p["A"] < 1e-6 and p["C"] < 1e-4
    rec = d["recommendation"]
    assert rec["setting"]["lr"] == "3e-4" and rec["setting"]["targets"] == "all-linear"
    assert rec["basis"].startswith("factorial fit")
    assert rec["ci95"][0] > 0 and rec["ci95"][0] < 3.2 < rec["ci95"][1]
    text = " ".join(cli("ablate", "analyze", str(results), "--factors", str(factors)).out.split())
    assert text.split(" · ")[3].startswith("metric f1 TAKE lr=3e-4")                   # the headline, first


def test_a_setting_resting_on_an_aliased_effect_says_the_design_cannot_separate_them(cli, tmp_path):
    # a 2^(3-1) fraction, C = AB (resolution III): A's column is BC's. A +0.9 planted: take A, and the design
    # cannot tell A from BC
    rows, _ = _factorial(3, 2, lambda x: 70 + 0.9 * x[0], 0.1, 5, keep=lambda x: x[2] == x[0] * x[1])
    results, factors = _write(tmp_path, 3, rows)
    d = cli("ablate", "analyze", str(results), "--factors", str(factors), "--json").json()
    rec = d["recommendation"]
    assert rec["setting"]["lr"] == "3e-4"
    assert any(a.startswith("A = ") and "BC" in a for a in rec["aliased_with"])
    assert "cannot separate" in rec["basis"]
    text = " ".join(cli("ablate", "analyze", str(results), "--factors", str(factors)).out.split())
    assert "the design cannot separate A = " in text


def test_no_setting_beats_the_control_keep_it(cli, tmp_path):
    # every change lowers the metric: the best setting is the control, gain 0
    rows, _ = _factorial(2, 2, lambda x: 70 - 0.5 * x[0] - 0.4 * x[1], 0.05, 2)
    results, factors = _write(tmp_path, 2, rows)
    rec = cli("ablate", "analyze", str(results), "--factors", str(factors), "--json").json()["recommendation"]
    assert rec["label"] == "(1)" and rec["predicted_gain"] == 0 and rec["ci95"] is None
    assert "KEEP THE CONTROL" in cli("ablate", "analyze", str(results), "--factors", str(factors)).out


def test_multi_level_factors_recommend_the_best_cell_against_the_control_with_its_paired_interval(cli, tmp_path):
    from scipy import stats

    factors = {"name": "m", "metric": "f1", "hours_per_run": 1,
               "factors": [{"name": "rank", "levels": [8, 16, 32], "control": 8}]}
    fpath = tmp_path / "m.yaml"
    fpath.write_text(json.dumps(factors), encoding="utf-8")
    values = {"8": [70.0, 70.4, 69.8], "16": [71.0, 71.5, 70.6], "32": [70.5, 70.3, 70.1]}
    rpath = tmp_path / "m.csv"
    rpath.write_text("rank,seed,f1\n" + "".join(f"{k},{s},{v}\n" for k, vs in values.items()
                                                 for s, v in enumerate(vs)), encoding="utf-8")
    rec = cli("ablate", "analyze", str(rpath), "--factors", str(fpath), "--json").json()["recommendation"]
    diffs = [a - b for a, b in zip(values["16"], values["8"], strict=True)]       # 1.0, 1.1, 0.8
    mean = sum(diffs) / 3
    low, high = stats.t.interval(0.95, 2, loc=mean, scale=stats.sem(diffs))
    assert rec["setting"] == {"rank": "16"} and rec["predicted_gain"] == pytest.approx(mean)
    assert rec["ci95"] == pytest.approx([low, high]) and "best mean improvement" in rec["basis"]
