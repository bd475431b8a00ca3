"""memory.family: a family the formulas do not know gets the generic activation model, so a card's fit is a guess
and the verdict is "not verified" (exit 1), never a go; a known family, a trace, or no card asked for gives none."""
from __future__ import annotations

import json

import pytest

from tests.conftest import tiny_llama

# OPT: transformers builds it, the formulas do not know it (learned positions, fc1/fc2, no gated MLP)
OPT = dict(model_type="opt", architectures=["OPTForCausalLM"], hidden_size=64, num_hidden_layers=2,
           num_attention_heads=4, ffn_dim=256, vocab_size=1000, word_embed_proj_dim=64, max_position_embeddings=128)


def _folder(tmp_path, cfg, name):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def _checks(out) -> dict[str, str]:
    return {c["id"]: c["status"] for c in json.loads(out)["checks"]}


def test_a_generic_family_that_fits_is_not_verified(cli, tmp_path):
    pytest.importorskip("transformers")
    opt = _folder(tmp_path, OPT, "opt")
    r = cli("memory", opt, "--card", "H100", "--batch", "1", "--seq-len", "64", "--json")
    # a 64-wide, 2-layer model holds in an 80 GB card by four orders of magnitude: the fit passes, yet the verdict
    # cannot be a go while its activations are the generic model's guess
    assert _checks(r.out) == {"memory.family": "skipped", "memory.fits": "pass"}
    assert r.code == 1
    text = cli("memory", opt, "--card", "H100", "--batch", "1", "--seq-len", "64")
    assert text.code == 1
    assert "not verified" in text.out and f"campaign trace {opt}" in " ".join(text.out.split())


def test_a_known_family_a_trace_or_no_card_add_no_family_check(cli, tmp_path):
    pytest.importorskip("transformers")
    llama = _folder(tmp_path, tiny_llama(), "llama")
    r = cli("memory", llama, "--card", "H100", "--batch", "1", "--seq-len", "64", "--json")
    assert _checks(r.out) == {"memory.fits": "pass"} and r.code == 0
    opt = _folder(tmp_path, OPT, "opt")
    r = cli("memory", opt, "--batch", "1", "--seq-len", "64", "--json")   # no card: a table, no verdict to guard
    assert _checks(r.out) == {} and r.code == 0
    pytest.importorskip("torch")
    r = cli("trace", opt, "--card", "H100", "--batch", "1", "--seq-len", "32", "--json")  # the real step, traced
    assert _checks(r.out) == {"memory.fits": "pass"} and r.code == 0
