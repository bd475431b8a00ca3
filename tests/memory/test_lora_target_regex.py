"""peft's target_modules as one string: a regular expression over whole module paths (axolotl's VLM and per-layer
examples write it so). It is read, never refused: the modules it matches in each layer are adapted, checked against
peft itself on a tiny real Llama and by hand on Llama 3.2 1B's shapes."""
from __future__ import annotations

import json

import pytest
import yaml

from campaign.memory import estimate_memory, make_workload
from campaign.memory.states import trainable_params
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

# Llama 3.2 1B: 16 layers, hidden 2048, intermediate 8192, 8 KV heads x 64 (k/v out 512); rank 16: r x (in + out)
R = 16
Q = OUT = R * (2048 + 2048)
K = V = R * (2048 + 512)
GATE = UP = DOWN = R * (2048 + 8192)


@pytest.mark.parametrize("pattern", [
    r"model\.layers\.\d+\.self_attn\.(q|v)_proj",             # every layer, two projections
    r".*\.layers\.1\.self_attn\.(q|k|v|o)_proj|.*\.mlp\.(gate|up|down)_proj",  # attention in layer 1 only
    r".*(q|down)_proj",
])
def test_the_modules_peft_adapts_are_the_ones_counted(pattern):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    cfg = tiny_llama(num_hidden_layers=3)
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    model = peft.get_peft_model(transformers.LlamaForCausalLM(config), peft.LoraConfig(r=4, target_modules=pattern))
    by_peft = sum(p.numel() for p in model.parameters() if p.requires_grad)
    w = make_workload(method="lora", lora_rank=4, lora_targets=("re:" + pattern,))
    assert trainable_params(spec_from_config(cfg, name="tiny", source="test"), w) == by_peft


def test_a_pattern_over_some_layers_counts_their_adapters_there_and_their_activations_everywhere():
    spec = load_spec("llama-3.2-1b")
    pattern = r".*\.layers\.(3|7|11|15)\.self_attn\.(q|k|v|o)_proj|.*\.mlp\.(gate|up|down)_proj"
    w = make_workload(method="lora", lora_rank=R, batch=1, seq_len=512, lora_targets=("re:" + pattern,))
    assert trainable_params(spec, w) == 4 * (Q + K + V + OUT) + 16 * (GATE + UP + DOWN)
    union = make_workload(method="lora", lora_rank=R, batch=1, seq_len=512,
                          lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    est, every = estimate_memory(spec, w), estimate_memory(spec, union)
    step = {i.name: i.bytes for i in next(p for p in est.phases if p.name == "optimizer step").items}
    assert step["LoRA adapter weights (fp32)"] == 4 * trainable_params(spec, w)
    assert step["optimizer states"] == 2 * 4 * trainable_params(spec, w)

    def activations(e):
        return next(i.bytes for i in next(p for p in e.phases if p.name == "backward").items if i.name == "activations")

    assert activations(est) == activations(every)  # the union in every layer: an upper bound, said in a note
    assert any("4 of 16 layers" in n and "an upper bound" in n for n in est.notes)


def test_a_vision_language_models_language_layers_are_matched_under_its_path():
    # axolotl's VLM examples: model.language_model.layers.N (transformers >= 4.52); Voxtral's language_model.model
    spec = load_spec("llama-3.2-1b")
    for pattern in (r"model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj",
                    r"language_model.model.layers.[\d]+.(mlp|self_attn).(up|down|gate|q|k|v|o)_proj"):
        w = make_workload(method="lora", lora_rank=R, lora_targets=("re:" + pattern,))
        assert trainable_params(spec, w) == 16 * (Q + K + V + OUT + GATE + UP + DOWN)


def test_axolotl_and_adapter_config_regexes_are_read(tmp_path, cli):
    recipe = tmp_path / "vlm.yml"
    recipe.write_text(yaml.safe_dump({
        "base_model": "meta-llama/Llama-3.2-1B", "adapter": "lora", "lora_r": R, "micro_batch_size": 1,
        "sequence_len": 512, "lora_target_modules": r"model.layers.[\d]+.self_attn.(q|v)_proj"}))
    read = workload_from_configs([recipe])
    assert not read.unmodelled
    adapter = tmp_path / "adapter_config.json"
    adapter.write_text(json.dumps({"peft_type": "LORA", "r": R, "target_modules": r".*\.(q|v)_proj"}))
    for path in (recipe, adapter):
        out = cli("memory", "llama-3.2-1b", "--config", str(path), "--batch", "1", "--seq-len", "512", "--json")
        assert out.code == 0, out.err
        assert json.loads(out.out)["trainable_params"] == 16 * (Q + V)


def test_a_pattern_that_matches_nothing_or_is_no_regex_is_one_line(cli):
    out = cli("memory", "llama-3.2-1b", "--method", "lora", "--lora-targets", r"re:model\.layers\.\d+\.attn\.c_attn")
    assert out.code == 2 and "matches no Linear module" in out.err and "model.layers.0.self_attn.q_proj" in out.err
    out = cli("memory", "llama-3.2-1b", "--method", "lora", "--lora-targets", "re:(q_proj")
    assert out.code == 2 and "is not a regular expression" in out.err and "Traceback" not in out.err


def test_the_command_line_keeps_a_patterns_commas():
    from campaign.cli.common import target_list

    assert target_list(r"re:.*\.layers\.\d{1,2}\.self_attn\.q_proj") == (r"re:.*\.layers\.\d{1,2}\.self_attn\.q_proj",)
    assert target_list("q_proj,v_proj") == ("q_proj", "v_proj")


def test_a_recipes_broken_pattern_names_its_file_and_key(tmp_path, cli):
    recipe = tmp_path / "ax.yml"
    recipe.write_text(yaml.safe_dump({"base_model": "meta-llama/Llama-3.2-1B", "adapter": "lora",
                                      "lora_target_modules": r"model.layers.(\d+.self_attn.q_proj"}))
    out = cli("memory", "llama-3.2-1b", "--config", str(recipe))
    assert out.code == 2 and "ax.yml: lora_target_modules:" in out.err and "not a regular expression" in out.err


def test_a_listed_name_may_be_the_dotted_end_of_a_module_path_as_in_peft():
    # peft's list: a module whose path equals a name or ends with '.' + name (llama-4's shared_expert.gate_proj)
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    cfg = dict(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], hidden_size=64, intermediate_size=128,
               moe_intermediate_size=32, shared_expert_intermediate_size=96, num_experts=4, num_experts_per_tok=2,
               num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=1000,
               max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="bfloat16")
    config = transformers.AutoConfig.for_model("qwen2_moe", **{k: v for k, v in cfg.items() if k != "model_type"})
    targets = ["shared_expert.gate_proj", "self_attn.q_proj", "v_proj"]
    model = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(config),
                                peft.LoraConfig(r=4, target_modules=targets))
    by_peft = sum(p.numel() for p in model.parameters() if p.requires_grad)
    w = make_workload(method="lora", lora_rank=4, lora_targets=tuple(targets))
    assert trainable_params(spec_from_config(cfg, name="tiny", source="test"), w) == by_peft
