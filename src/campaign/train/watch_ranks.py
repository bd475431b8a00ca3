"""`campaign check --processes N -- python train.py ARGS`: the user's script run unchanged under torchrun (gloo on
the CPU, NCCL on GPUs), each rank watched as one process is (train/watch.py writes one record per rank), and what
only several processes show, from what the ranks did:

- ddp.data_differs: at each watched update, the micro-batches each rank fed its model differ from every other
  rank's (compared by a digest of their tensors). Ranks seeded alike with no DistributedSampler feed every rank the
  same batches: N processes then train on one process's data, N times over.
- ddp.params_in_sync: after each watched update, every parameter tensor of the model is bitwise equal on every rank
  (compared by a checksum of its bits). A model not wrapped in DDP, or a tensor DDP does not all-reduce, drifts
  apart: the ranks train different models and the checkpoint rank 0 saves is only rank 0's.

The one-process checks are rank 0's (its probes run on the model DDP wraps, on rank 0 only).
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
        return [Check("ddp.data_differs", "skipped", why), Check("ddp.params_in_sync", "skipped", why)]
    return [_data(records, seen, n), _sync(records, seen, n)]


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
                     f"the {n} processes train on one process's data, {n} times over: the effective batch is a "
                     f"{n}th of the one planned",
                     "give each rank its own data: a DistributedSampler (sampler.set_epoch(epoch) every epoch), or "
                     "seed each rank's batch draws with its rank (torch.manual_seed(seed + rank))")
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


__all__ = ["rank_checks", "rank_record", "run_ranks"]
