"""Exact parameter counts from safetensors headers: read the 8-byte length and the JSON header, never the tensors."""
from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..io import load_json
from ..strict_json import parse_json
from ..validate import MAX_COUNT, JsonObject, kind_of

MAX_HEADER = 100 * 2**20  # the format caps headers at 100 MB
# Bytes per element of the safetensors dtypes (safetensors/src/tensor.rs, Dtype::size); sub-byte ones (F4, F6)
# are left out: their byte span is not elements x a whole size.
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
                "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8, "F64": 8, "I64": 8, "U64": 8}
# Packed or quantized layouts whose element count is not a parameter count.
_PACKED_SUFFIXES = (".qweight", ".qzeros", ".scales", ".g_idx", ".absmax", ".quant_map", ".quant_state",
                    ".nested_absmax", ".nested_quant_map", ".SCB", ".weight_format", "weight_scale_inv")


@dataclass(frozen=True)
class TensorStats:
    """What the weight files hold: elements and bytes per dtype, and whether counts are trustworthy."""

    files: tuple[str, ...]
    tensors: int
    elements: int
    bytes: int
    by_dtype: dict[str, int] = field(default_factory=dict)
    packed: bool = False

    @property
    def params(self) -> int | None:
        """Parameter count, or None when packed quantized tensors make elements != parameters."""
        return None if self.packed else self.elements


def read_header(path: Path) -> dict:
    """The JSON header of one .safetensors file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ConfigError(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER:
                raise ConfigError(f"{path}: header length {n} is larger than the format allows; the file is corrupt")
            text = f.read(n)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    header = parse_json(text, f"{path}: the safetensors header", ConfigError)
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: the safetensors header is a JSON {kind_of(header)}, not an object; "
                          "the file is corrupt")
    return header


def tensor_entry(path: str | Path, name: str, info: object) -> tuple[str, int, int]:
    """(dtype, elements, bytes) of one header entry, checked as the format defines it: a dtype string, a shape of
    whole numbers >= 0, and data_offsets [begin, end] whose span holds exactly elements x the dtype's size."""
    entry = JsonObject(info, f"{path}: tensor {name!r}", fix="the file is corrupt", error=ConfigError)
    dtype = entry.str("dtype")
    shape = entry.list("shape")
    offsets = entry.list("data_offsets")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_COUNT for d in shape):
        entry.fail(f"shape {str(shape)[:60]} must list whole numbers >= 0")
    if len(offsets) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= MAX_COUNT
                                    for o in offsets) or offsets[0] > offsets[1]:
        entry.fail(f"data_offsets {str(offsets)[:60]} must be two whole numbers [begin, end] with begin <= end")
    elements = prod(shape)
    size = offsets[1] - offsets[0]
    if elements > MAX_COUNT:
        entry.fail(f"shape {shape} has {elements:.3g} elements, more than any real tensor")
    if dtype in _DTYPE_BYTES and elements * _DTYPE_BYTES[dtype] != size:
        entry.fail(f"shape {shape} of {dtype} needs {elements * _DTYPE_BYTES[dtype]:,} bytes, data_offsets span "
                   f"{size:,}")
    return dtype, elements, size


def weight_files(directory: Path) -> list[Path]:
    """The .safetensors files of a model dir, through model.safetensors.index.json when sharded."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        names = shards_of_index(load_json(index, "a safetensors index", ConfigError), str(index))
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise ConfigError(f"{index}: lists {len(missing)} shard(s) that are not on disk, e.g. {missing[0]!r}")
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def shards_of_index(data: object, where: str) -> list[str]:
    """The shard file names a model.safetensors.index.json's weight_map lists, sorted, each checked to be a plain
    file name (no folder, no '..')."""
    doc = JsonObject(data, where, fix="the index is corrupt; download it again", error=ConfigError)
    weight_map = doc.obj("weight_map")
    shards: set[str] = set()
    for tensor, shard in weight_map.data.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard or shard in (".", ".."):
            weight_map.fail(f"tensor {tensor[:60]!r} maps to {str(shard)[:40]!r}, not a shard file name")
        shards.add(shard)
    return sorted(shards)


def is_packed(name: str, dtype: str) -> bool:
    """Whether a tensor is a packed or quantized layout, whose element count is not a parameter count."""
    return name.endswith(_PACKED_SUFFIXES) or dtype in ("U8", "I32") and "weight" in name


def tensor_stats(directory: Path) -> TensorStats | None:
    """Count elements and bytes over a model dir's safetensors headers; None when there are no weight files."""
    files = weight_files(directory)
    if not files:
        return None
    return stats_of([(path, read_header(path)) for path in files], tuple(str(f) for f in files))


def stats_of(headers: list[tuple[Any, dict[str, Any]]], files: tuple[str, ...]) -> TensorStats:
    """The TensorStats of (where, header) pairs: each tensor's elements and bytes by dtype, `__metadata__` skipped;
    `where` names the file in an error."""
    tensors = elements = total_bytes = 0
    by_dtype: Counter[str] = Counter()
    packed = False
    for where, header in headers:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype, n, size = tensor_entry(where, name, info)
            tensors += 1
            elements += n
            total_bytes += size
            by_dtype[dtype] += n
            packed = packed or is_packed(name, dtype)
    return TensorStats(files, tensors, elements, total_bytes, dict(by_dtype), packed)
