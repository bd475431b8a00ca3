"""A training step recorded once (memory/tape.py) and run for another batch leaves the allocator model exactly where
the step's own replay at that batch leaves it: every block, pool and peak (state()), with room to spare and under a
limit that makes it release cached segments, on the compiled model and the Python one."""
from __future__ import annotations

import pytest

from campaign.memory import make_workload, reserved
from campaign.memory.activations import layer_saved, saved_at
from campaign.memory.allocator import CachingAllocator, PythonAllocator
from campaign.memory.phases import training_phases
from campaign.memory.replay import Replay
from campaign.memory.tape import Tape, TapeReplay, Tokens, whole
from campaign.models import load_spec

from .test_kept import TRAINING

WORKLOADS = [*TRAINING, {"gpus": 2, "shard": "fsdp", "mixed_precision": True, "seq_len": 256}]  # test_kept's, FSDP


def _after_prefix(spec, w, phases, parts, limit, model):
    if model is PythonAllocator:  # the prefix replayed afresh on the Python model
        r = Replay(w.expandable_segments, limit, model=PythonAllocator)
        reserved._prefix(r, spec, w, phases, parts.plan.trainable)
        return r
    return reserved._after_prefix(spec, w, phases, parts.plan.trainable, w.expandable_segments, limit, parts.prefix)


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.2-1B", "google-bert/bert-base-uncased"])
@pytest.mark.parametrize("kw", WORKLOADS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_a_recorded_step_leaves_the_allocator_where_its_replay_does(model, kw):
    spec, w = load_spec(model), make_workload(**kw)  # recorded at batch 1, run at others
    phases = training_phases(spec, w)
    parts = reserved._step_parts(spec, w, phases, layer_saved(spec, w), w.expandable_segments)
    recorded = reserved._recorded(spec, w, parts)
    acts = saved_at(spec, w)
    released = []
    for batch in (1, 3, 17):
        tokens = batch * w.seq_len
        assert recorded.serves(tokens)
        final = reserved._final_bytes(spec, w, parts, tokens, acts(tokens)[0])
        free = _after_prefix(spec, w, phases, parts, None, CachingAllocator)
        reserved._replay_step(free, spec, w, parts, tokens, final)
        # a limit the step passes with room to spare: it releases cached segments (where it caches any)
        limit = max(free.a.peak_reserved - 64 * 2 ** 20, (free.a.peak_reserved + free.a.peak_allocated) // 2)
        for model_type in (CachingAllocator, PythonAllocator):
            for cap in (None, limit):
                direct = _after_prefix(spec, w, phases, parts, cap, model_type)
                reserved._replay_step(direct, spec, w, parts, tokens, final)
                taped = _after_prefix(spec, w, phases, parts, cap, model_type)
                taped.a.run_tape(recorded.ops, recorded.factors, tokens, final)
                assert taped.a.state() == direct.a.state()
                assert (taped.a.peak_reserved, taped.a.peak_allocated, taped.a.released) == (
                    direct.a.peak_reserved, direct.a.peak_allocated, direct.a.released)
                released.append(direct.a.released)
    assert max(released) > 0 or kw.get("expandable_segments")  # the limit made the step release segments


def test_a_size_under_one_byte_at_the_recording_limits_the_batches_it_serves():
    # 0.3 B a token: under 1 B up to 3 tokens, at least 1 B from 4 (4 x 0.3 = 1.2): decided at 2 tokens, the tape
    # serves 0 to 3 tokens, where the tensor is not made
    r = TapeReplay()
    tokens = Tokens(2, tape=r.a)
    made = [whole(t) for t in [tokens * 0.3] if t >= 1]
    assert made == [] and r.a.compiled().serves(3) and not r.a.compiled().serves(4)
    r = TapeReplay()  # decided at 10 tokens (3 B): it serves 4 tokens and more, where the tensor is made
    tokens = Tokens(10, tape=r.a)
    made = [whole(t) for t in [tokens * 0.3] if t >= 1]
    assert len(made) == 1 and r.a.compiled().serves(4) and not r.a.compiled().serves(3)


@pytest.mark.parametrize("tokens", [1, 3, 10, 7, 1000003])
def test_a_recorded_size_is_truncated_as_int_truncates_it(tokens):
    # (tokens x 3) x 0.1 as Python works it out (a double product, truncated): 3 tokens give 0.9000000000000001 B,
    # none taken; 10 give 3.0000000000000004, 3 B (rounded up to a 512 B block)
    r = TapeReplay()
    t = Tokens(tokens, tape=r.a)
    r.alloc(t * 3 * 0.1)
    recorded = r.a.compiled()
    expected = int(tokens * 3 * 0.1)
    for model_type in (CachingAllocator, PythonAllocator):
        a = model_type()
        a.run_tape(recorded.ops, recorded.factors, tokens, 0)
        block = 0 if expected < 1 else max(512, -(-expected // 512) * 512)
        assert a.allocated == block


def test_run_tape_refuses_a_give_before_its_take():
    tape = Tape()
    tape.give(0)
    recorded = tape.compiled()
    with pytest.raises(ValueError, match="give"):
        CachingAllocator().run_tape(recorded.ops, recorded.factors, 1, 0)
    with pytest.raises(ValueError, match="give"):
        PythonAllocator().run_tape(recorded.ops, recorded.factors, 1, 0)


@pytest.mark.parametrize("model_type", [CachingAllocator, PythonAllocator])
@pytest.mark.parametrize("ops", [(4, 0, 512), (-1, 0, 512), (0, 7, 512), (0, 0, -5)])
def test_run_tape_refuses_an_operation_no_tape_writes(model_type, ops):
    from array import array

    with pytest.raises(ValueError, match="unknown|negative"):
        model_type().run_tape(array("q", ops).tobytes(), array("d", [0.0]).tobytes(), 1, 0)


def test_an_int_valued_float_serves_the_token_counts_where_its_product_is_exact():
    # (tokens x 3) x 3.0 recorded as tokens x 9: the same as the replay's float product below 2^53 B only
    r = TapeReplay()
    r.alloc(Tokens(1, tape=r.a) * 3 * 3.0)
    recorded = r.a.compiled()
    assert recorded.serves(2 ** 53 // 9 - 1) and not recorded.serves(2 ** 53 // 9 + 1)


@pytest.mark.parametrize("model_type", [CachingAllocator, PythonAllocator])
@pytest.mark.parametrize("kw", [{"seq_len": 256},
                                {"seq_len": 1024, "grad_checkpointing": True, "mixed_precision": True},
                                {"method": "qlora", "seq_len": 512, "grad_checkpointing": True}], ids=str)
def test_overheads_each_are_each_batchs_own_replay(model_type, kw):
    # a card solve's batches in one call: each batch's recorded step run on a copy of the prefix, under no limit
    # and under one that makes the step release cached segments, is each batch's replay from the prefix afresh
    spec, w = load_spec("meta-llama/Llama-3.2-1B"), make_workload(**kw)
    phases = training_phases(spec, w)
    parts = reserved._step_parts(spec, w, phases, layer_saved(spec, w), False)
    recorded, acts = reserved._recorded(spec, w, parts), saved_at(spec, w)

    def prefix(limit):
        r = Replay(False, limit, model=model_type)
        reserved._prefix(r, spec, w, phases, parts.plan.trainable)
        return r

    kept = prefix(None)
    before = kept.a.state()
    tokens = [b * w.seq_len for b in (1, 2, 5, 17)]
    finals = [reserved._final_bytes(spec, w, parts, t, acts(t)[0]) for t in tokens]
    five = prefix(None)  # batch 5's step: a limit halfway from its peak allocated to its peak reserved releases
    reserved._replay_step(five, spec, w, parts, tokens[2], finals[2])
    released = 0
    for limit in (None, (five.a.peak_reserved + five.a.peak_allocated) // 2):
        expected = []
        for t, final in zip(tokens, finals, strict=True):
            r = prefix(limit)
            reserved._replay_step(r, spec, w, parts, t, final)
            expected.append(max(0, r.a.peak_reserved - r.a.peak_allocated))
            released += r.a.released
        assert kept.a.overheads_each(recorded.ops, recorded.factors, tokens, finals, limit) == expected
        # with a bound per batch: up to the first past its bound (a solve's check fails there), that one included
        within = [e + 1 for e in expected[:2]] + [expected[2] - 1, 0]
        assert kept.a.overheads_each(recorded.ops, recorded.factors, tokens, finals, limit, within) == expected[:3]
    assert kept.a.state() == before  # the prefix is left as it was
    assert released > 0  # the limit made the step release cached segments
    assert len(set(expected)) > 1  # the batches differ


def test_overheads_each_reads_exact_ints_only_before_it_runs():
    # an int subclass could run Python code (its __index__) between two runs, changing the state past the room made
    # for them: the compiled model reads every argument first, exact ints only
    from campaign.memory.allocator import Core

    if Core is None:
        pytest.skip("the compiled allocator model is not built")

    class Sneaky(int):
        def __index__(self):
            raise AssertionError("read during the runs")

    a = CachingAllocator()
    a.take(600)
    ops, factors = Tape().compiled().ops, Tape().compiled().factors  # an empty recording
    # nothing run past the prefix: its own overhead, a 2 MiB small segment less 600 B rounded up to 1,024
    assert a.overheads_each(ops, factors, [1, 2], [0, 0], None) == [2 * 2**20 - 1024] * 2
    with pytest.raises(TypeError, match="ints only"):
        a.overheads_each(ops, factors, [1, Sneaky(2)], [0, 0], None)
    with pytest.raises(ValueError, match="as many finals"):
        a.overheads_each(ops, factors, [1, 2], [0], None)
