"""Cold-process time of `campaign memory llama-3.1-8b` (goal: median under 0.3 s) and `campaign --help`.

Each run is a fresh Python process, so imports count. Prints the median and the spread of N runs.
Usage: python benchmarks/cli_speed.py [N]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 15
COMMANDS = [
    ["--help"],
    ["memory", "llama-3.1-8b"],
    ["memory", "llama-3.1-8b", "--json", "--no-solve"],
    ["kv", "llama-3.1-8b", "--context", "32768"],
]


def time_once(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "campaign", *args], check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120"})
    return time.perf_counter() - start


def solve_figure() -> str:
    """In this process: the card solve of `campaign memory llama-3.1-8b` (largest batch and context on the featured
    cards), its CPU time (best of 5) and how many probes replayed the step through the allocator model."""
    from campaign.hardware.cards import find_card
    from campaign.memory import estimate_memory, make_workload, reserved
    from campaign.memory.fit import fit_cards
    from campaign.memory.plan import FEATURED_CARDS
    from campaign.models import load_spec

    spec, w = load_spec("llama-3.1-8b"), make_workload()
    cards = [find_card(n) for n in FEATURED_CARDS]
    est = estimate_memory(spec, w)
    replays, real = [], reserved._training_replay
    reserved._training_replay = lambda *a, **k: replays.append(1) or real(*a, **k)
    try:
        best = float("inf")
        for _ in range(5):
            replays.clear()
            reserved._SAME_STEP.clear()  # a cold process: no replay kept from the round before
            start = time.process_time()
            fit_cards(spec, w, cards, estimate=est)
            best = min(best, time.process_time() - start)
    finally:
        reserved._training_replay = real
    return (f"card solve of memory llama-3.1-8b ({len(cards)} cards): {best:.3f} s CPU, {len(replays)} replays "
            f"of the step ({best / max(1, len(replays)) * 1000:.1f} ms each, solve included)")


def main() -> None:
    print(solve_figure())
    baseline = [time_once_python() for _ in range(5)]
    print(f"python -c pass (interpreter start): median {statistics.median(baseline):.3f} s")
    for args in COMMANDS:
        times = sorted(time_once(args) for _ in range(N))
        med = statistics.median(times)
        flag = "ok" if med < 0.3 or args == ["--help"] and med < 0.3 else "SLOW (goal < 0.3 s)"
        print(f"campaign {' '.join(args):45s} median {med:.3f} s  min {times[0]:.3f}  max {times[-1]:.3f}  {flag}")


def time_once_python() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=False)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
