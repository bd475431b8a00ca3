"""`campaign check --processes N -- python train.py ARGS`: the user's script run unchanged under torchrun (gloo on
the CPU, NCCL on GPUs), each rank watched as one process is (train/watch.py writes one record per rank), and what
only several processes show, from what the ranks did:

- ddp.data_differs: at each watched update, the micro-batches each rank fed its model differ from every other
  rank's (compared by a digest of their tensors). Ranks seeded alike with no DistributedSampler feed every rank the
  same batches: N processes then train on one process's data, N times over.
- ddp.params_in_sync: after each watched update, every parameter tensor of the model is bitwise equal on every rank
  (compared by a checksum of its bits). A model not wrapped in DDP, or a tensor DDP does not all-reduce, drifts
  apart: the ranks train different models and the checkpoint rank 0 saves is only rank 0's.
- ddp.grad_is_mean: at each watched update, the gradient each rank's optimizer applies is the mean over the ranks of
  the gradients each rank computed from its own micro-batches (what DDP's all-reduce gives). Each rank's own gradient
  is read by a hook on each parameter as each backward computes it, before any communication, so it carries the
  loop's own loss scaling; the two are compared by a linear fingerprint (train/watch.py), within the relative
  tolerance of the parameters' dtype. An all-reduce with SUM and no division applies N times the mean; a backward
  under no_sync() at every micro-batch applies each rank's own gradient. Where the model returns its own loss, the
  loop's scaling of the micro-batches must also add up to 1 over an update: a loss divided by the world size (which
  DDP's averaging already does) adds up to 1/N, and the update is N times too small.

The one-process checks are rank 0's (its probes run on the model DDP wraps, on rank 0 only), but for
step.accumulation: every rank probes its last update, and the ranks' accumulated gradients, averaged as DDP does,
are compared with the whole update's over every rank's micro-batches (rank_accumulation).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..checks import Check, listed
from ..errors import InputError

RECORD = "observed.rank{rank}.json"


def rank_record(out: str, rank: int) -> str:
    """Where rank `rank` writes its record, beside the one-process record's path."""
    return str(Path(out).with_name(RECORD.format(rank=rank)))


def run_ranks(exe: str, options: list[str], rest: list[str], tmp: Path, timeout: float, script: str,
              processes: int, grace: float) -> list[dict[str, Any]]:
    """One watched run of the script under torchrun with `processes` ranks: each rank's record, rank 0 first. The
    launcher is killed `grace` seconds after the ranks' own --timeout watchdogs should have ended them."""
    from ..io import load_json
    from .accumulation import launch

    out = tmp / "observed.json"
    cmd = [exe, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
           "-m", "campaign.train.watch", "--out", str(out), "--timeout", str(timeout), *options, "--", *rest]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code, stderr = launch(cmd, env, timeout + grace, f"{script} under torchrun ({processes} processes)")
    records = []
    for rank in range(processes):
        path = Path(rank_record(str(out), rank))
        if not path.is_file():
            tail = [line for line in stderr.strip().splitlines() if line.strip()]
            raise InputError(f"{script}: rank {rank} of {processes} ended (torchrun exit {code}) without a record: "
                             f"{tail[-1] if tail else 'no message'}")
        records.append(load_json(path, f"rank {rank}'s record"))
    for rank, r in enumerate(records[1:], start=1):
        if r.get("finished") == "error":
            raise InputError(f"{script}: rank {rank} raised {r['error']} (after {r.get('updates_seen', 0)} updates); "
                             "fix the script, or run it under torchrun to see the traceback")
    return records


def rank_checks(records: list[dict[str, Any]]) -> list[Check]:
    """ddp.data_differs and ddp.params_in_sync from every rank's record."""
    n = len(records)
    seen = min(len(r.get("updates") or []) for r in records)
    if seen == 0:
        why = "a rank reached no watched update"
        return [Check("ddp.data_differs", "skipped", why), Check("ddp.params_in_sync", "skipped", why),
                Check("ddp.grad_is_mean", "skipped", why)]
    return [_data(records, seen, n), _sync(records, seen, n), _mean(records, seen, n)]


