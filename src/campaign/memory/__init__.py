"""Memory: the analytic estimate, the KV cache, quantized formats and card fit."""
from .breakdown import Item, MemoryEstimate, Phase
from .estimate import estimate_memory
from .fit import Fit, fit_cards, max_value
from .kv import KVEstimate, estimate_kv, max_context_for, max_sequences_for
from .workload import Workload, make_workload

__all__ = ["Fit", "Item", "KVEstimate", "MemoryEstimate", "Phase", "Workload", "estimate_kv", "estimate_memory",
           "fit_cards", "make_workload", "max_context_for", "max_sequences_for", "max_value"]
