"""The temporaries of torchao's low-bit AdamW steps, counted from the code inductor generates for them: the figures
behind constants.TORCHAO_STEP_BYTES (`campaign memory --optimizer adamw-4bit` or `adamw-8bit-ao`; TrainingArguments'
and axolotl's adamw_torch_4bit and adamw_torch_8bit).

torchao steps each parameter with torch.compile(single_param_adam); this compiles it on the CPU for one bf16
parameter per optimizer, reads the buffers its output code allocates (TORCH_LOGS=output_code) and prints their bytes
per element of the parameter. All of them are counted as alive at once: an upper bound for the CPU, and for a GPU,
whose Triton kernels fuse at least as much.

Usage: python benchmarks/torchao_lowbit_step.py    (needs torchao and a C++ compiler; about two minutes)
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from campaign.memory.constants import TORCHAO_STEP_BYTES  # noqa: E402

STEP = """
import torch
from torchao.optim import {cls}
p = torch.nn.Parameter(torch.randn(512, 4096, dtype=torch.bfloat16))
p.grad = torch.randn_like(p)
{cls}([p]).step()
"""
OPTIMIZERS = {"adamw-4bit": "AdamW4bit", "adamw-8bit-ao": "AdamW8bit"}
NUMEL = 512 * 4096
ELEMENT = {"uint8": 1, "int8": 1, "bfloat16": 2, "float16": 2, "int32": 4, "float32": 4, "int64": 8, "float64": 8}
BUFFER = re.compile(r"empty_strided_cpu\(\(([\d, ]*)\), \([\d, ]*\), torch\.(\w+)\)")


def per_element(cls: str) -> float | None:
    """Bytes per parameter element of the buffers inductor's code for one step of torchao's `cls` allocates."""
    run = subprocess.run([sys.executable, "-c", STEP.format(cls=cls)], capture_output=True, text=True, timeout=900,
                         env={"TORCH_LOGS": "output_code", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
                              "PATH": "/usr/bin:/bin"})
    if run.returncode != 0:
        print(run.stderr[-2000:])
        return None
    buffers = [(tuple(int(d) for d in shape.split(",") if d.strip()), dtype)
               for shape, dtype in BUFFER.findall(run.stdout + run.stderr)]
    for shape, dtype in buffers:
        print(f"  {cls}: {dtype:9} {shape}")
    return sum(math.prod(shape) * ELEMENT[dtype] for shape, dtype in buffers) / NUMEL


def main() -> int:
    ok = True
    for name, cls in OPTIMIZERS.items():
        per = per_element(cls)
        if per is None:
            return 1
        print(f"{name} ({cls}): {per:.3f} B per element (constants.TORCHAO_STEP_BYTES: {TORCHAO_STEP_BYTES[name]})")
        ok = ok and abs(per - TORCHAO_STEP_BYTES[name]) < 0.1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
