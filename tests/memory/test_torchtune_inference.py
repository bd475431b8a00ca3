"""torchtune's inference configs (eleuther_eval's and the generate recipes'), which share the training recipes'
model and tokenizer sections: read as inference, not as a full fine-tune of the model (they were: an 8B eval config
"did not fit" an H100 as 8 x 2048 tokens of AdamW training). Keys and values as torchtune publishes them in
recipes/configs/ at bd2a0fc7 (eleuther_evaluation.yaml, generation.yaml, llama3_1/70B_generation_distributed.yaml)."""
from __future__ import annotations

import json

import yaml

# Llama 3.2 1B: 16 layers x 8 KV heads x 64 x (k, v) x 2 B (bf16) a token
KV_PER_TOKEN = 16 * 8 * 64 * 2 * 2
MODEL = {"_component_": "torchtune.models.llama3_2.llama3_2_1b"}


def _run(cli, tmp_path, doc, *args):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = cli("memory", "llama-3.2-1b", "--config", str(path), "--json", *args)
    assert out.code in (0, 1), out.err
    return out.code, json.loads(out.out)


def _prefill(d):
    return {i["name"]: i["bytes"] for p in d["phases"] if p["name"] == "prefill" for i in p["items"]}


def test_an_eleuther_eval_config_is_inference_of_its_batch_and_length(cli, tmp_path):
    code, d = _run(cli, tmp_path, {"model": MODEL, "dtype": "bf16", "tasks": ["truthfulqa_mc2"], "limit": None,
                                   "max_seq_length": 4096, "batch_size": 8, "enable_kv_cache": True,
                                   "quantizer": None})
    assert d["workload"]["mode"] == "infer" and d["trainable_params"] == 0
    assert _prefill(d)["KV cache"] == 8 * 4096 * KV_PER_TOKEN
    # lm-eval keeps every position's logits: named, so the verdict is not a promise
    assert code == 1 and d["status"] == "not verified"
    assert {k["key"]: k["use"] for k in d["config_keys"]}["tasks"] == "not modelled"


def test_a_generate_config_counts_one_prompt_and_its_new_tokens(cli, tmp_path):
    code, d = _run(cli, tmp_path, {"model": MODEL, "dtype": "bf16", "seed": 1234,
                                   "prompt": {"system": None, "user": "Tell me a joke."}, "max_new_tokens": 300,
                                   "temperature": 0.6, "top_k": 300, "enable_kv_cache": True, "quantizer": None})
    # one prompt; its tokens bounded by its 15 characters and 8 template tokens for it and for the header
    assert (d["workload"]["batch"], d["workload"]["seq_len"]) == (1, 300 + 15 + 2 * 8)
    assert _prefill(d)["KV cache"] == (300 + 15 + 16) * KV_PER_TOKEN
    assert code == 0 and d["status"] == "pass", [k for k in d["config_keys"] if k["use"] in ("unknown",
                                                                                              "not modelled")]


def test_a_distributed_generate_config_is_tensor_parallel_over_the_cards(cli, tmp_path):
    doc = {"model": MODEL, "dtype": "bf16", "prompt": {"user": "Hi"}, "max_new_tokens": 200,
           "tensor_parallel_plan": {"_component_": "torchtune.models.llama3.base_llama_tp_plan"}}
    _, d = _run(cli, tmp_path, doc, "--gpus", "2")
    assert d["workload"]["shard"] == "tp"
    assert _prefill(d)["weights"] == 1_235_814_400 * 2 // 2  # bf16 over 2 cards
    code, one = _run(cli, tmp_path, doc)  # no --gpus: the plan is named, one card counted
    assert code == 1 and {k["key"]: k["use"] for k in one["config_keys"]}["tensor_parallel_plan"] == "not modelled"
