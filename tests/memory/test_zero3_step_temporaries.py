"""ZeRO-3's optimizer step runs one sub-group at a time: the optimizer's temporaries are one sub-group's.

DeepSpeed's stage3.py step() loops over the sub-groups; _optimizer_step(sub_group_id) sets
`optimizer.param_groups[group]['params'] = [fp32_partitioned_groups_flat[sub_group_id]]`, calls optimizer.step() and
sets it back to []. Foreach AdamW (torch.optim.adamw _multi_tensor_adamw) makes one state-sized temporary,
sqrt(exp_avg_sq), of the tensor it steps: one sub-group's flat fp32 partition, freed before the next sub-group's step.

The figures below are worked by hand from Qwen2.5-7B's config.json (hidden 3584, intermediate 18944, 28 layers,
28 heads / 4 KV heads of 128, vocabulary 152064, untied head, q/k/v biases) and ms-swift's zero3.json
(sub_group_size 1e9; reduce_bucket_size, stage3_prefetch_bucket_size and stage3_param_persistence_threshold 'auto',
which the HF Trainer fills with h*h, 0.9*h*h and 10*h).
"""
from __future__ import annotations

from campaign.memory import estimate_memory, make_workload, reserved
from campaign.models import load_spec

H, INTER, L, V, KV = 3584, 18944, 28, 152064, 512  # KV: 4 KV heads x 128
BLOCK_BIG = H * H + H * KV * 2 + H * H + 3 * H * INTER  # q, k, v, o weights and the MLP's three: partitioned
BLOCK_SMALL = H + KV + KV + 2 * H  # q/k/v biases and two RMSNorm weights: <= 10*h = 35,840 elements, persistent
P = L * (BLOCK_BIG + BLOCK_SMALL) + 2 * V * H + H  # + embedding, lm_head, final norm
SUB_GROUP = 1_000_000_000


def _workload(gpus: int):
    return make_workload(mode="train", method="full", dtype="bf16", mixed_precision=True, optimizer="adamw",
                         batch=1, seq_len=8192, grad_checkpointing=True, loss="fused", gpus=gpus, shard="zero3",
                         zero_sub_group_size=SUB_GROUP, zero_overlap_comm=False, zero_reduce_bucket="auto",
                         zero_prefetch_bucket="auto", zero_persistence_threshold="auto",
                         zero_max_live_params=SUB_GROUP, zero_reuse_distance=SUB_GROUP)


def _step(est):
    return next(p for p in est.phases if p.name == "optimizer step")


def _item(phase, name):
    return next(i.bytes for i in phase.items if i.name == name)


def test_the_temporaries_are_the_largest_sub_groups_not_the_whole_partition():
    assert P == 7_615_616_512  # Qwen2.5-7B's published parameter count
    spec = load_spec("Qwen/Qwen2.5-7B")
    est = estimate_memory(spec, _workload(4))
    # 4 cards: a partition of 1,903,904,128 elements, sub-groups of 1e9 and 903,904,128; sqrt(exp_avg_sq) of the
    # larger in fp32: 4e9 B (the whole partition's would be 7,615,616,512 B)
    step = _step(est)
    assert _item(step, "optimizer temporaries") == 4 * SUB_GROUP
    # the step as the optimizer runs on the first sub-group: bf16 weights, fp32 master, the bf16 gradient partition,
    # Adam's two fp32 states (all per card), the reduce bucket (h*h bf16), the persistent parameters beyond the card's
    # share, the sub-group's fp32 gradient copy and its temporary
    persistent = L * BLOCK_SMALL + H
    expected = (2 * P // 4 + 4 * P // 4 + 2 * P // 4 + 8 * P // 4 + 2 * H * H
                + (2 * persistent - 2 * persistent // 4) + 4 * SUB_GROUP + 4 * SUB_GROUP)
    assert expected == 38_488_656_128
    assert step.bytes == expected
    assert est.peak_allocated_bytes == expected  # the step is this run's peak (the fused loss keeps no logits)


def test_one_sub_group_when_the_partition_is_smaller_than_sub_group_size():
    spec = load_spec("Qwen/Qwen2.5-7B")
    est = estimate_memory(spec, _workload(8))
    # 8 cards: a partition of 951,952,064 elements < 1e9: one sub-group, the whole partition's temporary
    assert _item(_step(est), "optimizer temporaries") == 4 * (P // 8) == 3_807_808_256


def test_the_replay_makes_the_step_the_estimate_counts():
    # the allocator replay steps each sub-group with its own temporary: its own peak allocated is the estimate's
    # (to a few blocks of rounding), so the reserved figure adds no tensor the replay did not make
    spec = load_spec("Qwen/Qwen2.5-7B")
    w = _workload(4)
    est = estimate_memory(spec, w)
    replay = reserved.training_overhead(spec, w, est.phases)
    assert abs(replay.peak_allocated - est.peak_allocated_bytes) < 16 * 2**20


def test_sub_group_size_0_steps_one_parameter_at_a_time():
    """axolotl's zero3 configs give sub_group_size 0, which DeepSpeed accepts (ge=0): _create_fp16_sub_groups closes
    a sub-group after every parameter, so the largest is the largest parameter's partition: the embedding (or the
    head), V x H = 152064 x 3584, over the cards."""
    from dataclasses import replace

    spec = load_spec("qwen2.5-7b")
    for gpus in (4, 8):
        w = replace(_workload(gpus), zero_sub_group_size=0)
        step = {i.name: i.bytes for p in estimate_memory(spec, w).phases if p.name == "optimizer step"
                for i in p.items}
        assert step["ZeRO fp32 gradient copy"] == 4 * -(-V * H // gpus)
