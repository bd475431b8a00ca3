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
