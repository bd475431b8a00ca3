"""One memory call shape: every call takes (model, workload), the model as a name, a path or a ModelSpec; a saved
estimate reads back into the MemoryEstimate it was written from."""
from __future__ import annotations

import json

import pytest

from campaign import estimate_kv, estimate_memory, load_estimate, load_spec, make_workload, plan_memory
from campaign.errors import InputError
from campaign.memory.build import model_config
from campaign.models.resolve import resolve_config


def test_a_name_a_path_and_a_modelspec_give_the_same_estimate(write_config):
    from tests.conftest import tiny_llama

    w = make_workload(batch=2, seq_len=64)
    assert estimate_memory("gpt2", w) == estimate_memory(load_spec("gpt2"), w)
    d = write_config(tiny_llama(), "tiny")
    assert estimate_memory(str(d), w) == estimate_memory(d, w) == estimate_memory(load_spec(str(d)), w)
    assert estimate_kv("gpt2", seq_len=100, batch=2) == estimate_kv(load_spec("gpt2"), seq_len=100, batch=2)


def test_trace_and_measure_find_the_config_behind_a_modelspec(write_config):
    from dataclasses import replace

    from tests.conftest import tiny_llama

    cfg, spec, directory = model_config(load_spec("gpt2"))
    assert cfg == resolve_config("gpt2")[0] and spec.name == load_spec("gpt2").name and directory is None
    d = write_config(tiny_llama(), "tiny")
    cfg, _, directory = model_config(load_spec(str(d)))
    assert cfg == resolve_config(str(d))[0] and directory == d
    with pytest.raises(InputError, match="pass the model's name, model dir or config.json"):
        model_config(replace(load_spec("gpt2"), source="made in a notebook"))


def test_a_saved_estimate_reads_back_as_the_same_object(tmp_path):
    w = make_workload(method="lora", batch=2, seq_len=256, lora_targets=("q_proj", "v_proj"))
    plan = plan_memory("llama-3.2-1b", w, card="l4")
    path = tmp_path / "e.json"
    path.write_text(json.dumps(plan.to_dict()), encoding="utf-8")   # what campaign memory --json writes
    assert load_estimate(path) == plan.estimate
    assert plan.passed and [f.card for f in plan.fits] == ["L4-24GB"]
