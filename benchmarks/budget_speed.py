"""Seconds `campaign budget` takes on plans of many phases (issue 29: 1,000 phases took 8 s and 4,000 took 147 s,
quadratic): a chain (each phase after the one before) and a fan (every phase after one baseline), each with three
runs of one hour per phase, scheduled on a 1-card and a 4-card package and on demand.

    python benchmarks/budget_speed.py [--phases 1000 4000]

Time should grow about linearly (x 4 phases: about x 4 seconds, at most x 4 log 4).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PRICES = {"source": "benchmark", "date": "2026-12-02", "cards": [{"card": "H100-SXM-80GB", "hourly": "2.00",
          "packages": [{"name": "30-day", "days": 30, "cards": 1, "price": "1000"},
                       {"name": "3650-day-4x", "days": 3650, "cards": 4, "price": "99000"}]}]}


def plan(n: int, shape: str) -> dict:
    phases = [{"name": "p0", "kind": "baseline", "hours": 1}]
    for i in range(1, n):
        after = [f"p{i - 1}"] if shape == "chain" else ["p0"]
        phases.append({"name": f"p{i}", "runs": 3, "hours": 1, "after": after, "priority": None})
    return {"name": f"{shape} of {n}", "card": "H100-SXM-80GB", "margin": "15%", "phases": phases}


def main() -> int:
    from campaign.plan.budget import budget

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, nargs="+", default=[1000, 4000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prices = Path(tmp) / "prices.json"
        prices.write_text(json.dumps(PRICES), encoding="utf-8")
        for shape in ("chain", "fan"):
            for n in args.phases:
                path = Path(tmp) / f"{shape}{n}.json"
                path.write_text(json.dumps(plan(n, shape)), encoding="utf-8")
                start = time.perf_counter()
                rep = budget(path, prices=prices)
                took = time.perf_counter() - start
                print(f"{shape:5} {n:6,} phases: {took:7.2f} s  ({len(rep.packages)} options, recommended "
                      f"{rep.recommended})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
