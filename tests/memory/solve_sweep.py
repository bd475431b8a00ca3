"""The card solve's sweep: every catalog model x training and inference workloads x a few cards, answered by the
exhaustive check (every batch below the search's answer replayed: the solver before it learnt to skip the batches
its overhead margin cannot reach). tests/memory/test_solve.py compares the fast solve with the answers kept here.

    python -m tests.memory.solve_sweep            # rewrite solve_sweep.json (minutes: the exhaustive check)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("solve_sweep.json")
CARDS = ("H200-SXM-141GB", "A100-SXM-80GB", "L40S-48GB", "RTX-4090-24GB", "T4-16GB")
WORKLOADS: dict[str, dict[str, Any]] = {
    "train": {},
    "train-ckpt-1024": {"seq_len": 1024, "grad_checkpointing": True, "mixed_precision": True},
    "qlora": {"method": "qlora", "seq_len": 2048, "grad_checkpointing": True, "mixed_precision": True},
    "lora-512": {"method": "lora", "seq_len": 512},
    "infer": {"mode": "infer", "seq_len": 4096},
    "infer-1024": {"mode": "infer", "seq_len": 1024},
}
# the non-monotone case of tests/memory/test_reserved.py: batch 10 does not fit 32 GiB where 11 does
EXTRA = [("llama-3.2-1b", "train-ckpt-1024-fp32", {"seq_len": 1024, "grad_checkpointing": True}, 32 * 2**30)]


def cases() -> list[tuple[str, str, dict[str, Any], str | int]]:
    from campaign.models.architectures import counted_on_meta_device
    from campaign.models.catalog import catalog_names, load_catalog_config

    out: list[tuple[str, str, dict[str, Any], str | int]] = []
    for model in catalog_names():
        if counted_on_meta_device(load_catalog_config(model)):  # vision-language, state-space (issue 50): not swept
            continue
        for name, kw in WORKLOADS.items():
            out.extend((model, name, kw, card) for card in CARDS)
    out.extend(EXTRA)
    return out


def answers(exhaustive: bool, only: list | None = None) -> dict[str, list[int] | str]:
    """'model|workload|card' -> [max batch, max seq], or the one-line error of a workload the model refuses."""
    from campaign.errors import CampaignError
    from campaign.hardware.cards import find_card
    from campaign.memory import make_workload
    from campaign.memory.fit import fits, max_value
    from campaign.memory.workload import resized
    from campaign.models import load_spec

    out: dict[str, list[int] | str] = {}
    shared: dict[tuple[str, str], tuple[dict, dict]] = {}
    for model, name, kw, card in only or cases():
        key = f"{model}|{name}|{card}"
        spec = load_spec(model)
        try:
            w = make_workload(**kw)
        except CampaignError as e:
            out[key] = str(e)
            continue
        memory = card if isinstance(card, int) else find_card(card).memory_bytes
        batches, lengths = shared.setdefault((model, name), ({}, {}))
        try:
            b = max_value(spec, w, memory, "batch", limit=1 << 16, cache=batches)
            s = max_value(spec, w, memory, "seq_len", limit=max(spec.max_position, w.seq_len), cache=lengths)
            if exhaustive:  # the largest batch for which every smaller batch fits too
                b = next((n - 1 for n in range(1, b) if not fits(spec, resized(w, "batch", n), memory)),
                         b)
        except CampaignError as e:
            out[key] = str(e)
            continue
        out[key] = [b, s]
    return out


def main() -> int:
    result = {}
    for i, case in enumerate(cases()):
        result.update(answers(True, [case]))
        print(f"{i + 1}/{len(cases())} {case[0]} {case[1]} {case[3]}: {result[f'{case[0]}|{case[1]}|{case[3]}']}",
              file=sys.stderr, flush=True)
    FIXTURE.write_text(json.dumps(result, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
