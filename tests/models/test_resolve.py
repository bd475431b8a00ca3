"""Finding models offline: catalog names, local dirs, the HF cache, and exact counts from safetensors headers."""
from __future__ import annotations

import json

import pytest

from campaign.errors import ConfigError, UnknownNameError
from campaign.models import load_spec
from campaign.models.safetensors_header import tensor_stats
from tests.conftest import tiny_llama


@pytest.mark.parametrize("typed",
                         ["meta-llama/Llama-3.1-8B", "llama-3.1-8b", "LLAMA-3.1-8B", "Meta-Llama/llama-3.1-8b"])
def test_catalog_names_match_case_insensitively_with_or_without_org(typed):
    assert load_spec(typed).name == "meta-llama/Llama-3.1-8B"


def test_variant_suffix_may_be_left_out():
    assert load_spec("gemma-2-9b").name == "google/gemma-2-9b-it"


def test_typo_gets_did_you_mean():
    with pytest.raises(UnknownNameError, match="did you mean 'Llama-3.1-8B'"):
        load_spec("llama-3.1-8c")


def test_local_dir_and_config_path(write_config):
    d = write_config(tiny_llama(), "tiny")
    assert load_spec(str(d)).params == load_spec(str(d / "config.json")).params


def test_dir_without_config(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        load_spec(str(tmp_path))


def test_malformed_and_non_utf8_configs(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama",\n "hidden_size": }', encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON .*at line 2 column"):
        load_spec(str(bad))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"model_type": "llama", "name": "caf\xe9"}')
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_spec(str(latin))


def _save_tiny(directory, shards: int = 1) -> int:
    """Save a real tiny Llama as safetensors (sharded through an index when shards > 1); return its param count."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = tiny_llama()
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}))
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors"
        save_file({k: state[k] for k in part}, str(directory / file))
        weight_map.update({k: file for k in part})
    if shards > 1:
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (directory / "config.json").write_text(json.dumps(cfg))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shards", [1, 3])
def test_exact_count_from_safetensors_headers(tmp_path, shards):
    expected = _save_tiny(tmp_path, shards)
    stats = tensor_stats(tmp_path)
    assert stats.params == expected and stats.bytes == 2 * expected
    spec = load_spec(str(tmp_path))
    assert spec.params_method == "safetensors" and spec.params == expected


def test_missing_shard_is_reported(tmp_path):
    _save_tiny(tmp_path, 2)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ConfigError, match="not on disk"):
        load_spec(str(tmp_path))


def test_corrupt_header(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_llama()))
    (tmp_path / "model.safetensors").write_bytes((10).to_bytes(8, "little") + b"not json!!")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_spec(str(tmp_path))


def test_hf_cache_lookup_is_offline(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(tiny_llama(num_hidden_layers=3)))
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    spec = load_spec("acme/tiny")
    assert spec.num_layers == 3 and spec.source.startswith("hf-cache:")


def test_exact_count_with_transformers_meta_device(write_config):
    pytest.importorskip("transformers")
    d = write_config(tiny_llama(tie_word_embeddings=True))
    spec = load_spec(str(d), exact=True)
    assert spec.params_method == "transformers"
    assert spec.params == spec.inventory_params == 2 * (4 * 64 * 64 - 2 * 64 * 32 + 3 * 64 * 160 + 128) + 1000 * 64 + 64
