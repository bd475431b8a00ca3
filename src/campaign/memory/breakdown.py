"""What a memory estimate is: named items per phase and the headline figures, as JSON and read back from it.

Headline figures (per card): peak_allocated_bytes (tensors alive at the peak), peak_reserved_bytes (what
PyTorch's caching allocator holds), device_bytes (plus the CUDA context: what nvidia-smi shows) and
required_bytes (plus the explicit reserve). `items` are the peak phase's items plus those three overheads,
so sum(items) == required_bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields as dataclass_fields
from functools import cached_property
from pathlib import Path
from typing import Any

from ..io import load_json
from ..validate import JsonObject
from .workload import Workload

SCHEMA = "campaign.memory/1"


@dataclass(frozen=True)
class Item:
    """One term of the breakdown: bytes, the formula in words and where it comes from."""

    name: str
    bytes: int
    formula: str
    category: str
    source: str = "formula"


@dataclass(frozen=True)
class Phase:
    """Tensors alive at the peak moment of one phase."""

    name: str
    items: tuple[Item, ...]
    moment: str = ""

    @cached_property
    def bytes(self) -> int:  # worked out once: a card solve compares each probe's phases by it several times
        return sum(i.bytes for i in self.items)

    def to_dict(self) -> dict[str, Any]:  # by hand: the phase's total (derived from its items) before them
        return {"name": self.name, "bytes": self.bytes, "moment": self.moment,
                "items": [asdict(i) for i in self.items]}


@dataclass(frozen=True)
class MemoryEstimate:
    """The analytic estimate of one workload on one card of `workload.gpus`; all bytes are per card."""

    model: str
    workload: Workload
    params: int
    trainable_params: int
    phases: tuple[Phase, ...]
    peak_phase: str
    items: tuple[Item, ...]
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_bytes: int
    required_bytes: int
    reserve_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    method: str = "formula"
    top_modules: tuple[tuple[str, int], ...] = ()
    schema: str = SCHEMA
    released_bytes: int = 0  # cached segments the replay released to stay within the card (card_bytes given)
    allocator_model: str = ""  # the allocator model that replayed the step: compiled | python ("": no replay)

    def verdict(self, memory_bytes: int) -> str:
        """fits / tight (inside the reserve) / does not fit, for a card of `memory_bytes`."""
        if self.required_bytes <= memory_bytes:
            return "fits"
        if self.device_bytes <= memory_bytes:
            return "tight"
        return "does not fit"

    def to_dict(self) -> dict[str, Any]:
        # written by hand, not results.Result: the headline figures come before the long item and phase lists (the
        # fields' order puts them after), and top_modules read as {module, peak_bytes}
        return {
            "schema": self.schema, "model": self.model, "method": self.method,
            "allocator_model": self.allocator_model or None,
            "workload": self.workload.to_dict(), "params": self.params, "trainable_params": self.trainable_params,
            "peak_phase": self.peak_phase, "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes, "device_bytes": self.device_bytes,
            "required_bytes": self.required_bytes, "reserve_bytes": self.reserve_bytes,
            "items": [asdict(i) for i in self.items], "phases": [p.to_dict() for p in self.phases],
            "notes": list(self.notes),
            "top_modules": [{"module": m, "peak_bytes": b} for m, b in self.top_modules],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "the estimate") -> MemoryEstimate:
        """The estimate `to_dict` wrote (campaign memory --json, campaign trace --json), checked field by field:
        one-line errors for what is not one."""
        d = JsonObject(data, where, fix="write it with campaign memory --json or campaign trace --json")
        if d.raw("schema", None) != SCHEMA:
            d.fail(f"not a campaign memory estimate (schema {d.raw('schema', None)!r})")

        def items(o: JsonObject) -> tuple[Item, ...]:
            return tuple(Item(i.str("name"), i.count("bytes"), i.str("formula", ""), i.str("category", ""),
                              i.str("source", "formula")) for i in o.items("items"))

        def phase(p: JsonObject) -> Phase:
            declared, read = p.count("bytes"), Phase(p.str("name"), items(p), p.str("moment", ""))
            if declared != read.bytes:
                p.fail(f"phase {read.name!r} says {declared:,} bytes, its items sum to {read.bytes:,}")
            return read

        known = {f.name for f in dataclass_fields(Workload)}
        raw_workload = {k: v for k, v in d.obj("workload").data.items() if k in known}
        try:
            given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw_workload.items()}
            workload = Workload(**given)
        except TypeError as e:
            d.fail(f"field 'workload' is not a workload ({e})")
        return cls(model=d.str("model"), workload=workload, params=d.count("params"),
                   trainable_params=d.count("trainable_params"),
                   phases=tuple(phase(p) for p in d.items("phases")),
                   peak_phase=d.str("peak_phase"), items=items(d),
                   peak_allocated_bytes=d.count("peak_allocated_bytes"),
                   peak_reserved_bytes=d.count("peak_reserved_bytes"), device_bytes=d.count("device_bytes"),
                   required_bytes=d.count("required_bytes"), reserve_bytes=d.count("reserve_bytes"),
                   notes=tuple(str(n) for n in d.list("notes", [])), method=d.str("method", "formula"),
                   allocator_model=str(d.raw("allocator_model", None) or ""),
                   top_modules=tuple((t.str("module"), t.count("peak_bytes")) for t in d.items("top_modules"))
                   if "top_modules" in d else ())


def load_estimate(path: str | Path) -> MemoryEstimate:
    """A saved estimate (campaign memory --json or campaign trace --json), checked field by field."""
    return MemoryEstimate.from_dict(load_json(path, "an estimate (campaign memory --json or campaign trace --json)"),
                                    where=str(path))
