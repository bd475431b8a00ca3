"""Run the measuring protocol for a workload (a model built from its config) or around a user's script."""
from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CampaignError, InputError, MissingDependencyError
from ..models.meta import building
from ..models.spec import ModelSpec
from .build import (
    encode_and_fill,
    encoder_decoder_cache,
    extend,
    extend_encoder_decoder,
    finish,
    instantiate,
    model_config,
    optimizer_for,
    prefill,
    prefill_chunk,
    quiet_transformers,
    step_inputs,
    torch_dtype,
    weights_to_load,
    workload_class_and_config,
)
from .dtypes import QUANTIZED
from .measure import MemoryMeter
from .measurement import Measurement
from .workload import Workload

_ACTIVE: list[MemoryMeter] = []


def current_meter() -> MemoryMeter:
    """The meter `campaign measure --script` runs a script under (a fresh one outside it)."""
    if not _ACTIVE:
        _ACTIVE.append(MemoryMeter())
    return _ACTIVE[-1]


class MeasurementFailed(CampaignError):
    """The measured work raised (a crash in a script, an out-of-memory error); what was measured is kept."""

    def __init__(self, measurement: Measurement, what: str = "the run") -> None:
        self.measurement = measurement
        m = measurement
        if m.failed_phase:
            where = f"in phase {m.failed_phase!r}"
        else:
            where = f"outside any phase (after {m.phases[-1].name!r})" if m.phases else "before any phase"
        saved = "the phases measured up to it are kept" if m.phases else "no phase was measured"
        super().__init__(f"{what} failed {where}: {m.error}; {saved}")