def _data(records: list[dict[str, Any]], seen: int, n: int) -> Check:
    cid = "ddp.data_differs"
    same: list[tuple[int, int, int]] = []           # (update, rank a, rank b) fed the same micro-batches
    for u in range(seen):
        digests = [r["updates"][u].get("fed") for r in records]
        if any(d is None for d in digests):
            return Check(cid, "skipped", f"update {u + 1}: a rank fed its model no tensor the watch could read",
                         gates=False)
        same += [(u + 1, a, b) for a in range(n) for b in range(a + 1, n) if digests[a] == digests[b]]
    if same:
        updates = sorted({u for u, _, _ in same})
        pairs = sorted({(a, b) for _, a, b in same})
        return Check(cid, "fail", f"ranks {listed([f'{a} and {b}' for a, b in pairs])} fed their models the same "
                     f"micro-batches at update{'s' if len(updates) > 1 else ''} {', '.join(map(str, updates))} "
                     f"(of {seen} watched)",
                     f"the {n} processes train on one process's data, {n} times over: the effective batch is 1/{n} "
                     "of the one planned",
                     "give each rank its own data: a DistributedSampler (sampler.set_epoch(epoch) every epoch), the "
                     "DataLoader passed to accelerator.prepare (accelerate), the Trainer's own get_train_dataloader, "
                     "or seed each rank's batch draws with its rank (torch.manual_seed(seed + rank))")
    return Check(cid, "pass", f"at each of the {seen} watched updates, the {n} ranks fed their models "
                 f"{n} different sets of micro-batches")


def _sync(records: list[dict[str, Any]], seen: int, n: int) -> Check:
    cid = "ddp.params_in_sync"
    names = records[0].get("param_names") or []
    for u in range(seen):
        sums = [r["updates"][u].get("param_sums") for r in records]
        if any(s is None for s in sums):
            return Check(cid, "skipped", f"after update {u + 1} a rank's parameters were not read", "",
                         "check that every rank steps the same optimizer")
        if any(len(s) != len(sums[0]) for s in sums):
            return Check(cid, "fail", f"after update {u + 1} the ranks hold models of different sizes "
                         f"({', '.join(str(len(s)) for s in sums)} tensors)",
                         "the ranks train different models", "build the same model on every rank")
        differ = sorted({i for s in sums[1:] for i, (x, y) in enumerate(zip(sums[0], s, strict=True)) if x != y})
        if differ:
            shown = [names[i] if i < len(names) else f"tensor {i}" for i in differ]
            return Check(cid, "fail", f"after update {u + 1}, {len(differ)} of {len(sums[0])} parameter tensors "
                         f"differ between the {n} ranks ({listed(shown)})",
                         "each rank updates them with its own gradient: the ranks train different models, and the "
                         "checkpoint rank 0 saves is only rank 0's",
                         "wrap the model in DistributedDataParallel before building the optimizer, start every rank "
                         "from the same weights, and let DDP all-reduce every trainable tensor")
    tensors = len(records[0]["updates"][0]["param_sums"])
    return Check(cid, "pass", f"after each of the {seen} watched updates, all {tensors} parameter tensors are bitwise "
                 f"equal on the {n} ranks")


def gradient_mismatch(applied: list[list[float]], locals_: list[list[list[float]]]) -> tuple[float, float]:
    """(relative error of the applied fingerprint against the mean of the ranks' own, the scalar ratio that best maps
    the mean onto the applied: applied . mean / |mean|^2)."""
    import math

    mean = [[sum(r[i][j] for r in locals_) / len(locals_) for j in range(len(applied[i]))]
            for i in range(len(applied))]
    a = [x for row in applied for x in row]
    m = [x for row in mean for x in row]
    norm = math.sqrt(sum(x * x for x in m))
    if norm == 0:
        return (0.0 if not any(a) else math.inf), math.nan
    rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, m, strict=True))) / norm
    return rel, sum(x * y for x, y in zip(a, m, strict=True)) / norm ** 2


