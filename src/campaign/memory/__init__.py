"""Memory: the analytic estimate, the KV cache, quantized formats and card fit.

The names below are loaded when first used (PEP 562), so that importing a submodule (memory.workload, for the
CLI's options) does not import the estimate, the models and the cards with it.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {"Item": "breakdown", "MemoryEstimate": "breakdown", "Phase": "breakdown", "estimate_memory": "estimate",
         "Fit": "fit", "fit_cards": "fit", "max_value": "fit", "KVEstimate": "kv", "estimate_kv": "kv",
         "max_context_for": "kv", "max_sequences_for": "kv", "Workload": "workload", "make_workload": "workload"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'campaign.memory' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
