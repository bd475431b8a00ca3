"""`campaign memory MODEL --config FILE`: the user's own training config as the workload, each value said with its
file and key, an option on the command line winning, a key the estimate cannot honour named as not modelled."""
from __future__ import annotations

import json

from .test_fuzz import named


def test_config_files_give_the_workload_and_the_command_line_wins(cli, tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 4, "gradient_checkpointing": True,
                                "optim": "paged_adamw_8bit", "max_length": 1024}))
    adapter = tmp_path / "adapter_config.json"
    adapter.write_text(json.dumps({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "v_proj"]}))
    r = cli("memory", "llama-3.1-8b", "--config", str(args), "--config", str(adapter), "--batch", "2", "--json")
    assert r.code == 0, r.err
    by_hand = cli("memory", "llama-3.1-8b", "--batch", "2", "--seq-len", "1024", "--grad-checkpointing",
                  "--optimizer", "adamw-8bit", "--method", "lora", "--lora-rank", "16", "--lora-targets",
                  "q_proj,v_proj", "--no-logits-held", "--json")
    assert r.json()["required_bytes"] == by_hand.json()["required_bytes"]
    shown = cli("memory", "llama-3.1-8b", "--config", str(args), "--config", str(adapter), "--batch", "2")
    assert "batch = 2 (the command line; args.json: per_device_train_batch_size says 4)" in shown.err
    assert "lora_rank = 16 (adapter_config.json: r)" in shown.err


def test_a_key_the_estimate_cannot_honour_is_named_and_the_file_read(cli, tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}))
    r = cli("memory", "llama-3.1-8b", "--config", str(ds), "--gpus", "8")
    named(r, "zero_optimization.offload_param", "offload to nvme", "counted on the card")
    assert "shard = zero3 (ds_config.json: zero_optimization.stage)" in " ".join(r.err.split())


def test_a_trainer_or_torchtune_config_frees_the_logits_before_backward(cli, tmp_path):
    """The HF Trainer (compute_loss returns the loss only) and torchtune's recipes (`del logits` before backward) do
    not hold the logits through backward: a config of either drops them from the backward peak, by the same bytes
    --no-logits-held drops; --logits-held on the command line wins."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 2, "max_length": 1024}))
    tune = tmp_path / "recipe.yaml"
    tune.write_text("model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_size: 2\n"
                    "tokenizer:\n  max_seq_len: 1024\n")
    base = ("memory", "llama-3.2-1b", "--batch", "2", "--seq-len", "1024", "--json")
    held_run, freed_run = cli(*base).json(), cli(*base, "--no-logits-held").json()
    held, freed = held_run["required_bytes"], freed_run["required_bytes"]
    # bf16 logits of 2 x 1024 tokens over Llama-3.2's 128,256-entry vocabulary: 2 B each, freed before backward
    assert held_run["peak_phase"] == freed_run["peak_phase"] == "backward"
    assert held_run["peak_allocated_bytes"] - freed_run["peak_allocated_bytes"] == 2 * 1024 * 128_256 * 2
    for config in (args, tune):
        r = cli("memory", "llama-3.2-1b", "--config", str(config), "--json")
        assert r.code == 0, r.err
        assert r.json()["required_bytes"] == freed, config.name
    kept = cli("memory", "llama-3.2-1b", "--config", str(args), "--logits-held", "--json")
    assert kept.json()["required_bytes"] == held


def test_a_bitsandbytes_checkpoint_is_estimated_with_its_own_double_quant(cli, write_config):
    # a 4-bit bitsandbytes checkpoint's quantization_config says whether its absmax scales are quantized too
    # (BitsAndBytesConfig's bnb_4bit_use_double_quant, False by default). Tiny Llama, per layer: q and o 64 x 64,
    # k and v 32 x 64, gate and up 160 x 64, down 64 x 160, in blocks of 64 elements: 64, 64, 32, 32, 160, 160, 160
    # blocks. Without double quant each block keeps an fp32 absmax (4 B); with it a uint8 per block and one fp32
    # scale per 256 blocks of each Linear (one each here: 7 x 4 B)
    from tests.conftest import tiny_llama

    def weights(quant: dict, *extra: str) -> int:
        model = write_config({**tiny_llama(), "quantization_config": quant}, name=f"m{len(seen)}")
        seen.append(model)
        res = cli("memory", str(model), "--infer", "--context", "64", "--json", *extra)
        assert res.code == 0, res.err
        return sum(i["bytes"] for i in json.loads(res.out)["items"] if i["name"] == "quantization scales/zeros")

    seen: list = []
    bnb = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False, "bnb_4bit_quant_type": "nf4"}
    blocks = 2 * 64 + 2 * 32 + 3 * 160
    assert weights(bnb) == 2 * 4 * blocks                                            # transformers' default: off
    assert weights({**bnb, "bnb_4bit_use_double_quant": True}) == 2 * (blocks + 4 * 7)
    assert weights(bnb, "--double-quant") == 2 * (blocks + 4 * 7)                   # the flag overrides the file
