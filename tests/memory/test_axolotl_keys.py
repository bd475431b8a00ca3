"""The keys of axolotl's examples (examples/ at axolotl 067b021c) that campaign did not know, each accounted for as
axolotl's source says: no memory (logging, the LR schedule, tokenizer loading, keys axolotl's schema drops), not
modelled with what it does (kernels, parallelism, quantized formats, other heads and trainers; off at its default),
or read: bfloat16 and float16 (the load dtype, utils/config resolve_dtype), batch_size, accelerator_config's
sync_each_batch, dp_shard_size and Ray's workers against --gpus, a streamed dataset, SwanLab's plugin."""
from __future__ import annotations

import json

import yaml

from campaign.memory.training_config import workload_from_configs

LLAMA_1B_PARAMS = 1_235_814_400  # meta-llama/Llama-3.2-1B, tied embeddings
BASE = {"base_model": "meta-llama/Llama-3.2-1B", "adapter": "lora", "lora_r": 8, "lora_target_linear": True,
        "micro_batch_size": 2, "sequence_len": 512, "bf16": True, "gradient_checkpointing": True}
SWANLAB = "axolotl.integrations.swanlab.SwanLabPlugin"
KERNELS = "axolotl.integrations.kernels.KernelsPlugin"


def _write(tmp_path, doc, name="a.yml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _memory(cli, path, *more):
    return cli("memory", "llama-3.2-1b", "--config", str(path), "--json", "--no-solve", *more)


def _uses(cfg):
    return {k.key: k.use for k in cfg.keys}


def test_keys_that_change_no_memory_leave_the_estimate_and_its_verdict(cli, tmp_path):
    """Logging (SwanLab, with its plugin; tensorboard, OpenTelemetry), the LR schedule, tokenizer and hub options,
    resuming, the data's order, batch_size beside gradient_accumulation_steps' default of 1, and keys axolotl's
    pydantic schema drops undeclared (eta_min, adam_eps, torch_dtype): the same estimate, still "pass"."""
    inert = {"plugins": [SWANLAB], "use_swanlab": True, "swanlab_project": "p", "swanlab_mode": "cloud",
             "swanlab_log_completions": False, "use_tensorboard": True, "use_wandb": False, "use_otel_metrics": True,
             "otel_metrics_port": 8000, "cosine_constant_lr_ratio": 0.8, "lr_quadratic_warmup": True,
             "jagged_restart_steps": 100, "tokenizer_use_fast": True, "tokenizer_legacy": True,
             "tokenizer_use_mistral_common": True, "hf_use_auth_token": True, "revision_of_model": "6299b5a",
             "auto_resume_from_checkpoints": True, "ddp_find_unused_parameters": False, "min_sample_len": 2,
             "curriculum_sampling": True, "sample_packing_sequentially": True, "batch_size": 8,
             "eta_min": 7e-7, "adam_eps": 1e-9, "torch_dtype": "float32", "flash_attn_rms_norm": True}
    plain = _memory(cli, _write(tmp_path, BASE, "plain.yml"))
    assert plain.code == 0 and plain.json()["status"] == "pass", plain.err
    got = _memory(cli, _write(tmp_path, BASE | inert, "inert.yml"))
    assert got.code == 0, got.err
    assert got.json()["status"] == "pass" and got.json()["required_bytes"] == plain.json()["required_bytes"]
    uses = {k["key"]: k["use"] for k in got.json()["config_keys"]}
    assert {k for k in inert if k != "plugins"} <= {k for k, u in uses.items() if u == "no memory"}
    assert uses["plugins"] == "modelled"  # SwanLab's logging alone: read
    # torch_dtype float32 is not axolotl's: the model is still loaded in bf16, as bf16 says
    assert got.json()["workload"]["dtype"] == "bf16"


def test_keys_not_modelled_are_named_and_off_change_nothing(cli, tmp_path):
    """Each key on: named with what it does, exit 1, "not verified", the same figure (named, not counted); at its
    off value (false, null, a degree of 1, device_map auto: axolotl's default): "off", and "pass"."""
    plain = _memory(cli, _write(tmp_path, BASE, "plain.yml")).json()
    on = {"tiled_mlp": True, "context_parallel_size": 2, "tensor_parallel_size": 2, "use_kernels": True,
          "qat": {"weight_dtype": "int4", "group_size": 32}, "quantize_moe_experts": True, "reward_model": True,
          "lora_target_parameters": ["mlp.experts.gate_up_proj"], "processor_type": "AutoProcessor",
          "device_map": "sequential", "plugins": [KERNELS]}
    for key, value in on.items():
        r = _memory(cli, _write(tmp_path, BASE | {key: value}, f"{key}.yml"))
        assert r.code == 1 and r.json()["status"] == "not verified", (key, r.err)
        named = {k["key"]: k for k in r.json()["config_keys"]}[key]
        assert named["use"] == "not modelled" and named["why"], key
        assert r.json()["required_bytes"] == plain["required_bytes"], key
    kernels = {k["key"]: k["why"] for k in r.json()["config_keys"]}["plugins"]
    assert "KernelsPlugin: MoE experts kernels" in kernels
    off = {"tiled_mlp": False, "context_parallel_size": 1, "tensor_parallel_size": 1, "dp_replicate_size": 1,
           "expert_parallel_size": 1, "use_kernels": False, "qat": None, "quantize_moe_experts": False,
           "reward_model": False, "device_map": "auto", "use_sonicmoe": False}
    r = _memory(cli, _write(tmp_path, BASE | off, "off.yml"))
    assert r.code == 0 and r.json()["status"] == "pass", r.err
    uses = {k["key"]: k["use"] for k in r.json()["config_keys"]}
    assert {k: uses[k] for k in off} == dict.fromkeys(off, "off")
    assert r.json()["required_bytes"] == plain["required_bytes"]


def test_float16_and_bfloat16_are_the_load_dtype(cli, tmp_path):
    """axolotl loads the model in cfg.torch_dtype (loaders/model.py), which resolve_dtype sets from bf16 or bfloat16
    (bf16), else fp16 or float16 (fp16), else fp32: float16 and bfloat16 (its no-AMP keys) were unknown and the
    model counted in the estimate's default. A full fine-tune of Llama-3.2-1B: 1,235,814,400 weights of 2 bytes in
    fp16 or bf16, 4 in fp32."""
    full = {"base_model": "meta-llama/Llama-3.2-1B", "micro_batch_size": 1, "sequence_len": 256, "bf16": False}

    def weights(doc, name):
        r = _memory(cli, _write(tmp_path, doc, name))
        assert r.code == 0, r.err
        return r.json(), next(i["bytes"] for i in r.json()["items"] if i["name"] == "weights")

    f16, f16_weights = weights(full | {"float16": True}, "f16.yml")
    fp32, fp32_weights = weights(full, "fp32.yml")
    bf16, bf16_weights = weights(full | {"bfloat16": True}, "bfloat16.yml")
    assert (f16["workload"]["dtype"], fp32["workload"]["dtype"], bf16["workload"]["dtype"]) == ("fp16", "fp32", "bf16")
    assert f16_weights == bf16_weights == LLAMA_1B_PARAMS * 2 and fp32_weights == LLAMA_1B_PARAMS * 4
    assert fp32_weights - f16_weights == LLAMA_1B_PARAMS * 2
    assert {k["key"]: k["use"] for k in f16["config_keys"]}["float16"] == "modelled" and f16["status"] == "pass"
    # the command line wins over the file: --dtype fp32 with float16 in it counts the 4-byte weights
    flag = _memory(cli, tmp_path / "f16.yml", "--dtype", "fp32").json()
    assert next(i["bytes"] for i in flag["items"] if i["name"] == "weights") == LLAMA_1B_PARAMS * 4
    # resolve_dtype's order: bf16 (or bfloat16) before fp16 (or float16); bf16 auto gives way to fp16 true
    order = {"both.yml": (full | {"bfloat16": True, "float16": True}, "bf16"),
             "auto.yml": ({**full, "bf16": "auto", "fp16": True}, "fp16")}
    for name, (doc, dtype) in order.items():
        cfg = workload_from_configs([_write(tmp_path, doc, name)])
        assert cfg.options["dtype"] == dtype, name
    sources = dict((o, w) for o, _, w in workload_from_configs([tmp_path / "f16.yml"]).sources)
    assert sources["dtype"] == "f16.yml: float16 (the model loaded in fp16)"


def test_bfloat16_fills_a_deepspeed_auto_as_the_trainers_bf16(tmp_path):
    """core/builders/base.py: the Trainer's bf16 is bf16 or bfloat16, its fp16 is fp16 and not bf16 (float16 none):
    a ds_config's bf16 "auto" is then on with bfloat16, off with float16 alone."""
    (tmp_path / "ds.json").write_text(json.dumps({"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}))
    base = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "bf16": False, "deepspeed": "ds.json"}
    on = workload_from_configs([_write(tmp_path, base | {"bfloat16": True}, "on.yml")])
    assert on.options["mixed_precision"] is True and on.options["dtype"] == "bf16"
    off = workload_from_configs([_write(tmp_path, base | {"float16": True}, "off.yml")])
    assert "mixed_precision" not in off.options and off.options["dtype"] == "fp16"


def test_batch_size_sets_the_accumulation_only_where_it_is_written_empty(tmp_path):
    """normalize_config: gradient_accumulation_steps = its value or batch_size // micro_batch_size, and the schema's
    default is 1, so batch_size reaches it only beside gradient_accumulation_steps written empty."""
    base = {"base_model": "gpt2", "micro_batch_size": 2, "sequence_len": 256, "batch_size": 8}
    alone = workload_from_configs([_write(tmp_path, base, "alone.yml")])
    assert "grad_accumulation" not in alone.options and _uses(alone)["batch_size"] == "no memory"
    empty = workload_from_configs([_write(tmp_path, base | {"gradient_accumulation_steps": None}, "empty.yml")])
    assert empty.options["grad_accumulation"] == 4 and _uses(empty)["batch_size"] == "modelled"


def test_accelerator_configs_sync_each_batch_is_read(tmp_path):
    """transformers' AcceleratorConfig from accelerator_config (core/builders/base.py): gradient_accumulation_kwargs'
    sync_each_batch is --sync-each-batch; even_batches changes nothing; split_batches is named."""
    base = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "gradient_accumulation_steps": 4}
    doc = base | {"accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": True},
                                         "even_batches": True}}
    cfg = workload_from_configs([_write(tmp_path, doc)])
    assert cfg.options["sync_each_batch"] is True and not cfg.unmodelled
    uses = _uses(cfg)
    assert uses["accelerator_config.gradient_accumulation_kwargs"] == "modelled"
    assert uses["accelerator_config.even_batches"] == "no memory"
    split = workload_from_configs([_write(tmp_path, base | {"accelerator_config": {"split_batches": True}})])
    assert [k.key for k in split.unmodelled] == ["accelerator_config.split_batches"]


