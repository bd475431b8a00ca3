"""Families whose layers the formulas do not describe (state-space and recurrent layers, encoder-decoders other than
T5) are refused by memory and kv with the trace command to use, never estimated as attention blocks; trace runs
their real code."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.kv import estimate_kv
from tests.conftest import tiny_llama

transformers = pytest.importorskip("transformers")


def _config(tmp_path, name, cfg):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg.to_dict()))
    return path


SMALL = dict(hidden_size=64, num_hidden_layers=2, vocab_size=256)
REFUSED = {
    "mamba": (lambda: transformers.MambaConfig(**SMALL), "state_size"),
    "jamba": (lambda: transformers.JambaConfig(**SMALL, intermediate_size=128, num_attention_heads=4,
                                              num_key_value_heads=2), "mamba_d_state"),
    "bart": (lambda: transformers.BartConfig(d_model=64, encoder_layers=2, decoder_layers=2, vocab_size=256,
                                             encoder_attention_heads=4, decoder_attention_heads=4,
                                             encoder_ffn_dim=128, decoder_ffn_dim=128), "encoder-decoder"),
}


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_memory_and_kv_refuse_with_the_trace_command(tmp_path, family):
    make, why = REFUSED[family]
    path = _config(tmp_path, family, make())
    with pytest.raises(InputError, match=f"{why}.*campaign trace {path}") as refused:
        estimate_memory(path, make_workload(batch=1, seq_len=64))
    assert "\n" not in str(refused.value)
    with pytest.raises(InputError, match=why):
        estimate_kv(path, seq_len=64)


def test_attention_models_and_a_vision_language_model_are_still_estimated(tmp_path):
    llama = tmp_path / "llama.json"
    llama.write_text(json.dumps(tiny_llama()))
    assert estimate_memory(llama, make_workload(batch=1, seq_len=64)).peak_allocated_bytes > 0
    # an unknown attention family takes the generic model (no builder, no state field): estimated, not refused
    gptj = _config(tmp_path, "gptj", transformers.GPTJConfig(n_embd=64, n_layer=2, n_head=4, vocab_size=256,
                                                              rotary_dim=8))
    est = estimate_memory(gptj, make_workload(batch=1, seq_len=64))
    assert any("generic activation model" in i.source or "generic activation model" in i.formula for i in est.items)


def test_trace_still_runs_a_refused_family(tmp_path):
    from campaign.memory.trace import trace_memory

    path = _config(tmp_path, "jamba", REFUSED["jamba"][0]())
    est = trace_memory(path, make_workload(batch=1, seq_len=32))
    assert est.method == "traced" and est.peak_allocated_bytes > 0
