"""The Ray engine's stage payloads round-trip what the stages send, and refuse anything that could run code."""
from __future__ import annotations

import os
import pickle

import pytest

np = pytest.importorskip("numpy")

from campaign.data.payload import dumps, loads  # noqa: E402
from campaign.data.read import make_dataset  # noqa: E402


def test_what_the_stages_send_comes_back_equal():
    ds = make_dataset(["a b", "c"], labels=[1, "x"], groups={"user": ["u", None]}, ids=[7, 8])
    sent = (3, np.arange(5, dtype=np.int64) << np.int64(40), np.array([b"x" * 32], dtype="S32"), ds,
            {(0, 1): (np.array([1], np.uint64), np.array([2], np.int16))}, {"k", 1}, [np.float64(0.5)])
    got = loads(dumps(sent))
    assert got[0] == 3 and got[3] == ds and got[5] == {"k", 1} and got[6] == [0.5]
    for a, b in ((got[1], sent[1]), (got[2], sent[2]), (got[4][0, 1][0], sent[4][0, 1][0])):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_a_payload_naming_any_other_callable_is_refused():
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        loads(pickle.dumps(_Evil()))
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        loads(pickle.dumps(pickle.loads))      # a global that could load anything
