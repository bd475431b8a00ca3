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


def main() -> None:
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
