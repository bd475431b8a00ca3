"""campaign: estimate, measure and record what a GPU compute campaign needs, before and while paying for it.

Every command's library call is here under the command's own words, imported on first use so that `import
campaign` (and the CLI) stays light: `campaign.trace_memory(...)` loads torch only when it is called. The memory
calls share one shape, (model, workload): the model as a catalog name, model dir, config.json, cached repo id or
ModelSpec, the workload from make_workload (seq_len, batch, ...).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import CampaignError, ConfigError, InputError, UnknownNameError
from .version import __version__

# name -> module that defines it, by the question it answers (campaign guide)
_LAZY = {
    # 1. my model has never run: memory, kv, cards, models, trace, measure, explain
    "load_spec": "models", "ModelSpec": "models", "describe_model": "models.describe", "catalog": "models.describe",
    "find_card": "hardware", "all_cards": "hardware", "card_list": "hardware", "Card": "hardware",
    "make_workload": "memory", "Workload": "memory", "estimate_memory": "memory", "MemoryEstimate": "memory",
    "plan_memory": "memory.plan", "MemoryPlan": "memory.plan", "estimate_kv": "memory", "plan_kv": "memory.plan",
    "KVEstimate": "memory", "fit_cards": "memory", "Fit": "memory", "trace_memory": "memory.trace",
    "measure_workload": "memory.protocol", "measure_script": "memory.protocol", "MemoryMeter": "memory.measure",
    "load_measurement": "memory.measurement", "explain": "memory.explain", "explain_model": "memory.explain",
    "load_estimate": "memory.breakdown", "plan_module": "memory.trace_module",
    # 2. can I trust the score: split, leaks, usage, errors, regress, seeds
    "split_file": "data.split", "LeakFreeSplitter": "data.split", "load_manifest": "data.split",
    "check_files": "data.leaks", "find_leaks": "data.leaks", "find_duplicates": "data.dedup",
    "use_split": "track.usage", "record_usage": "track.usage", "usage_report": "track.usage",
    "analyze_errors": "evaluate.analysis", "regress": "evaluate.regress", "compare_seeds": "evaluate.seeds",
    "compare_paired": "evaluate.seeds", "LeakFreeKFold": "data.kfold", "paired_tost": "evaluate.equivalence",
    "compare_harness_runs": "evaluate.harness", "compare_run_folders": "evaluate.harness_runs",
    "harness_errors": "evaluate.harness_runs", "compare_harness_seeds": "evaluate.harness_runs",
    # 3. about to train: check, inspect, batch, run, runs
    "check": "train.check", "save_checkpoint": "train.checkpoint", "load_checkpoint": "train.checkpoint",
    "check_accumulation": "train.accumulation", "load_setup": "train.setup",
    "inspect": "train.inspect",
    "run": "track.run", "start_run": "track.run", "end_run": "track.run", "decide_run": "track.run",
    "Store": "track.store", "list_runs": "track.store", "show_run": "track.store", "diff_runs": "track.compare",
    "check_run": "track.compare", "export_mlflow": "track.export",
    # the hand-over: the report of every record, the bundle of the accepted run
    "build_report": "report.build", "export_bundle": "report.bundle", "check_bundle": "report.verify",
    "save_record": "track.records",
    "load_records": "track.records",
    # 4. which variant: adapters bound to their base
    "save_adapter": "train.adapters", "load_adapter": "train.adapters",
    "compare_quant": "compress.quant", "QuantReport": "compress.result",
    # 5. my budget is limited: budget, ablate, bench
    "budget": "plan.budget", "read_plan": "plan.budget", "load_prices": "plan.prices",
    "estimate_runtime": "plan.runtime", "plan_ablation": "plan.ablate", "read_factors": "plan.ablate",
    "analyze_ablation": "plan.effects", "bench": "plan.bench",
    # the map
    "guide_map": "guide",
}

__all__ = ["CampaignError", "ConfigError", "InputError", "UnknownNameError", "__version__", "current_meter", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'campaign' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value          # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def current_meter():  # type: ignore[no-untyped-def]
    """The MemoryMeter a `campaign measure --script` run measures under (needs the torch extra)."""
    from .memory.protocol import current_meter as meter

    return meter()
