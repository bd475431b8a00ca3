"""torchtune's RL recipes (at bd2a0fc7): the synchronous GRPO recipe (recipes/configs/dev/3B_full_grpo.yaml,
qwen3B_sync_grpo.yaml) and the PPO recipe (llama2/1B_full_ppo_low_memory_single_device.yaml) read as the generation,
reference and step they run, not as an SFT step with their keys unknown; the PPO recipe's policy_model is its model."""
from __future__ import annotations

import json

import yaml

from campaign.memory.training_config import workload_from_configs

# recipes/configs/dev/3B_full_grpo.yaml, its keys and values (the profiler's and the logger's sections shortened)
GRPO = {"name": "grpo_llama3b", "output_dir": "/tmp/checkpoints/${name}",
        "base_model_path": "/tmp/llama3B_gsm8k_sft_part0/epoch_0",
        "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer",
                      "path": "/tmp/Llama-3.2-3B/original/tokenizer.model", "max_seq_len": None},
        "dataset": {"_component_": "torchtune.dev.grpo.gsm8k.gsm8k_dataset", "partition": "1-9/10"},
        "seed": None, "shuffle": False, "model": {"_component_": "torchtune.models.llama3_2.llama3_2_3b"},
        "checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer",
                         "checkpoint_dir": "${base_model_path}", "model_type": "LLAMA3"},
        "ref_checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer",
                             "checkpoint_dir": "${base_model_path}", "model_type": "LLAMA3"},
        "resume_from_checkpoint": False, "save_every_n_epochs": 1, "batch_size": 1, "grpo_samples": 16,
        "forward_batch_size": 1, "max_generated_tokens": 512, "top_k": None, "temperature": 1.0, "ppo_epochs": 1,
        "num_steps": 200, "clip_grad_norm": 1.0, "epochs": 10,
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-5, "fused": True},
        "loss": {"_component_": "torchtune.dev.grpo.loss.GRPOSimpleLoss", "kl_coeff": 0.01, "epsilon": 0.2},
        "device": "cuda", "enable_activation_checkpointing": True, "compile": False, "dtype": "bf16",
        "log_every_n_steps": 1, "log_peak_memory_stats": True, "log_level": "INFO"}

# recipes/configs/llama2/1B_full_ppo_low_memory_single_device.yaml (its checkpointers' file lists shortened)
SHAPE = {"vocab_size": 32000, "num_layers": 22, "num_heads": 32, "num_kv_heads": 4, "embed_dim": 2048,
         "max_seq_len": 2048, "intermediate_dim": 5632, "attn_dropout": 0.0, "norm_eps": 1e-5}
PPO = {"output_dir": "/tmp/torchtune/llama2_1B/full_ppo_low_memory",
       "tokenizer": {"_component_": "torchtune.models.llama2.llama2_tokenizer", "path": "/tmp/tokenizer.model",
                     "max_seq_len": 512},
       "dataset": {"_component_": "torchtune.datasets.text_completion_dataset", "column": "prompt"},
       "policy_model": {"_component_": "torchtune.models.llama2.llama2", **SHAPE},
       "reward_and_value_model": {"_component_": "torchtune.models.llama2.llama2_classifier", "num_classes": 1,
                                  **SHAPE},
       "checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer"},
       "ref_policy_checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer"},
       "value_checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer"},
       "reward_checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer"},
       "resume_from_checkpoint": False, "seed": None, "shuffle": True, "device": "cuda", "batch_size": 16,
       "num_steps": 10000, "ppo_epochs": 2, "ppo_batch_size": 16, "gradient_accumulation_steps": 1,
       "compile": False, "optimizer": {"_component_": "torch.optim.AdamW", "lr": 3e-6}, "optimizer_in_bwd": True,
       "log_peak_memory_stats": True, "enable_activation_checkpointing": True, "enable_kv_cache": True,
       "dtype": "bf16", "forward_batch_size": 16, "temperature": 0.7, "top_k": None, "max_generated_tokens": 58,
       "min_response_length": 18, "penalise_no_eos": True, "reward_penalty": -3, "stop_token_ids": [2, 29889],
       "whiten_rewards": False, "gamma": 1, "lmbda": 0.95, "loss": {"_component_": "torchtune.rlhf.loss.PPOLoss",
                                                                     "epsilon": 0.2, "value_coeff": 0.1},
       "kl_coeff": 0.01}


def _read(tmp_path, doc, **kw):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(doc))
    return workload_from_configs([path], **kw)


