"""The temporaries of torchao's AdamW4bit step, counted from the code inductor generates for it: the figure behind
constants.TORCHAO_4BIT_STEP_BYTES (`campaign memory --optimizer adamw-4bit`, axolotl's adamw_torch_4bit).

torchao steps each parameter with torch.compile(single_param_adam); this compiles it on the CPU for one bf16
parameter, reads the buffers its output code allocates (TORCH_LOGS=output_code) and prints their bytes per element
of the parameter. All of them are counted as alive at once: an upper bound for the CPU, and for a GPU, whose Triton
kernels fuse at least as much.

Usage: python benchmarks/torchao_4bit_step.py    (needs torchao and a C++ compiler; about a minute)
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from campaign.memory.constants import TORCHAO_4BIT_STEP_BYTES  # noqa: E402

STEP = """
import torch
from torchao.optim import AdamW4bit
p = torch.nn.Parameter(torch.randn(512, 4096, dtype=torch.bfloat16))
p.grad = torch.randn_like(p)
AdamW4bit([p]).step()
"""
NUMEL = 512 * 4096
ELEMENT = {"uint8": 1, "int8": 1, "bfloat16": 2, "float16": 2, "int32": 4, "float32": 4, "int64": 8, "float64": 8}
BUFFER = re.compile(r"empty_strided_cpu\(\(([\d, ]*)\), \([\d, ]*\), torch\.(\w+)\)")


def main() -> int:
    run = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, timeout=900,
                         env={"TORCH_LOGS": "output_code", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
                              "PATH": "/usr/bin:/bin"})
    if run.returncode != 0:
        print(run.stderr[-2000:])
        return 1
    buffers = [(tuple(int(d) for d in shape.split(",") if d.strip()), dtype)
               for shape, dtype in BUFFER.findall(run.stdout + run.stderr)]
    total = sum(math.prod(shape) * ELEMENT[dtype] for shape, dtype in buffers)
    for shape, dtype in buffers:
        print(f"  {dtype:9} {shape}")
    per = total / NUMEL
    print(f"{len(buffers)} buffers, {total:,} B for {NUMEL:,} elements: {per:.3f} B per element "
          f"(constants.TORCHAO_4BIT_STEP_BYTES = {TORCHAO_4BIT_STEP_BYTES})")
    return 0 if abs(per - TORCHAO_4BIT_STEP_BYTES) < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
