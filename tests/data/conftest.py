"""Corpora written by the tests: seeded random prose, planted near duplicates, and an independent Jaccard."""
from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def vocabulary(size: int = 4000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return sorted({"".join(rng.choices(LETTERS, k=rng.randint(3, 9))) for _ in range(size)})


VOCAB = vocabulary()


def sentence(rng: random.Random, lo: int = 25, hi: int = 60) -> str:
    """A random text of lo..hi words from a 4,000-word vocabulary (unrelated texts share few 5-grams)."""
    return " ".join(rng.choices(VOCAB, k=rng.randint(lo, hi)))


def edit(rng: random.Random, text: str, n_edits: int) -> str:
    """Substitute n_edits distinct word positions with other words (a near duplicate)."""
    words = text.split()
    for pos in rng.sample(range(len(words)), n_edits):
        words[pos] = rng.choice(VOCAB)
    return " ".join(words)


def shingles(text: str, n: int = 5, kind: str = "char") -> set:
    """Independent shingling: NFKC + casefold + whitespace collapse, then character or word n-grams."""
    t = " ".join(unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()).split())
    if kind == "word":
        w = t.split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else ({tuple(w)} if w else set())
    return {t[i:i + n] for i in range(len(t) - n + 1)} if len(t) >= n else ({t} if t else set())


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def brute_force_pairs(texts: list[str], threshold: float = 0.8, **kw) -> set[tuple[int, int]]:
    """Every pair (i < j) with exact Jaccard >= threshold, by comparing all pairs."""
    sh = [shingles(t, **kw) for t in texts]
    return {(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
            if sh[i] and sh[j] and jaccard(sh[i], sh[j]) >= threshold}


def components(n: int, pairs) -> list[set[int]]:
    """Connected components by depth-first search (a second method to union-find)."""
    adj: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in pairs:
        adj[a].add(b)
        adj[b].add(a)
    seen, out = set(), []
    for i in range(n):
        if i in seen:
            continue
        stack, comp = [i], set()
        while stack:
            x = stack.pop()
            if x in comp:
                continue
            comp.add(x)
            stack.extend(adj[x] - comp)
        seen |= comp
        out.append(comp)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def rng() -> random.Random:
    return random.Random(12345)
