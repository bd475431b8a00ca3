"""FSDP2's gathered parameters at the turn from forward to backward (issue #53, torchtune's 70B LoRA recipe).

torchtune's shard_model (training/_distributed.py at 30b8519e) calls fully_shard(layer, reshard_after_forward=True) on
each `layers.i`, then on the root; FSDP2 exempts the root alone from resharding after forward. So during the loss and
at the start of backward the card holds the root unit (embeddings, head, final norm) and one block (the last one,
prefetched by the root's pre-backward hook), not the two blocks (current + prefetched) of a layer's forward or
backward. Bytes worked by hand from the shapes."""
from __future__ import annotations

from pathlib import Path

from campaign.memory import make_workload
from campaign.memory.phases import step_items, training_phases
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

RECIPES = Path(__file__).parent / "recipes"

# tiny_llama: hidden 64, intermediate 160, 4 heads of 16, 2 KV heads, 2 layers, vocab 1000, untied head
BLOCK = (64 * 64 + 2 * 32 * 64 + 64 * 64) + 3 * 64 * 160 + 2 * 64  # q, k, v, o + gate, up, down + 2 norms = 43,136
ROOT = 2 * 1000 * 64 + 64  # tok_embeddings, output, final norm = 128,064

# Llama 3.1 70B: hidden 8192, 64 heads, 8 KV heads of 128, intermediate 28672, 80 layers, vocab 128,256, untied
BLOCK_70B = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 8192 * 28672 + 2 * 8192  # = 855,654,400
ROOT_70B = 2 * 128256 * 8192 + 8192  # = 2,101,354,496


def _gathered(phase) -> list[int]:
    return [i.bytes for i in phase.items if i.name == "all-gathered parameters"]


def _setup(**kw):
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    return spec, make_workload(dtype="bf16", batch=1, seq_len=16, grad_checkpointing=True, **kw)


def _phases(**kw):
    return training_phases(*_setup(**kw))


def test_at_the_loss_fsdp_holds_the_root_and_one_block():
    load, forward, backward, step = _phases(method="lora", gpus=4, shard="fsdp")
    assert _gathered(forward) == [(ROOT + BLOCK) * 2]  # bf16
    # a tiny model's backward peaks at its start (the logits' gradients): the turn too
    assert backward.moment.startswith("start of backward")
    assert _gathered(backward) == [(ROOT + BLOCK) * 2]
    # the last layer's recompute and the end of backward: current + prefetched block
    gathered = [i.bytes for i in step_items(*_setup(method="lora", gpus=4, shard="fsdp")).fwd_only
                if i.name == "all-gathered parameters"]
    assert gathered == [(ROOT + 2 * BLOCK) * 2]
    assert _gathered(load) == _gathered(step) == []


def test_one_card_or_zero3_has_no_fsdp_gathered_term():
    """No false alarm: without FSDP over several cards nothing is gathered; ZeRO-3 keeps its own terms."""
    for phase in _phases(method="lora", gpus=1):
        assert _gathered(phase) == []
    z3 = {p.name: p for p in _phases(method="full", gpus=4, shard="zero3")}
    assert all(i.source != "FSDP2 fully_shard: blocks reshard after forward, the root does not"
               for p in z3.values() for i in p.items)


