"""LLaMA-Factory's v1 train YAML (examples/v1 at ff6d4d12): read with the v1 engine's own defaults, not as HF
TrainingArguments (where every key was unknown and a LoRA file was estimated as a full fine-tune)."""
from __future__ import annotations

import json

import yaml

from campaign.memory.training_config import workload_from_configs

# Llama 3.2 1B: 16 layers, hidden 2048, intermediate 8192, k/v out 512; 1,235,814,400 parameters
P = 1_235_814_400
# rank 16 on every linear layer: r x (in + out) for q, k, v, o, gate, up, down
LORA_16 = 16 * 16 * ((2048 + 2048) + 2 * (2048 + 512) + (2048 + 2048) + 3 * (2048 + 8192))
# examples/v1/train_lora/train_lora_sft.yaml, its keys and values
LORA_SFT = {"model": "Qwen/Qwen3-4B", "model_class": "llm",
            "peft_config": {"name": "lora", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all"},
            "kernel_config": {"name": "auto"}, "dist_config": {"name": "fsdp2", "dcp_path": None},
            "train_dataset": "data/v1_sft_demo.yaml", "output_dir": "./outputs/test_lora", "micro_batch_size": 1,
            "cutoff_len": 2048, "learning_rate": 1.0e-4, "max_steps": 10, "sample_backend": "hf",
            "max_new_tokens": 128}


def _write(tmp_path, doc):
    path = tmp_path / "v1.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _estimate(cli, tmp_path, doc, *args):
    out = cli("memory", "llama-3.2-1b", "--config", str(_write(tmp_path, doc)), "--json", *args)
    assert out.code in (0, 1), out.err
    return out.code, json.loads(out.out)


def test_the_published_lora_example_is_lora_with_its_kernels_named(tmp_path):
    cfg = workload_from_configs([_write(tmp_path, LORA_SFT)], gpus=2)
    o = cfg.options
    assert (o["method"], o["lora_rank"], o["lora_targets"], o["lora_dropout"]) == ("lora", 16, ("all-linear",), 0.05)
    assert (o["batch"], o["seq_len"], o["grad_checkpointing"], o["shard"]) == (1, 2048, True, "fsdp")
    assert cfg.model == "Qwen/Qwen3-4B"
    # the trainer is the command's word (llamafactory-cli sft|dpo): named until --reference says which
    assert {k.key for k in cfg.unmodelled} == {"dist_config.name", "train_dataset"}
    said = workload_from_configs([_write(tmp_path, LORA_SFT)], gpus=2, reference="none")
    assert {k.key for k in said.unmodelled} == {"dist_config.name"}
    assert not any(k.use == "unknown" for k in cfg.keys)
    # kernel_config auto: v1's automatic kernels are the Ascend NPU's (kernels/interface.py), none on a CUDA card
    assert "kernel_config.name" in {k.key for k in said.keys if k.use == "modelled"}
    assert any("Ascend NPU kernels only" in n for n in said.notes)


def test_lora_on_one_card_without_kernels_is_verified(cli, tmp_path):
    doc = LORA_SFT | {"kernel_config": None, "dist_config": None}
    code, d = _estimate(cli, tmp_path, doc, "--reference", "none")
    assert code == 0 and d["status"] == "pass"
    assert d["trainable_params"] == LORA_16
    load = {i["name"]: i["bytes"] for p in d["phases"] if p["name"] == "load" for i in p["items"]}
    assert load["weights"] == 2 * P  # the checkpoint's bf16 ("auto"), adapters fp32
    assert load["LoRA adapter weights (fp32)"] == 4 * LORA_16


def test_a_full_fine_tune_is_fp32_and_bf16_only_under_fsdp2(cli, tmp_path):
    full = {k: v for k, v in LORA_SFT.items() if k != "peft_config"} | {"kernel_config": None}
    _, alone = _estimate(cli, tmp_path, full | {"dist_config": None})
    assert alone["workload"]["dtype"] == "fp32" and alone["workload"]["mixed_precision"] is False
    step = {i["name"]: i["bytes"] for p in alone["phases"] if p["name"] == "optimizer step" for i in p["items"]}
    assert step["weights"] == 4 * P
    code, sharded = _estimate(cli, tmp_path, full, "--gpus", "2", "--reference", "none")
    assert code == 0 and sharded["workload"]["mixed_precision"] is True and sharded["workload"]["shard"] == "fsdp"
    step = {i["name"]: i["bytes"] for p in sharded["phases"] if p["name"] == "optimizer step" for i in p["items"]}
    assert step["weights (fp32, AMP master)"] == 4 * P // 2  # fp32 shards, bf16 compute


def test_global_batch_size_is_the_accumulation_over_the_cards(tmp_path):
    doc = LORA_SFT | {"micro_batch_size": 2, "global_batch_size": 8}
    assert workload_from_configs([_write(tmp_path, doc)], gpus=2).options["grad_accumulation"] == 2
    odd = workload_from_configs([_write(tmp_path, doc | {"global_batch_size": 7})], gpus=2)
    assert "global_batch_size" in {k.key for k in odd.unmodelled}


# examples/v1/train_full/train_full_deepspeed.yaml and examples/deepspeed/ds_z3_config.json at ff6d4d12
FULL_DEEPSPEED = {"model": "Qwen/Qwen3-0.6B", "model_class": "llm", "kernel_config": {"name": "auto"},
                  "dist_config": {"name": "deepspeed", "config_file": "examples/deepspeed/ds_z3_config.json"},
                  "train_dataset": "data/v1_sft_demo.yaml", "output_dir": "outputs/Qwen3-0.6B-deepspeed",
                  "micro_batch_size": 1, "cutoff_len": 2048, "learning_rate": 1.0e-4, "max_steps": 10}
DS_Z3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
         "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
         "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                  "hysteresis": 2, "min_loss_scale": 1},
         "bf16": {"enabled": "auto"},
         "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
                               "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                               "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                               "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True}}


def _deepspeed_run(cli, tmp_path, monkeypatch, ds, *args):
    """The published pair as a user runs it from LLaMA-Factory's folder (config_file opens from there)."""
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "ds_z3_config.json").write_text(json.dumps(ds))
    monkeypatch.chdir(tmp_path)
    return cli("memory", "llama-3.2-1b", "--config", str(_write(tmp_path, FULL_DEEPSPEED)), "--gpus", "4",
               "--reference", "none", "--json", *args)


