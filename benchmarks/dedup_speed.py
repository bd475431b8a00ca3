"""Leak search between a training set and an evaluation set: campaign vs rensa (Rust MinHash LSH) vs datasketch,
end to end from the files, on the same documents and the same settings.

Workload: 160,000 training + 40,000 evaluation documents of 60 words (a Zipf vocabulary of 20,000 made-up words),
written as JSONL ({"id", "text"}). Planted: 800 evaluation documents are copies of a training document with 0 to 2
words replaced. Every tool: word 3-gram shingles (words as separated by spaces, lowercased), 128-slot MinHash, LSH
with 32 bands x 4 rows (rensa needs bands dividing 128), threshold 0.8, the training set indexed and the evaluation
set queried. A planted pair is a positive when the exact Jaccard similarity of its two word 3-gram sets (Python
sets, computed here) is >= 0.8; recall = positives found.

- campaign: `check_files([train, eval])`, the library call behind `campaign leaks` (reading and validating each
  record, normalizing, exact duplicates by SHA-256, LSH candidates confirmed by exact Jaccard, the report).
- rensa: its bulk calls, as its README recommends: `RMinHash.digest_matrix_from_token_sets` + `insert_matrix` for
  the index, `RMinHash.from_token_sets` + `query_all` for the queries. Found = a candidate (no confirmation).
- datasketch: `MinHash.generator` (shared permutations) + a `MinHashLSH` insertion session + `query` per
  evaluation document. Found = a candidate (no confirmation).
- The peers read the files with pyarrow's multithreaded JSON reader (the fastest reader installed) and tokenize
  with Python's str.split.

Every tool runs in its own fresh process (`--only NAME`), imports excluded from the time, files read inside it.

Usage:
    python benchmarks/dedup_speed.py                 # side by side (datasketch takes about a minute)
    python benchmarks/dedup_speed.py --small         # 16,000 + 4,000 documents (a quick look)
    python benchmarks/dedup_speed.py --phases        # where campaign's time goes, phase by phase
    python benchmarks/dedup_speed.py --million       # campaign only: 1M documents deduplicated as a stream, peak RSS
"""
from __future__ import annotations

import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEED = 20241130
VOCAB, WORDS_PER_DOC = 20_000, 60
NUM_PERM, BANDS, ROWS, THRESHOLD, NGRAM = 128, 32, 4, 0.8, 3


def _vocab() -> tuple[list[str], list[float]]:
    rng = random.Random(SEED)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(VOCAB)]
    return words, list(itertools.accumulate(1.0 / (r + 1) ** 1.07 for r in range(VOCAB)))


def write_workload(folder: Path, n_train: int, n_eval: int, n_planted: int) -> list[tuple[int, int]]:
    """Write train.jsonl and eval.jsonl; return the planted (train row, eval row) pairs."""
    words, cum = _vocab()
    rng = random.Random(SEED + n_train)
    train = [rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC) for _ in range(n_train)]
    evals = [rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC) for _ in range(n_eval)]
    planted = []
    for q in rng.sample(range(n_eval), n_planted):
        src = rng.randrange(n_train)
        copy = list(train[src])
        for _ in range(rng.randint(0, 2)):
            copy[rng.randrange(WORDS_PER_DOC)] = rng.choice(words)
        evals[q] = copy
        planted.append((src, q))
    for name, docs, prefix in (("train", train, "t"), ("eval", evals, "e")):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": f"{prefix}{i}", "text": " ".join(w)}) + "\n" for i, w in enumerate(docs))
    return planted


def shingles(text: str) -> list[str]:
    w = text.lower().split()
    # the NGRAM shifted copies are shorter by one word each: zip stops at the shortest, the last full n-gram
    return list(map(" ".join, zip(*(w[i:] for i in range(NGRAM)), strict=False)))


def positives(folder: Path, planted: list[tuple[int, int]]) -> list[tuple[int, int]]:
    train, evals = _read(folder / "train.jsonl"), _read(folder / "eval.jsonl")
    out = []
    for i, q in planted:
        a, b = set(shingles(train[i])), set(shingles(evals[q]))
        if len(a & b) / len(a | b) >= THRESHOLD:
            out.append((i, q))
    return out


