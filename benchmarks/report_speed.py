"""Seconds and bytes of `campaign report` over many records: N records of the kinds the report reads, made through
the library's own calls and record path (save_record, as `campaign --record` does; start_run/log_run/end_run for
runs) in a temporary CAMPAIGN_ROOT, then `python -m campaign report` timed in a fresh process.

    python benchmarks/report_speed.py [--records 10000] [--keep DIR] [--profile report.prof]

The mix (of N): 40% memory estimates (plan_memory against a card) of checkpoint folders, 15% error analyses and
10% regressions of distinct prediction files, 10% seed comparisons of distinct result files, 10% runs with 20
metric records each (one in five failed, some accepted or rejected), 5% budgets and 10% leak checks (re-runs of one
plan and one split: the report keeps the latest of each). Subjects are distinct wherever the report keys on one,
so every memory, errors, regress and seeds record is its own entry in the report (the worst case). An estimate
depends on the architecture and the workload only, so each distinct pair is estimated once by plan_memory and saved
under each checkpoint folder's name, as estimating the folders one by one would.

Prints the report's wall seconds, CPU seconds (of the report's process), its size and its figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
EXAMPLES = ROOT / "examples"
SHARES = {"memory": 0.40, "errors": 0.15, "regress": 0.10, "seeds": 0.10, "runs": 0.10, "budget": 0.05,
          "leaks": 0.10}
MODELS = ("openai-community/gpt2", "meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.1-8B")
CARDS = ("rtx-4090", "a100-80gb", "h100-80gb", "l4")


def counts(n: int) -> dict[str, int]:
    out = {k: int(n * share) for k, share in SHARES.items()}
    out["memory"] += n - sum(out.values())
    return out


def _predictions(folder: Path, i: int) -> Path:
    """The example candidate's predictions with a few answers changed (file i differs from every other)."""
    rows = [json.loads(line) for line in (EXAMPLES / "data" / "candidate.jsonl").read_text().splitlines()]
    labels = sorted({r["gold"] for r in rows})
    for k in range(i % 7 + 1):
        j = (i * 31 + k * 97) % len(rows)
        rows[j]["pred"] = labels[(labels.index(rows[j]["pred"]) + 1 + i) % len(labels)] \
            if rows[j]["pred"] in labels else labels[0]
    path = folder / "predictions" / f"epoch-{i:05d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _seeds(folder: Path, i: int) -> Path:
    lines = (EXAMPLES / "data" / "seeds.csv").read_text().splitlines()
    out = [lines[0]] + [f"{v},{s},{float(m) + (i % 13) * 0.01 * (v == 'candidate'):.2f}"
                        for v, s, m in (line.split(",") for line in lines[1:])]
    path = folder / "seeds" / f"sweep-{i:05d}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def make_records(folder: Path, n: int) -> dict[str, int]:
    """N records in folder/.campaign (CAMPAIGN_ROOT must point there); returns how many of each kind."""
    from campaign.data.leaks import check_files
    from campaign.evaluate.analysis import analyze_errors
    from campaign.evaluate.regress import regress
    from campaign.evaluate.seeds import compare_seeds
    from campaign.memory import make_workload
    from campaign.memory.plan import plan_memory
    from campaign.plan.budget import budget
    from campaign.track.records import save_record
    from campaign.track.run import decide_run, end_run, log_run, start_run

    how_many = counts(n)
    pool = [plan_memory(model, make_workload(batch=batch, seq_len=seq), card=card)
            for model in MODELS for batch, seq, card in zip((1, 4, 8, 16), (512, 1024, 2048, 4096), CARDS, strict=True)]
    for i in range(how_many["memory"]):
        plan = pool[i % len(pool)]
        named = dataclasses.replace(plan, estimate=dataclasses.replace(
            plan.estimate, model=f"checkpoints/{plan.estimate.model.split('/')[-1]}-step-{i:05d}"))
        save_record(named, command="memory", argv=["--record", "memory", named.estimate.model, "--card", plan.card])
    base = EXAMPLES / "data" / "baseline.jsonl"
    for i in range(max(how_many["errors"], how_many["regress"])):
        path = _predictions(folder, i)
        if i < how_many["errors"]:
            save_record(analyze_errors(path), command="errors", argv=["--record", "errors", str(path)])
        if i < how_many["regress"]:
            save_record(regress(base, path, guards=["f1[refund]>=-0.01"]), command="regress",
                        argv=["--record", "regress", str(base), str(path)])
    for i in range(how_many["seeds"]):
        path = _seeds(folder, i)
        save_record(compare_seeds(path, min_effect=0.5, n_resamples=2000), command="seeds",
                    argv=["--record", "seeds", str(path)])
    if how_many["budget"]:
        planned = budget(EXAMPLES / "plan" / "plan.yaml")
        for _ in range(how_many["budget"]):
            save_record(planned, command="budget", argv=["--record", "budget", "plan.yaml"])
    if how_many["leaks"]:
        leaks = check_files([EXAMPLES / "data" / "tickets.jsonl", EXAMPLES / "data" / "heldout.jsonl"])
        for _ in range(how_many["leaks"]):
            save_record(leaks, command="leaks", argv=["--record", "leaks", "tickets.jsonl", "heldout.jsonl"])
    previous = None
    for i in range(how_many["runs"]):
        m = start_run(f"sweep-{i:05d}", params={"lr": 1e-4 * (i % 7 + 1), "lora": {"r": 8 * (i % 4 + 1)}},
                      baseline=previous if i % 10 else None, with_torch=False, owner_pid=0, code_dir=folder)
        log_run(m.id, [{"step": s, "loss": 2.0 / (s + 1), "lr": 1e-4} for s in range(0, 500, 25)])
        failed = i % 5 == 4
        end_run(m.id, "failed" if failed else "completed", "CUDA out of memory at step 480" if failed else "")
        if i % 10 == 3:
            decide_run(m.id, "accepted" if i % 20 == 3 else "rejected", "guards hold" if i % 20 == 3 else "no gain")
        previous = m.id
    return how_many


def time_report(out: Path, profile: str | None = None) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds, the report's --json) of `python -m campaign report` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else []) + \
        ["-m", "campaign", "report", "--out", str(out), "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"campaign report failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000, help="records to make (runs count as records)")
    p.add_argument("--keep", type=Path, default=None, help="make the records in this folder and keep them")
    p.add_argument("--profile", default=None, help="write a cProfile of the report to this file")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="campaign-report-speed-") as tmp:
        folder = (args.keep or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["CAMPAIGN_ROOT"] = str(folder / ".campaign")
        start = time.perf_counter()
        made = make_records(folder, args.records)
        print(f"{args.records:,} records made in {time.perf_counter() - start:.1f} s: "
              + ", ".join(f"{v:,} {k}" for k, v in made.items()))
        out = folder / "report.html"
        wall, cpu, summary = time_report(out, args.profile)
        size = out.stat().st_size
        print(f"campaign report: {wall:.2f} s wall, {cpu:.2f} s CPU, {size / 1e6:.2f} MB ({size:,} bytes), "
              f"{summary['figures']} figures, {summary['records']:,} records and {summary['runs']:,} runs read; "
              f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