def test_the_70b_lora_recipe_at_the_readme_commit(cli):
    """torchtune 70B_lora.yaml at 30b8519e (the README's 27.6 GiB row): LoRA rank 16 on q, k, v, bf16, batch 2, AC,
    CEWithChunkedOutputLoss, FSDP over 8 cards. The loss holds the root + one block (the peak), the last layer's
    recompute two blocks; the base weights are sharded over the 8 cards in bf16."""
    recipe = RECIPES / "torchtune_llama3_1_70B_lora_30b8519e.yaml"
    d = cli("memory", "llama-3.1-70b", "--config", str(recipe), "--gpus", "8", "--seq-len", "2048", "--json",
            "--no-solve").json()
    assert d["trainable_params"] == 80 * 16 * ((8192 + 8192) + 2 * (8192 + 1024))  # q, k, v: 44,564,480
    phases = {p["name"]: p for p in d["phases"]}
    fwd = {i["name"]: i["bytes"] for i in phases["forward"]["items"]}
    bwd = {i["name"]: i["bytes"] for i in phases["backward"]["items"]}
    assert fwd["all-gathered parameters"] == (ROOT_70B + BLOCK_70B) * 2  # 5,914,017,792 B
    assert bwd["all-gathered parameters"] == (ROOT_70B + 2 * BLOCK_70B) * 2  # 7,625,326,592 B
    assert fwd["weights"] == 70_553_706_496 * 2 // 8
    # torchtune builds the adapters in bf16: the recomputed layer's lora_a keeps the attention norm's output once, 2 x
    # (8192 + 3 x 16) B a token, where fp32 adapters keep an fp32 copy per projection, 4 x 3 x (8192 + 16) B: 82,016 B
    # a token less, over 2 x 2048 tokens, and the loss (root + one block) is the peak
    fp32 = cli("memory", "llama-3.1-70b", "--config", str(recipe), "--gpus", "8", "--seq-len", "2048", "--json",
               "--no-solve", "--peft-autocast").json()
    fp32_bwd = {i["name"]: i["bytes"] for p in fp32["phases"] if p["name"] == "backward" for i in p["items"]}
    assert fp32_bwd["backward temporaries"] - bwd["backward temporaries"] == 4096 * 82_016
    assert d["peak_phase"] == "forward"


def test_without_resharding_after_forward_the_whole_model_stays_gathered(tmp_path):
    """reshard_after_forward=False (torchtune's fsdp_reshard_after_forward: False): each unit keeps its gathered
    parameters from its forward to its backward: the whole model, 2 x (root + 2 blocks), at the loss and the last
    layer's recompute; by the end of backward each block is resharded again, the root and the prefetched block left."""
    whole = (ROOT + 2 * BLOCK) * 2  # tiny_llama has 2 layers
    kept = step_items(*_setup(gpus=4, shard="fsdp", reshard_after_forward=False))
    assert [i.bytes for i in kept.fwd_only if i.name == "all-gathered parameters"] == [whole]
    assert [i.bytes for i in kept.fwd_turn if i.name == "all-gathered parameters"] == [whole]
    assert [i.bytes for i in kept.fwd_end if i.name == "all-gathered parameters"] == [(ROOT + 2 * BLOCK) * 2]
    load, forward, backward, step = _phases(gpus=4, shard="fsdp", reshard_after_forward=False)
    assert _gathered(forward) == [whole] and _gathered(step) == []
    resharded = _phases(gpus=4, shard="fsdp")
    assert forward.bytes - resharded[1].bytes == whole - (ROOT + BLOCK) * 2
    # read from torchtune's key; without FSDP the key changes nothing
    import yaml

    from campaign.memory.training_config import workload_from_configs

    recipe = yaml.safe_load((RECIPES / "torchtune_llama3_1_70B_lora_30b8519e.yaml").read_text())
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe | {"fsdp_reshard_after_forward": False}))
    cfg = workload_from_configs([path], gpus=8)
    assert cfg.options["reshard_after_forward"] is False
    assert {k.key: k.use for k in cfg.keys}["fsdp_reshard_after_forward"] == "modelled"
    one = workload_from_configs([path])
    assert "reshard_after_forward" not in one.options and not any(
        k.key == "fsdp_reshard_after_forward" and k.unmodelled for k in one.keys)