def _mean(records: list[dict[str, Any]], seen: int, n: int) -> Check:
    from .accumulation import TOLERANCE

    cid = "ddp.grad_is_mean"
    largest, tol = 0.0, 1e-4
    for u in range(seen):
        ups = [r["updates"][u] for r in records]
        if any(x.get("grad_applied") is None or x.get("grad_local") is None for x in ups):
            return Check(cid, "skipped", f"update {u + 1}: a rank's gradients were not read (a trainable parameter "
                         "the optimizer holds was in no forward the watch saw)", "",
                         "check that every rank steps one optimizer over the model it trains")
        if len({len(x["grad_applied"]) for x in ups}) > 1:
            return Check(cid, "fail", f"update {u + 1}: the ranks' optimizers hold different numbers of tensors",
                         "the ranks train different models", "build the same model and optimizer on every rank")
        tol = TOLERANCE.get(ups[0].get("grad_dtype", "float32"), 1e-4)
        if any(x.get("grad_clipped", 1.0) is None for x in ups):       # NaN in the rank (JSON null): by value
            return Check(cid, "skipped", f"update {u + 1}: the gradients were clipped entry by entry "
                         "(clip_grad_value_), so the applied gradient is no multiple of the ranks' mean", "",
                         "watch the script with value clipping off (clip_grad_norm_ is understood)")
        locals_ = [x["grad_local"] for x in ups]
        found = [gradient_mismatch(_unclipped(x), locals_) for x in ups]
        off = [rank for rank, (rel, _) in enumerate(found) if not rel <= tol]     # the first rank off, if any
        if off:
            return _not_mean(u + 1, off[0], *found[off[0]], tol, n)
        largest = max([largest, *(rel for rel, _ in found)])
        factors = [x.get("loss_factors") for x in ups]
        if all(factors):
            sums = [sum(f) for f in factors]     # type: ignore[arg-type]
            if all(abs(s * n - 1) <= 1e-3 for s in sums):
                return Check(cid, "fail", f"update {u + 1}: each rank scales its micro-batches' losses by factors "
                             f"adding up to {sums[0]:.4g} = 1/{n} (the loss is divided by the world size {n}) "
                             "before DDP averages the ranks' gradients",
                             f"every update is {n} times too small: the loss is averaged over the ranks twice",
                             "do not divide the loss by the world size: DDP's all-reduce already averages the "
                             "gradients (divide only by the number of micro-batches you accumulate)")
    return Check(cid, "pass", f"at each of the {seen} watched updates, every rank's applied gradient is the mean of "
                 f"the {n} ranks' own gradients (largest relative error {largest:.2g}, tolerance {tol:g})")


