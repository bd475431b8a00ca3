"""The one Check type: a status outside pass/fail/warn/skipped is a programming error; one rule turns checks into a
verdict (status_of: a skipped check a go depends on is never a pass), and every command's checks are that type."""
from __future__ import annotations

import pytest

from campaign.checks import Check, status_of


def test_status_is_one_of_four_and_only_fail_fails():
    with pytest.raises(ValueError, match="'ok' is not one of"):
        Check("x.y", "ok", "seen")
    assert status_of([Check("a", "pass", ""), Check("b", "warn", ""), Check("c", "skipped", "", gates=False)]) == "warn"
    assert status_of([Check("a", "pass", ""), Check("b", "warn", ""), Check("c", "skipped", "")]) == "not verified"
    assert status_of([Check("a", "pass", ""), Check("b", "fail", "")]) == "fail"
    assert Check("a", "fail", "s", "w", "f").to_dict() == {"id": "a", "status": "fail", "seen": "s", "why": "w",
                                                            "fix": "f"}


def test_split_leaks_and_usage_checks_are_one_type():
    from campaign.data.leaks import LeakCheck

    leak = LeakCheck("leak.near_duplicate", "fail", "2 rows", "why", "fix", rows=2, rate=0.5)
    assert isinstance(leak, Check) and leak.to_dict()["rows"] == 2 and leak.to_dict()["fix"] == "fix"
