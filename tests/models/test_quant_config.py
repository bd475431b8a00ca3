"""A checkpoint's config.json as the estimate reads it: the quantization_config's layout (bit width, group or block
size) read, never defaulted, with bytes worked out by hand from the tensor shapes; a value transformers refuses is
exit 2 with one line naming the file and the key, the valid forms kept."""
from __future__ import annotations

import pytest

from ..cli.test_fuzz import refused
from ..conftest import tiny_llama

# tiny_llama: hidden 64, intermediate 160, 4 heads of 16, 2 KV heads, 2 layers. Its linear weights (out x in):
# q 64x64, k 32x64, v 32x64, o 64x64, gate 160x64, up 160x64, down 64x160.
LINEARS = [(64, 64), (32, 64), (32, 64), (64, 64), (160, 64), (160, 64), (64, 160)]
LAYERS = 2
PARAMS = LAYERS * sum(o * i for o, i in LINEARS)          # 2 x 43,008 = 86,016
G_IDX = LAYERS * sum(4 * i for _, i in LINEARS)            # an int32 per input column: 2 x 544 x 4 = 4,352


def _groups(size: int | None) -> int:
    """Groups over every linear: ceil(in / size) per output row (size None: one per row)."""
    return LAYERS * sum(o * (1 if size is None else -(-i // size)) for o, i in LINEARS)


def _weights(cli, write_config, quant: dict, *extra: str):
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--context", "64",
            "--no-solve", "--json", *extra)
    assert r.code == 0, r.err
    items = {i["name"]: i["bytes"] for i in r.json()["items"]}
    data = next(v for k, v in items.items() if k.startswith("weights, ") and k.endswith(" linear layers"))
    return data, items["quantization scales/zeros"], items


def test_the_sums_the_tests_use():
    assert PARAMS == 86_016 and G_IDX == 4_352
    assert _groups(32) == 2_688 and _groups(None) == 1_152


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_a_gptq_checkpoint_is_counted_at_its_own_bit_width(cli, write_config, bits):
    """GPTQ stores b bits per weight (qweight: in x b / 32 int32 per output), an fp16 scale and a b-bit zero per
    group, an int32 g_idx per input column; the bit width used to be taken as 4 whatever `bits` said."""
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "gptq", "bits": bits, "group_size": 32})
    assert data == PARAMS * bits // 8                      # 8 bits: 86,016 B; 4 bits: 43,008 B
    groups = _groups(32)                                   # 2,688
    assert overhead == 2 * groups + groups * bits // 8 + G_IDX


def test_a_7b_at_8_bits_holds_twice_the_4_bit_bytes(cli, write_config):
    """The review's figure: a Llama-2-7B GPTQ at 8 bits, 32 layers of q, k, v, o (4096 x 4096) and gate, up, down
    (4096 x 11008): 6,476,005,376 linear weights, one byte each (estimated 3,238,002,688 before)."""
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert linear == 6_476_005_376
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=4096, intermediate_size=11008,
               num_attention_heads=32, num_key_value_heads=32, num_hidden_layers=32, vocab_size=32000,
               max_position_embeddings=4096, torch_dtype="float16",
               quantization_config={"quant_method": "gptq", "bits": 8, "group_size": 128})
    r = cli("memory", str(write_config(cfg, "7b")), "--infer", "--context", "64", "--no-solve", "--json")
    assert r.code == 0, r.err
    assert {i["name"]: i["bytes"] for i in r.json()["items"]}["weights, gptq8 linear layers"] == linear


@pytest.mark.parametrize("bits", ["4", 5, 16, None, True, 4.0, [4]])
def test_a_gptq_bits_that_is_not_a_bit_width_is_refused_naming_the_key(cli, write_config, bits):
    """transformers' GPTQConfig takes 2, 3, 4 or 8 (post_init: `self.bits not in [2, 3, 4, 8]`, so the string "4"
    is refused there as well), and has no default for it."""
    quant = {"quant_method": "gptq", "group_size": 128} | ({} if bits is None else {"bits": bits})
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--no-solve")
    refused(r, "q/config.json: quantization_config.bits", "2, 3, 4 or 8")


@pytest.mark.parametrize("quant, key", [({"quant_method": "awq", "bits": 8}, "bits"),
                                        ({"quant_method": "awq", "w_bit": 3}, "w_bit"),
                                        ({"quant_method": "awq", "bits": "4"}, "bits")])
def test_awq_at_another_width_than_4_is_refused_by_name(cli, write_config, quant, key):
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--no-solve")
    refused(r, f"q/config.json: quantization_config.{key}", "4-bit GEMM layout only")


