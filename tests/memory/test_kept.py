"""What a card solve keeps between its probes (the values neither the batch nor the length changes) changes no
estimate: a probe made after others gives what the same probe gives in a process that kept nothing."""
from __future__ import annotations

from dataclasses import replace

import pytest

from campaign.memory import estimate_memory, make_workload, reserved
from campaign.memory.workload import resized, size_free_key
from campaign.models import load_spec

WORKLOADS = [
    {"seq_len": 512},
    {"seq_len": 1024, "grad_checkpointing": True, "mixed_precision": True},
    {"method": "qlora", "seq_len": 512, "grad_checkpointing": True, "mixed_precision": True},
    {"method": "lora", "seq_len": 256, "grad_accumulation": 4},
    {"gpus": 4, "shard": "zero3", "mixed_precision": True, "seq_len": 256},
    {"grads_kept": True, "attention": "eager", "seq_len": 128},
    {"method": "frozen", "seq_len": 256},
    {"mode": "infer", "seq_len": 512},  # the weights loaded once (reserved._weights_loaded), forked per probe
    {"mode": "infer", "seq_len": 256, "kv_cache": "dynamic", "new_tokens": 32},
]


def _figures(est):
    return (est.required_bytes, est.device_bytes, est.peak_reserved_bytes, est.peak_allocated_bytes,
            [(p.name, p.moment, p.bytes, [(i.name, i.bytes, i.formula) for i in p.items]) for p in est.phases],
            [(i.name, i.bytes, i.formula) for i in est.items], est.notes)


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.2-1B", "google-bert/bert-base-uncased", "openai-community/gpt2"])
@pytest.mark.parametrize("kw", WORKLOADS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_a_probe_after_others_is_the_probe_of_a_process_that_kept_nothing(model, kw):
    spec = load_spec(model)
    w = make_workload(**kw)
    reserved.clear_kept()
    for batch in (1, 3, 2, 7):  # the kept values are made at batch 1 and read at the others
        estimate_memory(spec, resized(w, "batch", batch))
        estimate_memory(spec, resized(w, "batch", batch), card_bytes=16 * 2**30)
    estimate_memory(spec, resized(w, "seq_len", 64))
    warm = [_figures(estimate_memory(spec, resized(w, "batch", b), card_bytes=card))
            for b in (5, 2) for card in (None, 16 * 2**30)]
    cold = []
    for b in (5, 2):
        for card in (None, 16 * 2**30):
            reserved.clear_kept()
            cold.append(_figures(estimate_memory(spec, replace(w, batch=b), card_bytes=card)))
    assert warm == cold


def test_resized_is_replace_and_keeps_the_size_free_key():
    w = make_workload(method="lora", seq_len=512, batch=2)
    key = size_free_key(w)
    for field, n in (("batch", 9), ("seq_len", 4096)):
        new = resized(w, field, n)
        assert new == replace(w, **{field: n}) and getattr(new, field) == n and getattr(w, field) != n
        assert size_free_key(new) is key  # carried, not worked out again
        assert size_free_key(replace(w, **{field: n})) == key  # the same key, worked out
    with pytest.raises(ValueError):
        resized(w, "method", 1)  # another field would change the key: refused


def test_the_size_free_key_tells_apart_workloads_that_differ_in_any_other_field():
    w = make_workload(method="lora", seq_len=512)
    assert size_free_key(replace(w, lora_rank=w.lora_rank * 2)) != size_free_key(w)
    assert size_free_key(replace(w, grad_checkpointing=True)) != size_free_key(w)
    assert size_free_key(replace(w, batch=3, seq_len=7)) == size_free_key(w)


TRAINING = [kw for kw in WORKLOADS if kw.get("mode") != "infer"] + [
    {"gpus": 2, "shard": "zero2", "mixed_precision": True, "grad_checkpointing": True, "seq_len": 256},
    {"seq_len": 256, "expandable_segments": True},
]


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.2-1B", "google-bert/bert-base-uncased", "openai-community/gpt2"])
@pytest.mark.parametrize("kw", TRAINING, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_a_batch_replayed_alone_has_the_overhead_of_its_estimate(model, kw):
    # the card solve checks the batches within the margin of the card from their replays alone
    # (reserved.BatchOverheads: one batch's phases stand for the others'); each overhead is its own estimate's
    from campaign.memory.phases import training_phases

    spec, w = load_spec(model), make_workload(**kw)
    # (the first RECORD_AFTER batches replayed, the others run from the step recorded: memory/tape.py)
    batches = (*range(1, 19), 21, 24)
    assert reserved.RECORD_AFTER < len(batches)
    overhead_at = reserved.BatchOverheads(spec, w, training_phases(spec, resized(w, "batch", 24)))
    alone = [overhead_at(b) for b in batches]
    reserved.clear_kept()
    estimated = [next(i.bytes for i in estimate_memory(spec, replace(w, batch=b)).items
                      if i.name == "allocator overhead (reserved - allocated)") for b in batches]
    assert alone == estimated and len(set(estimated)) > 1  # the overhead changes with the batch


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.2-1B", "google-bert/bert-base-uncased"])
@pytest.mark.parametrize("kw", TRAINING, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_a_batch_replayed_alone_against_a_card_has_the_overhead_of_its_estimate_on_that_card(model, kw):
    # the solve's batches that fit only against the card (the allocator releasing cached segments) are checked from
    # their replays alone under the card's limit too: each is its estimate's replay against that card (the peak
    # reserved - peak allocated its formula shows; the estimate caps its item where the replay stayed within the card)
    import re

    from campaign.memory.estimate import allocator_limit
    from campaign.memory.phases import training_phases

    spec, w = load_spec(model), make_workload(**kw)
    overhead_at = reserved.BatchOverheads(spec, w, training_phases(spec, resized(w, "batch", 24)))
    for b in range(1, reserved.RECORD_AFTER + 1):  # past them, the recorded step runs
        overhead_at(b)
    released = 0
    for b in (3, 8, 13):
        est = estimate_memory(spec, replace(w, batch=b))
        outside = est.device_bytes - est.peak_reserved_bytes
        overhead = est.peak_reserved_bytes - est.peak_allocated_bytes
        tight = int(1.1 * (est.peak_allocated_bytes + overhead // 4 + outside))
        for card in (est.required_bytes - overhead // 2, tight):
            limit = allocator_limit(card, reserve="10%", context_bytes=outside)
            item = next(i for i in estimate_memory(spec, replace(w, batch=b), card_bytes=card).items
                        if i.name == "allocator overhead (reserved - allocated)")
            peak_reserved, peak_allocated = (int(x.replace(",", "")) for x in re.search(
                r"peak reserved ([\d,]+) - peak allocated ([\d,]+) B", item.formula).groups())
            assert overhead_at(b, limit) == peak_reserved - peak_allocated >= item.bytes
            released += "released" in item.formula
    # the cards made Llama's step release cached segments (BERT's full fine-tuning has none wholly free to release)
    assert released or "bert" in model or kw.get("expandable_segments") or kw.get("method") == "frozen"
