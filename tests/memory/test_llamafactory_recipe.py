"""A LLaMA-Factory train YAML read whole: LLaMA-Factory's own defaults (LoRA, rank 8 on every linear layer,
checkpointing on, cutoff_len 2048, HF's batch 8), its fp32 cast of a full fine-tune's parameters, QLoRA without
k-bit preparation, DPO's pairs and reference, its DeepSpeed path. The published examples are in
tests/memory/recipes (SOURCES.md); each figure below is worked out from Qwen3-4B's shapes or given as the flags a
user without the file would pass."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from campaign.memory.training_config import workload_from_configs

RECIPES = Path(__file__).parent / "recipes"
P = 4_022_468_096  # Qwen3-4B's parameters (tied head)
# Qwen3-4B: 36 layers, hidden 2560, 32 x 128 query heads, 8 x 128 KV heads, MLP 9728
LORA_8_ALL = 36 * 8 * ((2560 + 4096) + 2 * (2560 + 1024) + (4096 + 2560) + 2 * (2560 + 9728) + (9728 + 2560))


def run(cli, *args):
    r = cli("memory", "qwen3-4b", *args, "--json", "--no-solve")
    assert r.code in (0, 1), r.err
    return r


def item(result, name, phase=None):
    items = result["items"] if phase is None else next(p["items"] for p in result["phases"] if p["name"] == phase)
    return next(i["bytes"] for i in items if i["name"].startswith(name))


def edited(tmp_path, recipe, **changes):
    doc = yaml.safe_load((RECIPES / recipe).read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path = tmp_path / recipe
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_published_lora_recipe_is_the_lora_run_its_flags_give(cli):
    got = run(cli, "--config", str(RECIPES / "llamafactory_qwen3_lora_sft.yaml")).json()
    flags = run(cli, "--method", "lora", "--lora-rank", "8", "--lora-targets", "all-linear", "--batch", "1",
                "--seq-len", "2048", "--grad-checkpointing", "--grad-accumulation", "8", "--no-logits-held").json()
    assert got["required_bytes"] == flags["required_bytes"] and got["status"] == "pass"
    assert item(got, "LoRA adapter weights") == 4 * LORA_8_ALL  # peft's fp32 adapters
    uses = {k["key"]: k["use"] for k in got["config_keys"]}
    assert set(uses) == set(yaml.safe_load((RECIPES / "llamafactory_qwen3_lora_sft.yaml").read_text()))
    assert {k for k, u in uses.items() if u == "modelled"} == {
        "stage", "finetuning_type", "lora_rank", "lora_target", "cutoff_len", "per_device_train_batch_size",
        "gradient_accumulation_steps", "bf16"}
    assert set(uses.values()) == {"modelled", "no memory"}


def test_its_defaults_are_lora_rank_8_on_every_linear_checkpointed_batch_8(tmp_path, cli):
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({"model_name_or_path": "Qwen/Qwen3-4B", "stage": "sft", "output_dir": "o"}))
    cfg = workload_from_configs([bare])
    assert cfg.options == {"method": "lora", "lora_rank": 8, "lora_targets": ("all-linear",), "batch": 8,
                           "seq_len": 2048, "grad_checkpointing": True, "logits_held": False}
    assert cfg.model == "Qwen/Qwen3-4B"


def test_a_full_fine_tune_holds_fp32_weights_unless_pure_bf16(tmp_path, cli):
    plain = run(cli, "--config", edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None)).json()
    assert item(plain, "weights") == 4 * P  # model/adapter.py casts every trainable parameter to fp32
    pure = run(cli, "--config", edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None,
                                       pure_bf16=True)).json()
    assert item(pure, "weights") == 2 * P
    flags = run(cli, "--dtype", "fp32", "--mixed-precision", "--batch", "1", "--seq-len", "2048",
                "--grad-checkpointing", "--grad-accumulation", "2", "--no-logits-held").json()
    assert plain["required_bytes"] == flags["required_bytes"]


def test_its_deepspeed_path_is_opened_from_the_folder_the_command_runs_in(tmp_path, cli, monkeypatch):
    """The published full recipe names examples/deepspeed/ds_z3_config.json: found from the working folder, or
    given with --deepspeed; not found, it is named and the verdict is not verified."""
    recipe = RECIPES / "llamafactory_qwen3_full_sft.yaml"
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    shutil.copy(RECIPES / "llamafactory_ds_z3_config.json", tmp_path / "examples/deepspeed/ds_z3_config.json")
    flags = run(cli, "--shard", "zero3", "--gpus", "4", "--mixed-precision", "--batch", "1", "--seq-len", "2048",
                "--grad-checkpointing", "--grad-accumulation", "2", "--no-logits-held", "--no-zero-overlap-comm",
                "--zero-sub-group-size", "1e9", "--zero-max-live-params", "1e9", "--zero-reuse-distance", "1e9",
                "--zero-reduce-bucket", "auto", "--zero-prefetch-bucket", "auto", "--zero-persistence-threshold",
                "auto", "--expandable-segments").json()
    monkeypatch.chdir(tmp_path)
    found = run(cli, "--config", str(recipe), "--gpus", "4").json()
    assert found["status"] == "pass" and found["required_bytes"] == flags["required_bytes"]
    monkeypatch.chdir(RECIPES)
    given = run(cli, "--config", str(recipe), "--gpus", "4", "--deepspeed", str(tmp_path / "examples/deepspeed/"
                                                                                      "ds_z3_config.json")).json()
    assert given["required_bytes"] == flags["required_bytes"]
    missing = run(cli, "--config", str(recipe), "--gpus", "4")
    assert missing.code == 1 and missing.json()["status"] == "not verified"
    assert {k["key"]: k["use"] for k in missing.json()["config_keys"]}["deepspeed"] == "not modelled"


def test_dpo_with_lora_runs_pairs_with_the_adapters_disabled_as_reference(cli, tmp_path):
    got = run(cli, "--config", str(RECIPES / "llamafactory_qwen3_lora_dpo.yaml")).json()
    flags = run(cli, "--method", "lora", "--lora-rank", "8", "--lora-targets", "all-linear", "--batch", "2",
                "--seq-len", "2048", "--grad-checkpointing", "--grad-accumulation", "8", "--no-logits-held",
                "--reference", "adapters-off").json()
    assert got["required_bytes"] == flags["required_bytes"]
    orpo = workload_from_configs([edited(tmp_path, "llamafactory_qwen3_lora_dpo.yaml", pref_loss="orpo")])
    assert orpo.options["reference"] == "none" and orpo.options["batch"] == 2
    full = workload_from_configs([edited(tmp_path, "llamafactory_qwen3_lora_dpo.yaml", finetuning_type="full")])
    assert full.options["reference"] == "copy"


def test_qlora_is_nf4_with_double_quantization_and_no_kbit_preparation(cli):
    got = run(cli, "--config", str(RECIPES / "llamafactory_qwen3_lora_sft_otfq.yaml")).json()
    flags = run(cli, "--method", "qlora", "--double-quant", "--no-kbit-upcast", "--lora-rank", "8",
                "--lora-targets", "all-linear", "--batch", "1", "--seq-len", "2048", "--grad-checkpointing",
                "--grad-accumulation", "8", "--no-logits-held").json()
    assert got["required_bytes"] == flags["required_bytes"]


def test_each_key_on_and_off_moves_the_estimate_as_its_flag(tmp_path, cli):
    base = "llamafactory_qwen3_lora_sft.yaml"
    common = ("--method", "lora", "--lora-rank", "8", "--batch", "1", "--seq-len", "2048", "--grad-accumulation",
              "8", "--no-logits-held")
    cases = [
        ({"disable_gradient_checkpointing": True}, ()),
        ({"enable_liger_kernel": True}, ("--grad-checkpointing", "--loss", "fused", "--liger-kernels",
                                         "rope,rms_norm,swiglu")),
        ({"use_unsloth_gc": True}, ("--grad-checkpointing", "--activation-offloading")),
        ({"flash_attn": "disabled"}, ("--grad-checkpointing", "--attention", "eager")),
        ({"lora_rank": 64, "lora_target": "q_proj,v_proj"}, ("--grad-checkpointing",)),
        ({"per_device_train_batch_size": None}, ("--grad-checkpointing",)),
    ]
    for change, flags in cases:
        got = run(cli, "--config", edited(tmp_path, base, **change)).json()
        if "lora_rank" in change:
            want = run(cli, *common[:2], "--lora-rank", "64", "--lora-targets", "q_proj,v_proj", *common[4:],
                       *flags).json()
            assert item(got, "LoRA adapter weights") == 4 * 36 * 64 * ((2560 + 4096) + (2560 + 1024))
        elif "per_device_train_batch_size" in change:  # HF's default, 8
            want = run(cli, *common[:4], "--batch", "8", *common[6:], "--lora-targets", "all-linear", *flags).json()
        else:
            want = run(cli, *common, "--lora-targets", "all-linear", *flags).json()
        assert got["required_bytes"] == want["required_bytes"], change
        assert got["status"] == "pass", change
    # a generation length is not the training length
    cfg = workload_from_configs([edited(tmp_path, base, max_length=512, max_new_tokens=64)])
    assert cfg.options["seq_len"] == 2048


def test_what_it_does_not_model_is_named_and_a_typo_is_unknown(tmp_path, cli):
    base = "llamafactory_qwen3_lora_sft.yaml"
    galore = run(cli, "--config", edited(tmp_path, base, finetuning_type="full", use_galore=True, galore_rank=16))
    assert galore.code == 1 and galore.json()["status"] == "not verified"
    uses = {k["key"]: k["use"] for k in galore.json()["config_keys"]}
    assert uses["use_galore"] == "not modelled" and uses["galore_rank"] == "no memory"
    typo = run(cli, "--config", edited(tmp_path, base, lora_rnak=16))
    assert {k["key"]: k["use"] for k in typo.json()["config_keys"]}["lora_rnak"] == "unknown"
    freeze = workload_from_configs([edited(tmp_path, base, finetuning_type="freeze")])
    assert "method" not in freeze.options
    assert {k.key: k.use for k in freeze.keys}["finetuning_type"] == "not modelled"
    bad = cli("memory", "qwen3-4b", "--config", edited(tmp_path, base, finetuning_type="full", quantization_bit=4))
    assert bad.code == 2 and bad.err.count("\n") == 1 and "quantization_bit" in bad.err


def test_a_trainingarguments_file_is_still_read_as_one(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"output_dir": "o", "per_device_train_batch_size": 2, "max_length": 512,
                                "model_name_or_path": "Qwen/Qwen3-4B"}))
    cfg = workload_from_configs([path])
    assert cfg.options["seq_len"] == 512 and "method" not in cfg.options


def test_the_trainers_fsdp_shards_fp32_trainable_weights_with_bf16_compute(tmp_path, cli):
    # examples/extras/fp8/llama3_fp8_fsdp_sft.yaml at ff6d4d12 passes the HF Trainer's fsdp: [full_shard, auto_wrap]
    path = edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None, fsdp=["full_shard", "auto_wrap"],
                  fsdp_transformer_layer_cls_to_wrap="Qwen3DecoderLayer")
    cfg = workload_from_configs([Path(path)], gpus=4)
    assert (cfg.options["shard"], cfg.options["dtype"], cfg.options["mixed_precision"]) == ("fsdp", "fp32", True)
    assert not any(k.use == "unknown" for k in cfg.keys)
    d = run(cli, "--config", path, "--gpus", "4").json()
    # adapter.py casts the trainable parameters to fp32 unless ZeRO-3; FSDP shards them over the 4 cards
    assert item(d, "weights (fp32, AMP master)", "optimizer step") == 4 * P // 4
    offload = workload_from_configs([Path(edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None,
                                                 fsdp="full_shard auto_wrap offload"))], gpus=4)
    assert offload.options["offload_params"] == "cpu"
    # SHARD_GRAD_OP (counted as zero2) keeps the fp32 cast: fp32 master and Adam states over the cards
    grad_op = edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None, fsdp="shard_grad_op auto_wrap")
    cfg = workload_from_configs([Path(grad_op)], gpus=4)
    assert (cfg.options["shard"], cfg.options["dtype"], cfg.options["mixed_precision"]) == ("zero2", "fp32", True)
    assert item(run(cli, "--config", grad_op, "--gpus", "4").json(), "optimizer states", "optimizer step") == \
        8 * P // 4


def test_megatron_and_quantized_oft_keys_are_named_not_unknown(tmp_path):
    # examples/megatron/qwen3_moe_full.yaml (USE_MCA=1) and examples/extras/qoft/*_bnb_npu.yaml at ff6d4d12
    mca = workload_from_configs([Path(edited(tmp_path, "llamafactory_qwen3_full_sft.yaml", deepspeed=None,
                                             tensor_model_parallel_size=1, pipeline_model_parallel_size=4,
                                             expert_model_parallel_size=2, recompute_granularity="full",
                                             use_distributed_optimizer=True, sequence_parallel=False,
                                             export_hf_on_finish=False, mixed_precision="bf16_mixed"))])
    keys = {k.key: k.use for k in mca.keys}
    assert keys["tensor_model_parallel_size"] == keys["sequence_parallel"] == "off"  # a degree of 1, false
    assert keys["pipeline_model_parallel_size"] == keys["recompute_granularity"] == "not modelled"
    # Megatron Bridge's own (USE_MEGATRON_BRIDGE=1): its precision recipe named, an export turned off is off
    assert keys["mixed_precision"] == "not modelled" and keys["export_hf_on_finish"] == "off"
    qoft = workload_from_configs([Path(edited(tmp_path, "llamafactory_qwen3_lora_sft.yaml", finetuning_type="oft",
                                              quantization_bit=4, quantization_method="bnb",
                                              double_quantization=False))])
    keys = {k.key: k.use for k in qoft.keys}
    assert keys["quantization_bit"] == keys["double_quantization"] == keys["finetuning_type"] == "not modelled"
