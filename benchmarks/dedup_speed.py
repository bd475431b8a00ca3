"""Near-duplicate detection, ours vs datasketch's MinHashLSH, on the same generated documents with planted near
duplicates (goal: >= 10x datasketch's throughput at >= 0.95 recall of the planted pairs).

Documents: words drawn from a Zipf-distributed vocabulary of 20,000 made-up words, 30-150 words each. Planted:
2% of documents are copies of an earlier one with 1-3 words substituted, inserted or deleted, 0.5% exact copies.
A planted pair counts as a positive when its exact Jaccard similarity (character 5-gram sets, computed here with
Python sets) is >= 0.8; recall = positives found.

Both pipelines start from the raw texts and do the same work: normalize the text, character 5-gram shingles, 128-slot
MinHash, LSH with the same banding (21 bands x 6 rows). datasketch: MinHash.bulk (shared permutations) +
MinHashLSH insertion session + a query per document. Ours: find_duplicates, which also confirms every candidate
by exact Jaccard and clusters.

Timing starts after the imports and the document generation (except --million, which streams generated documents
through ours, so its time includes generating them).

Usage:
    python benchmarks/dedup_speed.py            # 200k documents, side by side (a few minutes)
    python benchmarks/dedup_speed.py 20000      # fewer documents
    python benchmarks/dedup_speed.py --million  # ours only, 1M documents streamed: time and peak RSS (goal < 4 GiB)
"""
from __future__ import annotations

import itertools
import random
import resource
import sys
import time
from collections.abc import Iterable, Iterator

SEED = 20240501
VOCAB = 20_000
NEAR_SHARE, EXACT_SHARE = 0.02, 0.005


def _vocab() -> tuple[list[str], list[float]]:
    rng = random.Random(SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(VOCAB)]
    weights = [1.0 / (r + 1) ** 1.07 for r in range(VOCAB)]
    return words, list(itertools.accumulate(weights))


WORDS, CUM = _vocab()


def _base(i: int) -> str:
    rng = random.Random(SEED * 1_000_003 + i)
    text = " ".join(rng.choices(WORDS, cum_weights=CUM, k=rng.randint(30, 150)))
    return text[0].upper() + text[1:] + "."


