"""The payloads the Ray engine's stages hand each other (a shard's Dataset, its sketch arrays, candidate pairs),
as bytes in a Ray Data column.

They are pickled, as Ray itself moves Python objects, but read back with an allowlist: only numpy arrays and
scalars, Python's plain containers and the campaign records they hold can be rebuilt, so bytes that did not come
from these stages (a tampered object store, a spilled file) cannot run code when loaded.
"""
from __future__ import annotations

import io
import pickle
from typing import Any

# (module, name) pairs a payload may name; containers, numbers, strings and bytes need no global at all
_ALLOWED = {
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "slice"),
    ("copyreg", "_reconstructor"), ("builtins", "object"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    *((m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")),
    *((m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")),
    ("campaign.data.read", "Dataset"), ("campaign.data.read", "Fields"), ("campaign.rows", "BadRecord"),
    ("campaign.data.leak_report", "LeakRow"),
    *(("campaign.data.ray.records", n) for n in ("ShardData", "ShardLabels", "ExactAndGroups", "Candidates", "Texts",
                                                  "Confirmed", "Fetched", "WrittenSplit", "WrittenClean")),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "numpy" and name.startswith("dtypes.")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a stage payload names {module}.{name}, which no stage writes; refused")


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


def loads(data: bytes) -> Any:
    """A payload written by dumps(); any other global than the allowed ones is refused."""
    return _Unpickler(io.BytesIO(data)).load()


__all__ = ["dumps", "loads"]
