"""Storage formats for weights, caches and optimizer states: bytes per element and quantization layouts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, UnknownNameError
from .constants import FP32_BYTES, NF4_BLOCK, NF4_DOUBLE_QUANT_BLOCK

# Plain element sizes in bytes. gptq is GPTQ at 4 bits, gptq8/gptq3/gptq2 at the other widths GPTQ stores.
ELEMENT_BYTES: dict[str, float] = {
    "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "nf4": 0.5, "gptq": 0.5, "awq": 0.5,
    "gptq8": 1, "gptq3": 0.375, "gptq2": 0.25,
}
_ALIASES = {
    "float32": "fp32", "float": "fp32", "f32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "f16": "fp16", "fp8_e4m3": "fp8", "e4m3": "fp8", "fp8-e4m3": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8",
    "q8": "int8", "8bit": "int8", "4bit": "nf4", "q4": "int4", "fp4": "nf4", "bnb4": "nf4", "bnb8": "int8",
    "gptq4": "gptq",
}
# GPTQ's dtype by its bit width: transformers' GPTQConfig takes 2, 3, 4 or 8 (post_init: "Only support quantization
# to [2,3,4,8] bits"), an int (the string "4" is refused there too)
GPTQ_BY_BITS = {2: "gptq2", 3: "gptq3", 4: "gptq", 8: "gptq8"}
BITS = {"int4": 4, "awq": 4} | {dtype: bits for bits, dtype in GPTQ_BY_BITS.items()}
QUANTIZED = {"fp8", "int8", "int4", "nf4", "gptq", "awq", "gptq8", "gptq3", "gptq2"}
WEIGHT_ONLY = QUANTIZED - {"fp8", "int8"}  # formats of weights only, never of a KV cache
HALF = {"bf16", "fp16"}
# A group (block) as large as any tensor dimension: one scale per row (GPTQ/AWQ group_size -1) or per tensor (fp8
# without weight_block_size), for linear_bytes' ceil(dim / group_size) = 1
WHOLE = 1 << 40


def parse_dtype(name: str, *, what: str = "dtype") -> str:
    """Canonical dtype name ('bf16', 'nf4', ...) for what a user typed."""
    key = str(name).strip().lower().replace("torch.", "")
    key = _ALIASES.get(key, key)
    if key not in ELEMENT_BYTES:
        raise UnknownNameError(what, str(name), list(ELEMENT_BYTES), "Choose one of: " + ", ".join(ELEMENT_BYTES) + ".")
    return key


@dataclass(frozen=True)
class LinearBytes:
    """Bytes of one quantized Linear weight: the packed data and the scales/zeros/indices that come with it."""

    data: int
    overhead: int

    @property
    def total(self) -> int:
        return self.data + self.overhead


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def linear_bytes(dtype: str, out_f: int, in_f: int, *, group_size: int = 128,
                 double_quant: bool = True) -> LinearBytes:
    """Bytes to store an (out_f x in_f) Linear weight in `dtype`, with each format's metadata.

    Layouts (per the libraries that write them):
      fp32/bf16/fp16: dense, no metadata.
      fp8: 1 byte/element + one fp32 scale per group_size x group_size block (the 128 x 128 block layout of
           the FP8 checkpoints on the Hub: DeepSeek-V3, Qwen3-FP8; `weight_scale_inv`).
      int8: bitsandbytes LLM.int8: 1 byte/element + one fp32 scale per row (SCB).
      nf4: bitsandbytes 4-bit, blocks of 64: 0.5 byte/element + one absmax per block, fp32 (4 B), or with
           double quantization (QLoRA) a uint8 plus one fp32 scale per 256 absmax (QLoRA paper, sec. 3:
           0.127 bits/param instead of 0.5).
      int4/gptq: b-bit values packed in int32 (4 bits; gptq8/gptq3/gptq2: 8, 3, 2) + an fp16 scale and a b-bit
           zero per group of `group_size` input columns per output row + an int32 g_idx per input column
           (AutoGPTQ: qweight (in x b / 32, out), qzeros (groups, out x b / 32), scales (groups, out), g_idx (in)).
      awq: like 4-bit gptq without g_idx (AutoAWQ GEMM layout).
    """
    n = out_f * in_f
    if dtype in ("fp32", "bf16", "fp16"):
        return LinearBytes(int(n * ELEMENT_BYTES[dtype]), 0)
    if dtype == "fp8":
        return LinearBytes(n, 4 * _ceil_div(out_f, group_size) * _ceil_div(in_f, group_size))
    if dtype == "int8":
        return LinearBytes(n, 4 * out_f)
    if dtype == "nf4":
        blocks = _ceil_div(n, NF4_BLOCK)
        if not double_quant:
            return LinearBytes(_ceil_div(n, 2), FP32_BYTES * blocks)
        return LinearBytes(_ceil_div(n, 2), blocks + FP32_BYTES * _ceil_div(blocks, NF4_DOUBLE_QUANT_BLOCK))
    if dtype in BITS:
        bits = BITS[dtype]
        groups = _ceil_div(in_f, group_size) * out_f
        overhead = 2 * groups + _ceil_div(groups * bits, 8)  # fp16 scales + zeros packed at `bits` bits
        if dtype != "awq":
            overhead += 4 * in_f  # g_idx
        return LinearBytes(_ceil_div(n * bits, 8), overhead)
    raise UnknownNameError("dtype", dtype, list(ELEMENT_BYTES))


def checkpoint_format(quant: dict | None, where: str = "config.json: quantization_config") -> tuple[str, int] | None:
    """(dtype, group size) of a checkpoint's quantization_config, or None for a dense checkpoint. Every field that
    sets the layout is read (the bit width, the group or block size, 4 or 8 bits of bitsandbytes); a value
    transformers' config classes refuse, or a format the estimate does not model, is one ConfigError naming
    `where` and the key: never a default in its place.
    """
    if not quant:
        return None
    method = quant.get("quant_method")
    if method == "fp8":  # FineGrainedFP8Config: weight_block_size (128, 128) by default, None for one scale
        block = quant.get("weight_block_size", [128, 128])
        if block is None:
            return "fp8", WHOLE
        if not (isinstance(block, list) and len(block) == 2 and all(_whole(b) and b > 0 for b in block)):
            raise ConfigError(f"{where}.weight_block_size: {block!r} is not two positive whole numbers; fix the config")
        if block[0] != block[1]:
            raise ConfigError(f"{where}.weight_block_size: {block!r}: the estimate models square blocks; give "
                              "--dtype fp8 --group-size N with the nearest")
        return "fp8", block[0]
    if method == "gptq":
        bits = quant.get("bits")
        if not _whole(bits) or bits not in GPTQ_BY_BITS:
            raise ConfigError(f"{where}.bits: {bits!r} is not a GPTQ bit width (2, 3, 4 or 8, a number, as "
                              "transformers' GPTQConfig takes it); fix the config")
        return GPTQ_BY_BITS[bits], _group_size(quant, "group_size", where)
    if method == "awq":
        key = "bits" if "bits" in quant else "w_bit"  # transformers' AwqConfig / AutoAWQ's quant_config
        bits = quant.get(key, 4)  # AwqConfig's default
        if bits != 4 or not _whole(bits):
            raise ConfigError(f"{where}.{key}: {bits!r}: the estimate models AWQ's 4-bit GEMM layout only; give "
                              "--dtype with the nearest format (gptq8 for 8 bits)")
        return "awq", _group_size(quant, "group_size" if "group_size" in quant else "q_group_size", where)
    if method == "bitsandbytes":
        four, eight = quant.get("load_in_4bit", False), quant.get("load_in_8bit", False)
        if not isinstance(four, bool) or not isinstance(eight, bool) or four == eight:
            raise ConfigError(f"{where}: load_in_4bit {four!r}, load_in_8bit {eight!r}: bitsandbytes takes one of "
                              "them true (booleans); fix the config")
        return ("nf4", 128) if four else ("int8", 128)
    raise ConfigError(f"{where}.quant_method: {method!r} is a format the estimate does not model; give --dtype with "
                      f"the nearest ({', '.join(sorted(QUANTIZED))})")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _group_size(quant: dict, key: str, where: str) -> int:
    """A GPTQ/AWQ group size: input columns per scale, 128 by default, -1 for one group per row (WHOLE); anything
    else is refused as transformers' GPTQConfig refuses it ("group_size must be greater than 0 or equal to -1")."""
    size = quant.get(key, 128)
    if size is None:
        return 128
    if not _whole(size) or not (size > 0 or size == -1):
        raise ConfigError(f"{where}.{key}: {size!r} is not a group size (a positive whole number, or -1 for one "
                          "group per row); fix the config")
    return WHOLE if size == -1 else size


def format_note(dtype: str, group_size: int, double_quant: bool = True) -> str:
    """One line naming the quantized layout assumed."""
    if dtype == "nf4" and not double_quant:
        return "bitsandbytes NF4, blocks of 64, fp32 absmax (no double quantization)"
    group = "one group per row" if group_size >= WHOLE else f"group size {group_size}"
    if dtype in GPTQ_BY_BITS.values():
        return f"GPTQ {BITS[dtype]}-bit, {group}: qweight, qzeros, fp16 scales, g_idx"
    return {
        "fp8": "fp8 e4m3 with one fp32 scale" if group_size >= WHOLE else
               f"fp8 e4m3 with an fp32 scale per {group_size} x {group_size} block",
        "int8": "bitsandbytes LLM.int8 with an fp32 scale per row",
        "nf4": "bitsandbytes NF4 with double quantization (blocks of 64, absmax in 8 bits)",
        "int4": "4-bit packed, fp16 scale and 4-bit zero per " + ("row" if group_size >= WHOLE else
                                                                  f"group of {group_size}") + ", int32 g_idx",
        "awq": f"AWQ 4-bit GEMM, {group}: qweight, qzeros, fp16 scales",
    }.get(dtype, f"{dtype} dense")
