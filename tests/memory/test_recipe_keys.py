"""Every key of the user's recipe read, and accounted for: modelled (its option, from its file and key), changing no
memory, or named as not modelled (the verdict then "not verified"). The recipes under tests/memory/recipes are the
published ones (SOURCES.md there names each)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from campaign.memory.training_config import workload_from_configs
from tests.conftest import tiny_llama

RECIPES = Path(__file__).parent / "recipes"


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith((".yaml", ".yml")) else json.dumps(doc))
    return path


def item(result, prefix):
    return next(i for i in result["items"] if i["name"].startswith(prefix))


def test_fms_hf_tuning_arguments_with_peft_keys_are_a_lora_run(cli):
    """fms-hf-tuning's published LoRA JSON: TrainingArguments keys with peft's beside them. It was estimated as a
    full fine-tune; it is the LoRA run the same settings give as flags."""
    recipe = str(RECIPES / "fms_hf_tuning_lora.json")
    r = cli("memory", "gpt2", "--config", recipe, "--json", "--no-solve")
    assert r.code == 0, r.err
    got = r.json()
    # no max_seq_length: fms-hf-tuning truncates to its default, 4096 tokens (tuning/config/configs.py)
    flags = cli("memory", "gpt2", "--method", "lora", "--lora-rank", "8", "--lora-targets", "c_attn,c_proj",
                "--lora-dropout", "0.05", "--batch", "4", "--seq-len", "4096", "--no-logits-held", "--json",
                "--no-solve").json()
    assert got["required_bytes"] == flags["required_bytes"]
    full = cli("memory", "gpt2", "--batch", "4", "--seq-len", "4096", "--no-logits-held", "--json", "--no-solve").json()
    assert got["required_bytes"] < full["required_bytes"]
    # gpt2: 12 layers, c_attn 768 -> 2304, c_proj 768 -> 768 (attention) and 3072 -> 768 (MLP, same name):
    # rank 8 x (in + out) each, fp32 adapters (peft's autocast on a bf16 base)
    adapters = 12 * 8 * ((768 + 2304) + (768 + 768) + (3072 + 768))
    assert item(got, "LoRA adapter weights")["bytes"] == adapters * 4
    uses = {k["key"]: k["use"] for k in got["config_keys"]}
    assert set(uses) == set(json.loads(Path(recipe).read_text()))  # every key of the file, none left out
    assert {k for k, u in uses.items() if u == "modelled"} == {"per_device_train_batch_size", "peft_method", "r",
                                                                "target_modules", "lora_dropout"}
    assert set(uses.values()) == {"modelled", "no memory"}
    assert got["status"] == "pass" and got["checks"][0]["id"] == "memory.recipe"


def test_a_key_that_is_not_modelled_makes_the_estimate_not_verified_and_off_it_changes_nothing(cli, tmp_path):
    base = {"output_dir": "o", "per_device_train_batch_size": 2, "max_seq_length": 512, "seed": 3}
    off = cli("memory", "gpt2", "--config", write(tmp_path, "off.json", base | {"torch_compile": False}), "--json",
              "--no-solve")
    on = cli("memory", "gpt2", "--config", write(tmp_path, "on.json", base | {"torch_compile": True}), "--json",
             "--no-solve")
    assert off.code == 0 and off.json()["status"] == "pass"
    assert on.code == 1 and on.json()["status"] == "not verified"
    check = on.json()["checks"][0]
    assert check["id"] == "memory.recipe" and check["status"] == "skipped" and "on.json: torch_compile" in check["seen"]
    assert off.json()["required_bytes"] == on.json()["required_bytes"]  # named, not counted
    named = {k["key"]: k["use"] for k in on.json()["config_keys"]}
    assert named["torch_compile"] == "not modelled" and named["seed"] == "no memory"
    # a key campaign does not know is named, not refused
    odd = cli("memory", "gpt2", "--config", write(tmp_path, "odd.json", base | {"my_own_flag": 1}), "--json",
              "--no-solve")
    assert odd.code == 1 and {k["key"]: k["use"] for k in odd.json()["config_keys"]}["my_own_flag"] == "unknown"
    text = cli("memory", "gpt2", "--config", str(tmp_path / "odd.json"), "--no-solve")
    assert "Read from your recipe" in text.out and "unknown: my_own_flag = 1" in text.out
    assert "not verified" in text.out


def test_torchtune_distributed_lora_over_eight_cards_is_sharded_with_fsdp(cli):
    """torchtune runs on several cards only through its *_distributed recipes (FSDP): the published 70B LoRA recipe
    with --gpus 8 was 8 whole copies."""
    recipe = str(RECIPES / "torchtune_llama3_1_70B_lora.yaml")
    got = cli("memory", "llama-3.1-70b", "--config", recipe, "--gpus", "8", "--json", "--no-solve")
    assert got.code in (0, 1), got.err
    flags = cli("memory", "llama-3.1-70b", "--method", "lora", "--lora-rank", "16", "--lora-targets",
                "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "--batch", "2", "--grad-checkpointing",
                "--dtype", "bf16", "--optimizer-impl", "fused", "--no-peft-autocast", "--no-logits-held",
                "--loss", "chunked", "--gpus", "8", "--shard", "fsdp", "--json", "--no-solve").json()
    w = got.json()["workload"]
    assert (w["shard"], w["gpus"], w["optimizer_impl"], w["peft_autocast"]) == ("fsdp", 8, "fused", False)
    assert got.json()["required_bytes"] == flags["required_bytes"]
    assert got.json()["status"] == "pass"  # every key modelled or changing no memory (compile: False is off)
    # the weights on each card: an eighth of the 16-bit base
    params = got.json()["params"]
    assert abs(item(got.json(), "weights")["bytes"] - params * 2 / 8) < params * 2 / 8 * 0.01
    one = cli("memory", "llama-3.1-70b", "--config", recipe, "--json", "--no-solve").json()
    assert one["workload"]["shard"] == "none"  # one card: the single-device recipe, no FSDP


def test_torchtune_qlora_reads_its_dtype_as_the_compute_dtype(tmp_path):
    """torchtune's QLoRA recipes say dtype: bf16 (compute); the base is NF4. Refused before with a message about a
    --dtype flag the user never gave."""
    path = write(tmp_path, "8B_qlora_single_device.yaml", {
        "model": {"_component_": "torchtune.models.llama3_1.qlora_llama3_1_8b",
                  "lora_attn_modules": ["q_proj", "v_proj", "output_proj"], "apply_lora_to_mlp": True,
                  "lora_rank": 8, "lora_alpha": 16},
        "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": None},
        "batch_size": 2, "dtype": "bf16", "enable_activation_checkpointing": True,
        "optimizer": {"_component_": "torch.optim.AdamW", "fused": True, "lr": 3e-4}})
    cfg = workload_from_configs([path])
    assert cfg.options["method"] == "qlora" and "dtype" not in cfg.options
    assert cfg.options["kbit_upcast"] is False and cfg.options["peft_autocast"] is False
    assert {k.key: k.use for k in cfg.keys}["dtype"] == "modelled"


def test_adapters_in_a_torchtune_recipe_are_counted_in_its_dtype_and_peft_upcasts_them(cli, tmp_path, write_config):
    """torchtune builds the model, adapters included, under set_default_dtype(bf16); peft (autocast_adapter_dtype,
    default since 0.12) keeps them in fp32 on a bf16 base. An adapter_config.json without target_modules takes peft's
    default for llama: q_proj and v_proj."""
    model = str(write_config(tiny_llama()))
    # tiny llama: hidden 64, 4 heads of 16, 2 KV heads -> q_proj 64 -> 64, v_proj 64 -> 32; 2 layers, rank 8
    lora_params = 2 * 8 * ((64 + 64) + (64 + 32))
    adapter = write(tmp_path, "adapter_config.json", {"peft_type": "LORA", "r": 8, "lora_alpha": 16})
    peft = cli("memory", model, "--config", str(adapter), "--json", "--no-solve")
    assert peft.code == 0, peft.err
    assert item(peft.json(), "LoRA adapter weights")["bytes"] == lora_params * 4
    assert peft.json()["workload"]["lora_targets"] == ["q_proj", "v_proj"]
    tune = write(tmp_path, "tune.yaml", {"model": {"_component_": "torchtune.models.llama3.lora_llama3_8b",
                                                  "lora_attn_modules": ["q_proj", "v_proj"], "lora_rank": 8},
                                        "dtype": "bf16"})
    tt = cli("memory", model, "--config", str(tune), "--json", "--no-solve")
    assert tt.code == 0, tt.err
    assert item(tt.json(), "LoRA adapter weights")["bytes"] == lora_params * 2


def test_peft_default_targets_match_peft_where_it_is_installed():
    """The bundled copy against peft's own table, read from its source (importing peft imports torch: seconds)."""
    import ast
    import importlib.util

    from campaign.memory.recipe_keys import LORA_DEFAULT_TARGETS

    spec = importlib.util.find_spec("peft")
    if spec is None or not spec.submodule_search_locations:
        return
    source = Path(list(spec.submodule_search_locations)[0]) / "utils" / "constants.py"
    tree = ast.parse(source.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") ==
                "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING")
    mapping = ast.literal_eval(node.value)
    for model_type, targets in LORA_DEFAULT_TARGETS.items():
        assert tuple(mapping[model_type]) == targets, model_type


