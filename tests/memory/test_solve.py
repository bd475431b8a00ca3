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


def test_the_batches_within_the_margin_are_replayed_without_their_estimates(monkeypatch):
    # BERT-base, 1,024 tokens with checkpointing, on an H200: 488 sequences fit (solve_sweep.json, the exhaustive
    # check), and the batches from about 220 up come within the overhead margin of the card. Each is checked from its
    # replay alone (reserved.BatchOverheads) and the allocated bytes of a larger batch
    from campaign.memory import fit

    kept = json.loads(FIXTURE.read_text(encoding="utf-8"))
    spec = load_spec("google-bert/bert-base-uncased")
    w = make_workload(seq_len=1024, grad_checkpointing=True, mixed_precision=True)
    estimates, alone = [], set()
    real_estimate, real_alone, real_known = (fit.estimate_memory, reserved.BatchOverheads.__call__,
                                             reserved.BatchOverheads.known)
    monkeypatch.setattr(fit, "estimate_memory", lambda *a, **k: (k.get("fragmentation") != 0.0 and estimates.append(
        k)) or real_estimate(*a, **k))  # the estimates with a replay
    # the batches replayed alone: one at a time, or many in one call (BatchOverheads.ahead) and read (known)
    monkeypatch.setattr(reserved.BatchOverheads, "__call__", lambda self, n, limit=None: alone.add(
        (n, limit)) or real_alone(self, n, limit))
    def known(self, n, limit=None):
        found = real_known(self, n, limit)
        if found is not None:
            alone.add((n, limit))
        return found

    monkeypatch.setattr(reserved.BatchOverheads, "known", known)
    most = max_value(spec, w, find_card("H200-SXM-141GB").memory_bytes, "batch", limit=1 << 16)
    assert [most, 1024] == kept["google-bert/bert-base-uncased|train-ckpt-1024|H200-SXM-141GB"]
    # near the edge, where the step fits only against the card (55 batches), each is replayed alone against the card
    # too, added to a larger batch's allocated bytes, then to its own: an estimate with a replay is made only for the
    # batch that does not fit (489), and where even that check does not show a batch fits
    assert len(alone) > 200 and sum(limit is not None for _, limit in alone) > 40 and len(estimates) < 4


def test_cards_of_one_workload_share_their_probes():
    spec, w = load_spec("llama-3.2-1b"), make_workload(seq_len=1024, grad_checkpointing=True)
    probes = Probes()
    first = max_value(spec, w, 32 * 2**30, "batch", limit=64, cache=probes)
    replayed = dict(probes.required)
    assert max_value(spec, w, 32 * 2**30, "batch", limit=64, cache=probes) == first == 9
    assert probes.required == replayed  # the second card of the same size replays nothing


def test_a_probe_that_fails_on_the_card_skips_its_replay_with_room_to_spare_only_where_it_cannot_fit(monkeypatch):
    # Llama-3.1-8B QLoRA, batch 4 with checkpointing, on an RTX 4090: the longest context. A probe that does not fit
    # against the card is checked with room to spare too (a step fits either way); that replay is skipped where the
    # replay against the card bounds it from below past the card. The answer is the plain search's over both.
    from campaign.memory.search import largest_satisfying

    spec = load_spec("llama-3.1-8b")
    w = make_workload(method="qlora", batch=4, seq_len=2048, grad_checkpointing=True, mixed_precision=True,
                      kbit_upcast=False)
    card = 24_564 * 2**20  # the RTX 4090's nvidia-smi total, the card these cases were found on

    def fits(n):
        wn = replace(w, seq_len=n)
        return (estimate_memory(spec, wn, card_bytes=card).required_bytes <= card
                or estimate_memory(spec, wn).required_bytes <= card)

    plain = largest_satisfying(fits, spec.max_position)
    reserved._SAME_STEP.clear()
    calls = []
    real = reserved._training_replay
    monkeypatch.setattr(reserved, "_training_replay", lambda *a: calls.append(a[5]) or real(*a))
    assert max_value(spec, w, card, "seq_len", limit=spec.max_position) == plain
    assert calls and None not in calls  # every probe replayed once, against the card


