"""axolotl's FSDP and activation-offloading settings read as the workload: the published FSDP examples (verbatim in
tests/memory/recipes, SOURCES.md there) were estimated as one full replica per card (DDP), which said "does not fit"
for a 70B QLoRA run axolotl ships for two 24 GB cards. Facts from axolotl at 067b021c: fsdp_config turns FSDP on
(core/builders/base.py), its keys are read with or without the fsdp_ prefix (utils/schemas/validation.py
check_fsdp_config_kwargs_prefix), `gradient_checkpointing: offload` is checkpointing with activation_offloading
(check_gradient_checkpointing_w_offload), and with an adapter that offloading replaces the recompute
(loaders/model.py)."""
from __future__ import annotations

from pathlib import Path

import yaml

from campaign.memory import estimate_memory, make_workload
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec

RECIPES = Path(__file__).parent / "recipes"
QLORA_70B = RECIPES / "axolotl_llama3_qlora_fsdp_70b.yaml"
FFT_8B = RECIPES / "axolotl_llama3_fft_8b_liger_fsdp.yaml"


def _write(tmp_path, doc, name="a.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_published_70b_qlora_fsdp_example_is_sharded_and_offloaded(cli, tmp_path):
    """examples/llama-3/qlora-fsdp-70b.yaml: fsdp [full_shard, auto_wrap] with fsdp_offload_params. The run on 2 x
    RTX 4090 fits only sharded and offloaded, as axolotl ships it; read as DDP it needed 51 GiB a card."""
    cfg = workload_from_configs([QLORA_70B], gpus=2, model_type="llama")
    assert cfg.options == {"logits_held": False, "method": "qlora", "lora_rank": 8, "lora_targets": ("all-linear",),
                           "seq_len": 512, "batch": 1, "grad_checkpointing": True, "optimizer": "adamw",
                           "optimizer_impl": "fused", "grad_accumulation": 4, "attention": "sdpa", "shard": "fsdp",
                           "offload_params": "cpu", "kbit_upcast": False, "lora_dropout": 0.05}
    uses = {k.key: k.use for k in cfg.keys}
    assert uses["fsdp"] == uses["fsdp_config.fsdp_offload_params"] == uses["fsdp_config.fsdp_sharding_strategy"] == \
        "modelled"
    assert uses["gradient_checkpointing_kwargs"] == "modelled"  # use_reentrant: what is kept stays the same
    assert not cfg.unmodelled
    common = ("memory", "llama-3.1-70b", "--gpus", "2", "--card", "rtx-4090", "--json", "--no-solve")
    read = cli(*common, "--config", str(QLORA_70B)).json()
    assert read["workload"]["shard"] == "fsdp" and read["workload"]["offload_params"] == "cpu"
    assert read["required_bytes"] < 24e9
    # the same file without its FSDP keys: a whole QLoRA base on each card, 70.55e9 parameters in nf4 at over
    # 0.5 B each, more than the card holds
    doc = yaml.safe_load(QLORA_70B.read_text())
    del doc["fsdp"], doc["fsdp_config"]
    whole = cli(*common, "--config", str(_write(tmp_path, doc))).json()
    assert whole["workload"]["shard"] == "none" and whole["required_bytes"] > 70.55e9 * 0.5 > 24 * 2**30


def test_the_published_8b_full_fsdp_example(tmp_path):
    cfg = workload_from_configs([FFT_8B], gpus=8, model_type="llama")
    o = cfg.options
    assert (o["shard"], o["offload_params"], o["loss"], o["batch"], o["seq_len"]) == ("fsdp", "cpu", "fused", 2, 4096)
    # fsdp_backward_prefetch BACKWARD_PRE gathers the next unit early: named, the only key left
    assert [k.key for k in cfg.unmodelled] == ["fsdp_config.fsdp_backward_prefetch"]


def test_fsdp_config_alone_in_axolotls_current_form(tmp_path):
    """fsdp_version 2 with un-prefixed keys and no fsdp list (axolotl's docs/multi-gpu.qmd): FSDP2, offloaded,
    resharding off, FSDP's activation checkpointing; each key moves the workload it names."""
    doc = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "fsdp_version": 2,
           "fsdp_config": {"offload_params": True, "reshard_after_forward": False, "activation_checkpointing": True,
                           "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "FULL_STATE_DICT"}}
    cfg = workload_from_configs([_write(tmp_path, doc)], gpus=4)
    o = cfg.options
    assert (o["shard"], o["offload_params"], o["reshard_after_forward"], o["grad_checkpointing"]) == \
        ("fsdp", "cpu", False, True)
    assert not cfg.unmodelled
    # each key off: no offload, resharding (the default), no checkpointing; no fsdp_config at all: no FSDP
    off = dict(doc, fsdp_config={"offload_params": False, "reshard_after_forward": True})
    o = workload_from_configs([_write(tmp_path, off)], gpus=4).options
    assert o["shard"] == "fsdp" and "offload_params" not in o and o["reshard_after_forward"] is True
    assert "grad_checkpointing" not in o
    plain = {k: v for k, v in doc.items() if k != "fsdp_config"}
    assert "shard" not in workload_from_configs([_write(tmp_path, plain)], gpus=4).options  # version alone: none


def test_fsdp1_and_other_strategies_are_named(tmp_path):
    base = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256}
    one = workload_from_configs([_write(tmp_path, base | {"fsdp_version": 1, "fsdp_config": {
        "fsdp_offload_params": True}})], gpus=4)
    # FSDP1 (written, or axolotl's default): counted as FSDP2, which shards and gathers the same bytes, and said so
    assert not one.unmodelled and any("fsdp_version: FSDP1, counted as FSDP2" in n for n in one.notes)
    default = workload_from_configs([_write(tmp_path, base | {"fsdp_config": {"offload_params": True}})], gpus=4)
    assert any("FSDP1 (the default without fsdp_version)" in n for n in default.notes)
    grad_op = workload_from_configs([_write(tmp_path, base | {"fsdp": ["shard_grad_op", "auto_wrap"]})], gpus=4)
    assert grad_op.options["shard"] == "zero2" and any("SHARD_GRAD_OP" in n for n in grad_op.notes)
    hybrid = workload_from_configs([_write(tmp_path, base | {"fsdp_config": {
        "fsdp_sharding_strategy": "HYBRID_SHARD"}})], gpus=4)
    assert hybrid.options["shard"] == "fsdp"
    assert {k.key for k in hybrid.unmodelled} == {"fsdp_config.fsdp_sharding_strategy"}


def test_checkpointing_offload_is_activation_offloading(tmp_path):
    """gradient_checkpointing: offload is checkpointing with each layer's input on the CPU for a full fine-tune
    (modelled: the estimate's --activation-offloading); with an adapter axolotl offloads every saved tensor instead
    of recomputing (named, counted as the full fine-tune's path); activation_offloading: hidden_states keeps the
    checkpointing for any method (modelled)."""
    base = {"base_model": "gpt2", "micro_batch_size": 2, "sequence_len": 512}
    full = workload_from_configs([_write(tmp_path, base | {"gradient_checkpointing": "offload"})])
    assert full.options["grad_checkpointing"] is True and full.options["activation_offloading"] is True
    assert not full.unmodelled
    lora = workload_from_configs([_write(tmp_path, base | {"adapter": "lora", "gradient_checkpointing": "offload"})])
    assert lora.options["activation_offloading"] is True
    assert {k.key for k in lora.unmodelled} == {"gradient_checkpointing"}
    hidden = workload_from_configs([_write(tmp_path, base | {"adapter": "lora", "gradient_checkpointing": True,
                                                             "activation_offloading": "hidden_states"})])
    assert hidden.options["activation_offloading"] is True and not hidden.unmodelled
    # the saving, by hand: gpt2's 12 checkpointed layers each keep their bf16 input, 2 x 512 x 768 x 2 B, which
    # offloading moves to the CPU but for the layer being recomputed
    spec = load_spec("gpt2")
    kept = estimate_memory(spec, make_workload(**(full.options | {"activation_offloading": False})))
    moved = estimate_memory(spec, make_workload(**full.options))
    inputs = 2 * 512 * 768 * 2

    def act(est):
        return sum(i.bytes for p in est.phases if p.name == "forward" for i in p.items if "activation" in i.name)

    assert act(kept) - act(moved) in (11 * inputs, 12 * inputs)


def test_accelerates_fsdp_version_is_read_by_the_same_reader(tmp_path):
    """The reader is accelerate's too: TRL's accelerate_configs/fsdp2.yaml (fsdp_version 2) is the FSDP the estimate
    models; version 1 is counted as it, with a note."""
    acc = {"distributed_type": "FSDP", "num_processes": 8, "mixed_precision": "bf16",
           "fsdp_config": {"fsdp_version": 2, "fsdp_offload_params": False, "fsdp_reshard_after_forward": True,
                           "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
    two = workload_from_configs([_write(tmp_path, acc, "fsdp2.yaml")])
    assert two.options["shard"] == "fsdp" and not two.unmodelled
    one = workload_from_configs([_write(tmp_path, acc | {"fsdp_config": {"fsdp_version": 1}}, "fsdp1.yaml")])
    assert not one.unmodelled and any("FSDP1, counted as FSDP2" in n for n in one.notes)
    assert not any("FSDP1" in n for n in two.notes)


def test_lora_target_modules_beside_lora_target_linear_is_their_union(tmp_path):
    """axolotl targets the union of both (loaders/adapter.py): linear layers' names add nothing to all-linear (every
    Linear but lm_head), read; the head among them is named (counted without it, low)."""
    base = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "adapter": "lora",
            "lora_target_linear": True}
    same = workload_from_configs([_write(tmp_path, base | {"lora_target_modules": ["q_proj", "v_proj"]})])
    assert same.options["lora_targets"] == ("all-linear",) and not same.unmodelled
    head = workload_from_configs([_write(tmp_path, base | {"lora_target_modules": ["lm_head"]})])
    assert {k.key for k in head.unmodelled} == {"lora_target_modules"}


def test_fsdps_checkpointing_beside_the_trainers_off(tmp_path):
    """axolotl's archived dbrx example: gradient_checkpointing false with fsdp_config activation_checkpointing true
    (the HF Trainer refuses both on): FSDP checkpoints every layer. It was a conflict, exit 2."""
    doc = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "gradient_checkpointing": False,
           "fsdp_config": {"fsdp_activation_checkpointing": True, "fsdp_version": 2}}
    cfg = workload_from_configs([_write(tmp_path, doc)], gpus=2)
    assert cfg.options["grad_checkpointing"] is True and any("FSDP checkpoints every layer" in n for n in cfg.notes)