def test_a_model_type_peft_has_no_default_for_is_refused_like_peft(tmp_path):
    import pytest

    from campaign.errors import InputError

    adapter = write(tmp_path, "adapter_config.json", {"peft_type": "LORA", "r": 8})
    with pytest.raises(InputError, match="no default for model type 'granite'"):
        workload_from_configs([adapter], model_type="granite")


def test_trl_model_config_keys_qlora(tmp_path):
    """TRL's ModelConfig beside SFTConfig in one YAML (trl sft --config): use_peft, lora_r, lora_target_modules,
    load_in_4bit."""
    path = write(tmp_path, "sft.yaml", {"output_dir": "o", "per_device_train_batch_size": 1, "max_length": 1024,
                                        "use_peft": True, "lora_r": 32, "lora_alpha": 16, "load_in_4bit": True,
                                        "lora_target_modules": ["q_proj", "k_proj"], "torch_dtype": "bfloat16",
                                        "gradient_checkpointing": True, "bnb_4bit_quant_type": "nf4"})
    cfg = workload_from_configs([path], model_type="llama")
    assert cfg.options["method"] == "qlora" and cfg.options["lora_rank"] == 32
    assert cfg.options["lora_targets"] == ("q_proj", "k_proj") and "dtype" not in cfg.options
    assert not cfg.unmodelled