def test_the_cards_and_placement_keys_are_read_against_gpus(tmp_path):
    """dp_shard_size and Ray's workers are the run's cards: read where they are --gpus's, named otherwise;
    experimental_skip_move_to_device true is axolotl's default, false under FSDP a whole model on each card before
    sharding (named); Mxfp4Config with dequantize true is the 16-bit model counted."""
    fsdp = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "fsdp_version": 2,
            "fsdp_config": {"reshard_after_forward": True}}
    same = workload_from_configs([_write(tmp_path, fsdp | {"dp_shard_size": 4})], gpus=4)
    assert _uses(same)["dp_shard_size"] == "modelled" and not same.unmodelled
    other = workload_from_configs([_write(tmp_path, fsdp | {"dp_shard_size": 2})], gpus=4)
    assert [k.key for k in other.unmodelled] == ["dp_shard_size"]
    ray = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "use_ray": True, "ray_num_workers": 4}
    assert not workload_from_configs([_write(tmp_path, ray)], gpus=4).unmodelled
    assert [k.key for k in workload_from_configs([_write(tmp_path, ray)], gpus=8).unmodelled] == ["ray_num_workers"]
    moved = workload_from_configs([_write(tmp_path, fsdp | {"experimental_skip_move_to_device": False})], gpus=4)
    assert [k.key for k in moved.unmodelled] == ["experimental_skip_move_to_device"]
    kept = workload_from_configs([_write(tmp_path, fsdp | {"experimental_skip_move_to_device": True})], gpus=4)
    assert _uses(kept)["experimental_skip_move_to_device"] == "modelled" and not kept.unmodelled
    mxfp4 = {"base_model": "openai/gpt-oss-20b", "micro_batch_size": 1, "sequence_len": 256,
             "model_quantization_config": "Mxfp4Config"}
    dequantized = workload_from_configs([_write(tmp_path, mxfp4 | {"model_quantization_config_kwargs": {
        "dequantize": True}})])
    assert not dequantized.unmodelled
    assert {k.key for k in workload_from_configs([_write(tmp_path, mxfp4)]).unmodelled} == \
        {"model_quantization_config"}


