"""CPU time of the card solve (the largest batch and longest context per card) of the issue's everyday memory
commands, in this process, and over the sweep of tests/memory/solve_sweep.py (every catalog model x six workloads x
five cards): goal 50 ms a solve (one card's largest batch and longest context), and a tiny model (2 layers, hidden
64: benchmarks/cli_speed.py's) well under a second. Per command line: its CPU time over all its cards (fit_cards:
the solve and each card's verdict), and per card. Every solve is cold (reserved.clear_kept: nothing kept from the
one before, as in a command's own process), and the sweep's longest are listed.

The CPU time of a solve varies with the machine's load by a quarter and more from run to run; the instructions it
executes do not. `--one I` runs command line I's solve once (`--baseline`: all of it but fit_cards), for
`valgrind --tool=callgrind`: the solve's instructions are the run's less the baseline's (docs/benchmarks.md).

Usage: python benchmarks/solve_speed.py [--sweep] | --one I [--baseline]
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMANDS = [
    ("llama-3.1-8b", {}, None, False),
    ("llama-3.1-8b", {"method": "qlora", "batch": 4, "seq_len": 2048, "grad_checkpointing": True,
                      "mixed_precision": True}, "rtx-4090", False),
    ("llama-3.2-1b", {"mode": "infer", "seq_len": 4096}, None, False),
    ("qwen2.5-7b", {"mode": "infer", "seq_len": 8192}, "l40s", False),
    ("qwen2.5-32b", {"mode": "infer", "seq_len": 16384, "batch": 4}, None, False),
    ("mixtral-8x7b", {"gpus": 8, "shard": "zero3", "mixed_precision": True, "grad_checkpointing": True}, None, True),
    ("tiny", {}, "h200", False),  # thousands of sequences fit
    ("tiny", {}, None, False),
    ("tiny", {"mode": "infer", "seq_len": 256}, None, False),
    # once the sweep's longest (tests/memory/solve_sweep.py): hundreds of batches near the card, and a 64-layer QLoRA
    # step's longest-context search
    ("google-bert/bert-base-uncased", {"seq_len": 1024, "grad_checkpointing": True, "mixed_precision": True},
     "H200-SXM-141GB", False),
    ("Qwen/Qwen3-32B", {"method": "qlora", "seq_len": 2048, "grad_checkpointing": True, "mixed_precision": True},
     "A100-SXM-80GB", False),
    # QLoRA's longest-context search on the H200, a dozen probes near the card's edge, each replaying a 64-layer step
    ("Qwen/Qwen3-32B", {"method": "qlora", "seq_len": 2048, "grad_checkpointing": True, "mixed_precision": True},
     "H200-SXM-141GB", False),
]


def model_spec(model: str):
    """A catalog model's spec, or for "tiny" benchmarks/cli_speed.py's tiny model (2 layers, hidden 64)."""
    from campaign.models import load_spec
    from campaign.models.architectures import spec_from_config

    if model != "tiny":
        return load_spec(model)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cli_speed import TINY_MODEL

    return spec_from_config(TINY_MODEL, name="tiny", source="benchmarks/cli_speed.py")


def solve_once(model: str, kw: dict, card: str | None, all_cards: bool, *, solve: bool = True) -> tuple[float, int]:
    """(CPU seconds of fit_cards, cards solved), a cold solve: no replay kept from before (`solve` False: all but
    fit_cards, the baseline of --one's instruction count)."""
    from campaign.hardware.cards import all_cards as catalog, find_card
    from campaign.memory import estimate_memory, make_workload, reserved
    from campaign.memory.fit import fit_cards
    from campaign.memory.plan import FEATURED_CARDS

    spec, w = model_spec(model), make_workload(**kw)
    cards = [find_card(card)] if card else list(catalog()) if all_cards else [find_card(n) for n in FEATURED_CARDS]
    est = estimate_memory(spec, w)
    reserved.clear_kept()
    start = time.process_time()
    if solve:
        fit_cards(spec, w, cards, estimate=est)
    return time.process_time() - start, len(cards)


def main() -> None:
    if "--one" in sys.argv:  # one command line's solve, once, for an instruction count (see the docstring)
        index = int(sys.argv[sys.argv.index("--one") + 1])
        solve_once(*COMMANDS[index], solve="--baseline" not in sys.argv)
        return
    from campaign.memory.allocator import CachingAllocator

    print(f"allocator model: {CachingAllocator.__name__} (CompiledAllocator where the install built "
          "memory/_allocator.c)")
    for model, kw, card, every in COMMANDS:
        best, n = min(solve_once(model, kw, card, every) for _ in range(3 if model != "tiny" else 1))
        flags = " ".join(f"{k}={v}" for k, v in kw.items())
        where = card or ("--all-cards" if every else "featured")
        print(f"{model.split('/')[-1]:22s} {flags:80s} {where:14s} {n:2d} cards: {best * 1000:8.1f} ms CPU, "
              f"{best * 1000 / n:7.1f} ms a card {'ok' if best / n <= 0.05 else 'SLOW (goal 50 ms a card)'}",
              flush=True)
    if "--sweep" in sys.argv:
        from campaign.memory import reserved
        from tests.memory.solve_sweep import answers, cases

        timed = []
        for case in cases():
            reserved.clear_kept()  # cold, as a command's own process: nothing kept from the other cards' solves
            start = time.process_time()
            answers(False, [case])
            timed.append((time.process_time() - start, case))
        timed.sort(key=lambda t: t[0])
        times = [t for t, _ in timed]
        print(f"sweep: {len(times)} solves (batch and length on one card), median {statistics.median(times) * 1000:.1f}"
              f" ms, 90th percentile {times[int(0.9 * len(times))] * 1000:.1f} ms, max {times[-1] * 1000:.0f} ms, "
              f"{sum(t <= 0.05 for t in times)} of {len(times)} within 50 ms; the longest:")
        for t, (model, workload, _, card) in timed[-8:]:
            print(f"  {t * 1000:6.1f} ms  {model} {workload} {card}")


if __name__ == "__main__":
    main()