def plan(n: int) -> dict[int, tuple[str, int]]:
    """Doc index -> ('near' | 'exact', source index), for the planted copies (source < index)."""
    rng = random.Random(SEED + n)
    planted: dict[int, tuple[str, int]] = {}
    for kind, share in (("near", NEAR_SHARE), ("exact", EXACT_SHARE)):
        for i in rng.sample(range(n // 10, n), int(n * share)):
            if i not in planted:
                planted[i] = (kind, rng.randrange(0, i))
    return planted


def document(i: int, planted: dict[int, tuple[str, int]]) -> str:
    if i not in planted:
        return _base(i)
    kind, src = planted[i]
    text = document(src, planted)
    if kind == "exact":
        return text
    rng = random.Random(SEED * 7 + i)
    words = text.split()
    for _ in range(rng.randint(1, 3)):
        op, pos = rng.choice(("sub", "ins", "del")), rng.randrange(len(words))
        if op == "sub":
            words[pos] = rng.choice(WORDS)
        elif op == "ins":
            words.insert(pos, rng.choice(WORDS))
        elif len(words) > 1:
            del words[pos]
    return " ".join(words)


def documents(n: int, planted: dict[int, tuple[str, int]]) -> Iterator[str]:
    return (document(i, planted) for i in range(n))


def shingles(text: str, n: int = 5) -> set[str]:
    from campaign.data.normalize import normalize_text

    t = normalize_text(text)
    return {t[i:i + n] for i in range(len(t) - n + 1)} if len(t) >= n else ({t} if t else set())


def positives(n: int, planted: dict[int, tuple[str, int]], threshold: float) -> list[tuple[int, int]]:
    """Planted near pairs whose exact Jaccard >= threshold (plus every exact copy)."""
    out = []
    for i, (kind, src) in sorted(planted.items()):
        a, b = shingles(document(src, planted)), shingles(document(i, planted))
        if kind == "exact" or len(a & b) / len(a | b) >= threshold:
            out.append((src, i))
    return out


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux reports KiB


def run_ours(texts: Iterable[str]):
    import numpy  # noqa: F401 - imported before the clock starts, as datasketch is

    from campaign.data.dedup import find_duplicates
    from campaign.data.sketch import DedupConfig

    start = time.perf_counter()
    result = find_duplicates(texts, DedupConfig(), progress=False)
    return time.perf_counter() - start, result


def run_datasketch(texts: list[str], bands: int, rows: int) -> tuple[float, set[tuple[int, int]]]:
    from datasketch import MinHash, MinHashLSH

    start = time.perf_counter()
    encoded = ([s.encode("utf-8") for s in shingles(t)] for t in texts)
    lsh = MinHashLSH(threshold=0.8, num_perm=128, params=(bands, rows))
    mhs = []
    with lsh.insertion_session() as session:
        for i, m in enumerate(MinHash.generator(encoded, num_perm=128)):
            session.insert(i, m)
            mhs.append(m)
    pairs = {(min(i, j), max(i, j)) for i, m in enumerate(mhs) for j in lsh.query(m) if j != i}
    return time.perf_counter() - start, pairs


def main(argv: list[str]) -> None:
    from campaign.data.sketch import DedupConfig

    million = "--million" in argv
    args = [a for a in argv if not a.startswith("--")]
    n = 1_000_000 if million else int(args[0]) if args else 200_000
    bands, rows = DedupConfig().banding()
    planted = plan(n)
    print(f"{n:,} documents, {sum(k == 'near' for k, _ in planted.values()):,} planted near copies and "
          f"{sum(k == 'exact' for k, _ in planted.values()):,} exact copies; char 5-grams, 128 slots, "
          f"{bands} bands x {rows} rows, threshold 0.8")
    pos = positives(n, planted, 0.8)
    print(f"planted pairs with exact Jaccard >= 0.8 (positives): {len(pos):,}")

    # 200k: both get the same list of texts; --million: ours consumes a generator (generation time included)
    texts = None if million else list(documents(n, planted))
    t_ours, result = run_ours(documents(n, planted) if million else texts)
    cl = result.cluster_of
    recall_ours = sum(cl[a] == cl[b] for a, b in pos) / len(pos)
    print(f"ours:       {t_ours:8.1f} s  {n / t_ours:10,.0f} docs/s  recall {recall_ours:.4f}  "
          f"({len(result.near_pairs):,} near pairs confirmed, {result.exact_duplicates:,} exact copies, "
          f"{result.candidates:,} LSH candidates, {result.checked:,} checked exactly)  "
          f"peak RSS {peak_rss_gib():.2f} GiB")
    if million:
        verdict = "ok" if peak_rss_gib() < 4 else "OVER (goal < 4 GiB)"
        print(f"1M documents streamed: peak RSS {peak_rss_gib():.2f} GiB — {verdict}")
        return
    t_ds, pairs = run_datasketch(texts, bands, rows)
    recall_ds = sum((a, b) in pairs for a, b in pos) / len(pos)
    print(f"datasketch: {t_ds:8.1f} s  {n / t_ds:10,.0f} docs/s  recall {recall_ds:.4f}  "
          f"({len(pairs):,} candidate pairs, not confirmed)")
    ratio = t_ds / t_ours
    ok = ratio >= 10 and recall_ours >= 0.95
    print(f"throughput ratio ours/datasketch: {ratio:.1f}x; recall ours {recall_ours:.4f} vs datasketch "
          f"{recall_ds:.4f} — {'goal met' if ok else 'goal NOT met (>= 10x at >= 0.95 recall)'}")


if __name__ == "__main__":
    main(sys.argv[1:])