def test_a_streamed_dataset_is_the_tokens_counted_but_under_eager_attention(tmp_path):
    """Packed streaming (utils/data/streaming.py) makes each micro-batch one row of micro_batch_size x sequence_len
    tokens: the tokens counted, but eager attention's scores grow with the row squared: named there."""
    base = {"base_model": "gpt2", "micro_batch_size": 2, "sequence_len": 256, "sample_packing": True,
            "pretraining_dataset": [{"path": "allenai/c4", "type": "pretrain"}],
            "streaming_multipack_buffer_size": 1000, "pretrain_multipack_attn": True}
    sdpa = workload_from_configs([_write(tmp_path, base | {"attn_implementation": "sdpa"})])
    assert not sdpa.unmodelled and _uses(sdpa)["pretraining_dataset"] == "modelled"
    eager = workload_from_configs([_write(tmp_path, base | {"attn_implementation": "eager"})])
    assert [k.key for k in eager.unmodelled] == ["pretraining_dataset"]


def test_qloras_bnb_config_kwargs_at_the_counted_format(tmp_path):
    """bnb_config_kwargs updates axolotl's BitsAndBytesConfig (loaders/model.py): double quantization and nf4 are
    the format counted; another storage dtype is named."""
    base = {"base_model": "gpt2", "micro_batch_size": 1, "sequence_len": 256, "adapter": "qlora",
            "load_in_4bit": True}
    counted = workload_from_configs([_write(tmp_path, base | {"bnb_config_kwargs": {
        "bnb_4bit_use_double_quant": True}})])
    assert not counted.unmodelled
    storage = workload_from_configs([_write(tmp_path, base | {"bnb_config_kwargs": {
        "bnb_4bit_quant_storage": "float32"}})])
    assert [k.key for k in storage.unmodelled] == ["bnb_config_kwargs"]
