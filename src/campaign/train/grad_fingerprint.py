"""Fingerprints of gradients under `campaign check --processes` (train/watch.py, watch_ranks.py,
watch_accumulation.py): two numbers per tensor, linear in the gradient, so that the fingerprint of the ranks' mean
gradient is the mean of their fingerprints and gradients are compared across ranks without sending them."""
from __future__ import annotations

from typing import Any

# the fingerprint of a parameter's gradient under --processes: its sum and its dot product with a fixed random vector
# over its first PROJECTED entries, in float64; both are linear in the gradient, so the fingerprint of the ranks'
# mean gradient is the mean of their fingerprints
PROJECTED = 1 << 16


def fingerprint(g: Any, probe: dict[int, Any]) -> Any:
    """[sum, projection] of gradient `g` (float64, on its device); `probe` caches the random vector per size."""
    import torch

    flat = g.detach().reshape(-1)
    m = min(flat.numel(), PROJECTED)
    r = probe.get(m)
    if r is None or r.device != flat.device:      # the same vector on every rank: seeded by the size only
        r = probe[m] = torch.randn(m, generator=torch.Generator().manual_seed(m), dtype=torch.float64) \
            .to(flat.device)
    head = flat[:m].double()
    return torch.stack([flat.sum(dtype=torch.float64), (head * r).sum()])


def fingerprints(params: list[Any], probe: dict[int, Any]) -> list[list[float]]:
    """Each parameter's gradient fingerprint (linear in the gradient), for the ranks' comparison."""
    import torch

    zero = torch.zeros(2, dtype=torch.float64)
    return torch.stack([fingerprint(p.grad, probe).cpu() if p.grad is not None else zero for p in params]).tolist()
