"""Cold-process cost of every `campaign` command: CPU seconds (user + sys of the child) and wall time.

Each run is a fresh Python process, so imports count. Per command line: the median of N runs of its CPU time (the
child's rusage from os.wait4, the figure the goals are set in: the wall time depends on what else the machine
runs) and of its wall time, against its goal: 0.3 CPU-s for the --help of every command and sub-command and for the
everyday commands (cards, models, guide, memory, kv), 0.5 for `leaks` on two tiny files. The long commands (errors,
regress, seeds, budget, split, leaks, usage, trace, measure on the repository's examples) have no start-up goal:
they show progress on a terminal instead; their figures say what a user waits. The memory commands of the solve
(the largest batch and context) are timed too, each run cut at --timeout seconds ("timeout").
A command line whose first run takes over 5 s is run min(N, 3) times; one that times out, once.
Each child runs with a bytecode cache, as an installed Python and package have (pip compiles a package's modules at
install): the children write it in a folder of this run's own (PYTHONPYCACHEPREFIX), PYTHONDONTWRITEBYTECODE is
taken out of their environment (a machine that sets it, with a standard library shipped without plain .pyc files,
compiles the standard library in every process: tenths of a second that no user pays), and a command line with a
start-up goal is run once unmeasured first, so that its modules are compiled before it is timed.

Usage: python benchmarks/cli_speed.py [N] [--only TEXT] [--timeout SECONDS] [--skip-solve-figure]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
START_UP_GOAL = 0.3      # CPU seconds: --help of every command, the everyday commands, the memory commands
TINY_LEAKS_GOAL = 0.5    # CPU seconds: campaign leaks on two tiny files (numpy is needed to sketch them)
TINY_MODEL = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=160,
                  num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=1000,
                  max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="bfloat16")


@dataclass(frozen=True)
class Run:
    cpu_s: float        # user + sys of the child
    wall_s: float
    code: int | None    # exit code; None when cut at the timeout


BYTECODE = tempfile.TemporaryDirectory(prefix="cli-speed-bytecode-")  # the children's bytecode cache (see above)


def run_once(args: list[str], *, cwd: str | Path, timeout_s: float = 60.0) -> Run:
    """`python -m campaign ARGS` in a fresh process (stdout and stderr discarded, so no progress is drawn): its CPU
    seconds from os.wait4 and its wall seconds; a run past timeout_s is killed (its whole process group)."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "COLUMNS": "120",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p),
           "PYTHONPYCACHEPREFIX": BYTECODE.name}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "campaign", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout_s:
            os.killpg(child.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(child.pid, 0)
            timed_out = True
            break
        time.sleep(0.005)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait for it again
    return Run(usage.ru_utime + usage.ru_stime, wall, None if timed_out else child.returncode)


@dataclass(frozen=True)
class Figure:
    args: tuple[str, ...]
    goal_cpu_s: float | None
    runs: tuple[Run, ...]

    @property
    def timed_out(self) -> bool:
        return any(r.code is None for r in self.runs)

    @property
    def cpu_s(self) -> float:
        return statistics.median(r.cpu_s for r in self.runs)

    @property
    def wall_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def verdict(self) -> str:
        if self.timed_out:
            return "timeout"
        if self.goal_cpu_s is None:
            return "-"
        return "ok" if self.cpu_s <= self.goal_cpu_s else f"SLOW (goal {self.goal_cpu_s:.1f} CPU-s)"

    def line(self) -> str:
        command = "campaign " + " ".join(self.args)
        if len(command) > 78:
            command = command[:75] + "..."
        codes = sorted({r.code for r in self.runs if r.code is not None})
        exits = f"exit {','.join(map(str, codes))}" if codes else ""
        if self.timed_out:
            figures = f"{'':>8} {'> ' + format(self.runs[-1].wall_s, '.1f'):>8}"
        else:
            figures = f"{self.cpu_s:8.3f} {self.wall_s:8.3f}"
        return f"{command:78s} {figures} {len(self.runs):>4} {exits:>8}  {self.verdict}"


def measure(args: list[str], *, goal_cpu_s: float | None, n: int, cwd: str | Path, timeout_s: float) -> Figure:
    """Median of n cold runs (min(n, 3) when the first takes over 5 s; one when it times out); a command line with a
    goal is run once before, unmeasured, to compile its modules into the bytecode cache."""
    if goal_cpu_s is not None:
        run_once(args, cwd=cwd, timeout_s=timeout_s)
    runs = [run_once(args, cwd=cwd, timeout_s=timeout_s)]
    if runs[0].code is not None:
        for _ in range((n if runs[0].wall_s <= 5 else min(n, 3)) - 1):
            runs.append(run_once(args, cwd=cwd, timeout_s=timeout_s))
            if runs[-1].code is None:
                break
    return Figure(tuple(args), goal_cpu_s, tuple(runs))


def help_lines() -> list[list[str]]:
    """`--help` of campaign and of every command and sub-command, found by walking the typer app."""
    import typer

    sys.path.insert(0, str(ROOT / "src"))
    from campaign.cli import app

    def walk(command, path):
        yield [*path, "--help"]
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def workloads(tmp: Path) -> dict[str, list[tuple[list[str], float | None]]]:
    """The command lines by section, with their CPU goal (None: long work, no start-up goal). Writes the inputs
    they need into tmp: two tiny split files, a split of the examples (for usage), a tiny model config."""
    (tmp / "a.jsonl").write_text('{"id": "a", "text": "hello world"}\n{"id": "b", "text": "foo bar"}\n')
    (tmp / "b.jsonl").write_text('{"id": "c", "text": "hello world"}\n')
    (tmp / "tiny").mkdir(exist_ok=True)
    (tmp / "tiny" / "config.json").write_text(json.dumps(TINY_MODEL))
    data, plan = EXAMPLES / "data", EXAMPLES / "plan"
    setup = run_once(["split", str(data / "tickets.jsonl"), "--out", "split", "--force"], cwd=tmp)
    if setup.code not in (0, 1):
        print(f"(setting up the split for `usage` failed: exit {setup.code})")
    return {
        "everyday": [
            (["memory", "llama-3.1-8b", "--no-solve"], START_UP_GOAL),
            (["memory", "llama-3.1-8b", "--no-solve", "--json"], START_UP_GOAL),
            (["kv", "llama-3.1-8b", "--context", "32768"], START_UP_GOAL),
            (["cards"], START_UP_GOAL),
            (["models"], START_UP_GOAL),
            (["models", "llama-3.1-8b"], START_UP_GOAL),
            (["guide"], START_UP_GOAL),
            (["leaks", "a.jsonl", "b.jsonl"], TINY_LEAKS_GOAL),
        ],
        "long work (progress on a terminal)": [
            (["errors", str(data / "baseline.jsonl")], None),
            (["regress", str(data / "baseline.jsonl"), str(data / "candidate.jsonl")], None),
            (["seeds", str(data / "seeds.csv")], None),
            (["budget", str(plan / "plan.yaml")], None),
            (["split", str(data / "tickets.jsonl"), "--out", "split-again", "--force"], None),
            (["leaks", str(data / "tickets.jsonl"), str(data / "heldout.jsonl")], None),
            (["usage", "split"], None),
            (["trace", "tiny", "--seq-len", "64"], None),
            (["measure", "tiny", "--seq-len", "64", "--device", "cpu"], None),
        ],
        "memory with the solve (largest batch and context)": [
            (["memory", "llama-3.1-8b"], START_UP_GOAL),
            (["memory", "llama-3.1-8b", "--method", "qlora", "--batch", "4", "--seq-len", "2048",
              "--grad-checkpointing", "--mixed-precision", "--card", "rtx-4090"], START_UP_GOAL),
            (["memory", "llama-3.2-1b", "--infer"], START_UP_GOAL),
            (["memory", "qwen2.5-7b", "--infer", "--context", "8192", "--card", "l40s"], START_UP_GOAL),
            (["memory", "qwen2.5-32b", "--infer", "--context", "16384", "--sequences", "4"], START_UP_GOAL),
            (["memory", "mixtral-8x7b", "--gpus", "8", "--shard", "zero3", "--mixed-precision",
              "--grad-checkpointing", "--all-cards"], START_UP_GOAL),
            (["kv", "qwen2.5-7b", "--context", "32768", "--sequences", "8", "--kv-dtype", "fp8", "--card", "l40s"],
             START_UP_GOAL),
            (["memory", "tiny"], START_UP_GOAL),  # a 2-layer model: thousands of sequences fit each card
            (["memory", "tiny", "--card", "h200"], START_UP_GOAL),
        ],
    }


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
            reserved.clear_kept()  # a cold process: no replay kept from the round before
            start = time.process_time()
            fit_cards(spec, w, cards, estimate=est)
            best = min(best, time.process_time() - start)
    finally:
        reserved._training_replay = real
    return (f"card solve of memory llama-3.1-8b ({len(cards)} cards): {best:.3f} s CPU, {len(replays)} replays "
            f"of the step ({best / max(1, len(replays)) * 1000:.1f} ms each, solve included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=5, help="cold runs per command line (median)")
    parser.add_argument("--only", default="", help="only the command lines containing this text")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a run is cut")
    parser.add_argument("--skip-solve-figure", action="store_true", help="do not time the card solve in-process")
    opts = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    if not opts.skip_solve_figure:
        try:
            print(solve_figure())
        except Exception as e:  # the solver is being rewritten: its figure must not stop the rest
            print(f"card solve figure unavailable: {type(e).__name__}: {e}")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
          + f" on {os.cpu_count()} CPUs: CPU seconds are the child's own, but a loaded machine inflates them too")
    print("children run with a bytecode cache of their own (PYTHONPYCACHEPREFIX), compiled by an unmeasured first "
          "run of each command line with a goal")
    baseline = [run_python_pass() for _ in range(5)]
    print(f"python -c pass (interpreter start): median {statistics.median(r.cpu_s for r in baseline):.3f} CPU-s, "
          f"{statistics.median(r.wall_s for r in baseline):.3f} s wall")
    print(f"{opts.n} cold runs per command line; CPU = user + sys of the child (median), wall = median seconds\n")
    header = f"{'command':78s} {'CPU s':>8} {'wall s':>8} {'runs':>4} {'':>8}  verdict"
    slow = 0
    with tempfile.TemporaryDirectory(prefix="cli-speed-") as tmp:
        sections = {"--help of every command and sub-command": [(h, START_UP_GOAL) for h in help_lines()],
                    **workloads(Path(tmp))}
        for title, lines in sections.items():
            lines = [(args, goal) for args, goal in lines if opts.only in " ".join(args)]
            if not lines:
                continue
            print(f"== {title}\n{header}")
            for args, goal in lines:
                fig = measure(args, goal_cpu_s=goal, n=opts.n, cwd=tmp, timeout_s=opts.timeout)
                slow += fig.verdict not in ("ok", "-")
                print(fig.line(), flush=True)
            print()
    print(f"{slow} command line(s) over their goal or cut at the timeout" if slow else "every goal met")
    print("load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


def run_python_pass() -> Run:
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return Run(usage.ru_utime + usage.ru_stime, time.perf_counter() - start, child.returncode)


if __name__ == "__main__":
    main()
