"""Time `campaign trace` on a full fine-tuning step of Llama-3.1-8B at 1 x 2048 (goal: under 30 s on 2 cores),
next to PyTorch's own MemTracker on the same two fake steps, and print both peaks.

Usage: python benchmarks/trace_speed.py [model] [seq_len]
"""
from __future__ import annotations

import sys
import time

import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from campaign.memory import make_workload
from campaign.memory.trace import trace_memory
from campaign.models.meta import model_class_and_config
from campaign.models.resolve import resolve_config

MODEL = sys.argv[1] if len(sys.argv) > 1 else "llama-3.1-8b"
SEQ = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
GiB = 2**30


def ours() -> tuple[float, int]:
    start = time.perf_counter()
    est = trace_memory(MODEL, make_workload(batch=1, seq_len=SEQ))
    return time.perf_counter() - start, est.peak_allocated_bytes


def raw_memtracker() -> tuple[float, int]:
    start = time.perf_counter()
    cls, config = model_class_and_config(resolve_config(MODEL)[0], transformers=transformers)
    config._attn_implementation = "sdpa"
    with FakeTensorMode():
        model = cls._from_config(config, dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        ids = torch.randint(0, config.vocab_size, (1, SEQ))
        tracker = MemTracker()
        tracker.track_external(model, opt)
        with tracker:
            for _ in range(2):
                tracker.reset_mod_stats()
                model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        peak = max(snap["Total"] for snap in tracker.get_tracker_snapshot("peak").values())
    return time.perf_counter() - start, peak


def main() -> None:
    print(f"{MODEL}, full fine-tuning, bf16 AdamW (foreach), batch 1 x {SEQ}, two steps on fake tensors")
    t_ours, p_ours = ours()
    print(f"campaign trace      {t_ours:6.1f} s   peak {p_ours / GiB:7.2f} GiB   "
          f"{'ok' if t_ours < 30 else 'SLOW (goal < 30 s)'}")
    t_raw, p_raw = raw_memtracker()
    print(f"raw MemTracker      {t_raw:6.1f} s   peak {p_raw / GiB:7.2f} GiB")
    print(f"speed-up {t_raw / t_ours:.1f}x; peaks differ by {(p_ours - p_raw) / GiB:+.3f} GiB")


if __name__ == "__main__":
    main()
