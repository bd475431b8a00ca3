"""The user's own training configuration as the workload: each format written here as its tool documents it, each
value traced to its file and key, a memory-changing key the estimate does not model named, never dropped."""
from __future__ import annotations

import json

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith((".yaml", ".yml")) else json.dumps(doc))
    return path


def test_training_arguments_with_a_deepspeed_file_and_a_peft_config(tmp_path):
    # TrainingArguments.to_json_string() keys; the DeepSpeed config it names; peft's adapter_config.json
    write(tmp_path, "ds.json", {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
                                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}})
    args = write(tmp_path, "training_args.json", {
        "output_dir": "out", "per_device_train_batch_size": 4, "gradient_accumulation_steps": 8,
        "gradient_checkpointing": True, "bf16": True, "optim": "adamw_torch_fused", "deepspeed": "ds.json",
        "learning_rate": 2e-4, "max_length": 1024})
    adapter = write(tmp_path, "adapter_config.json", {
        "peft_type": "LORA", "r": 32, "target_modules": ["q_proj", "v_proj"], "lora_alpha": 64,
        "base_model_name_or_path": "meta-llama/Llama-3.1-8B", "task_type": "CAUSAL_LM"})
    cfg = workload_from_configs([args, adapter])
    assert cfg.options == {"batch": 4, "seq_len": 1024, "grad_checkpointing": True, "optimizer": "adamw",
                           "optimizer_impl": "fused", "grad_accumulation": 8, "shard": "zero2", "method": "lora",
                           "lora_rank": 32, "lora_targets": ("q_proj", "v_proj"), "logits_held": False,
                           "mixed_precision": True}  # ds.json's bf16 "auto" is the Trainer's bf16: on
    assert cfg.model == "meta-llama/Llama-3.1-8B"
    where = {option: source for option, _, source in cfg.sources}
    assert where["batch"] == "training_args.json: per_device_train_batch_size"
    assert where["shard"] == "ds.json: zero_optimization.stage" and where["lora_rank"] == "adapter_config.json: r"
    assert where["grad_accumulation"] == "training_args.json: gradient_accumulation_steps"  # ds.json's is absent
    assert where["mixed_precision"] == "training_args.json: bf16 (fills ds.json: bf16.enabled auto)"
    # the same estimate as the options given by hand
    spec = load_spec("llama-3.1-8b")
    by_hand = make_workload(batch=4, seq_len=1024, grad_checkpointing=True, optimizer="adamw", optimizer_impl="fused",
                            shard="zero2", method="lora", lora_rank=32, lora_targets=("q_proj", "v_proj"),
                            logits_held=False, grad_accumulation=8, mixed_precision=True)
    assert estimate_memory(spec, make_workload(**cfg.options)).required_bytes == \
        estimate_memory(spec, by_hand).required_bytes


def test_axolotl_qlora(tmp_path):
    path = write(tmp_path, "qlora.yml", {
        "base_model": "mistralai/Mistral-7B-v0.1", "adapter": "qlora", "load_in_4bit": True, "lora_r": 16,
        "lora_target_linear": True, "sequence_len": 4096, "micro_batch_size": 2, "gradient_accumulation_steps": 4,
        "gradient_checkpointing": True, "bf16": "auto", "optimizer": "paged_adamw_8bit", "sample_packing": True})
    cfg = workload_from_configs([path], model_type="mistral")
    # axolotl casts the norms, embeddings and head back to bf16, and turns its LoRA kernels on
    assert cfg.options == {"method": "qlora", "lora_rank": 16, "lora_targets": ("all-linear",), "seq_len": 4096,
                           "batch": 2, "grad_checkpointing": True, "optimizer": "adamw-8bit",
                           "optimizer_impl": "foreach", "grad_accumulation": 4, "logits_held": False,
                           "kbit_upcast": False, "lora_kernels": "qkv,o,mlp"}
    assert cfg.model == "mistralai/Mistral-7B-v0.1"


def test_torchtune_lora_recipe(tmp_path):
    path = write(tmp_path, "8B_lora_single_device.yaml", {
        "model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b", "lora_attn_modules":
                  ["q_proj", "v_proj", "output_proj"], "apply_lora_to_mlp": True, "lora_rank": 8, "lora_alpha": 16},
        "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": 2048},
        "batch_size": 2, "gradient_accumulation_steps": 8, "enable_activation_checkpointing": True, "dtype": "bf16",
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 3e-4}})
    cfg = workload_from_configs([path])
    assert cfg.options["method"] == "lora" and cfg.options["lora_rank"] == 8
    assert cfg.options["lora_targets"] == ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert (cfg.options["seq_len"], cfg.options["batch"], cfg.options["dtype"]) == (2048, 2, "bf16")
    assert cfg.options["grad_checkpointing"] is True and cfg.options["optimizer"] == "adamw"
    assert cfg.options["logits_held"] is False  # the recipe deletes the logits before loss.backward()
    assert cfg.options["grad_accumulation"] == 8


