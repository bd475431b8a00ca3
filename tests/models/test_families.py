"""The families added for issue 11 (GPT-NeoX, GPT-BigCode, Falcon, Phi-2, StarCoder2, OLMo 2, Gemma 3, T5), any other
architecture transformers builds, multimodal towers, and configs whose fields have the wrong type (issue 12)."""
from __future__ import annotations

import json

import pytest

from campaign.errors import ConfigError
from campaign.models.architectures import spec_from_config
from campaign.models.families import falcon_shared_attention

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=1000)

# (config, a word on what the variant exercises); every one is also built by transformers on the meta device
FAMILIES = {
    "gpt_neox": dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], **SMALL),
    "gpt_neox-tied-nobias-sequential": dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], **SMALL,
                                            tie_word_embeddings=True, attention_bias=False,
                                            use_parallel_residual=False),
    "gpt_bigcode-mqa": dict(model_type="gpt_bigcode", architectures=["GPTBigCodeForCausalLM"], n_embd=64, n_layer=2,
                            n_head=4, vocab_size=1000, n_positions=128),
    "gpt_bigcode-mha-untied": dict(model_type="gpt_bigcode", architectures=["GPTBigCodeForCausalLM"], n_embd=64,
                                   n_layer=2, n_head=4, vocab_size=1000, n_positions=128, multi_query=False,
                                   n_inner=100, tie_word_embeddings=False),
    "phi": dict(model_type="phi", architectures=["PhiForCausalLM"], **SMALL),
    "phi-gqa-qk-layernorm": dict(model_type="phi", architectures=["PhiForCausalLM"], **SMALL, num_key_value_heads=2,
                                 qk_layernorm=True),
    "falcon-7b-style": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=64,
                            num_hidden_layers=2, num_attention_heads=4, vocab_size=1000),
    "falcon-40b-style": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=64,
                             num_hidden_layers=2, num_attention_heads=4, vocab_size=1000,
                             new_decoder_architecture=True, num_kv_heads=2, bias=True),
    "falcon-rw-style": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=64,
                            num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, multi_query=False,
                            parallel_attn=False, alibi=True, bias=True, ffn_hidden_size=100,
                            tie_word_embeddings=False),
    "falcon2-style": dict(model_type="falcon", architectures=["FalconForCausalLM"], hidden_size=64,
                          num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, new_decoder_architecture=True,
                          num_kv_heads=2, num_ln_in_parallel_attn=1),
    "starcoder2": dict(model_type="starcoder2", architectures=["Starcoder2ForCausalLM"], **SMALL,
                       num_key_value_heads=2, sliding_window=16),
    "olmo2": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"], **SMALL, num_key_value_heads=2),
    "gemma3_text": dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], hidden_size=64,
                        num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256,
                        vocab_size=1000, head_dim=16, sliding_window=16),
    "t5-v1.0": dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, num_layers=2,
                    num_heads=4, d_kv=16, d_ff=256, vocab_size=1000),
    "t5-v1.1-gated": dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, num_layers=2,
                          num_decoder_layers=3, num_heads=4, d_kv=8, d_ff=256, vocab_size=1000,
                          feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    "gemma3-multimodal": dict(
        model_type="gemma3", architectures=["Gemma3ForConditionalGeneration"], mm_tokens_per_image=4,
        text_config=dict(model_type="gemma3_text", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=256, vocab_size=1000, head_dim=16),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, image_size=56, patch_size=14)),
    "llava": dict(
        model_type="llava", architectures=["LlavaForConditionalGeneration"],
        text_config=dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=256, vocab_size=1000),
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=56, patch_size=14, projection_dim=16)),
}


@pytest.mark.parametrize("key", list(FAMILIES))
def test_inventory_equals_transformers_on_the_meta_device(key):
    pytest.importorskip("transformers")
    from campaign.models.meta import count_with_transformers

    cfg = FAMILIES[key]
    spec = spec_from_config(cfg, name=key, source="test")
    assert spec.params_method == "config"          # read by the family's builder, not counted by transformers
    assert spec.inventory_params == count_with_transformers(cfg)


def test_pythia_shape_by_hand():
    # GPT-NeoX: embed_in and an untied embed_out (V x h); per layer two LayerNorms (weight + bias), fused qkv
    # (3h x h + 3h), dense (h x h + h), h->I and I->h with biases; a final LayerNorm
    h, inter, V, L = 64, 256, 1000, 2
    per_layer = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (inter * h + inter) + (h * inter + h)
    assert spec_from_config(FAMILIES["gpt_neox"], name="x", source="t").params == 2 * V * h + L * per_layer + 2 * h


