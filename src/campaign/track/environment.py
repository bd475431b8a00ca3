"""The environment a run actually used, read from what is loaded and installed rather than from an environment's
name: Python and the packages that change results (their installed versions), torch with the CUDA or ROCm/HIP build
it runs, cuDNN, NCCL/RCCL, the driver, the GPUs (names, count, memory) and the CPU.

torch is imported only if it is installed (its CUDA, cuDNN and NCCL versions are those of the build in use);
nothing else is imported: package versions come from their installed metadata.

Importing torch and asking CUDA for its devices takes seconds (9 s on a fresh machine), so what they report is
captured once per host and Python environment and cached (`cache_dir()`, one JSON file per interpreter), keyed by
everything that can change it: the interpreter (path, version, prefix), the installed distributions (every
*.dist-info / *.egg-info on sys.path with the mtimes and sizes of its folder and metadata file), the driver (its version
files), the device nodes and MIG capabilities, the variables that pick devices or libraries (CUDA_VISIBLE_DEVICES,
LD_LIBRARY_PATH...), the host, its boot and this module itself. A changed key is captured afresh; a cache file that
cannot be read or does not hold what it should is ignored and rewritten, never fatal. Python, the platform, the CPU
and the visible devices are read live on every call.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# Packages whose version changes what a training or an evaluation computes.
PACKAGES = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "datasets", "tokenizers", "safetensors",
            "deepspeed", "flash-attn", "numpy", "scipy", "scikit-learn", "vllm", "torchao", "campaign")
CACHE_SCHEMA = "campaign.environment-cache/2"
CACHE_VARIABLE = "CAMPAIGN_CACHE"       # the cache folder (default: $XDG_CACHE_HOME/campaign, else ~/.cache/campaign)
# The variables that change which devices torch sees or which CUDA/cuDNN/NCCL libraries it loads.
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                    "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH", "LD_PRELOAD")
# The files the kernel drivers publish their versions in (as memory.measure.DRIVER_FILES reads them).
DRIVER_FILES = ("/proc/driver/nvidia/version", "/sys/module/amdgpu/version")
_CACHED = ("packages", "torch", "cuda", "hip", "cudnn", "nccl", "driver", "gpus", "installed")


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
    installed: dict[str, str] = field(default_factory=dict)  # every distribution installed: a lock (with torch)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def capture_environment(*, with_torch: bool = True, cache: bool = True) -> RunEnvironment:
    """The environment of this process (see the module docstring). with_torch=False: the packages only, torch not
    imported (its fields None); cache=False: everything captured afresh (the cache is not read; it is rewritten)."""
    if with_torch:
        facts = _cached_facts(read=cache)
    else:
        facts = {"packages": _packages(), "torch": None, "cuda": None, "hip": None, "cudnn": None, "nccl": None,
                 "driver": None, "gpus": (), "installed": {}}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("HIP_VISIBLE_DEVICES"))
    return RunEnvironment(python=sys.version.split()[0], platform=platform.platform(), cpu=_cpu_name(),
                          cpu_count=os.cpu_count() or 0, packages=facts["packages"], torch=facts["torch"],
                          cuda=facts["cuda"], hip=facts["hip"], cudnn=facts["cudnn"], nccl=facts["nccl"],
                          driver=facts["driver"], gpus=tuple(facts["gpus"]), visible_devices=visible,
                          installed=dict(facts["installed"]))


def _packages() -> dict[str, str]:
    return {name: v for name in PACKAGES if (v := _version(name)) is not None}


def _installed() -> dict[str, Any]:
    """The slow part: the packages, and what torch reports of its build and of the devices (imports torch)."""
    packages = _packages()
    torch_v = cuda = hip = cudnn = nccl = driver = None
    gpus: tuple[Gpu, ...] = ()
    if "torch" in packages:
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
    return {"packages": packages, "torch": torch_v, "cuda": cuda, "hip": hip, "cudnn": cudnn, "nccl": nccl,
            "driver": driver, "gpus": gpus, "installed": _every_distribution()}


def _every_distribution() -> dict[str, str]:
    """Every installed distribution's version, by name (a lock of the environment, as `pip freeze` lists it)."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


# -- the cache --------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where the environment cache lives: $CAMPAIGN_CACHE, else $XDG_CACHE_HOME/campaign, else ~/.cache/campaign."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "campaign"