def test_gradient_accumulation_is_read_and_two_files_must_agree(tmp_path):
    # a ds_config's own gradient_accumulation_steps; "auto" (the HF Trainer fills it) says nothing; a second file
    # with another count is refused, as for every option
    ds = write(tmp_path, "ds.json", {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}})
    assert workload_from_configs([ds]).options["grad_accumulation"] == 4
    auto = write(tmp_path, "auto.json", {"gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}})
    assert "grad_accumulation" not in workload_from_configs([auto]).options
    args = write(tmp_path, "args.json", {"output_dir": "o", "gradient_accumulation_steps": 2})
    with pytest.raises(InputError, match="grad_accumulation"):
        workload_from_configs([args, ds])
    derived = write(tmp_path, "derived.json", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                               "zero_optimization": {"stage": 2}})
    cfg = workload_from_configs([derived])
    assert "grad_accumulation" not in cfg.options  # over how many cards the file does not say: named
    assert {k.key: k.use for k in cfg.keys}["train_batch_size"] == "not modelled"
    assert workload_from_configs([derived], gpus=8).options["grad_accumulation"] == 4  # 64 / (2 x 8)
    zero = write(tmp_path, "zero.json", {"output_dir": "o", "gradient_accumulation_steps": 0})
    with pytest.raises(InputError, match="gradient_accumulation_steps: 0 is not a positive whole number"):
        workload_from_configs([zero])


def test_accelerate_fsdp_config(tmp_path):
    path = write(tmp_path, "fsdp.yaml", {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "mixed_precision": "bf16",
        "num_processes": 8, "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD",
                                            "fsdp_activation_checkpointing": True, "fsdp_offload_params": False}})
    cfg = workload_from_configs([path])
    assert cfg.options == {"gpus": 8, "mixed_precision": True, "shard": "fsdp", "grad_checkpointing": True}