def test_starcoder_shape_by_hand():
    # GPT-BigCode with multi-query: c_attn makes h queries and one K and one V head (2 x head_dim), with bias
    h, V, P, L, hd = 64, 1000, 128, 2, 16
    per_layer = 2 * 2 * h + (h + 2 * hd) * (h + 1) + h * (h + 1) + 4 * h * (h + 1) + (4 * h * h + h)
    spec = spec_from_config(FAMILIES["gpt_bigcode-mqa"], name="x", source="t")
    assert spec.params == V * h + P * h + L * per_layer + 2 * h
    assert spec.num_kv_heads == 1 and spec.tie_embeddings


def test_phi2_head_has_a_bias_and_one_norm_per_layer():
    h, inter, V, L = 64, 256, 1000, 2
    per_layer = 4 * (h * h + h) + (inter * h + inter) + (h * inter + h) + 2 * h
    assert spec_from_config(FAMILIES["phi"], name="x", source="t").params == (
        V * h + L * per_layer + 2 * h + (V * h + V))


def test_t5_stacks_by_hand():
    # shared embedding (the head is tied); encoder block: q,k,v,o (h x 64 each) + wi, wo (256 x 64) + 2 norms;
    # decoder block adds cross-attention and a third norm; one relative position bias (32 buckets x 4 heads) per stack
    h, ff, V, inner = 64, 256, 1000, 64
    enc = 4 * h * inner + 2 * h * ff + 2 * h
    dec = 8 * h * inner + 2 * h * ff + 3 * h
    spec = spec_from_config(FAMILIES["t5-v1.0"], name="x", source="t")
    assert spec.params == V * h + 2 * enc + 2 * dec + 2 * 32 * 4 + 2 * h
    assert spec.encdec.encoder_layers == 2 and spec.num_layers == 2


def test_falcon_40b_style_caches_what_the_installed_transformers_caches():
    spec = spec_from_config(FAMILIES["falcon-40b-style"], name="x", source="t")
    if falcon_shared_attention():  # transformers 5.25 on: the cache keeps the KV heads, repeat_kv comes after it
        assert (spec.num_kv_heads, spec.num_heads) == (2, 4)
        assert not any("caches K/V expanded" in n for n in spec.notes)
    else:
        assert spec.num_kv_heads == spec.num_heads == 4
        assert any("caches K/V expanded" in n for n in spec.notes)


def test_gemma3_text_layers_follow_the_sliding_pattern():
    spec = spec_from_config(FAMILIES["gemma3_text"], name="x", source="t")
    kinds = [a.kind for a in spec.attention]
    assert kinds == ["sliding"] * 5 + ["full"] + ["sliding"]  # every 6th layer is global (Gemma3TextConfig)
    assert spec.attention[0].window == 16


def test_multimodal_configs_count_every_tower():
    pytest.importorskip("transformers")
    import torch
    import transformers

    for key in ("llava", "gemma3-multimodal"):
        cfg = FAMILIES[key]
        spec = spec_from_config(cfg, name=key, source="t")
        config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items()
                                                                          if k != "model_type"})
        with torch.device("meta"):
            model = getattr(transformers, cfg["architectures"][0])(config)
        vision = sum(p.numel() for p in model.model.vision_tower.parameters())
        projector = sum(p.numel() for p in model.model.multi_modal_projector.parameters())
        towers = sum(g.params for g in spec.groups if g.name.startswith(("model.vision_tower", "model.multi_modal")))
        assert towers == vision + projector > 0
        assert spec.model_type == cfg["text_config"]["model_type"]           # the text model's own activation model
        assert any("other towers counted" in n for n in spec.notes)


def test_any_other_architecture_gets_a_labelled_generic_model():
    pytest.importorskip("transformers")
    cfg = dict(model_type="opt", architectures=["OPTForCausalLM"], hidden_size=64, num_hidden_layers=2,
               num_attention_heads=4, ffn_dim=256, vocab_size=1000, word_embed_proj_dim=64,
               max_position_embeddings=128)
    spec = spec_from_config(cfg, name="opt", source="t")
    # OPT by hand: token embedding (tied head), learned positions with OPT's offset of 2, per layer q,k,v,o with
    # biases, two LayerNorms, fc1/fc2 with biases; the final LayerNorm
    h, ff, V = 64, 256, 1000
    per_layer = 4 * (h * h + h) + 2 * 2 * h + (ff * h + ff) + (h * ff + h)
    assert spec.params == V * h + (128 + 2) * h + 2 * per_layer + 2 * h
    assert spec.params_method == "transformers" and spec.generic.startswith("generic activation model")
    assert spec.num_kv_heads == 4 and spec.head_dim == 16
    from campaign.memory import estimate_memory, make_workload

    e = estimate_memory(spec, make_workload(batch=1, seq_len=64))
    acts = next(i for i in e.items if i.name == "activations")
    assert acts.formula.startswith("generic activation model")


