"""The environment a run actually used, read from what is loaded and installed rather than from an environment's
name: Python and the packages that change results (their installed versions), torch with the CUDA or ROCm/HIP build
it runs, cuDNN, NCCL/RCCL, the driver, the GPUs (names, count, memory) and the CPU.

torch is imported only if it is installed (its CUDA, cuDNN and NCCL versions are those of the build in use);
nothing else is imported: package versions come from their installed metadata.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

# Packages whose version changes what a training or an evaluation computes.
PACKAGES = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "datasets", "tokenizers", "safetensors",
            "deepspeed", "flash-attn", "numpy", "scipy", "scikit-learn", "vllm", "torchao", "campaign")


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int


@dataclass(frozen=True)
class RunEnvironment:
    """What ran: versions actually loaded or installed, accelerators as the runtime sees them."""

    python: str
    platform: str
    cpu: str
    cpu_count: int
    packages: dict[str, str]             # installed versions of PACKAGES that are present
    torch: str | None
    cuda: str | None                     # the CUDA runtime torch was built with and runs
    hip: str | None                      # ROCm/HIP, on AMD builds
    cudnn: str | None
    nccl: str | None                     # NCCL (RCCL on ROCm) bundled with torch
    driver: str | None
    gpus: tuple[Gpu, ...]
    visible_devices: str | None          # CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES as set

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def capture_environment(*, with_torch: bool = True) -> RunEnvironment:
    """The environment of this process (see the module docstring)."""
    packages = {name: v for name in PACKAGES if (v := _version(name)) is not None}
    torch_v = cuda = hip = cudnn = nccl = driver = None
    gpus: tuple[Gpu, ...] = ()
    if with_torch and "torch" in packages:
        import torch

        torch_v = torch.__version__
        cuda = torch.version.cuda
        hip = getattr(torch.version, "hip", None)
        if torch.backends.cudnn.is_available():
            cudnn = str(torch.backends.cudnn.version())
        if torch.cuda.is_available():
            props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
            gpus = tuple(Gpu(p.name, int(p.total_memory)) for p in props)
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except (RuntimeError, AttributeError):
                nccl = None
            from ..memory.measure import driver_version

            driver = driver_version()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("HIP_VISIBLE_DEVICES"))
    return RunEnvironment(python=sys.version.split()[0], platform=platform.platform(), cpu=_cpu_name(),
                          cpu_count=os.cpu_count() or 0, packages=packages, torch=torch_v, cuda=cuda, hip=hip,
                          cudnn=cudnn, nccl=nccl, driver=driver, gpus=gpus, visible_devices=visible)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


__all__ = ["Gpu", "PACKAGES", "RunEnvironment", "capture_environment"]
