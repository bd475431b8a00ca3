"""explain: a measurement of something else is refused, the margin names the phase it comes from, and a card
inside the reserve ('tight') fails as it does in campaign memory."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory.explain import explain

from .test_measure import ESTIMATED, made_estimate, made_measurement


def test_a_measurement_far_from_the_estimate_is_refused_unless_forced():
    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    # an unrelated script: its forward peaks at 96,000 MiB against 2,000 estimated (48x)
    other = made_measurement({**ESTIMATED, "forward": 96_000}, reserved=97_000, device=98_000)
    with pytest.raises(InputError, match=r"phase 'forward' measured 48x the estimate.*--force"):
        explain(analytic, other)
    # and one far below (a tenth of the weights: another model)
    with pytest.raises(InputError, match=r"phase 'load' measured 0.1x the estimate"):
        explain(analytic, made_measurement({**ESTIMATED, "load": 100}, reserved=3300, device=3800))
    forced = explain(analytic, other, force=True)
    assert forced.margin == pytest.approx(47.05)           # 96,000 / 2,000 - 1 = 4,700%, + 5 points
    # 3x exactly is still an estimation error, not another workload
    measured = made_measurement({**ESTIMATED, "backward": 9000}, reserved=9300, device=9800)
    assert explain(analytic, measured).margin == 2.05


def test_the_margin_names_its_phase_and_says_when_it_is_not_the_peak():
    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    # load 1,300 for 1,000 (+30%) while the peak phase, backward, is exact; device +5% (3,990 / 3,800)
    e = explain(analytic, made_measurement({**ESTIMATED, "load": 1300}, reserved=3500, device=3990))
    assert e.margin == 0.35 and "in phase 'load'" in e.margin_reason
    assert any("comes from phase 'load', not from the estimate's peak phase 'backward'" in n for n in e.notes)
    # when the peak phase itself is the worst, no such note
    e = explain(analytic, made_measurement({**ESTIMATED, "backward": 3600}, reserved=3700, device=3900))
    assert "in phase 'backward'" in e.margin_reason and not any("comes from" in n for n in e.notes)


def test_cli_explain_exits_1_on_a_tight_card_as_memory_does(cli, tmp_path):
    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    (tmp_path / "e.json").write_text(json.dumps(analytic.to_dict()), encoding="utf-8")
    made_measurement(ESTIMATED, reserved=3300, device=3800).save(tmp_path / "m.json")
    # the plan is 3,800 x 1.05 = 3,990 MiB: a 3,900 MiB card holds the estimate but not the plan (tight)
    tight = cli("explain", str(tmp_path / "e.json"), str(tmp_path / "m.json"), "--card", "3900MiB", "--json")
    assert tight.code == 1 and tight.json()["verdicts"][0]["verdict"] == "tight"
    fits = cli("explain", str(tmp_path / "e.json"), str(tmp_path / "m.json"), "--card", "4000MiB", "--json")
    assert fits.code == 0 and fits.json()["verdicts"][0]["verdict"] == "fits"