def _read(path: Path) -> list[str]:
    import pyarrow.json as pj

    return pj.read_json(path).column("text").to_pylist()


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux reports KiB


# ----------------------------------------------------------------------------------------------- the tools


def run_campaign(folder: Path) -> tuple[float, set[tuple[int, int]], str]:
    import numpy  # noqa: F401 - imports before the clock, as for the peers

    from campaign.data.leaks import check_files
    from campaign.data.sketch import DedupConfig, sketch_chunk

    config = DedupConfig(threshold=THRESHOLD, shingle="word", ngram=NGRAM, num_perm=NUM_PERM, bands=BANDS, rows=ROWS)
    sketch_chunk(["warm up the compiled kernel"], config)  # numba loads its on-disk cache (compiled once per install)
    start = time.perf_counter()
    report = check_files([folder / "train.jsonl", folder / "eval.jsonl"], config=config, progress=False)
    elapsed = time.perf_counter() - start
    found = set()
    for check in report.checks:
        if check.id in ("leak.exact_duplicate", "leak.near_duplicate"):
            for pair in check.pairs:
                found.update(pair.linked)
    near = report.check("leak.near_duplicate").rows
    exact = report.check("leak.exact_duplicate").rows
    return elapsed, found, f"{exact:,} exact and {near:,} near-duplicate eval rows, confirmed by exact Jaccard"


def run_rensa(folder: Path) -> tuple[float, set[tuple[int, int]], str]:
    import pyarrow.json  # noqa: F401
    from rensa import RMinHash, RMinHashLSH

    start = time.perf_counter()
    train = [shingles(t) for t in _read(folder / "train.jsonl")]
    evals = [shingles(t) for t in _read(folder / "eval.jsonl")]
    lsh = RMinHashLSH(THRESHOLD, NUM_PERM, BANDS)
    lsh.insert_matrix(RMinHash.digest_matrix_from_token_sets(train, NUM_PERM, 0))
    candidates = lsh.query_all(RMinHash.from_token_sets(evals, NUM_PERM, 0))
    found = {(i, q) for q, keys in enumerate(candidates) for i in keys}
    return time.perf_counter() - start, found, f"{len(found):,} candidate pairs, not confirmed"


def run_datasketch(folder: Path) -> tuple[float, set[tuple[int, int]], str]:
    import pyarrow.json  # noqa: F401
    from datasketch import MinHash, MinHashLSH

    start = time.perf_counter()
    train = _read(folder / "train.jsonl")
    evals = _read(folder / "eval.jsonl")
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, params=(BANDS, ROWS))
    encoded = ([s.encode("utf-8") for s in shingles(t)] for t in train)
    with lsh.insertion_session() as session:
        for i, m in enumerate(MinHash.generator(encoded, num_perm=NUM_PERM)):
            session.insert(i, m)
    queries = MinHash.generator(([s.encode("utf-8") for s in shingles(t)] for t in evals), num_perm=NUM_PERM)
    found = {(i, q) for q, m in enumerate(queries) for i in lsh.query(m)}
    return time.perf_counter() - start, found, f"{len(found):,} candidate pairs, not confirmed"


def run_phases(folder: Path) -> tuple[float, set[tuple[int, int]], str]:
    """campaign's pipeline phase by phase (the same library calls check_files makes, timed one by one)."""
    import hashlib

    from campaign.data.dedup import cross_duplicates
    from campaign.data.normalize import normalize_texts
    from campaign.data.read import read_dataset
    from campaign.data.sketch import DedupConfig, Sketches, sketch_chunk

    config = DedupConfig(threshold=THRESHOLD, shingle="word", ngram=NGRAM, num_perm=NUM_PERM, bands=BANDS, rows=ROWS)
    sketch_chunk(["warm up the compiled kernel"], config)
    clock, times = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[name] = now - clock
        clock = now

    splits = [read_dataset(folder / f) for f in ("train.jsonl", "eval.jsonl")]
    lap("read and validate the files")
    norm = [[t for i in range(0, len(d), 4096) for t in normalize_texts(d.texts[i:i + 4096])] for d in splits]
    lap("normalize")
    for n in norm:
        [hashlib.sha256(t.encode()).digest() for t in n]
    lap("content hashes (SHA-256)")
    for n in norm:
        for i in range(0, len(n), 4096):
            sketch_chunk(n[i:i + 4096], config)
    lap("shingles, MinHash, band keys")
    sketches = [Sketches(config).add(d.texts, progress=False) for d in splits]
    clock = time.perf_counter()  # (the sketches again, as check_files builds them, off the clock)
    matches = cross_duplicates(*sketches)
    lap("exact matches, LSH candidates, exact Jaccard")
    total = sum(times.values())
    lines = "; ".join(f"{k} {v:.2f} s" for k, v in times.items())
    return total, {(i, q) for i, q, _ in matches.near} | set(matches.exact), lines


