"""One process of `campaign batch --processes N`, started by torchrun: load the setup, accumulate under DDP (gloo on
the CPU, NCCL on a GPU), and rank 0 writes the figures. Usage: ddp_worker SETUP ACCUMULATION OUT.json"""
from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    from ..io import atomic_write_json
    from .accumulation import ddp_variants
    from .setup import load_setup

    setup_ref, accumulation, out = argv[0], int(argv[1]), argv[2]
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        torch.manual_seed(0)                      # the same initial weights on every rank (DDP also broadcasts)
        result = ddp_variants(load_setup(setup_ref), accumulation)
        if dist.get_rank() == 0:
            atomic_write_json(out, result)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
