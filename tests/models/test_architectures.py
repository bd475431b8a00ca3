"""Parameter counts from config fields, checked by hand, against transformers (meta device) and published figures."""
from __future__ import annotations

import pytest

from campaign.errors import ConfigError
from campaign.models import catalog_names, load_spec, published_counts
from campaign.models.architectures import spec_from_config
from campaign.models.catalog import load_catalog_config
from tests.conftest import tiny_llama


def test_llama_31_8b_by_hand():
    # embed + untied head; per layer q,o (h x h), k,v (h x 1024), gate/up/down (h x 14336), two norms; final norm
    h, inter, kv, V, L = 4096, 14336, 8 * 128, 128256, 32
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h
    expected = 2 * V * h + L * per_layer + h
    assert expected == 8_030_261_248  # the published exact count (huggingface.js safetensors spec)
    assert load_spec("llama-3.1-8b").params == expected


def test_gpt2_by_hand():
    h, V, P, L = 768, 50257, 1024, 12
    per_layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (4 * h * h + 4 * h) + (4 * h * h + h)
    assert load_spec("gpt2").params == V * h + P * h + L * per_layer + 2 * h == 124_439_808


def test_gpt2_with_an_untied_head_counts_it_as_transformers_does():
    # tie_word_embeddings false: GPT2LMHeadModel's lm_head is its own V x h matrix (no bias)
    pytest.importorskip("transformers")
    from campaign.models.meta import count_with_transformers

    cfg = load_catalog_config("openai-community/gpt2") | {"tie_word_embeddings": False}
    spec = spec_from_config(cfg, name="gpt2-untied", source="test")
    assert spec.params == 124_439_808 + 50257 * 768 == count_with_transformers(cfg)
    assert not spec.tie_embeddings


def test_bert_checkpoint_holds_the_pretraining_heads():
    # bert-base-uncased's safetensors hold 110,106,428 values (huggingface.js): BertForPreTraining's tensors,
    # while its config names BertForMaskedLM. Pooler (h*h + h) and NSP head (2h + 2) make the difference.
    h = 768
    mlm = load_spec("bert-base-uncased").params
    cfg = load_catalog_config("google-bert/bert-base-uncased") | {"architectures": ["BertForPreTraining"]}
    pre = spec_from_config(cfg, name="bert", source="test").params
    assert pre - mlm == (h * h + h) + (2 * h + 2)
    assert pre == 110_106_428


def test_moe_active_params_by_hand():
    # Mixtral-8x7B: 2 of 8 experts per token; experts are 3 x 4096 x 14336 each, 32 layers
    spec = load_spec("mixtral-8x7b-instruct-v0.1")
    expert = 3 * 4096 * 14336
    assert spec.params - spec.active_params == 32 * 6 * expert
    assert spec.params == 46_702_792_704


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_count_equals_transformers_meta_count(name):
    pytest.importorskip("transformers")
    from campaign.models.meta import count_with_transformers

    assert load_spec(name).params == count_with_transformers(load_catalog_config(name))


@pytest.mark.parametrize("name", [n for n, v in published_counts().items() if v.get("params")])
def test_catalog_count_equals_published_exact_count(name):
    published = published_counts()[name]["params"]
    spec = load_spec(name)
    if name == "google/gemma-2-9b-it":
        # the Gemma 2 report counts a 256,128 vocabulary; the HF config has 256,000 (x 3584 hidden)
        published -= 128 * 3584
    if name == "google-bert/bert-base-uncased":
        published -= 768 * 768 + 768 + 2 * 768 + 2  # pooler + NSP head, see test above
    assert spec.params == published


def test_catalog_covers_the_families_asked_for():
    types = {load_spec(n).model_type for n in catalog_names()}
    assert {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "phi3", "deepseek_v3",
            "bert", "roberta", "gpt2"} <= types


def test_gemma2_alternates_sliding_and_full_layers():
    spec = load_spec("gemma-2-9b")
    kinds = [a.kind for a in spec.attention]
    assert kinds[:4] == ["sliding", "full", "sliding", "full"] and kinds.count("sliding") == 21
    assert spec.attention[0].window == 4096


def test_deepseek_v3_is_mla_moe():
    spec = load_spec("DeepSeek-V3")
    assert spec.mla.kv_lora_rank == 512 and spec.moe.num_experts == 256 and spec.moe.moe_layers == 58


@pytest.mark.parametrize("change, message", [
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
    ({"hidden_size": 65}, "not divisible by num_attention_heads"),
    ({"num_hidden_layers": 0}, "'num_hidden_layers' must be >= 1"),
    ({"vocab_size": -5}, "'vocab_size' must be >= 1"),
    ({"hidden_size": "64"}, "must be an integer"),
    ({"model_type": "acme_unknown"}, "cannot build model_type"),
])
def test_bad_configs_raise_one_clear_error(change, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_config(tiny_llama(**change), name="x", source="cfg.json")


def test_missing_field_is_named():
    cfg = tiny_llama()
    del cfg["intermediate_size"]
    with pytest.raises(ConfigError, match="missing field 'intermediate_size'"):
        spec_from_config(cfg, name="x", source="cfg.json")