def test_the_replay_with_room_to_spare_is_kept_where_it_fits_and_the_card_replay_does_not():
    # Qwen2.5-7B QLoRA at 6,408 tokens on an RTX 4090: against the card the allocator releases its cached segments
    # and the step does not fit; with room to spare it fits (the replay's own allocated passes the estimate's). So
    # a failing replay against the card does not mean the other fails: the bound must not claim it.
    from campaign.memory.estimate import allocator_limit
    from campaign.memory.fit import unlimited_fails

    spec = load_spec("qwen2.5-7b")
    w = make_workload(method="qlora", seq_len=6408, grad_checkpointing=True, mixed_precision=True, kbit_upcast=False)
    card = 24_564 * 2**20  # the RTX 4090's nvidia-smi total, the card these cases were found on
    on_card = estimate_memory(spec, w, card_bytes=card)
    assert on_card.required_bytes > card >= estimate_memory(spec, w).required_bytes
    limit = allocator_limit(card, reserve="10%", context_bytes=on_card.device_bytes - on_card.peak_reserved_bytes)
    assert reserved.unlimited_floor(spec, w, on_card.phases, limit) is not None  # the card replay released
    assert not unlimited_fails(spec, on_card, card, "10%")


def test_the_solve_gives_the_exhaustive_answers_under_deepspeed():
    # DeepSpeed's init leaves blocks cached before the first step (ZeRO-1/2: the flattened parameters' originals;
    # ZeRO-3: the setup's whole model without zero.Init) and each step makes and drops its gradient copies: the
    # overhead margin counts them, so the batches it lets pass without a replay fit as the exhaustive check says
    cases = [("gpt2", {"shard": "zero2", "gpus": 2, "grad_checkpointing": True}, "L40S-48GB"),
             ("gpt2", {"shard": "zero1", "gpus": 2}, "RTX-4090-24GB"),
             ("llama-3.2-1b", {"shard": "zero3", "gpus": 4, "zero_init": False, "seq_len": 1024}, "RTX-4090-24GB")]
    for model, kw, card in cases:
        spec, w = load_spec(model), make_workload(mixed_precision=True, **kw)
        memory = find_card(card).memory_bytes
        fast = max_value(spec, w, memory, "batch", limit=1 << 16)
        assert fast == max_value(spec, w, memory, "batch", limit=1 << 16, exhaustive=True) > 1, (model, kw, card)


def test_the_solve_gives_the_exhaustive_answers_where_large_batches_peak_at_a_recompute():
    # Mixtral-8x22B over 8 cards with FSDP, 1,024 tokens with checkpointing: from about batch 40 the backward peaks
    # as the last layer is recomputed, not at its end; the batches within the margin of the card are replayed from
    # the largest batch's phases (reserved.BatchOverheads), which must make the step's gradients as each batch's own
    # estimate does (the review's case: 187.5 GiB, where not even batch 1 fits, was solved as 6)
    spec = load_spec("mistralai/Mixtral-8x22B-Instruct-v0.1")
    w = make_workload(seq_len=1024, grad_checkpointing=True, gpus=8, shard="fsdp")
    for memory in (int(187.5 * 2**30), find_card("MI300X-192GB").memory_bytes, 200 * 2**30):
        fast = max_value(spec, w, memory, "batch", limit=4096)
        reserved.clear_kept()
        assert fast == max_value(spec, w, memory, "batch", limit=4096, exhaustive=True), memory
        reserved.clear_kept()


def test_the_overhead_margin_bounds_the_replay_under_deepspeed():
    # the margin must hold the replayed overhead (with room to spare) for the solve to skip a probe's replay: under
    # ZeRO it holds what DeepSpeed's init left cached and the copies each step makes and drops (Llama-3.1-8B ZeRO-2
    # on 8 cards: the 16 GB of parameters flattened leave their 16 GB of original blocks cached)
    from campaign.memory.fit import overhead_margin

    for model, kw in [("llama-3.1-8b", {"shard": "zero2", "grad_checkpointing": True}),
                      ("llama-3.1-8b", {"shard": "zero3", "zero_init": False}),
                      ("gpt2", {"shard": "zero1", "grad_checkpointing": True})]:
        spec, w = load_spec(model), make_workload(gpus=8, mixed_precision=True, seq_len=512, **kw)
        low = estimate_memory(spec, w, fragmentation=0.0)
        gap = estimate_memory(spec, w).required_bytes - low.required_bytes
        assert 0 < gap <= overhead_margin(spec, low, reserve="10%"), (model, kw)
