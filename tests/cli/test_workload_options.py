"""The memory commands' workload options, generated from the Workload fields' metadata: every field is an option
of the groups its command takes, with the field's flag and help; each reaches the Workload."""
from __future__ import annotations

import dataclasses

import pytest

from campaign.cli import workload as options
from campaign.memory.workload import Workload

FIELDS = [f for f in dataclasses.fields(Workload) if f.name != "notes"]


def _params(command: str) -> dict[str, object]:
    import typer

    from campaign.cli import app

    group = typer.main.get_command(app)
    return {p.name: p for p in group.commands[command].params}


def _flags(groups: tuple[str, ...]) -> set[str]:
    names = set()
    for f in FIELDS:
        if f.metadata["group"] in groups:
            names.add(f.metadata.get("param", f.name))
            names.update(alias for alias, _, _ in f.metadata.get("aliases", ()))
    return names


def test_every_field_says_its_option():
    for f in FIELDS:
        assert {"flag", "help", "group"} <= set(f.metadata), f.name
        assert f.metadata["group"] in options.GROUPS and f.metadata["flag"].startswith("--"), f.name


@pytest.mark.parametrize("command, groups", [("memory", options.MEMORY), ("trace", options.TRACE),
                                             ("measure", options.MEASURE), ("explain", options.EXPLAIN)])
def test_each_command_takes_the_options_of_its_groups(command, groups):
    params = _params(command)
    every = _flags(options.GROUPS)
    assert _flags(groups) <= set(params)
    assert not (every - _flags(groups)) & set(params)               # the gaps are the groups it does not take
    for f in FIELDS:
        name = f.metadata.get("param", f.name)
        if name in params:
            assert params[name].help == f.metadata["help"]
            assert f.metadata["flag"].split("/")[0] in params[name].opts


def test_the_gaps_are_the_documented_ones():
    # 5, --hf-loss, --peft-autocast, 11 DeepSpeed (--offload-optimizer and --zero-bf16-master among them), 12 of the
    # loop (--loss, --liger-kernels, --lora-kernels, --optimizer-in-backward, --activation-offloading, --reference,
    # --rollouts, --completion-tokens, --vllm-share, --offload-params, --checkpoint-every, --checkpoint-ops),
    # --device-map and --balance (generation)
    assert len(_flags(options.MEMORY) - _flags(options.TRACE)) == 32
    # and the parallel group's --fsdp-embedding-units and --reshard-after-forward, the allocator group's
    # --sync-each-batch
    assert len(_flags(options.MEMORY) - _flags(options.MEASURE)) == 43
    assert options.MEASURE == options.EXPLAIN


def test_each_memory_option_reaches_the_workload(cli):
    r = cli("memory", "llama-3.2-1b", "--json", "--no-solve", "--method", "lora", "--lora-rank", "8",
            "--lora-targets", "q_proj,v_proj", "--optimizer", "sgd", "--optimizer-impl", "fused", "--mixed-precision",
            "--grad-checkpointing", "--attention", "eager", "--gpus", "2", "--shard", "zero2", "--batch", "3",
            "--seq-len", "256", "--kv-dtype", "fp8", "--group-size", "64", "--no-double-quant",
            "--prefill-chunk", "512",
            "--expandable-segments", "--grad-as-bucket-view", "--grads-kept", "--grad-accumulation", "4",
            "--softmax-saves-input", "--zero-reduce-bucket", "2e8", "--no-zero-overlap-comm",
            "--no-zero-contiguous-gradients",
            "--zero-sub-group-size", "1e8", "--zero-prefetch-bucket", "auto", "--zero-max-live-params", "3e8",
            "--zero-reuse-distance", "4e8", "--zero-persistence-threshold", "1000", "--no-zero-init",
            "--hf-loss", "shift-copy", "--no-peft-autocast", "--liger-kernels", "swiglu,rms_norm", "--reference",
            "adapters-off")
    assert r.code in (0, 1), r.err
    w = r.json()["workload"]
    assert (w["method"], w["lora_rank"], w["lora_targets"], w["optimizer"], w["optimizer_impl"]) == \
        ("lora", 8, ["q_proj", "v_proj"], "sgd", "fused", )
    assert w["mixed_precision"] and w["grad_checkpointing"] and w["attention"] == "eager"
    assert (w["gpus"], w["shard"], w["batch"], w["seq_len"], w["kv_dtype"], w["group_size"]) == (2, "zero2", 3, 256,
                                                                                               "fp8", 64)
    assert not w["double_quant"] and w["prefill_chunk"] == 512
    assert w["expandable_segments"] and w["grad_as_bucket_view"] and w["grads_kept"] and w["softmax_saves_input"]
    assert w["grad_accumulation"] == 4
    assert (w["zero_reduce_bucket"], w["zero_overlap_comm"], w["zero_contiguous_gradients"], w["zero_sub_group_size"],
            w["zero_prefetch_bucket"], w["zero_max_live_params"], w["zero_reuse_distance"],
            w["zero_persistence_threshold"]) == (200_000_000, False, False, 100_000_000, "auto", 300_000_000,
                                                 400_000_000, 1000)
    assert w["zero_init"] is False and w["hf_loss"] == "shift-copy" and w["peft_autocast"] is False
    assert w["liger_kernels"] == "rms_norm,swiglu" and w["reference"] == "adapters-off"
    inf = cli("memory", "llama-3.2-1b", "--json", "--no-solve", "--infer", "--context", "4096", "--sequences", "2",
              "--kv-cache", "dynamic", "--new-tokens", "64").json()["workload"]
    assert (inf["mode"], inf["seq_len"], inf["batch"], inf["kv_cache"], inf["new_tokens"]) == ("infer", 4096, 2,
                                                                                               "dynamic", 64)