def test_an_adapter_config_of_another_peft_method_is_read_and_named(tmp_path):
    """peft's IA3 adapter_config.json: its method is named as not modelled (counted as --method's), its settings
    with it, and its base model is read, as a LoRA file's is."""
    path = write(tmp_path, "adapter_config.json", {"peft_type": "IA3", "target_modules": ["k_proj", "v_proj"],
                                                   "feedforward_modules": ["down_proj"], "task_type": "CAUSAL_LM",
                                                   "base_model_name_or_path": "meta-llama/Llama-3.2-1B"})
    cfg = workload_from_configs([path])
    assert cfg.options == {} and cfg.model == "meta-llama/Llama-3.2-1B"
    uses = {k.key: k.use for k in cfg.keys}
    assert uses == {"peft_type": "not modelled", "target_modules": "not modelled",
                    "feedforward_modules": "not modelled", "task_type": "no memory",
                    "base_model_name_or_path": "no memory"}


def test_a_decoder_s_loss_settings_on_an_encoder_are_named_not_applied(tmp_path):
    """Liger patches decoders only: use_liger_kernel on BERT or T5 changes nothing (a note). DPO's log-probability
    loss on an encoder-decoder is not modelled: named, the model's own loss counted, never an error."""
    liger = write(tmp_path, "liger.json", {"output_dir": "o", "per_device_train_batch_size": 2, "max_length": 512,
                                           "use_liger_kernel": True})
    dpo = write(tmp_path, "dpo.json", {"output_dir": "o", "per_device_train_batch_size": 2, "max_length": 512,
                                       "beta": 0.1})
    for model_type in ("bert", "t5"):
        cfg = workload_from_configs([liger], model_type=model_type, causal=False)
        assert "loss" not in cfg.options and any("Liger has no kernels" in n for n in cfg.notes)
        assert {k.key: k.use for k in cfg.keys}["use_liger_kernel"] == "modelled"
    cfg = workload_from_configs([dpo], model_type="t5", causal=False)
    assert "loss" not in cfg.options and {k.key: k.use for k in cfg.keys}["beta"] == "not modelled"
    # a decoder's are applied (the correct setup)
    assert workload_from_configs([liger], model_type="llama", causal=True).options["loss"] == "fused"
    assert workload_from_configs([dpo], model_type="llama", causal=True).options["loss"] == "logps"


