"""With a card per phase, `budget --plot` (and the report) draw every rental's phases on their own rows, labelled
CARD@OFFER and the rental, on the campaign's clock, as the text Gantt does: the other card's phase lies at its hours.
Every figure worked out by hand in the comments."""
from __future__ import annotations

import pytest

from campaign.plan.budget import budget
from campaign.plan.plots import lanes, rentals_figure

# the H100 compared: $3.00/h, no package. The L40S under two offers: 'a' at $1.00/h with 0.5 h of set-up and a
# 1-day package for $2.00; 'b' at $2.00/h, no set-up.
PRICES = {"cards": [
    {"card": "H100-SXM-80GB", "hourly": "3.00"},
    {"card": "L40S-48GB", "offer": "a", "hourly": "1.00", "setup_hours": 0.5,
     "packages": [{"name": "1-day", "days": 1, "price": "2.00"}]},
    {"card": "L40S-48GB", "offer": "b", "hourly": "2.00"}]}
# two 10 h training runs on the H100, then a 2.5 h evaluation on an L40S of its own, no margin
PLAN = {"name": "t", "card": "H100-SXM-80GB", "compare": ["H100-SXM-80GB"], "margin": "0%",
        "phases": [{"name": "train", "kind": "experiment", "runs": 2, "hours": 10},
                   {"name": "eval", "kind": "evaluation", "hours": 2.5, "card": "L40S-48GB", "after": ["train"]}]}
# The H100 on demand on one card: the two runs one after the other, 0 h to 20 h ($60.00).
# The L40S: offer a's 1-day holds 0.5 h set-up + 2.5 h for $2.00; on demand 3 started hours x $1.00 = $3.00;
# offer b: 3 started hours x $2.00 = $6.00. Take L40S-48GB@a 1-day. It starts when training ends, at 20 h: set-up
# from 20 h to 20.5 h, the evaluation from 20.5 h to 23 h; its package ends 24 h after its start, at 44 h.


def test_lanes_place_each_rentals_phases_on_the_campaigns_clock(write_yaml):
    rep = budget(write_yaml(PLAN), prices=write_yaml(PRICES, "p.yaml"))
    assert (rep.rentals[0].offer, rep.rentals[0].option.name, rep.total_cents) == ("a", "1-day", 6_200)
    got = [(lane.rental, lane.start_hours, lane.setup_hours, lane.package_end_hours,
            [(r.phase, r.start_hours, r.end_hours) for r in lane.rows]) for lane in lanes(rep.to_dict())]
    assert got == [("H100-SXM-80GB on-demand", 0, 0, None, [("train", 0, pytest.approx(20))]),
                   ("L40S-48GB@a 1-day", pytest.approx(20), 0.5, pytest.approx(44),
                    [("eval", pytest.approx(20.5), pytest.approx(23))])]


def _bars(ax):
    """Each bar drawn: (row, left, width) read back from the figure's rectangles."""
    from matplotlib.patches import Rectangle

    return sorted((round(p.get_y() + p.get_height() / 2), round(p.get_x(), 6), round(p.get_width(), 6))
                  for p in ax.patches if isinstance(p, Rectangle))


def test_the_figure_draws_the_other_cards_phase_at_its_hours(write_yaml):
    pytest.importorskip("matplotlib")
    rep = budget(write_yaml(PLAN), prices=write_yaml(PRICES, "p.yaml"))
    ax = rentals_figure(rep.to_dict(), "t").axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["train · H100-SXM-80GB on-demand", "eval · L40S-48GB@a 1-day"]
    # row 0: train from 0 h for 20 h; row 1: the set-up from 20 h for 0.5 h, then eval from 20.5 h for 2.5 h
    assert _bars(ax) == [(0, 0, 20), (1, 20, 0.5), (1, 20.5, 2.5)]
    # the L40S's package ends at 44 h, drawn across its own row only (row 1: from 0.55 to 1.45)
    [ends] = [c for c in ax.collections if c.get_segments()]
    [[(x0, y0), (x1, y1)]] = [s.tolist() for s in ends.get_segments()]
    assert (x0, x1) == (pytest.approx(44), pytest.approx(44)) and 0.5 < min(y0, y1) < max(y0, y1) < 1.5
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "L40S-48GB@a: 1-day ends at 44 h" in legend
    assert "set-up: 0.5 h billed before the first step (L40S-48GB@a)" in legend


def test_budget_plot_writes_every_rental(write_yaml, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "gantt.svg"
    rep = budget(write_yaml(PLAN), prices=write_yaml(PRICES, "p.yaml"), plot=out)
    page = out.read_text(encoding="utf-8")
    assert rep.plot == str(out) and "L40S-48GB@a 1-day" in page and "H100-SXM-80GB on-demand" in page
    # one rental only: the card slots' Gantt as before (no lane labels)
    one = budget(write_yaml({**PLAN, "phases": PLAN["phases"][:1]}, "one.yaml"), prices=write_yaml(PRICES, "p.yaml"),
                 plot=tmp_path / "one.svg")
    assert one.plot and "card 0" in (tmp_path / "one.svg").read_text(encoding="utf-8")


def test_the_report_draws_every_rental(cli, write_yaml, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    r = cli("--record", "budget", str(write_yaml(PLAN)), "--prices", str(write_yaml(PRICES, "p.yaml")))
    assert r.code == 0, r.err
    assert cli("report", "--out", str(tmp_path / "r.html")).code == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "eval · L40S-48GB@a 1-day" in page and "train · H100-SXM-80GB on-demand" in page
    assert "L40S-48GB@a: 1-day ends at 44 h" in page
