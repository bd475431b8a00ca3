"""campaign check on a lent GPU: the example setups moved to the card (examples/check_setup.py: on_card), every check
with its status, the step's memory measured by the card's allocator beside the estimate, and the resume compared in
a fresh process with the GPU tolerances (atomic adds may reorder sums: 1e-5 relative instead of bitwise).

Usage: python benchmarks/gpu_train_check.py            # on the GPU machine
       python benchmarks/gpu_train_check.py --dry-run  # the CPU setups, to check the script itself
On a lent device machine (torch, transformers and peft already installed):
    set -o pipefail; PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/gpu_train_check.py 2>&1 | tee $OUT/log
Writes $OUT/train_check.json when OUT is set.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from campaign.io import atomic_write_json  # noqa: E402
from campaign.train.check import check  # noqa: E402

SETUPS = {"cuda": ["on_card"], "cpu": ["make_setup", "lora_setup"]}


def main() -> None:
    device = "cpu" if "--dry-run" in sys.argv else "cuda"
    rows = []
    for name in SETUPS[device]:
        start = time.perf_counter()
        try:
            r = check(f"{ROOT / 'examples' / 'check_setup.py'}:{name}", overfit_steps=10, overfit_drop=0.2)
        except Exception as e:  # recorded, the next setup runs
            rows.append({"setup": name, "failed": f"{type(e).__name__}: {e}"})
            print(f"{name}: FAILED {type(e).__name__}: {e}")
            continue
        row = {"setup": name, "device": r.device, "passed": r.passed, "seconds": round(time.perf_counter() - start, 1),
               "checks": {c.id: c.status for c in r.checks},
               "memory": [{"phase": m.phase, "measured": m.measured_bytes, "estimated": m.estimated_bytes}
                          for m in r.memory_vs_estimate],
               "resume": r.resume.__dict__ if r.resume else None}
        rows.append(row)
        print(f"{name} on {r.device}: {'READY' if r.passed else 'NOT READY'} in {row['seconds']} s")
        for c in r.checks:
            print(f"  {c.id}: {c.status} - {c.seen}")
        for m in r.memory_vs_estimate:
            print(f"  memory {m.phase}: measured {m.measured_bytes / 2**20:.2f} MiB, estimate "
                  f"{(m.estimated_bytes or 0) / 2**20:.2f} MiB")
        if os.environ.get("OUT"):
            atomic_write_json(Path(os.environ["OUT"]) / "train_check.json", rows)
    if any("failed" in row for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
