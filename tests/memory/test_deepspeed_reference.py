"""The ds_config of a published run read into its workload: `recipe_deepspeed.deepspeed_options` (a config held in
memory, read as `campaign memory --deepspeed FILE` reads a file) and benchmarks/memory_reference.py's entries that carry
one. Each figure is a hand count from the config's values, the model's shapes and DeepSpeed's defaults."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from campaign.errors import CampaignError, InputError
from campaign.memory import estimate_memory
from campaign.memory.recipe_deepspeed import deepspeed_options
from campaign.memory.training_config import workload_from_configs

ROOT = Path(__file__).resolve().parents[2]

# modelscope/ms-swift @ 7b709960f swift/llm/ds_config/zero3.json, as the ms-swift entry quotes it
SWIFT_ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "none", "pin_memory": True},
        "offload_param": {"device": "none", "pin_memory": True}, "overlap_comm": False, "contiguous_gradients": True,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto", "zero_quantized_weights": False,
        "zero_quantized_gradients": False, "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}


def _reference():
    spec = importlib.util.spec_from_file_location("memory_reference", ROOT / "benchmarks" / "memory_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(entry_id):
    data = json.loads((ROOT / "benchmarks" / "memory_reference_data.json").read_text(encoding="utf-8"))
    return next(e for e in data["entries"] if e["id"] == entry_id)


def test_a_ds_config_in_memory_reads_as_the_same_file_does(tmp_path):
    path = tmp_path / "zero3.json"
    path.write_text(json.dumps(SWIFT_ZERO3), encoding="utf-8")
    options = deepspeed_options(SWIFT_ZERO3, "zero3.json")
    assert options == workload_from_configs([path]).options
    # the file's own values: stage 3, overlap_comm false, sub_group_size 1e9 elements, the three sizes the HF Trainer
    # fills from the hidden size left 'auto', the other two as given; bf16/fp16 'auto' set nothing
    assert options == {"shard": "zero3", "zero_overlap_comm": False, "zero_contiguous_gradients": True,
                       "zero_sub_group_size": 1_000_000_000, "zero_reduce_bucket": "auto",
                       "zero_prefetch_bucket": "auto", "zero_persistence_threshold": "auto",
                       "zero_max_live_params": 1_000_000_000, "zero_reuse_distance": 1_000_000_000}


def test_a_reference_ds_config_with_a_setting_not_modelled_is_not_compared():
    offload = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}
    with pytest.raises(InputError, match="run-x: zero_optimization.offload_optimizer: offload to nvme"):
        deepspeed_options(offload, "run-x")


def test_a_reference_entry_takes_its_zero_settings_from_its_ds_config():
    ref = _reference()
    entry = _entry("colossalai-pl-benchmark-gpt2-12b-zero3-8xa100-40g-bs1-seq1024")
    w = ref.workload_for(entry)
    # Lightning's DeepSpeedStrategy defaults, as the entry's ds_config holds them
    assert (w.shard, w.zero_sub_group_size, w.zero_reduce_bucket, w.zero_overlap_comm) == \
        ("zero3", 10**12, 200_000_000, True)
    assert (w.batch, w.optimizer_impl) == (1, "fused")  # the batch the run fed, not the config's logging value 1
    est = estimate_memory(ref.spec_for(entry["model"]), w)
    step = {i.name: i.bytes for i in next(p for p in est.phases if p.name == "optimizer step").items}
    # GPT-2 with n_embd 4096, n_layer 60, vocabulary 50257, 1024 positions, tied head: V h + P h + L (12 h^2 + 13 h)
    # (c_attn, c_proj, c_fc, c_proj weights and biases, two LayerNorms) + 2 h (ln_f)
    h = 4096
    params = 50257 * h + 1024 * h + 60 * (12 * h * h + 13 * h) + 2 * h
    assert params == 12_292_845_568
    part = -(-params // 8)  # 1,536,605,696 elements per card
    # sub_group_size 1e12 holds the whole partition: one fp32 copy of it, not one of 1e9 elements (the default)
    assert step["ZeRO fp32 gradient copy"] == 4 * part
    assert step["ZeRO reduce bucket"] == 200_000_000 * 2  # reduce_bucket_size 2e8 x 2 B (fp16)


def test_a_ds_config_that_contradicts_its_entry_is_an_error():
    ref = _reference()
    entry = json.loads(json.dumps(_entry("colossalai-pl-benchmark-gpt2-12b-zero3-8xa100-40g-bs1-seq1024")))
    entry["workload"]["shard"] = "zero2"
    with pytest.raises(CampaignError, match="ds_config sets shard 'zero3', the workload states 'zero2'"):
        ref.workload_for(entry)


def test_a_zero2_entry_takes_deepspeed_defaults_for_what_its_ds_config_leaves_out():
    ref = _reference()
    entry = _entry("deepspeed-chat-opt-1.3b-sft-zero2-16xv100-bs8-seq512")
    w = ref.workload_for(entry)
    # DeepSpeed-Chat's get_train_ds_config(stage=2) names no bucket sizes and no overlap_comm: DeepSpeed 0.9.0's
    # DeepSpeedZeroConfig defaults hold (reduce_bucket_size 5e8, overlap_comm False below stage 3)
    assert (w.shard, w.gpus, w.batch, w.seq_len, w.optimizer_impl) == ("zero2", 16, 8, 512, "fused")
    assert (w.zero_reduce_bucket, w.zero_overlap_comm) == (None, None)
    est = estimate_memory(ref.spec_for(entry["model"]), w)
    step = {i.name: i.bytes for i in next(p for p in est.phases if p.name == "optimizer step").items}
    backward = {i.name: i.bytes for i in next(p for p in est.phases if p.name == "backward").items}
    # OPT-1.3b (config.json): V h + (2048 + 2) h learned positions + L (12 h^2 + 13 h) (q, k, v, out_proj, fc1, fc2
    # weights and biases, two LayerNorms) + 2 h (final LayerNorm); the head is tied to the embedding
    h, L, V = 2048, 24, 50272
    params = V * h + 2050 * h + L * (12 * h * h + 13 * h) + 2 * h
    assert params == 1_315_758_080
    part = params // 16  # 82,234,880 elements per card, a multiple of DeepSpeed's alignment (2 x 16): no padding
    assert part * 16 == params
    assert step["weights"] == 2 * params  # stage 2 keeps every fp16 parameter on each card
    assert step["fp32 master weights"] == 4 * part
    assert step["optimizer states"] == 8 * part  # Adam's exp_avg and exp_avg_sq, fp32, of the partition
    assert step["ZeRO fp32 gradient copy"] == 4 * part
    assert backward["ZeRO reduce bucket"] == 500_000_000 * 2  # the default reduce_bucket_size x 2 B (fp16)