def test_the_traced_fsdp_step_keeps_the_blocks_gathered_as_counted(cli, tmp_path):
    """The real FSDP2 step traced over 4 fake ranks, with reshard_after_forward=False: at the start of backward the
    3 blocks other than the prefetched last one are still gathered, 3 x 725,504 params x 2 B more, as the estimate
    counts them (4 layers; hidden 256, 4 heads of 64, 2 KV heads, intermediate 688)."""
    import json

    pytest = __import__("pytest")
    pytest.importorskip("transformers")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(tiny_llama(
        hidden_size=256, intermediate_size=688, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
        vocab_size=8000, max_position_embeddings=1024)))
    block = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256

    def peak(command, *flags):
        args = [command, str(model), "--shard", "fsdp", "--gpus", "4", "--batch", "2", "--seq-len", "128", "--json"]
        r = cli(*args, *flags, *(("--no-solve",) if command == "memory" else ()))
        assert r.code == 0, r.err
        return r.json()["peak_allocated_bytes"]

    for command in ("trace", "memory"):
        assert peak(command, "--no-reshard-after-forward") - peak(command) == 3 * block * 2


def test_without_resharding_the_output_unit_is_not_gathered_twice():
    """--fsdp-embedding-units with --no-reshard-after-forward: the output projection is still gathered from its
    forward (inside the whole model counted), so the start of backward adds its unsharded gradient only."""
    kept = step_items(*_setup(gpus=4, shard="fsdp", fsdp_embedding_units=True, reshard_after_forward=False))
    items = {i.name: i.bytes for i in kept.head_unit}
    assert items == {"gradient of the output projection (unsharded)": 1000 * 64 * 2}  # bf16, full fine-tuning
    resharded = step_items(*_setup(gpus=4, shard="fsdp", fsdp_embedding_units=True))
    assert {i.name: i.bytes for i in resharded.head_unit} == items | {
        "output projection gathered for its backward": 1000 * 64 * 2}


def test_torchtunes_fsdp_accumulation_keeps_sharded_gradients(tmp_path):
    """The HF Trainer accumulates under no_sync, FSDP then keeping each gradient whole (bf16, Llama 3.2 1B:
    2 x 1,235,814,400 B); torchtune's distributed recipes call no no_sync, so FSDP reduce-scatters every micro-batch
    and the sum stays sharded: a quarter of it on 4 cards (--sync-each-batch, read from the recipe)."""
    import yaml

    from campaign.memory import estimate_memory, make_workload
    from campaign.memory.training_config import workload_from_configs

    def kept(sync):
        est = estimate_memory("llama-3.2-1b", make_workload(shard="fsdp", gpus=4, grad_accumulation=4,
                                                            sync_each_batch=sync, batch=1, seq_len=128))
        return [i.bytes for p in est.phases if p.name == "forward" for i in p.items if i.category == "gradients"]

    assert kept(False) == [2 * 1_235_814_400] and kept(True) == [2 * 1_235_814_400 // 4]
    recipe = tmp_path / "tt.yaml"
    recipe.write_text(yaml.safe_dump({"model": {"_component_": "torchtune.models.llama3_2.llama3_2_1b"},
                                      "tokenizer": {"_component_": "t", "max_seq_len": 128}, "batch_size": 1,
                                      "gradient_accumulation_steps": 4, "dtype": "bf16"}))
    assert workload_from_configs([recipe], gpus=4).options["sync_each_batch"] is True
    assert "sync_each_batch" not in workload_from_configs([recipe], gpus=1).options


def test_the_trace_reduce_scatters_every_micro_batch_too(write_config):
    """--sync-each-batch in the trace (FSDP2 over fake ranks, set_requires_gradient_sync on every micro-batch): the
    forward of the second micro-batch holds the sharded sum, not the whole gradients, by what the formula counts."""
    import pytest

    from campaign.memory import estimate_memory, make_workload
    from campaign.memory.trace import trace_memory
    from campaign.models.architectures import spec_from_config
    from tests.conftest import tiny_llama

    path = write_config(tiny_llama(), "tiny")
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")

    def forward(how, sync):
        w = make_workload(batch=2, seq_len=32, gpus=4, shard="fsdp", grad_accumulation=2, sync_each_batch=sync)
        est = trace_memory(str(path), w) if how == "trace" else estimate_memory(spec, w)
        return next(p.bytes for p in est.phases if p.name == "forward")

    traced = forward("trace", False) - forward("trace", True)
    counted = forward("formula", False) - forward("formula", True)
    assert traced > 0 and counted == pytest.approx(traced, rel=0.01)
