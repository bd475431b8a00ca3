"""One process of `campaign batch --processes N`, started by torchrun: load the setup, accumulate under DDP (gloo on
the CPU, NCCL on a GPU): the setup's own accumulate on this rank's share of the micro-batches when it gives one, and
each normalization; rank 0 writes the figures. Usage: ddp_worker SETUP TASK OUT.json, TASK 'accumulate:K' (batch,
K micro-batches per update) or 'check' (`campaign check --processes`'s one update, train/ddp_check.py).

The first rank to fail writes why, one line, to ERROR_FILE beside OUT (created exclusively: the ranks torchrun stops
after it, or whose collectives break when it exits, do not overwrite the root cause)."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    from ..errors import InputError
    from ..io import atomic_write_json
    from .accumulation import ERROR_FILE, ddp_variants
    from .ddp_check import ddp_step
    from .setup import first_line, load_setup

    setup_ref, task, out = argv[0], argv[1], argv[2]
    rank = os.environ.get("RANK", "?")
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        torch.manual_seed(0)                      # the same initial weights on every rank (DDP also broadcasts)
        if task == "check":
            result = ddp_step(load_setup(setup_ref))
        else:
            result = ddp_variants(load_setup(setup_ref), int(task.removeprefix("accumulate:")))
        if dist.get_rank() == 0:
            atomic_write_json(out, result)
        dist.barrier()
    except BaseException as e:
        line = str(e) if isinstance(e, InputError) else \
            f"rank {rank} of the torchrun check raised {type(e).__name__}: {first_line(e)}"
        _first_failure(Path(out).with_name(ERROR_FILE), line)
        raise
    finally:
        dist.destroy_process_group()


def _first_failure(path: Path, line: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:                       # another rank failed first: its cause stands
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(line.replace("\n", " ") + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