def test_an_architecture_transformers_cannot_build_is_refused_in_one_line():
    pytest.importorskip("transformers")
    with pytest.raises(ConfigError, match="cannot build model_type 'acme_net'") as e:
        spec_from_config(dict(model_type="acme_net", hidden_size=8), name="x", source="cfg.json")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="has no class 'AcmeForCausalLM'"):
        spec_from_config(dict(model_type="opt", architectures=["AcmeForCausalLM"]), name="x", source="cfg.json")


def test_one_class_rule_for_meta_count_trace_and_measure():
    """meta.py used to fall back to AutoModelForCausalLM where build.py refused: both now refuse."""
    pytest.importorskip("transformers")
    import transformers

    from campaign.memory import make_workload
    from campaign.memory.build import workload_class_and_config
    from campaign.models.meta import count_with_transformers
    from tests.conftest import tiny_llama

    cfg = tiny_llama(architectures=["LlamaForSomethingElse"])
    with pytest.raises(ConfigError, match="has no class 'LlamaForSomethingElse'"):
        count_with_transformers(cfg)
    with pytest.raises(ConfigError, match="has no class 'LlamaForSomethingElse'"):
        workload_class_and_config(transformers, cfg, make_workload())
    no_arch = {k: v for k, v in tiny_llama().items() if k != "architectures"}
    assert workload_class_and_config(transformers, no_arch, make_workload())[0] is transformers.LlamaForCausalLM


BAD_FIELDS = [
    ({"model_type": ["llama"]}, "model_type"),
    ({"model_type": {"name": "llama"}}, "model_type"),
    ({"text_config": 5}, "text_config"),
    ({"text_config": "llama"}, "text_config"),
    ({"architectures": 5}, "architectures"),
    ({"layer_types": 5}, "layer_types"),
    ({"num_hidden_layers": 10**15}, "num_hidden_layers"),
    ({"torch_dtype": "float13"}, "torch_dtype"),
    ({"text_config": {"model_type": "llama", "num_hidden_layers": "2"}}, "num_hidden_layers"),
]


@pytest.mark.parametrize("change, field", BAD_FIELDS)
def test_fields_of_the_wrong_type_exit_2_with_one_line(cli, write_config, change, field):
    from tests.conftest import tiny_llama

    d = write_config(tiny_llama(**change), "bad")
    r = cli("memory", str(d))
    assert r.code == 2, r.err
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"'{field}'" in lines[0] and "internal error" not in lines[0]


def test_trace_refuses_an_unknown_dtype_before_building(cli, write_config):
    pytest.importorskip("transformers")
    from tests.conftest import tiny_llama

    d = write_config(tiny_llama(torch_dtype="float13"), "bad-dtype")
    r = cli("trace", str(d), "--seq-len", "16")
    assert r.code == 2 and "'torch_dtype'" in r.err and "internal error" not in r.err


def test_config_file_with_wrong_types_through_a_subprocess(tmp_path):
    """The installed entry point, not only the in-process CLI: exit 2 and one line."""
    import subprocess
    import sys

    from tests.conftest import tiny_llama

    (tmp_path / "config.json").write_text(json.dumps(tiny_llama(architectures=5)))
    r = subprocess.run([sys.executable, "-m", "campaign", "memory", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "'architectures'" in r.stderr


def test_t5_is_modelled_traced_and_measured_as_a_seq2seq_step(write_config):
    pytest.importorskip("transformers")
    from campaign import estimate_memory, make_workload
    from campaign.memory.protocol import measure_workload
    from campaign.memory.trace import trace_memory

    d = write_config(FAMILIES["t5-v1.0"], "t5")   # no decoder_start_token_id: the step passes decoder inputs
    est = estimate_memory(str(d), make_workload(batch=2, seq_len=64))
    assert not any(n.startswith("generic activation model") for n in est.notes)
    assert not next(i for i in est.items if i.name == "activations").formula.startswith("generic")
    train = make_workload(batch=2, seq_len=16)
    assert [p.name for p in trace_memory(str(d), train).phases] == ["load", "forward", "backward", "optimizer step"]
    infer = make_workload(mode="infer", batch=2, seq_len=16)
    assert [p.name for p in trace_memory(str(d), infer).phases] == ["load", "prefill", "decode"]
    for w in (train, infer):
        m = measure_workload(str(d), w, device="cpu")
        assert m.outcome == "ok" and m.peak_allocated_bytes > 0
