"""The card solve: the largest batch for which every smaller batch fits, and the longest context, at a cost that does
not grow with the answer, giving the exhaustive check's answers."""
from __future__ import annotations

import json
from dataclasses import replace

from campaign.hardware.cards import find_card
from campaign.memory import estimate_memory, make_workload, reserved
from campaign.memory.fit import Probes, max_value
from campaign.models import load_spec
from tests.memory.solve_sweep import FIXTURE, answers, cases


def test_the_solve_gives_the_exhaustive_answers_on_the_sweep():
    # solve_sweep.json: every catalog model x six training and inference workloads x five cards, and the
    # non-monotone llama-3.2-1b case, answered by replaying every batch below the search's answer
    kept = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert len(kept) == len(cases()) > 800
    now = answers(exhaustive=False)
    differ = {k: (kept[k], now[k]) for k in kept if now[k] != kept[k]}
    assert not differ
    assert sum(isinstance(v, list) and v[0] > 100 for v in kept.values()) > 50  # answers large enough to matter


def test_the_replays_do_not_grow_with_the_answer(monkeypatch):
    # Qwen2.5-0.5B inference at 1024 tokens holds thousands of sequences on an H200: the exhaustive check replays
    # each of them; the solve replays only those within the overhead margin of the card
    calls = []
    real = reserved.inference_overhead
    monkeypatch.setattr(reserved, "inference_overhead", lambda *a, **k: calls.append(1) or real(*a, **k))
    spec, w = load_spec("Qwen/Qwen2.5-0.5B"), make_workload(mode="infer", seq_len=1024)
    card = find_card("H200-SXM-141GB").memory_bytes
    most = max_value(spec, w, card, "batch", limit=1 << 16)
    assert most > 5000 and len(calls) < 100  # the exhaustive check replays every one of the 5,000+
    # the answer is the batch below the first that does not fit, checked from the estimates themselves
    assert estimate_memory(spec, replace(w, batch=most), card_bytes=card).required_bytes <= card
    assert estimate_memory(spec, replace(w, batch=most + 1), card_bytes=card).required_bytes > card


def test_cards_of_one_workload_share_their_probes():
    spec, w = load_spec("llama-3.2-1b"), make_workload(seq_len=1024, grad_checkpointing=True)
    probes = Probes()
    first = max_value(spec, w, 32 * 2**30, "batch", limit=64, cache=probes)
    replayed = dict(probes.required)
    assert max_value(spec, w, 32 * 2**30, "batch", limit=64, cache=probes) == first == 9
    assert probes.required == replayed  # the second card of the same size replays nothing
