"""TOST on paired scores, checked against statsmodels' ttost_paired and a hand count."""
from __future__ import annotations

import math
import random

import pytest

from campaign.errors import InputError
from campaign.evaluate.equivalence import paired_tost


def test_the_same_p_value_and_statistics_as_statsmodels():
    weightstats = pytest.importorskip("statsmodels.stats.weightstats")
    rng = random.Random(0)
    base = [rng.gauss(0.7, 0.1) for _ in range(50)]
    cand = [b + rng.gauss(0.004, 0.02) for b in base]
    ours = paired_tost(base, cand, margin=0.01)
    np = pytest.importorskip("numpy")
    p, low, high = weightstats.ttost_paired(np.array(cand), np.array(base), -0.01, 0.01)
    assert ours.p_value == pytest.approx(float(p), rel=1e-9)
    assert ours.t_low == pytest.approx(float(low[0]), rel=1e-9) and ours.t_high == pytest.approx(float(high[0]),
                                                                                                rel=1e-9)


def test_paired_correctness_by_hand():
    # 100 examples, 0/1 correct: 6 the candidate alone gets right, 4 the baseline alone; the rest agree. The
    # differences are +1 x 6, -1 x 4, 0 x 90: mean 0.02, sample variance (6 x 0.98^2 + 4 x 1.02^2 + 90 x 0.02^2)/99
    # = 0.0985..., se = 0.03138; with a margin of 0.1: t_low = 0.12/0.03138 = 3.824, t_high = -0.08/0.03138 = -2.549
    base = [1] * 4 + [0] * 6 + [1] * 60 + [0] * 30
    cand = [0] * 4 + [1] * 6 + [1] * 60 + [0] * 30
    r = paired_tost(base, cand, margin=0.1)
    var = (6 * 0.98 ** 2 + 4 * 1.02 ** 2 + 90 * 0.02 ** 2) / 99
    se = math.sqrt(var / 100)
    assert r.difference == pytest.approx(0.02) and r.t_low == pytest.approx(0.12 / se)
    assert r.t_high == pytest.approx(-0.08 / se) and r.equivalent and r.status == "pass"
    # a margin of one point: the same data cannot show it
    narrow = paired_tost(base, cand, margin=0.01)
    assert not narrow.equivalent and narrow.status == "fail" and narrow.checks[0].id == "equivalence.within_margin"


def test_the_interval_decides_as_the_p_value_does():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(3, 40)
        base = [rng.random() for _ in range(n)]
        cand = [b + rng.gauss(rng.uniform(-0.05, 0.05), 0.05) for b in base]
        r = paired_tost(base, cand, margin=0.03)
        inside = -0.03 < r.interval[0] and r.interval[1] < 0.03
        assert inside == r.equivalent


@pytest.mark.parametrize("kw, message", [
    ({"baseline": [1, 0], "candidate": [1], "margin": 0.1}, "pairs them"),
    ({"baseline": [1, 0], "candidate": [1, 1], "margin": 0}, "positive number"),
    ({"baseline": [1], "candidate": [1], "margin": 0.1}, "at least 2"),
    ({"baseline": [1, float("nan")], "candidate": [1, 1], "margin": 0.1}, "not finite"),
])
def test_bad_input_is_one_line(kw, message):
    with pytest.raises(InputError, match=message):
        paired_tost(**kw)
