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
    assert {k.key for k in cfg.unmodelled} == {"kernel_config.name", "dist_config.name", "train_dataset"}
    said = workload_from_configs([_write(tmp_path, LORA_SFT)], gpus=2, reference="none")
    assert {k.key for k in said.unmodelled} == {"kernel_config.name", "dist_config.name"}
    assert not any(k.use == "unknown" for k in cfg.keys)


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
