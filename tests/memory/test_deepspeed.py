"""DeepSpeed ZeRO's own buffers, each against a hand count from the model's shapes and DeepSpeed's defaults
(deepspeed/runtime/zero/config.py: reduce_bucket_size 5e8, sub_group_size 1e9, stage3_prefetch_bucket_size 5e7,
stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9, stage3_param_persistence_threshold 1e5), and the
ds_config read for them (`campaign memory MODEL --deepspeed ds_config.json`)."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec

# Llama 3.1 8B: 32 blocks, hidden 4096, 8 KV heads x 128, MLP 14336, vocabulary 128256, untied head
P8B = 8_030_261_248
H8B = 128_256 * 4096                                       # lm_head
B8B = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096  # one block's matrices (its two norms stay whole)


def _phase(est, name):
    return {i.name: i.bytes for i in next(p for p in est.phases if p.name == name).items}


def _zero(stage, model="llama-3.1-8b", gpus=8, **kw):
    w = make_workload(gpus=gpus, shard=stage, mixed_precision=True, batch=1, seq_len=512, grad_checkpointing=True,
                      **kw)
    return estimate_memory(load_spec(model), w)


def test_the_stage_1_2_reduce_bucket_is_allocated_whole_for_each_backward():
    est = _zero("zero2")
    backward, forward, step = _phase(est, "backward"), _phase(est, "forward"), _phase(est, "optimizer step")
    assert backward["ZeRO reduce bucket"] == 500_000_000 * 2  # 5e8 elements x 2 B (bf16) = 0.93 GiB
    assert "ZeRO reduce bucket" not in forward and "ZeRO reduce bucket" not in step  # released after backward
    assert "ZeRO all-gather bucket" not in backward  # the all-gather narrows the flat partitions: no buffer
    # overlap_comm keeps a second buffer (stage_1_and_2.py setup_buckets)
    assert _phase(_zero("zero2", zero_overlap_comm=True), "backward")["ZeRO reduce bucket"] == 2 * 500_000_000 * 2
    assert "ZeRO reduce bucket" not in _phase(_zero("zero2", zero_contiguous_gradients=False), "backward")
    # a small model on one card still gets the whole bucket: torch.empty(int(reduce_bucket_size))
    small = _zero("zero1", model="gpt2", gpus=1)
    assert _phase(small, "backward")["ZeRO reduce bucket"] == 500_000_000 * 2


def test_the_fp32_gradient_copy_of_the_optimizer_step():
    part = -(-P8B // 8)
    z2 = _phase(_zero("zero2"), "optimizer step")
    assert z2["ZeRO fp32 gradient copy"] == 4 * part
    assert z2["ZeRO flattened gradient partition"] == 2 * part and z2["gradients"] == 2 * part
    # stage 3 copies one sub-group at a time: min(sub_group_size 1e9, the partition) x 4 B
    assert _phase(_zero("zero3"), "optimizer step")["ZeRO fp32 gradient copy"] == 4 * 1_000_000_000
    sub = _phase(_zero("zero3", zero_sub_group_size="1e8"), "optimizer step")
    assert sub["ZeRO fp32 gradient copy"] == 4 * 100_000_000
    # without fp32 master weights the copy is the 16-bit gradient itself (.to() of the same dtype): none
    pure = estimate_memory("llama-3.1-8b", make_workload(gpus=8, shard="zero2", batch=1, seq_len=512))
    assert "ZeRO fp32 gradient copy" not in _phase(pure, "optimizer step")


def test_stage_3_holds_its_bucket_and_gradient_partition_from_init():
    forward = _phase(_zero("zero3"), "forward")
    assert forward["ZeRO reduce bucket"] == 500_000_000 * 2
    assert forward["gradients (ZeRO-3 flat partition)"] == 2 * -(-P8B // 8)
    # the HF Trainer's "auto": reduce_bucket_size = hidden_size^2
    auto = _phase(_zero("zero3", zero_reduce_bucket="auto"), "forward")
    assert auto["ZeRO reduce bucket"] == 4096 * 4096 * 2


def test_stage_3_gathered_parameters_by_reuse_distance():
    # at the turn from forward to backward the head is used again at once; block L-m after 2 m blocks + 2 heads:
    # 2 x 525,336,576 > 1e9, so no block stays gathered; the prefetch takes 5e7 more
    turn = _phase(_zero("zero3"), "forward")
    assert turn["all-gathered parameters"] == H8B * 2
    assert turn["ZeRO-3 prefetch bucket"] == 50_000_000 * 2
    # a reuse distance of 4e9: blocks with 2 m B + 2 H < 4e9, m = 0..6, stay gathered
    assert max(m for m in range(32) if 2 * m * B8B + 2 * H8B < 4_000_000_000) == 6
    far = _phase(_zero("zero3", zero_reuse_distance="4e9"), "forward")
    assert far["all-gathered parameters"] == (H8B + 7 * B8B) * 2
    # a model smaller than half the reuse distance stays gathered whole (Qwen2.5-0.5B: tied embedding, 24 blocks)
    qwen = _phase(_zero("zero3", model="qwen2.5-0.5b", gpus=2), "forward")
    block = 2 * 896 * 896 + 2 * 128 * 896 + 3 * 4864 * 896
    assert qwen["all-gathered parameters"] == (151_936 * 896 + 24 * block) * 2
    # persistent parameters: Llama's 65 norms of 4096 (at most 1e5 elements each) whole on every card
    assert turn["ZeRO-3 persistent parameters"] == 65 * 4096 * 2 - -(-65 * 4096 * 2 // 8)


def test_ddp_and_fsdp_get_none_of_deepspeeds_buffers():
    for shard in ("none", "fsdp"):
        est = _zero(shard)
        names = {i.name for p in est.phases for i in p.items}
        assert not any(n.startswith(("ZeRO", "gradients (ZeRO")) for n in names), shard


def test_a_ds_config_gives_the_buffer_sizes(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({
        "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": 2e8,
                              "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": 1e4,
                              "stage3_max_live_parameters": "1e9", "allgather_partitions": True,
                              "stage3_gather_16bit_weights_on_model_save": True}}))
    cfg = workload_from_configs([ds])
    assert cfg.options["zero_reduce_bucket"] == 200_000_000 and cfg.options["zero_prefetch_bucket"] == "auto"
    assert cfg.options["zero_persistence_threshold"] == 10_000 and cfg.options["zero_max_live_params"] == 10**9
    assert (cfg.options["optimizer"], cfg.options["optimizer_impl"]) == ("adamw", "fused")  # DeepSpeed's FusedAdam
    assert dict((k, where) for k, _, where in cfg.sources)["zero_reduce_bucket"] == \
        "ds_config.json: zero_optimization.reduce_bucket_size"


@pytest.mark.parametrize("zero, said", [
    ({"stage": 3, "reduce_bucket_sise": 5e8}, "zero_optimization.reduce_bucket_sise: not a DeepSpeed"),
    ({"stage": 2, "reduce_bucket_size": -1}, "zero_optimization.reduce_bucket_size: -1 is not a whole number"),
    ({"stage": 2, "overlap_comm": "yes"}, "is not true or false"),
])
def test_a_zero_key_deepspeed_itself_refuses_is_refused(tmp_path, zero, said):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"zero_optimization": zero}))
    with pytest.raises(InputError, match=said):
        workload_from_configs([ds])


@pytest.mark.parametrize("zero, key, said", [
    ({"stage": 3, "zero_quantized_weights": True}, "zero_optimization.zero_quantized_weights", "quantized weight"),
    ({"stage": 3, "zero_hpz_partition_size": 8}, "zero_optimization.zero_hpz_partition_size", "a secondary"),
])
def test_a_zero_key_the_estimate_does_not_model_is_named(tmp_path, zero, key, said):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"zero_optimization": zero}))
    cfg = workload_from_configs([ds])
    named = {k.key: k.why for k in cfg.unmodelled}
    assert named[key].startswith(said) and "not modelled: counted without it" in named[key]
    assert cfg.options["shard"] == "zero3"  # the rest of the file still read


def test_auto_where_transformers_fills_none_is_refused():
    with pytest.raises(InputError, match="zero-sub-group-size 'auto'"):
        make_workload(shard="zero3", gpus=2, zero_sub_group_size="auto")


def test_memory_deepspeed_prints_each_buffer(cli, tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "overlap_comm": True}}))
    r = cli("memory", "llama-3.1-8b", "--deepspeed", str(ds), "--gpus", "8", "--seq-len", "512", "--no-solve",
            "--json")
    assert r.code in (0, 1), r.err
    est = r.json()
    assert est["workload"]["shard"] == "zero2" and est["workload"]["zero_overlap_comm"] is True
    backward = next(p for p in est["phases"] if p["name"] == "backward")
    bucket = next(i for i in backward["items"] if i["name"] == "ZeRO reduce bucket")
    assert bucket["bytes"] == 2 * 500_000_000 * 2 and "stage_1_and_2.py" in bucket["source"]
    flags = cli("memory", "llama-3.1-8b", "--shard", "zero2", "--mixed-precision", "--zero-overlap-comm", "--gpus",
                "8", "--seq-len", "512", "--no-solve", "--json")
    assert flags.json()["required_bytes"] == est["required_bytes"]
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 2}))
    wrong = cli("memory", "llama-3.1-8b", "--deepspeed", str(args))
    assert wrong.code == 2 and "not a DeepSpeed config" in wrong.err and len(wrong.err.strip().splitlines()) == 1


def test_a_model_built_without_zero_init_is_whole_on_each_card_at_setup():
    spec = load_spec("llama-3.1-8b")
    buffers = sum(b for _, b in spec.buffers)
    built = _zero("zero3", zero_init=False)
    setup = _phase(built, "setup")
    assert setup["weights, whole before partitioning"] == P8B * 2  # cast to bf16, then moved whole
    assert sum(setup.values()) == P8B * 2 + buffers
    assert [p.name for p in built.phases] == ["load", "setup", "forward", "backward", "optimizer step"]
    # the HF Trainer's default: from_pretrained under zero.Init (ZeRO-3 config alive), partitioned as it is made
    assert "setup" not in [p.name for p in _zero("zero3").phases]
    assert "setup" not in [p.name for p in _zero("zero2", zero_init=False).phases]  # stages 1-2: whole anyway
    # at one token the setup is the floor: the whole model is above the partitioned step
    tiny = estimate_memory(spec, make_workload(gpus=64, shard="zero3", mixed_precision=True, batch=1, seq_len=1,
                                               zero_init=False))
    assert tiny.peak_phase == "setup"
    # a quantized base skips zero.Init (transformers: is_deepspeed_zero3_enabled() and not _is_quantized)
    qlora = estimate_memory(spec, make_workload(gpus=8, shard="zero3", method="qlora", batch=1, seq_len=512))
    assert "setup" in [p.name for p in qlora.phases]


def test_the_hf_documented_zero3_config_is_read_and_unknown_top_level_keys_refused(tmp_path):
    # transformers' DeepSpeed guide's ZeRO-3 example, offload set to none
    hf = {"fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                   "hysteresis": 2, "min_loss_scale": 1},
          "bf16": {"enabled": "auto"},
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                    "weight_decay": "auto"}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                       "warmup_num_steps": "auto"}},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none"},
                                "offload_param": {"device": "none"}, "overlap_comm": True,
                                "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                                "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                                "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                                "stage3_gather_16bit_weights_on_model_save": True},
          "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
          "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
          "amp": {"enabled": False}}
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps(hf))
    options = workload_from_configs([ds]).options
    assert options["shard"] == "zero3" and options["zero_reduce_bucket"] == "auto"
    for extra, said in [({"tensor_parallel": {"autotp_size": 2}}, "tensor parallelism"),
                        ({"sequence_parallel_size": 4}, "sequence parallelism"),
                        ({"communication_data_type": "fp32"}, "gradients reduced in fp32")]:
        ds.write_text(json.dumps(hf | extra))
        cfg = workload_from_configs([ds])  # read whole; the setting named as not modelled
        named = {k.key: k.why for k in cfg.unmodelled}
        assert named[next(iter(extra))].startswith(said) and cfg.options["shard"] == "zero3"


def test_fsdp_shard_grad_op_read_as_zero2_says_deepspeeds_buffers_are_counted(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"output_dir": "out", "fsdp": "shard_grad_op auto_wrap"}))
    cfg = workload_from_configs([args])
    assert cfg.options["shard"] == "zero2" and any("an upper bound for FSDP" in n for n in cfg.notes)
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"output_dir": "out", "fsdp": "full_shard auto_wrap"}))
    assert not any("upper bound" in n for n in workload_from_configs([full]).notes)


def test_a_deepspeed_key_campaign_does_not_know_is_named_not_refused(tmp_path):
    """A top-level key DeepSpeed ignores (a misspelt or newer one, read by DeepSpeed with dict.get): named as unknown
    (the estimate then not verified), the rest of the user's file read as before. Inside zero_optimization DeepSpeed
    forbids other keys, and so does campaign (test above)."""
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"trian_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
                              "zero_optimization": {"stage": 3, "overlap_comm": True}}))
    cfg = workload_from_configs([ds])
    assert cfg.options["shard"] == "zero3" and cfg.options["batch"] == 4 and cfg.options["zero_overlap_comm"] is True
    uses = {k.key: k.use for k in cfg.keys}
    assert uses == {"trian_batch_size": "unknown", "train_micro_batch_size_per_gpu": "modelled",
                    "steps_per_print": "no memory", "zero_optimization.stage": "modelled",
                    "zero_optimization.overlap_comm": "modelled"}
    assert [k.key for k in cfg.unmodelled] == ["trian_batch_size"]



def test_a_model_loaded_in_fp32_is_cast_to_16_bits_by_deepspeed():
    """deepspeed.initialize casts a model loaded in fp32 (TRL's ModelConfig default, a TrainingArguments file's
    torch_dtype float32) to its 16-bit dtype, the fp32 master being ZeRO's own: the weights are 2 B a parameter
    either way (Llama 3.2 1B: 1,235,814,400 parameters)."""
    def weights(dtype):
        est = estimate_memory(load_spec("llama-3.2-1b"), make_workload(dtype=dtype, mixed_precision=True,
                                                                        shard="zero2", gpus=2, batch=1, seq_len=128))
        return next(i.bytes for p in est.phases if p.name == "load" for i in p.items if i.name == "weights")

    assert weights("fp32") == weights("bf16") == 2 * 1_235_814_400
