"""One process of `campaign batch --processes N`, started by torchrun: load the setup, accumulate under DDP (gloo on
the CPU, NCCL on a GPU): the setup's own accumulate on this rank's share of the micro-batches when it gives one, and
each normalization; rank 0 writes the figures. Usage: ddp_worker SETUP TASK OUT.json, TASK 'accumulate:K' (batch,
K micro-batches per update) or 'check' (`campaign check --processes`'s one update, train/ddp_check.py).

A rank that fails records its own error, one line with its rank and the time, in ERROR_RECORD beside OUT: the
launcher names the rank that failed first with its own error, not a rank that only lost its connection to it
(accumulation.root_cause). A rank past the last barrier marks itself done (DONE_RECORD): the result is complete
then, and a crash in gloo's teardown after it does not fail the check."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    setup_ref, task, out = argv[0], argv[1], argv[2]
    try:
        _run(setup_ref, task, out)
    except BaseException as e:                    # recorded before the process group goes down
        _record(Path(out), os.environ.get("RANK", "?"), time.time(), e)
        raise
    finally:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def _run(setup_ref: str, task: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from ..io import atomic_write_json
    from .accumulation import DONE_RECORD, ddp_variants
    from .ddp_check import ddp_step
    from .setup import load_setup

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)                          # the same initial weights on every rank (DDP also broadcasts)
    if task == "check":
        result = ddp_step(load_setup(setup_ref))
    else:
        result = ddp_variants(load_setup(setup_ref), int(task.removeprefix("accumulate:")))
    if dist.get_rank() == 0:
        atomic_write_json(out, result)
    dist.barrier()
    Path(out).with_name(DONE_RECORD.format(rank=dist.get_rank())).touch()


def _record(out: Path, rank: str, when: float, e: BaseException) -> None:
    """This rank's own error, one line, with the time it was raised (accumulation.ERROR_RECORD beside OUT)."""
    from ..errors import InputError
    from ..io import atomic_write_json
    from .accumulation import ERROR_RECORD
    from .setup import first_line

    line = str(e) if isinstance(e, InputError) else \
        f"rank {rank} of the torchrun check raised {type(e).__name__}: {first_line(e)}"
    number = int(rank) if rank.isdigit() else -1
    atomic_write_json(out.with_name(ERROR_RECORD.format(rank=number)),
                      {"rank": number, "time": when, "line": line.replace("\n", " ")})


if __name__ == "__main__":
    main(sys.argv[1:])