def _step(d):
    return {i["name"]: i["bytes"] for p in d["phases"] if p["name"] == "optimizer step" for i in p["items"]}


def test_the_deepspeed_plugin_reads_its_ds_config_in_bf16_as_v1_infers_it(cli, tmp_path, monkeypatch):
    out = _deepspeed_run(cli, tmp_path, monkeypatch, DS_Z3)
    assert out.code == 0, out.err
    d = json.loads(out.out)
    assert d["status"] == "pass" and d["workload"]["shard"] == "zero3" and d["workload"]["mixed_precision"] is True
    step = _step(d)
    # ZeRO-3 over 4 cards, bf16 (both "auto": v1's infer_deepspeed_mixed_precision says bf16): the engine casts
    # v1's fp32 model to bf16, fp32 master and Adam's two fp32 moments partitioned
    assert step["weights"] == 2 * P // 4
    assert step["fp32 master weights"] == 4 * P // 4
    assert step["optimizer states"] == 8 * P // 4
    cfg = workload_from_configs([tmp_path / "v1.yaml"], gpus=4, reference="none")
    keys = {(k.file, k.key): k.use for k in cfg.keys}
    assert keys[("ds_z3_config.json", "zero_optimization.stage")] == "modelled"
    assert keys[("v1.yaml", "dist_config.config_file")] == "modelled"


def test_a_ds_config_that_turns_bf16_off_trains_v1_in_fp32(cli, tmp_path, monkeypatch):
    out = _deepspeed_run(cli, tmp_path, monkeypatch, DS_Z3 | {"bf16": {"enabled": False}})
    d = json.loads(out.out)
    assert d["workload"]["mixed_precision"] is False
    step = _step(d)
    assert step["weights"] == 4 * P // 4 and "fp32 master weights" not in step  # fp32 parameters, no master copy


def test_fp16_on_or_no_config_file_is_refused_as_v1_refuses_it(cli, tmp_path, monkeypatch):
    out = _deepspeed_run(cli, tmp_path, monkeypatch, DS_Z3 | {"fp16": {"enabled": True}})
    assert out.code == 2 and "fp16.enabled is true" in out.err and "false or auto" in out.err
    doc = FULL_DEEPSPEED | {"dist_config": {"name": "deepspeed"}}
    out = cli("memory", "llama-3.2-1b", "--config", str(_write(tmp_path, doc)), "--gpus", "4")
    assert out.code == 2 and "dist_config.config_file" in out.err and len(out.err.strip().splitlines()) == 1


def test_a_ds_config_not_found_is_named_not_refused(tmp_path):
    cfg = workload_from_configs([_write(tmp_path, FULL_DEEPSPEED)], gpus=4, reference="none")
    assert "dist_config.config_file" in {k.key for k in cfg.unmodelled}
    assert cfg.options.get("shard", "none") == "none"