@pytest.mark.parametrize("name, doc, key", [
    ("ds.json", {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
     "zero_optimization.offload_optimizer"),
    ("adapter_config.json", {"peft_type": "LORA", "r": 8, "modules_to_save": ["lm_head"]}, "modules_to_save"),
    ("adapter_config.json", {"peft_type": "LORA", "r": 8, "use_dora": True}, "use_dora"),
    ("args.json", {"output_dir": "o", "optim": "galore_adamw"}, "optim"),
    ("fsdp.yaml", {"distributed_type": "FSDP", "fsdp_config": {"fsdp_offload_params": True,
                                                               "fsdp_sharding_strategy": "SHARD_GRAD_OP"}},
     "fsdp_config.fsdp_offload_params"),
    # torchtune's mistral/7B_lora*.yaml and llama2/13B_lora.yaml: LoRA on the output projection was an exit 2
    ("7B_lora.yaml", {"model": {"_component_": "torchtune.models.mistral.lora_mistral_7b", "lora_attn_modules":
                                ["q_proj", "v_proj"], "apply_lora_to_output": True}}, "model.apply_lora_to_output"),
])
def test_a_memory_key_that_cannot_be_honoured_is_named_not_refused(tmp_path, name, doc, key):
    """The file is read whole; the setting the estimate does not model is named with what is counted instead, and
    makes the estimate "not verified" (ConfigKey.unmodelled)."""
    cfg = workload_from_configs([write(tmp_path, name, doc)])
    named = {k.key: k for k in cfg.unmodelled}
    assert key in named and named[key].file == name and named[key].use == "not modelled"
    assert "not modelled: " in named[key].why and "\n" not in named[key].why


def test_two_files_that_disagree_are_refused(tmp_path):
    args = write(tmp_path, "args.json", {"output_dir": "o", "per_device_train_batch_size": 4})
    ds = write(tmp_path, "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})
    with pytest.raises(InputError, match="ds.json: train_micro_batch_size_per_gpu sets batch to 2 but args.json"):
        workload_from_configs([args, ds])


def test_a_file_of_no_known_format_is_one_line(tmp_path):
    with pytest.raises(InputError, match="not a training config campaign reads"):
        workload_from_configs([write(tmp_path, "x.json", {"hello": 1})])
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(InputError, match="not valid YAML"):
        workload_from_configs([tmp_path / "bad.yaml"])


def test_accelerates_zero3_init_flag(tmp_path):
    """true: from_pretrained under zero.Init (read); false: a script that builds the model itself loads it whole,
    which the file alone does not say (TrainingArguments still use zero.Init): named, not "off"."""
    base = {"distributed_type": "DEEPSPEED", "num_processes": 4, "mixed_precision": "bf16",
            "deepspeed_config": {"zero_stage": 3}}
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump({**base, "deepspeed_config": {"zero_stage": 3, "zero3_init_flag": True}}))
    on = workload_from_configs([path])
    assert on.options["zero_init"] is True and not on.unmodelled
    path.write_text(yaml.safe_dump({**base, "deepspeed_config": {"zero_stage": 3, "zero3_init_flag": False}}))
    off = workload_from_configs([path])
    assert "zero_init" not in off.options and [k.key for k in off.unmodelled] == ["deepspeed_config.zero3_init_flag"]
    path.write_text(yaml.safe_dump({**base, "deepspeed_config": {"zero_stage": 2, "zero3_init_flag": False}}))
    assert not workload_from_configs([path]).unmodelled  # read by ZeRO-3 only


def test_torchaos_8bit_adamw_reads_as_the_8bit_states(tmp_path):
    """TrainingArguments' optim adamw_torch_8bit is torchao's AdamW8bit: 8-bit states with one fp32 scale per block of
    256, the bytes of bitsandbytes' (2 x (1 + 4 / 256) B a parameter), with torchao's compiled step per tensor;
    adamw_torch_4bit is torchao's AdamW4bit."""
    eight = write(tmp_path, "a.json", {"output_dir": "o", "optim": "adamw_torch_8bit"})
    assert workload_from_configs([eight]).options["optimizer"] == "adamw-8bit-ao"
    four = write(tmp_path, "b.json", {"output_dir": "o", "optim": "adamw_torch_4bit"})
    cfg = workload_from_configs([four])
    assert cfg.options["optimizer"] == "adamw-4bit" and not cfg.unmodelled


def test_trl_and_fms_lora_without_lora_dropout_take_their_default(tmp_path):
    """TRL's ModelConfig and fms-hf-tuning's LoraConfig default lora_dropout to 0.05 (peft's own LoraConfig to 0):
    a file that turns LoRA on without the key runs with dropout, and the estimate says where the figure came from."""
    trl = workload_from_configs([write(tmp_path, "t.json", {"output_dir": "o", "use_peft": True, "lora_r": 8,
                                                           "lora_target_modules": ["q_proj", "v_proj"]})])
    assert trl.options["lora_dropout"] == 0.05
    assert any(k == "lora_dropout" and "default, 0.05" in where for k, _, where in trl.sources)
    fms = workload_from_configs([write(tmp_path, "f.json", {"output_dir": "o", "peft_method": "lora", "r": 8,
                                                           "target_modules": ["q_proj"], "lora_dropout": 0.0})])
    assert fms.options["lora_dropout"] == 0.0
    # no LoRA: the key changes nothing and is read as such
    full = workload_from_configs([write(tmp_path, "n.json", {"output_dir": "o", "lora_dropout": 0.1})])
    assert "lora_dropout" not in full.options and not full.unmodelled


def test_torchtunes_optimizer_in_backward_over_several_cards_is_named_not_refused(tmp_path):
    """A torchtune recipe over several cards is FSDP; its optimizer_in_bwd (full_finetune_distributed supports it)
    was an exit 2 naming --optimizer-in-backward and --shard, options the user never gave."""
    doc = {"model": {"_component_": "torchtune.models.llama3_2.llama3_2_1b"}, "optimizer_in_bwd": True,
           "optimizer": {"_component_": "torch.optim.AdamW", "fused": True}, "batch_size": 4}
    cfg = workload_from_configs([write(tmp_path, "full.yaml", doc)], gpus=4)
    assert cfg.options["shard"] == "fsdp" and "optimizer_in_backward" not in cfg.options
    assert {k.key for k in cfg.unmodelled} == {"optimizer_in_bwd"}
    est = estimate_memory(load_spec("llama-3.2-1b"), make_workload(**cfg.options))
    assert est.peak_allocated_bytes > 0
    one = workload_from_configs([write(tmp_path, "full.yaml", doc)])  # one card: modelled
    assert one.options["optimizer_in_backward"] is True and not one.unmodelled