TOOLS = {"campaign": run_campaign, "rensa": run_rensa, "datasketch": run_datasketch}


def run_one(name: str, folder: Path) -> None:
    """In a fresh process: time one tool, print one JSON line (seconds, found pairs, what was found)."""
    elapsed, found, what = {**TOOLS, "phases": run_phases}[name](folder)
    print(json.dumps({"seconds": elapsed, "found": sorted(found), "what": what, "peak_rss_gib": peak_rss_gib()}))


def million() -> None:
    """campaign only: 1M documents of 60 words (2% planted near copies) deduplicated as a generated stream."""
    from campaign.data.dedup import find_duplicates
    from campaign.data.sketch import DedupConfig

    words, cum = _vocab()

    def docs():
        rng = random.Random(SEED)
        recent: list[list[str]] = []
        for _ in range(1_000_000):
            if recent and rng.random() < 0.02:
                w = list(rng.choice(recent))
                w[rng.randrange(WORDS_PER_DOC)] = rng.choice(words)
            else:
                w = rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC)
                recent = (recent + [w])[-1000:]
            yield " ".join(w)

    config = DedupConfig(shingle="word", ngram=NGRAM)
    start = time.perf_counter()
    result = find_duplicates(docs(), config, progress=False)
    elapsed = time.perf_counter() - start
    rss = peak_rss_gib()
    print(f"1M documents streamed (generation included): {elapsed:.1f} s, {len(result.near_pairs):,} near pairs, "
          f"peak RSS {rss:.2f} GiB — {'ok' if rss < 4 else 'OVER (goal < 4 GiB)'}")


def main(argv: list[str]) -> None:
    if "--only" in argv:
        run_one(argv[argv.index("--only") + 1], Path(argv[argv.index("--only") + 2]))
        return
    if "--million" in argv:
        million()
        return
    n_train, n_eval, n_planted = (16_000, 4_000, 80) if "--small" in argv else (160_000, 40_000, 800)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        planted = write_workload(folder, n_train, n_eval, n_planted)
        pos = positives(folder, planted)
        size = sum(os.path.getsize(folder / f) for f in ("train.jsonl", "eval.jsonl")) / 2**20
        print(f"{n_train:,} train + {n_eval:,} eval documents of {WORDS_PER_DOC} words ({size:.0f} MiB of JSONL); "
              f"{len(planted)} planted copies, {len(pos)} with exact Jaccard >= {THRESHOLD}; word {NGRAM}-grams, "
              f"{NUM_PERM} slots, {BANDS} bands x {ROWS} rows; {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}")
        times = {}
        if "--phases" in argv:
            out = subprocess.run([sys.executable, __file__, "--only", "phases", str(folder)], capture_output=True,
                                 text=True, check=True)
            print("campaign by phase: " + json.loads(out.stdout.strip().splitlines()[-1])["what"])
            return
        for name in TOOLS:
            out = subprocess.run([sys.executable, __file__, "--only", name, str(folder)], capture_output=True,
                                 text=True)
            if out.returncode:
                print(f"{name:<11} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            found = {tuple(p) for p in res["found"]}
            recall = sum(p in found for p in pos) / len(pos)
            times[name] = res["seconds"]
            print(f"{name:<11} {res['seconds']:7.2f} s  {(n_train + n_eval) / res['seconds']:9,.0f} docs/s  "
                  f"recall {recall:.4f}  peak RSS {res['peak_rss_gib']:.2f} GiB  ({res['what']})")
        if "campaign" in times:
            print("time / campaign's time: " + ", ".join(f"{k} {v / times['campaign']:.2f}x" for k, v in times.items()
                                                        if k != "campaign"))


if __name__ == "__main__":
    main(sys.argv[1:])