def cache_path() -> Path:
    """This interpreter's cache file on this host (one per host, executable and prefix; its key says the rest)."""
    who = "\0".join((socket.gethostname(), _interpreter(), sys.prefix))
    return cache_dir() / f"environment-{hashlib.sha256(who.encode()).hexdigest()[:16]}.json"


def _interpreter() -> str:
    """The interpreter's real path: a venv's python and python3 are links to one program (sys.prefix tells venvs
    apart)."""
    return os.path.realpath(sys.executable)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _listing(folder: str, prefixes: tuple[str, ...] = ("",)) -> list[str]:
    try:
        return sorted(e for e in os.listdir(folder) if e.startswith(prefixes))
    except OSError:
        return []


def _stat(path: str) -> list[int] | None:
    """[mtime in ns, size] of a file or folder; None when it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _distributions() -> list[list[Any]]:
    """Every installed distribution on sys.path: [folder, [[name, folder stat, metadata stat], ...]]; a folder
    without any is left out (so the current folder, on sys.path for `python -m`, does not change the key)."""
    out = []
    for entry in sys.path:
        where = os.path.abspath(entry or ".")
        found = []
        try:
            with os.scandir(where) as it:
                for e in it:
                    if e.name.endswith((".dist-info", ".egg-info")):
                        meta = os.path.join(e.path, "METADATA" if e.name.endswith(".dist-info") else "PKG-INFO")
                        found.append([e.name, _stat(e.path), _stat(meta) if e.is_dir() else None])
        except OSError:
            continue
        if found:
            out.append([where, sorted(found)])
    return out


def _mig() -> list[str]:
    """The MIG capabilities the NVIDIA driver publishes (they change when MIG instances are made or destroyed)."""
    root = "/proc/driver/nvidia/capabilities"
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        out += [os.path.relpath(os.path.join(folder, f), root) for f in sorted(files)]
    return out


def cache_key() -> dict[str, Any]:
    """Everything the cached facts depend on (see the module docstring); cheap: a few stats and small reads."""
    return {
        "schema": CACHE_SCHEMA, "module": _stat(__file__),
        "host": socket.gethostname(), "boot": (_read("/proc/sys/kernel/random/boot_id") or "").strip(),
        "executable": _interpreter(), "version": sys.version, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
        "machine": platform.machine(), "distributions": _distributions(),
        "variables": {k: os.environ.get(k) for k in DEVICE_VARIABLES},
        "drivers": {f: _read(f) for f in DRIVER_FILES},
        "devices": _listing("/dev", ("nvidia", "kfd")) + [f"dri/{e}" for e in _listing("/dev/dri")],
        "gpus": _listing("/proc/driver/nvidia/gpus"), "mig": _mig(),
    }


def _digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _valid(facts: Any) -> bool:
    """Whether a cached entry holds what _installed() returns (anything else is treated as absent)."""
    if not isinstance(facts, dict) or set(facts) != set(_CACHED):
        return False
    packages, gpus, installed = facts["packages"], facts["gpus"], facts["installed"]
    return (isinstance(packages, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in packages.items())
            and isinstance(installed, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in installed.items())
            and all(facts[k] is None or isinstance(facts[k], str) for k in _CACHED[1:-2])
            and isinstance(gpus, list) and all(isinstance(g, dict) and set(g) == {"name", "memory_bytes"}
                                               and isinstance(g["name"], str) and isinstance(g["memory_bytes"], int)
                                               for g in gpus))


def _cached_facts(*, read: bool = True) -> dict[str, Any]:
    """The slow facts from the cache when its key matches, else captured now and the cache rewritten."""
    from dataclasses import asdict

    from ..io import atomic_write_json

    path, digest = cache_path(), _digest(cache_key())
    if read:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if (isinstance(doc, dict) and doc.get("schema") == CACHE_SCHEMA and doc.get("key") == digest
                    and _valid(doc.get("facts"))):
                facts = doc["facts"]
                return {**facts, "gpus": tuple(Gpu(g["name"], g["memory_bytes"]) for g in facts["gpus"])}
        except (OSError, ValueError, RecursionError):
            pass                                           # absent, unreadable or corrupt: captured again below
    facts = _installed()
    try:
        atomic_write_json(path, {"schema": CACHE_SCHEMA, "key": digest,
                                 "facts": {**facts, "gpus": [asdict(g) for g in facts["gpus"]]}})
    except OSError:
        pass                                               # a read-only home: captured every time, still right
    return facts


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


__all__ = ["CACHE_VARIABLE", "Gpu", "PACKAGES", "RunEnvironment", "cache_dir", "cache_key", "cache_path",
           "capture_environment"]
