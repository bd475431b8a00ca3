"""campaign: estimate, measure and record what a GPU compute campaign needs, before and while paying for it."""
from .errors import CampaignError, ConfigError, InputError, UnknownNameError
from .hardware import Card, all_cards, find_card
from .memory import (Fit, KVEstimate, MemoryEstimate, Workload, estimate_kv, estimate_memory, fit_cards,
                     make_workload)
from .models import ModelSpec, load_spec

from .version import __version__


def current_meter():  # type: ignore[no-untyped-def]
    """The MemoryMeter a `campaign measure --script` run measures under (needs the torch extra)."""
    from .memory.protocol import current_meter as meter

    return meter()

__all__ = ["CampaignError", "Card", "ConfigError", "Fit", "InputError", "KVEstimate", "MemoryEstimate",
           "ModelSpec", "UnknownNameError", "Workload", "__version__", "all_cards", "estimate_kv",
           "current_meter", "estimate_memory", "find_card", "fit_cards", "load_spec", "make_workload", "plan_memory"]


def plan_memory(model: str, *, reserve: str | float = "10%", **workload: object) -> MemoryEstimate:
    """One call for notebooks: resolve the model, validate the workload, estimate. Same names as the CLI."""
    return estimate_memory(load_spec(model), make_workload(**workload), reserve=reserve)