def test_t5_with_a_liger_recipe_on_the_command_line(cli, tmp_path):
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 64, "d_ff": 128, "d_kv": 16,
        "num_heads": 4, "num_layers": 2, "num_decoder_layers": 2, "vocab_size": 320, "feed_forward_proj": "relu",
        "is_encoder_decoder": True, "tie_word_embeddings": True}))
    recipe = write(tmp_path, "liger.json", {"output_dir": "o", "per_device_train_batch_size": 2, "max_length": 64,
                                            "use_liger_kernel": True})
    r = cli("memory", str(t5), "--config", str(recipe), "--json", "--no-solve")
    assert r.code == 0, r.err
    plain = cli("memory", str(t5), "--batch", "2", "--seq-len", "64", "--no-logits-held", "--json", "--no-solve")
    assert r.json()["required_bytes"] == plain.json()["required_bytes"]


def test_attn_implementation_eager_is_the_eager_estimate(tmp_path, cli):
    """transformers' eager attention materializes the scores: attn_implementation eager in a TrainingArguments or
    axolotl file is --attention eager; sdpa and flash attention keep none."""
    base = {"output_dir": "o", "per_device_train_batch_size": 2, "max_length": 1024}
    eager = cli("memory", "gpt2", "--config", write(tmp_path, "e.json", base | {"attn_implementation": "eager"}),
                "--json", "--no-solve").json()
    flags = cli("memory", "gpt2", "--batch", "2", "--seq-len", "1024", "--no-logits-held", "--attention", "eager",
                "--json", "--no-solve").json()
    assert eager["required_bytes"] == flags["required_bytes"] and eager["status"] == "pass"
    flash = cli("memory", "gpt2", "--config", write(tmp_path, "f.json", base | {"attn_implementation":
                                                                                "flash_attention_2"}),
                "--json", "--no-solve").json()
    assert flash["required_bytes"] < eager["required_bytes"]
    axolotl = write(tmp_path, "a.yml", {"base_model": "gpt2", "micro_batch_size": 2, "sequence_len": 1024,
                                        "attn_implementation": "eager", "a_future_key": None})
    cfg = workload_from_configs([axolotl])
    assert cfg.options["attention"] == "eager"
    assert {k.key: k.use for k in cfg.keys}["a_future_key"] == "off"  # an unknown key left empty sets nothing


