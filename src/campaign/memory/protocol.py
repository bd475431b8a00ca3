"""Run the measuring protocol for a workload (a model built from its config) or around a user's script."""
from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import CampaignError, InputError, MissingDependencyError
from ..models.resolve import resolve_config
from .build import (extend, finish, instantiate, labels_for, model_class_and_config, prefill, prefill_chunk, torch_dtype,
                    weights_to_load)
from .measure import Measurement, MemoryMeter
from .workload import Workload

_ACTIVE: list[MemoryMeter] = []


def current_meter() -> MemoryMeter:
    """The meter `campaign measure --script` runs a script under (a fresh one outside it)."""
    if not _ACTIVE:
        _ACTIVE.append(MemoryMeter())
    return _ACTIVE[-1]


class ScriptFailed(CampaignError):
    """A measured script raised; the measurement up to that point is kept."""

    def __init__(self, measurement: Measurement) -> None:
        self.measurement = measurement
        super().__init__(f"the script failed in phase {measurement.failed_phase!r}: {measurement.error}; "
                         "the phases measured before it are saved")


def measure_script(path: str | Path, args: list[str] | None = None, *, device: str | None = None) -> Measurement:
    """Run a Python script in this process under a meter.

    The script may mark its phases with `campaign.current_meter().phase(name)`; a script that marks none is
    measured as one phase, 'script'. A crash is reported with the phase it reached (ScriptFailed).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"script {str(path)!r} does not exist; give the path of a Python file")
    meter = MemoryMeter(device)
    _ACTIVE.append(meter)
    argv = sys.argv
    sys.argv = [str(path), *(args or [])]
    try:
        try:
            with meter.around("script"):
                runpy.run_path(str(path), run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise RuntimeError(f"exited with status {e.code}") from None
    except Exception as e:  # the user's code: report where it stopped, keep what was measured
        phase = meter.current or (meter.phases[-1].name if meter.phases else "before any phase")
        raise ScriptFailed(meter.result(label=str(path), status="failed", failed_phase=phase,
                                        error=f"{type(e).__name__}: {e}")) from e
    finally:
        sys.argv = argv
        _ACTIVE.remove(meter)
    return meter.result(label=str(path))


def measure_workload(model: str, workload: Workload, *, device: str | None = None, weights: str = "auto",
                     progress: Callable[[str], None] | None = None) -> Measurement:
    """Load the model (or build it from its config with random weights) on the device and measure its phases.

    weights: "auto" loads a local model dir's safetensors when it has them (a catalog name or a bare config has
    none: random weights), "load" insists, "random" always builds from the config. The footprint is the same
    for a bf16 model; loading shows the real load phase (from_pretrained's own peak).

    Training: load, then two steps (forward, backward, optimizer step); the second step is kept, so the
    optimizer state exists in its forward. Inference: load, prefill (chunked), decode one token.
    """
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError("torch and transformers", "torch") from None
    w = workload
    if w.dtype in ("nf4", "int8", "int4", "gptq", "awq", "fp8"):
        raise InputError(f"measuring a {w.dtype} base needs its kernels on a GPU; measure --script with your "
                         "own loading code, or measure the bf16 model")
    if w.gpus > 1:
        raise InputError("measure one card (--gpus 1); multi-card runs: wrap your launcher with --script")
    meter = MemoryMeter(device)
    tell = progress or (lambda _p: None)
    cfg, _source, name, directory = resolve_config(model)
    weights_dir = weights_to_load(cfg, directory, weights)
    cls, config = model_class_and_config(transformers, cfg, w)
    arch = cls.__name__
    dev = torch.device(meter.device)
    tell("load")
    with meter.phase("load"):
        if weights_dir is not None:
            net = instantiate(cls, config, torch_dtype(torch, w), w, weights_dir=weights_dir, device=str(dev))
        else:
            with dev:
                net = instantiate(cls, config, torch_dtype(torch, w), w)
        finish(net, w)
        # CPU: safetensors tensors can be memory-mapped from the file, made outside the tracker; count them as the
        # weights a card would hold (on a GPU they are copied into the caching allocator and counted there)
        meter.track(net)
    vocab = getattr(config, "vocab_size", None) or config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (w.batch, w.seq_len), device=dev)
    labels = labels_for(torch, arch, cfg, ids).to(dev)
    if w.training and w.method != "frozen":
        params = [p for p in net.parameters() if p.requires_grad]
        impl = {"foreach": dict(foreach=True), "fused": dict(fused=True), "loop": dict(foreach=False)}[w.optimizer_impl]
        opt = (torch.optim.SGD(params, lr=1e-3, momentum=0.9) if w.optimizer == "sgd" else
               torch.optim.Adafactor(params, lr=1e-3) if w.optimizer == "adafactor" else
               torch.optim.AdamW(params, lr=1e-5, **impl))
        for step in range(2):
            if step == 1:
                meter.phases = meter.phases[:1]  # keep load + the second step
            tell(f"forward (step {step + 1})")
            with meter.phase("forward"), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=w.mixed_precision):
                loss = net(input_ids=ids, labels=labels, use_cache=False).loss
            tell(f"backward (step {step + 1})")
            with meter.phase("backward"):
                loss.backward()
                del loss
            tell(f"optimizer step (step {step + 1})")
            with meter.phase("optimizer step"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    else:
        cache = transformers.DynamicCache(config=net.config)
        with torch.no_grad():
            tell("prefill")
            with meter.phase("prefill"):
                prefill(net, ids, cache, prefill_chunk(w))
            tell("decode")
            with meter.phase("decode"):
                extend(net, ids[:, -1:], cache)
    return meter.result(label=name, workload=w.to_dict(),
                        weights=f"loaded from {weights_dir}" if weights_dir else "random (from the config)")