def test_awq_in_autoawqs_own_keys_is_read(cli, write_config):
    """AutoAWQ's quant_config names the width w_bit and the group q_group_size: no g_idx, 4-bit zeros."""
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "awq", "w_bit": 4, "q_group_size": 32})
    groups = _groups(32)
    assert (data, overhead) == (PARAMS // 2, 2 * groups + groups // 2)


def test_group_size_minus_one_is_one_group_per_row(cli, write_config):
    """-1 (GPTQConfig: "-1 uses per-column quantization"): one scale and zero per output row over all inputs."""
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "gptq", "bits": 4, "group_size": -1})
    rows = _groups(None)                                   # 1,152
    assert (data, overhead) == (PARAMS // 2, 2 * rows + rows // 2 + G_IDX)


@pytest.mark.parametrize("size", [0, -2, "128", 12.5])
def test_a_group_size_transformers_refuses_is_refused(cli, write_config, size):
    quant = {"quant_method": "gptq", "bits": 4, "group_size": size}
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--no-solve")
    refused(r, "q/config.json: quantization_config.group_size")


def test_fp8_without_blocks_has_one_scale_per_tensor(cli, write_config):
    """FineGrainedFP8Config: weight_block_size null is one fp32 scale per weight (its FP8Linear: a scalar
    weight_scale_inv); absent is (128, 128)."""
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "fp8", "weight_block_size": None})
    assert (data, overhead) == (PARAMS, 4 * LAYERS * len(LINEARS))
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "fp8"})
    # 128 x 128 blocks: one for q, k, v, o (every side under 128), two for gate and up (160 rows) and down (160
    # columns): 10 per layer
    assert (data, overhead) == (PARAMS, 4 * LAYERS * (4 * 1 + 3 * 2))


@pytest.mark.parametrize("block, fragment", [([128, 64], "square blocks"), ("128", "two positive whole numbers"),
                                             ([128, 0], "two positive whole numbers")])
def test_fp8_blocks_the_estimate_cannot_use_are_refused(cli, write_config, block, fragment):
    quant = {"quant_method": "fp8", "weight_block_size": block}
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--no-solve")
    refused(r, "q/config.json: quantization_config.weight_block_size", fragment)


def test_bitsandbytes_8_bit_keeps_a_scale_per_row(cli, write_config):
    data, overhead, _ = _weights(cli, write_config, {"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert (data, overhead) == (PARAMS, 4 * LAYERS * sum(o for o, _ in LINEARS))


@pytest.mark.parametrize("quant, fragment", [
    ({"quant_method": "bitsandbytes"}, "load_in_4bit False, load_in_8bit False"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": "yes"}, "load_in_4bit 'yes'"),
    ({"quant_method": "hqq", "nbits": 4}, "quantization_config.quant_method: 'hqq' is a format the estimate does not"),
    ({"bits": 4}, "quantization_config.quant_method: None"),
])
def test_a_quantization_config_the_estimate_cannot_read_is_refused_not_taken_as_dense(cli, write_config, quant,
                                                                                     fragment):
    r = cli("memory", str(write_config(tiny_llama(quantization_config=quant), "q")), "--infer", "--no-solve")
    refused(r, "q/config.json: quantization_config", fragment)


def test_the_quantization_config_is_read_for_inference_only_and_dtype_wins(cli, write_config):
    """Training dequantizes (or takes --dtype), so a checkpoint's layout is not read for it; --dtype is the user's
    own choice of format."""
    d = write_config(tiny_llama(quantization_config={"quant_method": "hqq"}), "q")
    assert cli("memory", str(d), "--no-solve").code == 0
    assert cli("memory", str(d), "--infer", "--dtype", "gptq8", "--no-solve").code == 0


def test_a_gptq_width_is_no_kv_cache_dtype(cli):
    refused(cli("memory", "llama-3.1-8b", "--infer", "--kv-dtype", "gptq8", "--no-solve"), "is a weight format")
    refused(cli("kv", "llama-3.1-8b", "--kv-dtype", "gptq3"), "is a weight format")


# ------------------------------------------------------------------ transformers' own validation (finding 5)

def test_a_config_transformers_validation_refuses_is_one_line_naming_the_file(cli, write_config):
    """transformers 5 validates a config as a strict dataclass (huggingface_hub's StrictDataclass*Error, not a
    ValueError): a Granite config (no family builder here: built by transformers) whose layer_types disagree with
    its layers was exit 3 with the validator's message over several lines."""
    pytest.importorskip("transformers")
    cfg = tiny_llama(model_type="granite", architectures=["GraniteForCausalLM"], layer_types=["full_attention"])
    d = write_config(cfg, "granite")
    refused(cli("memory", str(d), "--no-solve"), "granite/config.json: transformers", "refuses this 'granite' config",
            "layer_types")
    ok = write_config(tiny_llama(model_type="granite", architectures=["GraniteForCausalLM"]), "granite_ok")
    assert cli("memory", str(ok), "--no-solve").code == 0


def test_a_field_transformers_types_strictly_is_refused_with_its_reason(cli, write_config):
    pytest.importorskip("transformers")
    d = write_config(tiny_llama(rms_norm_eps="x"), "eps")
    refused(cli("models", str(d), "--exact"), "eps/config.json: transformers", "rms_norm_eps")
    assert cli("models", str(write_config(tiny_llama(), "fine")), "--exact").code == 0


@pytest.mark.parametrize("value", ["x", [0.1], 1.5, True])
def test_a_dropout_that_is_not_a_probability_is_refused_naming_the_field(cli, write_config, value):
    """The family builders read the dropout as float(...): a string was a ValueError, exit 3."""
    d = write_config(tiny_llama(attention_dropout=value), "drop")
    refused(cli("memory", str(d), "--no-solve"), "drop/config.json: field 'attention_dropout'")