def test_a_deepspeed_path_is_opened_from_the_working_folder_then_beside_the_file(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z3.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    args = write(tmp_path / "configs", "args.json", {"output_dir": "o", "per_device_train_batch_size": 1,
                                                     "deepspeed": "ds/z3.json"})
    monkeypatch.chdir(tmp_path)  # as the HF Trainer opens it
    assert workload_from_configs([args]).options["shard"] == "zero3"
    monkeypatch.chdir(tmp_path / "configs")
    missing = workload_from_configs([args])
    assert "shard" not in missing.options
    assert {k.key: k.use for k in missing.keys}["deepspeed"] == "not modelled"


def test_deepspeed_derives_the_micro_batch_from_the_total(tmp_path):
    """runtime/config.py: train_batch_size = micro-batch x accumulation x GPUs, any two giving the third."""
    ds = write(tmp_path, "ds.json", {"train_batch_size": 8, "gradient_accumulation_steps": 1,
                                     "zero_optimization": {"stage": 2}})
    assert workload_from_configs([ds], gpus=2).options["batch"] == 4
    acc = write(tmp_path, "acc.json", {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                                       "zero_optimization": {"stage": 2}})
    assert workload_from_configs([acc], gpus=4).options["grad_accumulation"] == 4
    unknown = workload_from_configs([ds])  # the cards not given: named
    assert "batch" not in unknown.options
    assert {k.key: k.use for k in unknown.keys}["train_batch_size"] == "not modelled"


def test_fms_alora_is_counted_as_its_lora(tmp_path):
    doc = {"output_dir": "o", "per_device_train_batch_size": 4, "peft_method": "alora", "r": 32,
           "target_modules": ["q_proj", "k_proj", "v_proj"]}
    cfg = workload_from_configs([write(tmp_path, "alora.json", doc)])
    lora = workload_from_configs([write(tmp_path, "lora.json", doc | {"peft_method": "lora"})])
    assert cfg.options == lora.options and cfg.options["method"] == "lora" and cfg.options["lora_rank"] == 32


def test_an_fms_file_without_max_seq_length_counts_its_default_of_4096(tmp_path):
    doc = {"output_dir": "o", "per_device_train_batch_size": 4, "training_data_path": "t.jsonl"}
    cfg = workload_from_configs([write(tmp_path, "fms.json", doc)])
    assert cfg.options["seq_len"] == 4096 and "fms-hf-tuning's default" in dict(
        (o, w) for o, _, w in cfg.sources)["seq_len"]
    given = workload_from_configs([write(tmp_path, "fms1k.json", doc | {"max_seq_length": 1024})])
    assert given.options["seq_len"] == 1024
    trl = workload_from_configs([write(tmp_path, "trl.json", {"output_dir": "o", "per_device_train_batch_size": 4})])
    assert "seq_len" not in trl.options  # not an fms file: --seq-len's, with a note


def test_a_torchtune_recipe_without_max_seq_len_says_which_length_is_counted(tmp_path):
    doc = {"model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b", "lora_rank": 8},
           "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "path": "t", "max_seq_len": None},
           "batch_size": 2}
    cfg = workload_from_configs([write(tmp_path, "tt.yaml", doc)])
    assert "seq_len" not in cfg.options and any("max_seq_len null" in n for n in cfg.notes)


def test_documented_axolotl_keys_are_accounted_not_unknown(tmp_path):
    """Keys of axolotl's schema (src/axolotl/utils/schemas/config.py) that its published examples carry: those that
    change no GPU memory are no memory; those that train fewer parameters or swap kernels are named as not modelled
    (the estimate then an upper bound), never unknown."""
    doc = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "adapter": "lora",
           "eot_tokens": ["<|eot|>"], "loss_watchdog_threshold": 5.0, "loss_watchdog_patience": 3,
           "remove_unused_columns": False, "lora_model_dir": "prev", "unfrozen_parameters": ["^lm_head.weight$"],
           "lora_mlp_kernel": True, "model_config": {"rope_theta": 1e6}}
    uses = {k.key: k.use for k in workload_from_configs([write(tmp_path, "a.yml", doc)]).keys}
    assert {k for k, u in uses.items() if u == "no memory"} >= {"eot_tokens", "loss_watchdog_threshold",
                                                                 "loss_watchdog_patience", "remove_unused_columns",
                                                                 "lora_model_dir"}
    assert {k for k, u in uses.items() if u == "not modelled"} == {"unfrozen_parameters", "model_config"}
    assert uses["lora_mlp_kernel"] == "modelled"  # --lora-kernels (test_lora_kernels.py)
    assert "unknown" not in uses.values()


def test_a_torchtune_builder_given_its_own_shape_is_named_not_unknown(tmp_path):
    # llama2/1B_qat_single_device.yaml at bd2a0fc7: torchtune.models.llama2.llama2 with its sizes; the model counted
    # is the command line's, so the sizes are named, and a dropout of 0 is off
    doc = {"model": {"_component_": "torchtune.models.llama2.llama2", "vocab_size": 32000, "num_layers": 22,
                     "num_heads": 32, "num_kv_heads": 4, "embed_dim": 2048, "max_seq_len": 2048, "attn_dropout": 0.0,
                     "norm_eps": 1e-5},
           "tokenizer": {"_component_": "torchtune.models.llama2.llama2_tokenizer", "max_seq_len": 512},
           "batch_size": 2}
    path = tmp_path / "qat.yaml"
    path.write_text(yaml.safe_dump(doc))
    keys = {k.key: k.use for k in workload_from_configs([path]).keys}
    assert keys["model.num_layers"] == keys["model.embed_dim"] == "not modelled"
    assert keys["model.attn_dropout"] == "off" and keys["model.norm_eps"] == "no memory"
    assert "unknown" not in keys.values()
