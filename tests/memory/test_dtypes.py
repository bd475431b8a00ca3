"""Quantized weight layouts, with bytes worked out by hand from each library's tensor shapes."""
from __future__ import annotations

import pytest

from campaign.errors import UnknownNameError
from campaign.memory.dtypes import linear_bytes, parse_dtype


def test_gptq_4096_square_group_128():
    # qweight int32 packs 8 values: 4096*4096/8*4 B; scales fp16 (4096/128 x 4096); qzeros int32 packs 8 per
    # row of groups: (32 x 4096/8) x 4 B; g_idx int32 per input column.
    lb = linear_bytes("gptq", 4096, 4096, group_size=128)
    assert lb.data == 4096 * 4096 // 8 * 4
    assert lb.overhead == 32 * 4096 * 2 + 32 * 4096 // 8 * 4 + 4096 * 4


def test_awq_has_no_g_idx():
    assert linear_bytes("gptq", 4096, 4096).overhead - linear_bytes("awq", 4096, 4096).overhead == 4096 * 4


def test_nf4_double_quant_is_0_127_bits_of_overhead_per_param():
    # QLoRA paper: double quantization costs 8/64 + 32/(64*256) = 0.127 bits per parameter
    n = 4096 * 4096
    lb = linear_bytes("nf4", 4096, 4096)
    assert lb.data == n // 2
    assert lb.overhead * 8 / n == pytest.approx(8 / 64 + 32 / (64 * 256))


@pytest.mark.parametrize("dtype, per", [("fp32", 4), ("bf16", 2), ("fp16", 2)])
def test_dense(dtype, per):
    assert linear_bytes(dtype, 10, 7).total == 70 * per


def test_int8_carries_a_scale_per_row():
    assert linear_bytes("int8", 10, 7).total == 70 + 10 * 4


def test_fp8_carries_a_scale_per_128_block():
    # DeepSeek-V3's layout: weight_scale_inv of shape (ceil(out/128), ceil(in/128)), fp32
    assert linear_bytes("fp8", 4096, 7168).overhead == 32 * 56 * 4
    assert linear_bytes("fp8", 300, 200).overhead == 3 * 2 * 4


def test_checkpoint_formats_from_quantization_config():
    from campaign.memory.dtypes import checkpoint_format

    assert checkpoint_format({"quant_method": "fp8", "weight_block_size": [128, 128]}) == ("fp8", 128)
    assert checkpoint_format({"quant_method": "gptq", "bits": 4, "group_size": 64}) == ("gptq", 64)
    assert checkpoint_format({"quant_method": "awq", "q_group_size": 128}) == ("awq", 128)
    assert checkpoint_format({"quant_method": "bitsandbytes", "load_in_4bit": True})[0] == "nf4"
    assert checkpoint_format(None) is None


@pytest.mark.parametrize("typed, canonical", [("bfloat16", "bf16"), ("torch.float16", "fp16"), ("NF4", "nf4"),
                                              ("float32", "fp32"), ("e4m3", "fp8")])
def test_dtype_aliases(typed, canonical):
    assert parse_dtype(typed) == canonical


def test_unknown_dtype():
    with pytest.raises(UnknownNameError, match="unknown dtype 'bf61'"):
        parse_dtype("bf61")


def test_nf4_without_double_quant_keeps_fp32_absmax():
    # one fp32 absmax per block of 64: 32 bits / 64 = 0.5 bits per parameter of overhead
    lb = linear_bytes("nf4", 4096, 4096, double_quant=False)
    assert lb.overhead == 4096 * 4096 // 64 * 4