def test_the_grpo_recipe_is_its_rollouts_reference_and_one_step_over_them(tmp_path):
    cfg = _read(tmp_path, GRPO, gpus=8)
    o = cfg.options
    # batch_size 1 prompt x grpo_samples 16: generated, then trained in one forward
    assert (o["rollouts"], o["batch"], o["completion_tokens"]) == (16, 16, 512)
    assert (o["method"], o["reference"], o["shard"], o["reshard_after_forward"]) == ("full", "copy", "fsdp", False)
    assert o["loss"] == "logps" and "seq_len" not in o  # max_seq_len null: the data's prompts, noted
    assert any("longest prompt + 512 generated tokens" in n for n in cfg.notes)
    named = {k.key for k in cfg.unmodelled}
    assert named == {"loss", "max_generated_tokens"}  # the whole sequence's logits, the preallocated cache
    assert not any(k.use == "unknown" for k in cfg.keys)
    # qwen3B_sync_grpo.yaml: the prompt truncated to max_seq_len 1024, then 512 generated
    sync = _read(tmp_path, GRPO | {"tokenizer": GRPO["tokenizer"] | {"max_seq_len": 1024},
                                   "reward_functions": [{"_component_": "torchtune.dev.rl.rewards.X"}]}, gpus=8)
    assert sync.options["seq_len"] == 1536


def test_grpo_generation_in_smaller_batches_is_named_an_upper_bound(tmp_path):
    cfg = _read(tmp_path, GRPO | {"batch_size": 4, "forward_batch_size": 2}, gpus=8)
    assert cfg.options["rollouts"] == cfg.options["batch"] == 64
    assert "forward_batch_size" in {k.key for k in cfg.unmodelled}


def test_the_grpo_generation_phase_holds_every_rollouts_cache(cli, tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(GRPO | {"tokenizer": GRPO["tokenizer"] | {"max_seq_len": 1024}}))
    out = cli("memory", "llama-3.2-1b", "--config", str(path), "--gpus", "8", "--json")
    assert out.code == 1, out.err  # named keys: not verified
    d = json.loads(out.out)
    gen = next(p for p in d["phases"] if p["name"] == "generation")
    cache = next(i["bytes"] for i in gen["items"] if i["name"] == "KV cache")
    # Llama 3.2 1B: 16 layers x 8 KV heads x 64 x (K and V) x 2 B = 32,768 B a token; 16 rollouts x 1,536 tokens
    assert cache == 16 * 1536 * 32_768


def test_the_ppo_recipe_reads_its_policy_and_names_its_other_models(tmp_path):
    cfg = _read(tmp_path, PPO)
    o = cfg.options
    assert o["method"] == "full" and o["reference"] == "copy"  # ref_policy_checkpointer: a frozen policy
    assert (o["batch"], o["rollouts"], o["completion_tokens"], o["seq_len"]) == (16, 16, 58, 512 + 58)
    assert o["optimizer_in_backward"] is True and o["grad_checkpointing"] is True
    # the policy's own builder shape is named too (the model counted is the command line's), its dropout 0 off
    shape = {f"policy_model.{k}" for k in SHAPE if k not in ("attn_dropout", "norm_eps")}
    assert {k.key for k in cfg.unmodelled} == {"reward_and_value_model", "loss", "max_generated_tokens"} | shape
    keys = {k.key: k.use for k in cfg.keys}
    assert keys["policy_model.attn_dropout"] == "off" and keys["policy_model._component_"] == "modelled"
    assert "unknown" not in keys.values()


def test_ppo_backward_batches_come_from_ppo_batch_size_over_the_accumulation(tmp_path):
    cfg = _read(tmp_path, PPO | {"batch_size": 64, "ppo_batch_size": 32, "gradient_accumulation_steps": 4,
                                 "forward_batch_size": 8, "optimizer_in_bwd": False})
    assert cfg.options["batch"] == 8 and cfg.options["rollouts"] == 8
    smaller = _read(tmp_path, PPO | {"batch_size": 64, "ppo_batch_size": 64, "forward_batch_size": 8,
                                     "optimizer_in_bwd": False})
    # a backward of 64 sequences after generating 8 at a time: counted as 64 at once, named
    assert smaller.options["rollouts"] == 64 and "forward_batch_size" in {k.key for k in smaller.unmodelled}


def test_an_sft_recipe_is_unchanged(tmp_path):
    sft = {"model": {"_component_": "torchtune.models.llama3_2.llama3_2_1b"}, "batch_size": 4,
           "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": 1024},
           "enable_activation_checkpointing": True, "dtype": "bf16"}
    o = _read(tmp_path, sft).options
    assert (o["batch"], o["seq_len"]) == (4, 1024) and "rollouts" not in o and "reference" not in o


def test_grpo_without_forward_batch_size_is_refused_as_torchtune_refuses_it(cli, tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in GRPO.items() if k != "forward_batch_size"}))
    out = cli("memory", "llama-3.2-1b", "--config", str(path), "--gpus", "8")
    assert out.code == 2 and "forward_batch_size" in out.err and len(out.err.strip().splitlines()) == 1