def test_liger_kernel_on_qwen3_is_liger_layers_with_its_cross_entropy_named(cli, tmp_path):
    # examples/v1/train_full/train_full_liger_kernel.yaml, on one card
    doc = {"model": "Qwen/Qwen3-0.6B", "model_class": "llm", "kernel_config": {"name": "liger_kernel"},
           "quant_config": None, "train_dataset": "data/v1_sft_demo.yaml", "output_dir": "outputs/test_fsdp2",
           "micro_batch_size": 1, "cutoff_len": 2048, "learning_rate": 1.0e-4, "max_steps": 10}
    path = _write(tmp_path, doc)
    cfg = workload_from_configs([path], model_type="qwen3", reference="none")
    assert cfg.options["liger_kernels"] == "rope,rms_norm,swiglu"  # Liger's defaults for apply_liger_kernel_to_qwen3
    assert {k.key for k in cfg.unmodelled} == {"kernel_config.name"}  # the cross_entropy swapped in for training
    # the file moves the estimate exactly as the flags it stands for
    by_file = json.loads(cli("memory", "qwen3-0.6b", "--config", str(path), "--reference", "none", "--json").out)
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc | {"kernel_config": None}))
    by_flags = json.loads(cli("memory", "qwen3-0.6b", "--config", str(bare), "--reference", "none", "--liger-kernels",
                              "rope,rms_norm,swiglu", "--json").out)
    without = json.loads(cli("memory", "qwen3-0.6b", "--config", str(bare), "--reference", "none", "--json").out)

    def activations(d):
        return next(i["bytes"] for p in d["phases"] if p["name"] == "forward" for i in p["items"]
                    if i["name"] == "activations")

    assert by_file["phases"] == by_flags["phases"]
    # every layer checkpointed: what Liger removes in the forward is the final RMSNorm's fp32 copy of its input,
    # 2048 tokens x hidden 1024 x 4 B (Qwen3-0.6B)
    assert activations(without) - activations(by_file) == 2048 * 1024 * 4
    # v1 applies Liger to Qwen3's types only: on a Llama nothing changes, and it says so
    llama = workload_from_configs([path], model_type="llama", reference="none")
    assert "liger_kernels" not in llama.options and any("trains without it" in n for n in llama.notes)


def test_the_freeze_plugin_and_its_settings_are_named(tmp_path):
    # examples/v1/train_freeze/train_freeze_sft.yaml at ff6d4d12
    doc = LORA_SFT | {"peft_config": {"name": "freeze", "freeze_trainable_layers": 2,
                                      "freeze_trainable_modules": "all"}, "dist_config": None}
    cfg = workload_from_configs([_write(tmp_path, doc)], reference="none")
    named = {k.key for k in cfg.unmodelled}
    assert {"peft_config.name", "peft_config.freeze_trainable_layers", "peft_config.freeze_trainable_modules"} <= named
    assert cfg.options["dtype"] == "fp32"  # counted as v1's full fine-tune, an upper bound
    assert not any(k.use == "unknown" for k in cfg.keys)


def test_the_ds_config_is_read_as_v1_hands_it_to_deepspeed(cli, tmp_path, monkeypatch):
    # infer_deepspeed_mixed_precision reads "false" as false (no bf16: fp32 weights, no master), and v1's dataloader
    # feeds micro_batch_size whatever train_micro_batch_size_per_gpu says
    out = _deepspeed_run(cli, tmp_path, monkeypatch, DS_Z3 | {"bf16": {"enabled": "false"},
                                                              "train_micro_batch_size_per_gpu": 4})
    assert out.code == 0, out.err
    d = json.loads(out.out)
    assert d["workload"]["mixed_precision"] is False and d["workload"]["batch"] == 1
    assert _step(d)["weights"] == 4 * P // 4


def test_liger_with_require_logits_false_is_refused_as_training_fails(cli, tmp_path):
    doc = {"model": "Qwen/Qwen3-0.6B", "kernel_config": {"name": "liger_kernel", "require_logits": False}}
    out = cli("memory", "qwen3-0.6b", "--config", str(_write(tmp_path, doc)), "--reference", "none")
    assert out.code == 2 and "require_logits" in out.err and len(out.err.strip().splitlines()) == 1


def test_the_fsdpturbo_engines_expert_parallel_settings_are_named(tmp_path):
    # examples/v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml at ff6d4d12 (its dist_config)
    doc = LORA_SFT | {"dist_config": {"name": "fsdpturbo", "ep_size": 8, "ep_dispatcher": "alltoall"}}
    keys = {k.key: k.use for k in workload_from_configs([_write(tmp_path, doc)], gpus=8, reference="none").keys}
    assert keys["dist_config.ep_size"] == keys["dist_config.ep_dispatcher"] == "not modelled"
