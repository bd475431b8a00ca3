"""Storage formats for weights, caches and optimizer states: bytes per element and quantization layouts."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnknownNameError
from .constants import FP32_BYTES, NF4_BLOCK, NF4_DOUBLE_QUANT_BLOCK

# Plain element sizes in bytes.
ELEMENT_BYTES: dict[str, float] = {
    "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "nf4": 0.5, "gptq": 0.5, "awq": 0.5,
}
_ALIASES = {
    "float32": "fp32", "float": "fp32", "f32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "f16": "fp16", "fp8_e4m3": "fp8", "e4m3": "fp8", "fp8-e4m3": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8",
    "q8": "int8", "8bit": "int8", "4bit": "nf4", "q4": "int4", "fp4": "nf4", "bnb4": "nf4", "bnb8": "int8",
}
QUANTIZED = {"fp8", "int8", "int4", "nf4", "gptq", "awq"}
HALF = {"bf16", "fp16"}


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
      int4/gptq: 4-bit packed in int32 + fp16 scale and 4-bit zero per group of `group_size` input
           columns per output row + an int32 g_idx per input column (AutoGPTQ qweight/qzeros/scales/g_idx).
      awq: like gptq without g_idx (AutoAWQ GEMM layout).
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
    if dtype in ("int4", "gptq", "awq"):
        groups = _ceil_div(in_f, group_size) * out_f
        overhead = 2 * groups + _ceil_div(groups, 2)  # fp16 scales + packed 4-bit zeros
        if dtype != "awq":
            overhead += 4 * in_f  # g_idx
        return LinearBytes(_ceil_div(n, 2), overhead)
    raise UnknownNameError("dtype", dtype, list(ELEMENT_BYTES))


def checkpoint_format(quant: dict | None) -> tuple[str, int] | None:
    """(dtype, group size) of a checkpoint's quantization_config, or None for a dense checkpoint."""
    if not quant:
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        block = quant.get("weight_block_size") or [128, 128]
        return "fp8", int(block[0])
    if method in ("gptq", "awq"):
        return method, int(quant.get("group_size") or quant.get("q_group_size") or 128)
    if method == "bitsandbytes":
        return ("nf4", 128) if quant.get("load_in_4bit") else ("int8", 128)
    return None


def format_note(dtype: str, group_size: int, double_quant: bool = True) -> str:
    """One line naming the quantized layout assumed."""
    if dtype == "nf4" and not double_quant:
        return "bitsandbytes NF4, blocks of 64, fp32 absmax (no double quantization)"
    return {
        "fp8": f"fp8 e4m3 with an fp32 scale per {group_size} x {group_size} block",
        "int8": "bitsandbytes LLM.int8 with an fp32 scale per row",
        "nf4": "bitsandbytes NF4 with double quantization (blocks of 64, absmax in 8 bits)",
        "int4": f"4-bit packed, fp16 scale and 4-bit zero per group of {group_size}, int32 g_idx",
        "gptq": f"GPTQ 4-bit, group size {group_size}: qweight, qzeros, fp16 scales, g_idx",
        "awq": f"AWQ 4-bit GEMM, group size {group_size}: qweight, qzeros, fp16 scales",
    }.get(dtype, f"{dtype} dense")
