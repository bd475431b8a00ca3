"""The leak search on Ray (campaign leaks --engine ray) against the single-machine path, on the same files: documents
per second with 1 and 2 local Ray workers, the peak RSS of the worker processes, and whether the two give the same
rows for every check.

Data: 160,000 train + 40,000 eval documents of 60 words (a 20,000-word Zipf vocabulary), written as JSONL shards
of 20,000 documents (and as one file per split for the single-machine path); 2% of eval rows are copies of a train
row with 0-2 words substituted, 0.5% exact copies. Settings: word 3-gram shingles, 128 permutations, threshold 0.8.
Times run from the files to the LeakReport; the single machine's compiled kernel is loaded before its clock (as in
dedup_speed.py); the Ray figures leave out the start of Ray (printed beside them) but include each worker's imports.

Usage:
    python benchmarks/dedup_scale.py               # 160,000 + 40,000 documents (a few minutes on 2 cores)
    python benchmarks/dedup_scale.py --docs 20000  # fewer (train 80%, eval 20%)
    python benchmarks/dedup_scale.py --dry-run     # 2,000 + 500 documents, for the tests; JSON to $OUT if set
"""
from __future__ import annotations

import itertools
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

SEED = 20240501
VOCAB = 20_000
WORDS_PER_DOC = 60
SHARD_DOCS = 20_000
NEAR_SHARE, EXACT_SHARE = 0.02, 0.005
SETTINGS = {"threshold": 0.8, "shingle": "word", "ngram": 3, "num_perm": 128}


def generate(folder: Path, n_train: int, n_eval: int, shard_docs: int) -> None:
    """train/ and eval/ folders of JSONL shards, and train.jsonl / eval.jsonl holding the same rows."""
    rng = random.Random(SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(VOCAB)]
    cum = list(itertools.accumulate(1.0 / (r + 1) ** 1.07 for r in range(VOCAB)))
    train = [rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC) for _ in range(n_train)]
    evals = [rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC) for _ in range(n_eval)]
    for q in rng.sample(range(n_eval), int(n_eval * (NEAR_SHARE + EXACT_SHARE))):
        copy = list(train[rng.randrange(n_train)])
        if rng.random() < NEAR_SHARE / (NEAR_SHARE + EXACT_SHARE):
            for _ in range(rng.randint(0, 2)):
                copy[rng.randrange(WORDS_PER_DOC)] = rng.choice(words)
        evals[q] = copy
    for name, docs in (("train", train), ("eval", evals)):
        lines = [json.dumps({"id": f"{name[0]}{i}", "text": " ".join(w)}) + "\n" for i, w in enumerate(docs)]
        (folder / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
        (folder / name).mkdir()
        for k, start in enumerate(range(0, len(lines), shard_docs)):
            (folder / name / f"part-{k:05d}.jsonl").write_text("".join(lines[start:start + shard_docs]),
                                                               encoding="utf-8")


class WorkerMemory:
    """Peak RSS of this process's Ray worker processes (descendants whose command line is a Ray worker), sampled
    every 0.1 s."""

    def __init__(self) -> None:
        import psutil

        self.psutil, self.peak, self.workers = psutil, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        me = self.psutil.Process()
        while not self._stop.is_set():
            for p in me.children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                    if "default_worker.py" in cmd or p.name().startswith("ray::"):
                        self.workers.add(p.pid)
                        self.peak = max(self.peak, p.memory_info().rss)
                except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    pass
            self._stop.wait(0.1)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def rows_of(report) -> dict[str, list]:
    return {c.id: [(p.index, p.query, p.rows, p.links, p.linked) for p in c.pairs] for c in report.checks}


def main(argv: list[str]) -> int:
    dry = "--dry-run" in argv
    n = 2_500 if dry else int(argv[argv.index("--docs") + 1]) if "--docs" in argv else 200_000
    n_train, n_eval = n * 4 // 5, n - n * 4 // 5
    shard_docs = 500 if dry else SHARD_DOCS
    import ray

    from campaign.data.leaks import check_files
    from campaign.data.sketch import DedupConfig

    config = DedupConfig(**SETTINGS)
    out: dict = {"docs": n, "train": n_train, "eval": n_eval, "shard_docs": shard_docs, "settings": SETTINGS,
                 "cpus": len(os.sched_getaffinity(0)), "runs": []}
    with tempfile.TemporaryDirectory(prefix="dedup_scale_") as tmp:
        folder = Path(tmp)
        generate(folder, n_train, n_eval, shard_docs)
        from campaign.data.sketch import sketch_chunk

        sketch_chunk(["warm up the compiled kernel"], config)  # numba's on-disk cache, loaded before the clock
        start = time.perf_counter()
        single = check_files([folder / "train.jsonl", folder / "eval.jsonl"], config=config, progress=False)
        elapsed = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out["runs"].append({"engine": "single machine", "seconds": elapsed, "docs_per_s": n / elapsed,
                            "peak_rss_bytes": rss})
        print(f"single machine   {elapsed:7.1f} s  {n / elapsed:9,.0f} docs/s  peak RSS {rss / 2**30:.2f} GiB "
              f"(this process)  exact {single.check('leak.exact_duplicate').rows:,}, near "
              f"{single.check('leak.near_duplicate').rows:,} eval rows", flush=True)
        for workers in (1, 2):
            t0 = time.perf_counter()
            ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR")
            boot = time.perf_counter() - t0
            try:
                with WorkerMemory() as mem:
                    start = time.perf_counter()
                    stages: dict[str, float] = {}
                    report = check_files([str(folder / "train"), str(folder / "eval")], config=config,
                                         names=["train.jsonl", "eval.jsonl"], timings=stages, engine="ray",
                                         progress=False)
                    elapsed = time.perf_counter() - start
            finally:
                ray.shutdown()
            same = rows_of(report) == rows_of(single)
            out["runs"].append({"engine": f"ray, {workers} worker(s)", "seconds": elapsed, "docs_per_s": n / elapsed,
                                "ray_start_seconds": boot, "worker_peak_rss_bytes": mem.peak,
                                "worker_processes": len(mem.workers), "same_rows": same, "stages_seconds": stages})
            print(f"ray {workers} worker(s)  {elapsed:7.1f} s  {n / elapsed:9,.0f} docs/s  worker peak RSS "
                  f"{mem.peak / 2**30:.2f} GiB ({len(mem.workers)} processes)  Ray start {boot:.1f} s  same rows as "
                  f"the single machine: {'yes' if same else 'NO'}; stages "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()), flush=True)
            if not same:
                return 1
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "dedup_scale.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
