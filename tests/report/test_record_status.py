"""The report reads a record's status the one way results write it now, and still reads the records written before
(on users' disks): regress and quant's `passed`, a measurement's ok/failed, checks without a status."""
from __future__ import annotations

import pytest

from campaign.report.build import record_status


@pytest.mark.parametrize("record, expected", [
    ({"schema": "campaign.check/1", "campaign_version": "1", "status": "not verified", "checks": []}, "not verified"),
    ({"schema": "campaign.regress/1", "status": "fail", "checks": [{"id": "guard.f1>=0", "status": "fail"}]}, "fail"),
    ({"schema": "campaign.regress/1", "passed": True, "guards": []}, "pass"),          # before the header
    ({"schema": "campaign.quant/1", "passed": False, "variants": []}, "fail"),
    ({"schema": "campaign.measurement/1", "status": "ok", "phases": []}, "pass"),
    ({"schema": "campaign.measurement/1", "status": "failed", "phases": []}, "fail"),
    ({"schema": "campaign.usage/1", "status": "pass", "checks": []}, "pass"),
    ({"schema": "campaign.batch/1", "checks": [{"id": "a", "status": "pass"}, {"id": "b", "status": "warn"}]}, "warn"),
    ({"schema": "campaign.check/1", "checks": [{"id": "a", "status": "skipped"}, {"id": "b", "status": "fail"}]},
     "fail"),
    ({"schema": "campaign.memory/1", "model": "x", "fits": []}, None),                 # information, then and now
])
def test_status_of_new_and_old_records(record, expected):
    assert record_status(record) == expected


def test_a_new_result_round_trips_through_the_report_reader():
    from campaign.checks import Check
    from campaign.evaluate.regress import Guard, guard_checks

    guards = (Guard("f1>=0", "f1", ">=", 0.0, 0.5, 0.4, -0.1, False),)
    assert guard_checks(guards)[0] == Check("guard.f1>=0", "fail", guards[0].describe(), guard_checks(guards)[0].why,
                                            guard_checks(guards)[0].fix)
    assert record_status({"status": "fail", "checks": [c.to_dict() for c in guard_checks(guards)]}) == "fail"
