"""The allocator replay from the process's start (issue 32): the adapters in the run's dtype, the setup of a ZeRO-3
model built whole, and DeepSpeed's buffers allocated where DeepSpeed makes them; each against a hand count from
shapes and the allocator's rules (2 MiB rounding above 10 MiB, 20 MiB segments below, best fit, split when the
rest is over 1 MiB)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from campaign.memory import make_workload, reserved
from campaign.memory.breakdown import Item, Phase
from campaign.memory.phases import training_phases
from campaign.memory.replay import Replay
from campaign.memory.workload import KeptBySpec
from campaign.models import load_spec
from campaign.models.spec import ParamGroup

MiB = 2**20
P1B = 1_235_814_400  # Llama-3.2-1B: 16 blocks, hidden 2048, 8 KV heads x 64, MLP 8192, tied vocabulary 128256


class Recording(Replay):
    """A replay that also writes down what it is asked, in order: ('alloc', bytes) and ('free', the bytes its
    handle was asked with); shared by every Recording (the replay makes its own)."""

    events: list = []
    asked: dict = {}

    def alloc(self, size):
        handle = super().alloc(size)
        if handle is not None:
            Recording.asked[id(handle)] = int(size)
            Recording.events.append(("alloc", int(size)))
        return handle

    def alloc_each(self, sizes):
        return [self.alloc(size) for size in sizes]

    def free(self, *handles):
        for handle in handles:
            if handle is not None:
                Recording.events.append(("free", Recording.asked.get(id(handle))))
        super().free(*handles)


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(reserved, "Replay", Recording)
    monkeypatch.setattr(reserved, "_PREFIXES", KeptBySpec(16))
    Recording.events, Recording.asked = [], {}
    return Recording.events


def _replay(spec, w):
    reserved.training_overhead(spec, w, training_phases(spec, w), limit=None)


def _allocs(events):
    return [size for op, size in events if op == "alloc"]


def _contains(seq, part):
    return any(seq[i:i + len(part)] == part for i in range(len(seq) - len(part) + 1))


@pytest.mark.parametrize("autocast, a", [(False, 2), (True, 4)])
def test_the_adapters_are_replayed_once_in_the_runs_dtype_and_their_shapes(recording, autocast, a):
    # bf16 LoRA, rank 8 on q_proj (2048 -> 2048) and v_proj (2048 -> 512), 16 blocks: per block A_q 8 x 2048,
    # B_q 2048 x 8, A_v 8 x 2048, B_v 512 x 8; bf16 without peft's autocast (--no-peft-autocast), fp32 with it
    spec = load_spec("llama-3.2-1b")
    w = make_workload(method="lora", lora_rank=8, lora_targets=("q_proj", "v_proj"), batch=1, seq_len=64,
                      peft_autocast=autocast)
    layers, rest = reserved._trainable_layers(spec, w)
    reserved._prefix(Recording(False), spec, w, training_phases(spec, w), [n for layer in layers for n in layer] + rest)
    adapters = [8 * 2048 * a, 2048 * 8 * a, 8 * 2048 * a, 512 * 8 * a] * 16
    sizes = _allocs(recording)
    assert _contains(sizes, adapters)
    # the prefix holds the 16-bit weights (2 B x params, tensor by tensor) and the adapters, each once
    assert sum(sizes) == 2 * P1B + sum(adapters)


def _two_tensor_setup():
    """Two 4096 x 4096 bf16 tensors (32 MiB whole each) over 4 cards (8 MiB partitions), built whole first."""
    spec = replace(load_spec("llama-3.2-1b"), groups=(ParamGroup("w", "linear", (4096, 4096), 2),), buffers=())
    load = Phase("load", (Item("weights", 2 * 8 * MiB, "", "weights"),))
    setup = Phase("setup", (Item("weights, whole before partitioning", 2 * 32 * MiB, "", "weights"),))
    w = make_workload(gpus=4, shard="zero3", mixed_precision=True, zero_init=False)
    return spec, w, (load, setup)


def test_the_setup_leaves_the_whole_models_blocks_cached_and_in_the_reserved_peak():
    from campaign.memory.replay import replay_load

    spec, w, phases = _two_tensor_setup()
    r = Replay(False)
    parts = replay_load(r, spec, w, phases)
    # by hand: the two whole tensors take a 32 MiB segment each (64); the first 8 MiB partition finds no free block
    # and takes a 20 MiB segment (8 MiB is below 10 MiB: kLargeBuffer), and whole tensor 1 is freed; the second
    # partition takes the best fit, the 12 MiB rest of that segment (not the free 32 MiB), and whole tensor 2 is
    # freed. The two 32 MiB segments stay cached: reserved 84 MiB for 16 MiB allocated
    assert len(parts) == 2
    assert (r.a.allocated, r.a.reserved) == (16 * MiB, 84 * MiB)
    assert (r.a.peak_allocated, r.a.peak_reserved) == (72 * MiB, 84 * MiB)
    # the step's first 40 MiB tensor fits no cached block: a segment more, nothing given back without a limit
    r.alloc(40 * MiB)
    assert (r.a.reserved, r.a.peak_reserved, r.a.released) == (124 * MiB, 124 * MiB, 0)


def test_a_card_limit_releases_the_setups_cached_segments():
    from campaign.memory.replay import replay_load

    spec, w, phases = _two_tensor_setup()
    r = Replay(False, limit=100 * MiB)
    replay_load(r, spec, w, phases)
    # 84 + 40 > 100: release_cached_blocks gives back the two wholly free 32 MiB segments first (the 20 MiB one
    # holds both partitions), then the 40 MiB segment is made: 20 + 40
    r.alloc(40 * MiB)
    assert (r.a.reserved, r.a.released, r.a.peak_reserved) == (60 * MiB, 64 * MiB, 84 * MiB)


def test_the_process_replay_covers_a_zero3_model_built_whole():
    # Llama-3.1-8B (8,030,261,248 parameters), LoRA under ZeRO-3 on 8 cards without zero.Init: every card holds the
    # whole bf16 model (2 B x params) at setup, and the partitions of the frozen base stay in its blocks: the
    # replay's peak reserved is at least the whole model; with zero.Init no card ever holds it whole
    spec = load_spec("llama-3.1-8b")
    kw = dict(method="lora", gpus=8, shard="zero3", mixed_precision=True, batch=1, seq_len=64)
    for zero_init, whole in ((False, True), (True, False)):
        w = make_workload(**kw, zero_init=zero_init)
        found = reserved.training_overhead(spec, w, training_phases(spec, w), limit=None)
        assert (found.peak_reserved >= 2 * 8_030_261_248) is whole


def test_the_gathered_parameters_follow_the_coordinator_by_hand():
    from campaign.memory.zero_replay import Coordinator, ZeroPlan

    # an embedding of 4 MiB, two blocks of two 2 MiB tensors, a head of 8 MiB; a prefetch of 3 MiB; the head and
    # block 1 used again within the reuse distance at the turn
    plan = ZeroPlan(3, 2, (1,), (), True, (), {"embed": [4 * MiB], 0: [2 * MiB] * 2, 1: [2 * MiB] * 2,
                                                  "head": [8 * MiB]}, frozenset({"head", 1}), 3 * MiB)
    r = Replay(False)
    co = Coordinator(r, plan, 2)
    seen = []
    for unit in ("embed", 0, 1, "head", "head", 1, 0, "embed"):
        co.fetch(unit)
        seen.append(r.a.allocated // MiB)
        co.release(unit)
        seen.append(r.a.allocated // MiB)
    # embed gathered (4) + block 0 prefetched whole (the bucket is passed at its second tensor: 4), embed released;
    # block 0 runs, block 1 prefetched (4), block 0 released; block 1 runs, the head prefetched (8), block 1 kept;
    # the head runs, block 0 prefetched for backward (4): the turn holds head 8 + block 1 4 + block 0 4 = 16;
    # backward: the head released after its backward, block 1 released, block 0 runs with the embedding
    # prefetched, then released, the embedding last
    assert seen == [8, 4, 8, 4, 12, 12, 16, 16, 16, 8, 8, 4, 8, 4, 4, 0]


def test_zero2_reduce_bucket_lives_through_backward_and_the_step_casts_a_flat_copy(recording):
    # Llama-3.2-1B, ZeRO-2 on 2 cards, bf16 with fp32 master: partition 617,907,200 elements
    spec = load_spec("llama-3.2-1b")
    part = P1B // 2
    _replay(spec, make_workload(gpus=2, shard="zero2", mixed_precision=True, batch=1, seq_len=64))
    events = recording
    bucket = 500_000_000 * 2  # reduce_bucket_size 5e8 x 2 B, one buffer (no overlap_comm)
    # init: the 16-bit parameters flattened (2 B x params), the fp32 master partition (4 B x part)
    assert _contains(_allocs(events), [2 * P1B, 4 * part])
    # each step: the bucket at the first gradient, freed at the end of backward, before the step's flat 16-bit
    # copy of the gradients (2 B x part), its fp32 cast (4 B x part), the flat copy freed, the fp32 one after
    steps = [i for i, e in enumerate(events) if e == ("alloc", bucket)]
    assert len(steps) == 2
    for start in steps:
        after = events[start:]
        freed = after.index(("free", bucket))
        flat = after.index(("alloc", 2 * part))
        assert freed < flat
        assert after[flat:flat + 3] == [("alloc", 2 * part), ("alloc", 4 * part), ("free", 2 * part)]
        assert ("free", 4 * part) in after[flat + 3:]


def test_zero3_init_allocates_in_deepspeeds_order(recording):
    # Llama-3.2-1B full fine-tuning under ZeRO-3 on 2 cards: after the partitions (P / 2 x 2 B) are defragmented
    # into one buffer, the fp32 partition (one sub-group: 617,907,200 <= sub_group_size 1e9), the gradient buffer of
    # initialize_optimizer_states (4 B x sub-group, dropped), the reduce bucket (5e8 x 2 B), the gradient partition
    # (2 B x part); then the 33 norms (2,048 <= the persistence threshold 1e5) whole beyond their half share
    spec = load_spec("llama-3.2-1b")
    part = P1B // 2
    _replay(spec, make_workload(gpus=2, shard="zero3", mixed_precision=True, batch=1, seq_len=64))
    init = [("alloc", 2 * part), ("alloc", 4 * part), ("alloc", 4 * part), ("free", 4 * part),
            ("alloc", 1_000_000_000), ("alloc", 2 * part)] + [("alloc", 2048)] * 33
    assert _contains(recording, init)
    # forward gathers each block's matrices whole in bf16: q_proj 2048 x 2048 x 2 B, k_proj 512 x 2048 x 2 B ...
    block = [2048 * 2048 * 2, 512 * 2048 * 2, 512 * 2048 * 2, 2048 * 2048 * 2] + [8192 * 2048 * 2] * 3
    assert _contains(_allocs(recording), block)


def test_empty_cache_gives_back_the_wholly_free_segments_without_counting_a_release():
    # DeepSpeed calls empty_cache() itself (stage 1-2 before flattening, stage 3's defragment): the 32 MiB segment
    # wholly free goes back, the 20 MiB one holding a live 8 MiB block stays; `released` counts only what a card's
    # limit forced back (the estimate says so in its formula)
    r = Replay(False)
    whole, part = r.alloc(32 * MiB), r.alloc(8 * MiB)
    r.free(whole)
    r.a.empty_cache()
    assert (r.a.reserved, r.a.allocated, r.a.released) == (20 * MiB, 8 * MiB, 0)
    r.free(part)
