"""The adapter checks of `campaign check` for a peft model: the trainable count against the adapter config's plan,
the adapter saved with its binding to the base's weights (train/adapters.py), and reloaded onto the bare base in a
fresh process (train/resume.py) giving the same outputs.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from ..checks import Check
from .resume_check import ATOL
from .setup import Setup
from .step import StepFigures


def adapter_checks(s: Setup, ref: str | None, batch: Any, fig: StepFigures, timeout: float,
                   fresh: Any = None) -> list[Check]:
    """The adapter's trainable count against LoRA's plan; saved with its binding; reloaded in a fresh process
    (`fresh`: a FreshProcess started ahead for `ref` in adapter mode; one is started here when None)."""
    import torch

    from .adapters import binding_of, planned_trainable, save_adapter
    from .resume import FreshProcess, FreshProcessFailed
    from .step import output_tensor

    out = []
    planned = planned_trainable(s.model)
    extra = fig.trainable_elements - planned
    if extra == 0:
        out.append(Check("adapter.trainable_as_planned", "pass", f"{fig.trainable_elements:,} trainable elements = "
                         "rank x (in + out) of the adapted layers + the modules saved in full"))
    else:
        out.append(Check("adapter.trainable_as_planned", "warn" if extra > 0 else "fail",
                         f"{fig.trainable_elements:,} trainable elements; the adapter's config plans {planned:,} "
                         f"({extra:+,})",
                         "beyond the adapter, base tensors or whole modules train (modules_to_save, an unfrozen "
                         "norm): more memory and optimizer state than LoRA's plan, and an adapter file that carries "
                         "them", "freeze what should not train, or count it in the plan on purpose"))
    binding = binding_of(s.model)
    where = f"{binding.base or 'an unnamed base'}" + (f" at revision {binding.revision[:12]}"
                                                      if binding.revision else "")
    out.append(Check("adapter.bound_to_base", "pass", f"base {where}, {binding.tensors} tensors, weights sha256 "
                     f"{binding.weights_sha256[:12]}"))
    if ref is None:
        out.append(Check("adapter.reload_equal", "skipped", "the setup was given as live objects",
                         "only a fresh process proves the adapter reloads onto the base", "give setup.py:make_setup"))
        return out
    with (fresh or FreshProcess(ref, "adapter")) as process, \
            tempfile.TemporaryDirectory(prefix="campaign-adapter-") as tmp:
        folder = save_adapter(s.model, Path(tmp) / "adapter", warn=False)  # bound_to_base names the base
        was = s.model.training
        s.model.eval()
        with torch.no_grad():
            ours = output_tensor(s.model(**{k: v for k, v in batch.items() if k != "labels"})).detach().cpu()
        s.model.train(was)
        try:
            theirs = process.run(folder, Path(tmp) / "outputs.safetensors", timeout=timeout)["outputs"]
        except FreshProcessFailed as e:
            out.append(Check("adapter.reload_equal", "fail", str(e), "an adapter that does not load onto the base "
                             "it is shipped with cannot be used", "build the exact base (same revision, same seed "
                             "for a random one) and keep the base frozen"))
            return out
    exact = ours.device.type == "cpu" and next(s.model.parameters()).device.type == "cpu"
    same = ours.shape == theirs.shape and (torch.equal(ours, theirs) if exact else
                                           torch.allclose(ours.float(), theirs.float(), rtol=1e-4, atol=ATOL))
    if same:
        out.append(Check("adapter.reload_equal", "pass", f"the adapter reloaded onto the bare base in a fresh process "
                         f"gives the same outputs ({'bitwise' if exact else 'within 1e-4'}, {tuple(ours.shape)})"))
    else:
        diff = float((ours.float() - theirs.float()).abs().max()) if ours.shape == theirs.shape else math.inf
        out.append(Check("adapter.reload_equal", "fail", f"outputs differ after reloading (up to {diff:.2e})",
                         "the shipped adapter does not reproduce what was trained", "save with save_pretrained and "
                         "check that every adapted module is in adapter_config.json's target_modules"))
    return out




__all__ = ["adapter_checks"]
