"""`campaign check SETUP --processes N`: the setup's own step (its loss, or the model's) under torchrun (gloo on the
CPU, NCCL on a GPU), the model wrapped in DDP, one complete update on each rank's own micro-batch (batch r on rank
r); then what only several processes show:

- ddp.params_in_sync: after the update every tensor the optimizer updates (the model's trainable parameters and any
  it holds outside the model, e.g. a learned temperature of the loss) is bitwise equal on every rank. A tensor DDP
  does not know of is updated with each rank's own gradient and drifts apart.
- ddp.grads_reduced: the gradient each rank applied equals the average of the ranks' local gradients (each computed
  on the bare model under the same dropout masks).

The launch, the first failing rank's one line and the setup loading are `campaign batch --processes`'s
(train/accumulation.py, train/ddp_worker.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks import Check
from ..errors import InputError
from ..results import Result
from .setup import Setup

SCHEMA = "campaign.check_ddp/1"
TOLERANCE = 1e-5            # relative: an all-reduce in float32 sums in another order than the average taken here


@dataclass(frozen=True)
class DdpCheckReport(Result):
    """The update under DDP on each rank, and what the ranks hold after it."""

    checks: tuple[Check, ...]
    processes: int
    backend: str
    losses: tuple[float, ...]                  # per rank
    out_of_sync: tuple[str, ...]               # tensors that differ between ranks after the update
    grad_relative_error: float                 # worst rank: |applied - mean of local| / |mean of local|
    applied_grad_norm: float                   # rank 0's applied gradient, every tensor the optimizer holds
    source: str = ""
    schema: str = SCHEMA


def check_ddp(setup: str, processes: int, *, timeout: float = 600,
              progress: Callable[[str], None] | None = None) -> DdpCheckReport:
    """Run the setup's step under torchrun with `processes` ranks (>= 2) and check the ranks agree after it."""
    from .accumulation import check_processes, run_torchrun

    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 2:
        raise InputError(f"--processes {processes!r} must be a whole number >= 2 (without it, check runs one process)")
    check_processes(processes)
    if not isinstance(setup, str):
        raise InputError("a check over several processes runs the setup file in each: give 'setup.py:make_setup'")
    (progress or (lambda _m: None))(f"one update under torchrun: {processes} processes (DDP)")
    r = run_torchrun(setup, "check", processes, timeout)
    checks = (
        Check("ddp.params_in_sync", "pass" if not r["out_of_sync"] else "fail",
              f"{len(r['out_of_sync'])} of {r['tensors']} updated tensors differ between ranks after one update"
              + (f": {', '.join(r['out_of_sync'][:5])}" if r["out_of_sync"] else " (bitwise equal)"),
              "a tensor DDP does not all-reduce is updated with each rank's own gradient: the ranks train "
              "different models and the checkpoint saved by rank 0 is only rank 0's",
              "make it a parameter of the model DDP wraps (nn.Parameter on a submodule), not a tensor the optimizer "
              "holds beside it; do not list trainable parameters in _ddp_params_and_buffers_to_ignore"),
        Check("ddp.grads_reduced", "pass" if r["grad_relative_error"] <= TOLERANCE else "fail",
              f"the gradient each rank applied against the average of the ranks' local gradients: relative error "
              f"{r['grad_relative_error']:.2e} (tolerance {TOLERANCE:g})",
              "a rank applying other than the average steps on its own data only",
              "let DDP reduce every gradient (no no_sync() around the last micro-batch, no gradient edited after "
              "backward on one rank only)"))
    return DdpCheckReport(checks=checks, processes=processes, backend=r["backend"], losses=tuple(r["losses"]),
                          out_of_sync=tuple(r["out_of_sync"]), grad_relative_error=r["grad_relative_error"],
                          applied_grad_norm=r["applied_grad_norm"], source=setup)


def ddp_step(setup: Setup) -> dict[str, Any]:
    """In a torchrun process (the process group up): the local gradient on the bare model, then one complete update
    through DDP on this rank's micro-batch under the same random state. Returns rank 0's figures (others: {})."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from .accumulation import _raised_in
    from .check import _loaded
    from .setup import first_line
    from .step import loss_of, to_device, train_mode

    rank, world = dist.get_rank(), dist.get_world_size()
    s = _loaded(setup)
    where = s.source or "the setup"
    if len(s.batches) < world:
        raise InputError(f"{where}: {len(s.batches)} batch(es) for {world} processes: each rank updates on its own "
                         f"micro-batch, give at least {world}")
    batch = to_device(s.batches[rank], next(s.model.parameters()).device)
    names = {id(p): n for n, p in s.model.named_parameters()}
    held = [p for g in s.optimizer.param_groups for p in g["params"]]
    labels = [names.get(id(p), f"a tensor of shape {tuple(p.shape)} the optimizer holds outside the model")
              for p in held]
    ddp = DistributedDataParallel(s.model)
    train_mode(s.model)
    state = torch.get_rng_state()

    def step(model: Any) -> float:
        s.optimizer.zero_grad(set_to_none=True)
        try:
            loss = loss_of(model, batch, s.loss)
            loss.backward()
        except InputError:
            raise
        except Exception as e:
            fn = s.loss if s.loss is not None else type(s.model).forward
            raise InputError(f"{where}: the step raised {type(e).__name__}: {first_line(e)} in "
                             f"{_raised_in(e, fn)} on rank {rank} of {world} (torchrun, {dist.get_backend()})") \
                from None
        return float(loss.detach().float())

    step(s.model)                                   # local: the bare model, no all-reduce
    local = _flat(held)
    torch.set_rng_state(state)                      # the same dropout masks for the update through DDP
    loss = step(ddp)
    applied = _flat(held)
    s.optimizer.step()
    if s.scheduler is not None:
        s.scheduler.step()
    after = torch.cat([p.detach().reshape(-1).double().cpu() for p in held])
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"loss": loss, "local": local, "applied": applied, "after": after})
    if rank != 0:
        return {}
    mean = torch.stack([g["local"] for g in gathered]).mean(0)
    error = max(float(torch.linalg.vector_norm(g["applied"] - mean) / torch.linalg.vector_norm(mean).clamp_min(1e-30))
                for g in gathered)
    sizes = [p.numel() for p in held]
    apart = [label for label, *parts in zip(labels, *(g["after"].split(sizes) for g in gathered), strict=True)
             if not all(torch.equal(parts[0], x) for x in parts[1:])]
    return {"backend": dist.get_backend(), "losses": [g["loss"] for g in gathered], "out_of_sync": apart,
            "tensors": len(held), "grad_relative_error": error,
            "applied_grad_norm": float(torch.linalg.vector_norm(applied))}


def _flat(tensors: list[Any]) -> Any:
    import torch

    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).double().cpu()
                      for p in tensors])
