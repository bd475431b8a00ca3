"""Exact parameter counts from safetensors headers: read the 8-byte length and the JSON header, never the tensors."""
from __future__ import annotations

import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

from ..errors import ConfigError

_MAX_HEADER = 100 * 2**20  # the format caps headers at 100 MB
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
            if n > _MAX_HEADER:
                raise ConfigError(f"{path}: header length {n} is larger than the format allows; the file is corrupt")
            header = json.loads(f.read(n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: the safetensors header is not valid JSON ({e}); the file is corrupt") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: the safetensors header is not a JSON object; the file is corrupt")
    return header


def weight_files(directory: Path) -> list[Path]:
    """The .safetensors files of a model dir, through model.safetensors.index.json when sharded."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (KeyError, ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"{index}: not a valid safetensors index ({e})") from None
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise ConfigError(f"{index}: lists {len(missing)} shard(s) that are not on disk, e.g. {missing[0]!r}")
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def tensor_stats(directory: Path) -> TensorStats | None:
    """Count elements and bytes over a model dir's safetensors headers; None when there are no weight files."""
    files = weight_files(directory)
    if not files:
        return None
    tensors = elements = total_bytes = 0
    by_dtype: Counter[str] = Counter()
    packed = False
    for path in files:
        for name, info in read_header(path).items():
            if name == "__metadata__":
                continue
            try:
                n = prod(info["shape"])
                start, end = info["data_offsets"]
                dtype = info["dtype"]
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{path}: tensor {name!r} has no valid shape/dtype/data_offsets") from None
            tensors += 1
            elements += n
            total_bytes += end - start
            by_dtype[dtype] += n
            packed = packed or name.endswith(_PACKED_SUFFIXES) or dtype in ("U8", "I32") and "weight" in name
    return TensorStats(tuple(str(f) for f in files), tensors, elements, total_bytes, dict(by_dtype), packed)
