"""Estimates against FitCheck's measured Tesla T4 archive (fitcheck-llm 0.3.1's data/measurements), row by row.

Reads benchmarks/fitcheck_t4_data.json (79 QLoRA nf4 and LoRA fp16 training steps on one T4, eager and SDPA, with
checkpointing; 12 near-limit runs that completed or ran out of memory) and prints, per row, the measured peak
allocated, `campaign memory`'s, and their ratio; then, per near-limit run, the verdict on the T4. Goals (issue #52):
at least 76 of 79 rows within 10%, median error at most 2.5%, no run that ran out of memory called "fits".
Usage: python benchmarks/fitcheck_reference.py [--json]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from campaign.hardware.cards import find_card
from campaign.memory import estimate_memory, make_workload
from campaign.models.architectures import spec_from_config

HERE = Path(__file__).resolve().parent
MiB = 2**20


def workload(w: dict[str, Any]) -> Any:
    """The row's step as campaign's flags say it: nf4 QLoRA (peft's k-bit preparation, as the harness calls it) or
    LoRA on the fp16 model; fp16 weights without autocast; AdamW."""
    quantized = w["quantization"] == "nf4"
    return make_workload(method="qlora" if quantized else "lora", dtype="nf4" if quantized else "fp16",
                         double_quant=w.get("double_quant", False), batch=w["batch"], seq_len=w["seq_len"],
                         grad_checkpointing=w["grad_checkpointing"], attention=w["attention"],
                         lora_rank=w["lora_rank"], lora_targets=tuple(w["lora_targets"]), optimizer="adamw")


def score(data: dict[str, Any]) -> dict[str, Any]:
    specs = {name: spec_from_config(dict(cfg, max_position_embeddings=32768), name=name, source="fitcheck archive")
             for name, cfg in data["models"].items()}
    rows = []
    for r in data["rows"]:
        est = estimate_memory(specs[r["model"]], workload(r["workload"]))
        measured = round(r["measured_mib"]["peak_allocated"] * MiB)
        rows.append(dict(id=r["id"], role=r["role"], measured=measured, estimate=est.peak_allocated_bytes,
                         ratio=est.peak_allocated_bytes / measured))
    card = find_card("t4")
    near = []
    for r in data["near_limit"]:
        w = workload(dict(r, quantization="nf4", grad_checkpointing=True))
        est = estimate_memory(specs[r["model"]], w, card_bytes=card.memory_bytes)
        near.append(dict(model=r["model"], batch=r["batch"], outcome=r["outcome"], device=est.device_bytes,
                         measured_process=round(r["measured_process_mib"] * MiB) if r.get("measured_process_mib")
                         else None,
                         required=est.required_bytes, verdict=est.verdict(card.memory_bytes)))
    errors = [abs(r["ratio"] - 1) for r in rows]
    return dict(rows=rows, near_limit=near, within=sum(e <= 0.10 for e in errors), total=len(rows),
                median_error=statistics.median(errors),
                false_fits=sum(n["outcome"] == "oom" and n["verdict"] == "fits" for n in near))


def main() -> None:
    result = score(json.loads((HERE / "fitcheck_t4_data.json").read_text(encoding="utf-8")))
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
        return
    print(f"{'row':86s} {'measured MiB':>12s} {'ours MiB':>9s} {'ratio':>6s}")
    for r in result["rows"]:
        flag = "" if abs(r["ratio"] - 1) <= 0.10 else "  <- outside +-10%"
        print(f"{r['id'][:86]:86s} {r['measured'] / MiB:12.0f} {r['estimate'] / MiB:9.0f} {r['ratio']:6.3f}{flag}")
    print(f"\n{result['within']}/{result['total']} rows within +-10% of the measured peak allocated; median error "
          f"{result['median_error']:.1%}")
    print("\nNear-limit runs on the T4 (campaign memory --card t4: default 10% reserve and 500 MiB "
          "context; process: what the run's process held, where published):")
    for n in result["near_limit"]:
        process = f"{n['measured_process'] / MiB:7.0f}" if n["measured_process"] else "      -"
        print(f"  {n['model'][:40]:40s} batch {n['batch']:>2d}  {n['outcome']:9s}  process {process} MiB, device "
              f"{n['device'] / MiB:7.0f} MiB, required {n['required'] / MiB:7.0f} MiB: {n['verdict']}")
    print(f"runs that ran out of memory called 'fits': {result['false_fits']}")


if __name__ == "__main__":
    main()