def measure_script(path: str | Path, args: list[str] | None = None, *, device: str | None = None) -> Measurement:
    """Run a Python script in this process under a meter.

    The script may mark its phases with `campaign.current_meter().phase(name)`; a script that marks none is
    measured as one phase, 'script'. A crash raises MeasurementFailed with the phase it reached and the record.
    A script that calls torch.cuda.reset_peak_memory_stats() itself cuts the peak of the phase it is in.
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
                try:
                    runpy.run_path(str(path), run_name="__main__")
                except SystemExit as e:
                    if e.code not in (None, 0):
                        raise RuntimeError(f"exited with status {e.code}") from None
        except Exception as e:  # the user's code: report where it stopped, keep what was measured
            raise MeasurementFailed(meter.failure(e, label=str(path)), "the script") from e
    finally:
        sys.argv = argv
        _ACTIVE.remove(meter)
    return meter.result(label=str(path))


def measure_workload(model: str | Path | ModelSpec, workload: Workload, *, device: str | None = None,
                     weights: str = "auto", progress: Callable[[str], None] | None = None) -> Measurement:
    """Load the model (or build it from its config with random weights) on the device and measure its phases.

    model: a catalog name, model dir, config.json or cached repo id, or a ModelSpec (as every memory call).

    weights: "auto" loads a local model dir's safetensors when it has them (a catalog name or a bare config has
    none: random weights), "load" insists, "random" always builds from the config. The footprint is the same
    for a bf16 model; loading shows the real load phase (from_pretrained's own peak).

    Training: load, then two steps (forward, backward, optimizer step); the second step is kept, so the
    optimizer state exists in its forward. A frozen model: load, then a forward with its loss, without autograd.
    Inference: load, prefill (chunked), decode one token; for an encoder (BERT), load and one forward.
    Raises MeasurementFailed (with the phases measured, the one that failed marked) when the work raises, an
    out-of-memory error above all.
    """
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError("torch and transformers", "torch") from None
    w = workload
    if w.dtype in QUANTIZED:
        raise InputError(f"measuring a {w.dtype} base needs its kernels on a GPU; measure --script with your "
                         "own loading code, or measure the bf16 model")
    if w.gpus > 1:
        raise InputError("measure one card (--gpus 1); multi-card runs: wrap your launcher with --script")
    meter = MemoryMeter(device)
    make_optimizer = _optimizer_factory(torch, w, meter.device)
    tell = progress or (lambda _message: None)
    cfg, spec, directory = model_config(model)  # an architecture the planner cannot read: exit 2
    name = spec.name
    weights_dir = weights_to_load(cfg, directory, weights)
    cls, config = workload_class_and_config(transformers, cfg, w)
    arch = cls.__name__
    dev = torch.device(meter.device)
    described: dict[str, Any] = dict(
        label=name, workload=w.to_dict(),
        weights=f"loaded from {weights_dir}" if weights_dir else "random (from the config)")
    try:
        # one measured run around the phases: on the CPU the allocator's records cover the gaps between them
        with meter.around("run"):
            tell("load")
            with meter.phase("load"), building(cls):
                if weights_dir is not None:
                    net = instantiate(cls, config, torch_dtype(torch, w), w, weights_dir=weights_dir, device=str(dev))
                else:
                    with dev:
                        net = instantiate(cls, config, torch_dtype(torch, w), w)
                finish(net, w)
                # CPU: safetensors tensors can be memory-mapped from the file, not handed out by the allocator; count
                # them as the weights a card would hold (on a GPU they are copied into the caching allocator)
                meter.track(net)
            vocab = getattr(config, "vocab_size", None) or config.get_text_config().vocab_size
            ids = torch.randint(0, vocab, (w.batch, w.seq_len), device=dev)
            inputs = step_inputs(torch, arch, cfg, ids, vocab, encdec=spec.encdec is not None)
            _run_phases(torch, transformers, net, ids, inputs, w, spec, meter, make_optimizer, tell)
    except CampaignError:
        raise
    except Exception as e:
        raise MeasurementFailed(meter.failure(e, **described), f"measuring {name}") from e
    return meter.result(**described)


def _run_phases(torch: Any, transformers: Any, net: Any, ids: Any, inputs: dict[str, Any], w: Workload, spec: Any,
                meter: MemoryMeter, make_optimizer: Callable[[list[Any]], Any], tell: Callable[[str], None]) -> None:
    """The measured steps after the load: two training steps, a loss without autograd, or prefill and decode."""
    def autocast() -> Any:
        return torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=w.mixed_precision)

    with quiet_transformers():
        if w.training and w.method != "frozen":
            opt = make_optimizer([p for p in net.parameters() if p.requires_grad])
            for step in range(2):
                if step == 1:
                    meter.phases = meter.phases[:1]  # keep load + the second step
                tell(f"forward (step {step + 1})")
                with meter.phase("forward"), autocast():
                    loss = net(**inputs, use_cache=False).loss
                tell(f"backward (step {step + 1})")
                with meter.phase("backward"):
                    loss.backward()
                    del loss
                tell(f"optimizer step (step {step + 1})")
                with meter.phase("optimizer step"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
        elif w.training:
            tell("forward")
            with meter.phase("forward"), torch.no_grad(), autocast():
                net(**inputs, use_cache=False)
        elif spec.encoder:
            tell("forward")
            with meter.phase("forward"), torch.no_grad():
                net(input_ids=ids)
        elif spec.encdec is not None:  # generation: encoder, the decoder's caches filled, one more token
            cache = encoder_decoder_cache(transformers, net)
            with torch.no_grad():
                tell("prefill")
                with meter.phase("prefill"):
                    encoded = encode_and_fill(net, ids, cache, prefill_chunk(w))
                tell("decode")
                with meter.phase("decode"):
                    extend_encoder_decoder(net, ids[:, -1:], encoded, cache)
        else:
            cache = transformers.DynamicCache(config=net.config)
            with torch.no_grad():
                tell("prefill")
                with meter.phase("prefill"):
                    prefill(net, ids, cache, prefill_chunk(w))
                tell("decode")
                with meter.phase("decode"):
                    extend(net, ids[:, -1:], cache)


def _optimizer_factory(torch: Any, w: Workload, device: str) -> Callable[[list[Any]], Any]:
    """The optimizer the workload names; adamw-8bit needs bitsandbytes on a GPU (checked before any work)."""
    if w.optimizer in ("adamw-8bit", "adamw-32bit"):
        try:
            import bitsandbytes as bnb  # type: ignore[import-not-found]
        except ImportError:
            bnb = None
        if bnb is None or device != "cuda":
            raise InputError(f"{w.optimizer} needs bitsandbytes on a CUDA device; install it on the card, or measure "
                             f"--optimizer adamw (and compare with campaign memory --optimizer {w.optimizer})")
        kind = bnb.optim.AdamW8bit if w.optimizer == "adamw-8bit" else bnb.optim.AdamW32bit
        return lambda params: kind(params, lr=1e-5)
    if w.optimizer in ("adamw-4bit", "adamw-8bit-ao"):
        try:
            from torchao import optim as ao  # type: ignore[import-not-found]
        except ImportError:
            raise InputError(f"{w.optimizer} is torchao's: pip install 'campaign[quant]' (torchao) on the card, or "
                             "measure --optimizer adamw") from None
        kind = ao.AdamW4bit if w.optimizer == "adamw-4bit" else ao.AdamW8bit
        return lambda params: kind(params, lr=1e-5)
    return lambda params: optimizer_for(torch, w, params)