def rank_accumulation(records: list[dict[str, Any]]) -> Check | None:
    """step.accumulation across the ranks: the gradient the ranks accumulated over the last watched update's
    micro-batches, averaged over the ranks as DDP does, against the gradient of the whole update, every rank's
    micro-batches together: each rank's whole-batch gradient of the model's own loss, weighted by the number of
    terms its loss averages over where the loop passes a count over the update (num_items_in_batch: token-weighted
    over every rank), else alike. None where a rank's update was not probed (rank 0's own facts stand)."""
    import math

    found = [r.get("accumulation") or {} for r in records]
    if not all(f.get("applies") and f.get("accumulated") and f.get("whole") for f in found):
        return None
    if len({len(f["accumulated"]) for f in found}) > 1:
        return None
    n = len(found)
    given = [f.get("weight") for f in found]
    weights = [float(w) for w in given if w is not None and w > 0]
    if len(weights) != n:
        weights = [1.0] * n
    total = sum(weights)

    def flat(rows: list[list[float]]) -> list[float]:
        return [x for row in rows for x in row]

    acc = [sum(xs) / n for xs in zip(*(flat(f["accumulated"]) for f in found), strict=True)]
    whole = [sum(w * x for w, x in zip(weights, xs, strict=True)) / total
             for xs in zip(*(flat(f["whole"]) for f in found), strict=True)]
    norm = math.sqrt(sum(x * x for x in whole))
    rel = math.sqrt(sum((a - b) ** 2 for a, b in zip(acc, whole, strict=True))) / norm if norm else \
        (0.0 if not any(acc) else math.inf)
    ratio = sum(a * b for a, b in zip(acc, whole, strict=True)) / norm ** 2 if norm else math.nan
    tol = max(f["tolerance"] for f in found)
    k = found[0]["micro_batches"]
    scaled = ", ".join(f"{x:.4g}" for x in found[0]["factors"])
    weighed = ("weighted by the terms each rank's loss averages over (" + ", ".join(f"{w:g}" for w in weights) + ")"
               if weights != [1.0] * n else "the ranks weighed alike")
    seen = (f"the gradient accumulated over the last update's micro-batches on the {n} ranks ({k} on rank 0, its "
            f"model's own loss scaled by {scaled}), averaged over the ranks as DDP does, is {rel:.2g} (relative) off "
            f"the gradient of the whole update, every rank's micro-batches together ({weighed}; tolerance {tol:g})")
    cid = "step.accumulation"
    if rel <= tol:
        return Check(cid, "pass", seen)
    return Check(cid, "fail", seen + f"; the update is {ratio:.4g} times the whole update's",
                 "the update is not the one the effective batch promises: a sum of means, micro-batches or ranks "
                 "weighted by their length rather than their tokens, or a loss divided by the world size",
                 "divide each micro-batch's loss by the accumulation steps where micro-batches hold equal tokens; "
                 "else sum the token losses and divide by the update's token count over every rank "
                 "(transformers: num_items_in_batch, average_tokens_across_devices)")


def _unclipped(update: dict[str, Any]) -> list[list[float]]:
    """The applied gradient's fingerprint before gradient clipping by the total norm (which scales every gradient
    by one factor <= 1, the same on every rank): the Trainer clips at max_grad_norm=1.0 by default."""
    c = float(update.get("grad_clipped", 1.0))
    return update["grad_applied"] if c == 1.0 or not c > 0 else [[x / c for x in row] for row in update["grad_applied"]]


def _not_mean(update: int, rank: int, rel: float, ratio: float, tol: float, n: int) -> Check:
    cid = "ddp.grad_is_mean"
    if abs(ratio - n) <= 1e-3 * n and abs(rel - (n - 1)) <= 1e-3 * n:       # applied = N x mean: their sum
        return Check(cid, "fail", f"at update {update}, rank {rank}'s applied gradient is {ratio:.4g} times the mean "
                     f"of the {n} ranks' gradients (relative error {rel:.3g}): their sum, not their mean",
                     f"every update is {n} times too large (as if the learning rate were {n} times higher)",
                     f"divide the all-reduced gradients by the world size (dist.all_reduce(g, op=SUM) then "
                     f"g /= {n}), or use ReduceOp.AVG, or wrap the model in DistributedDataParallel")
    return Check(cid, "fail", f"at update {update}, rank {rank}'s applied gradient differs from the mean of the "
                 f"{n} ranks' gradients by {rel:.3g} relative (tolerance {tol:g}; best scalar ratio {ratio:.4g}): "
                 "the gradients were not averaged over the ranks",
                 "each rank applies its own gradient (every backward of the update ran under no_sync(), or no "
                 "all-reduce ran): the ranks drift apart, each trained on its own share of the data",
                 "run the forward and backward of each update's last micro-batch outside no_sync(), so that DDP "
                 "all-reduces the accumulated gradients")

__all__ = ["gradient_mismatch", "rank_accumulation", "rank_checks", "rank_record", "run_ranks"]
