"""The GPU check: measure 6 workloads on one card and print analytic, traced and measured figures side by side.

Runs in well under 8 minutes on one H100/H200-class GPU (random weights, two training steps or prefill + decode
per workload). Prints, per workload and phase, peak allocated (analytic / traced / measured) and their ratios,
then reserved and device totals against the estimate, the gap attributed and the margin `campaign explain` gives.
Writes $OUT/gpu_check.json after each workload when OUT is set; a workload that fails is recorded and the
next one runs.

Usage: python benchmarks/gpu_check.py            # on the GPU machine
       python benchmarks/gpu_check.py --dry-run  # tiny models on the CPU, to check the script itself
On a lent device machine, whose python3 already holds torch, transformers, peft and accelerate (nothing is
installed; the package is pure Python), one command does it:
    set -o pipefail; PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/gpu_check.py 2>&1 | tee $OUT/log
(--dry-run was checked here with that machine's transformers 5.17 and accelerate 1.15; it has torch 2.11, Python 3.12).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from campaign import estimate_memory
from campaign.io import atomic_write_json
from campaign.memory import make_workload
from campaign.memory.explain import explain
from campaign.memory.protocol import MeasurementFailed, measure_workload
from campaign.memory.trace import trace_memory

GiB = 2**30
WORKLOADS = [
    ("llama-3.2-1b", dict(batch=4, seq_len=1024)),
    ("llama-3.2-1b", dict(batch=8, seq_len=2048, grad_checkpointing=True)),
    ("llama-3.1-8b", dict(method="lora", batch=2, seq_len=2048, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"))),
    ("qwen3-8b", dict(method="lora", batch=4, seq_len=2048, grad_checkpointing=True)),
    ("llama-3.1-8b", dict(mode="infer", batch=8, seq_len=4096)),
    ("gpt2", dict(batch=16, seq_len=1024, dtype="fp32", mixed_precision=True)),
]


def tiny_model() -> str:
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=128, intermediate_size=352,
               num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2, vocab_size=512,
               max_position_embeddings=512, torch_dtype="bfloat16")
    folder = Path(tempfile.mkdtemp()) / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def main() -> None:
    dry = "--dry-run" in sys.argv
    device = "cpu" if dry else "cuda"
    rows: list[dict] = []
    started = time.perf_counter()
    for model, kw in WORKLOADS:
        if dry:
            model, kw = tiny_model(), {**kw, "batch": 2, "seq_len": 64}
            if kw.get("lora_targets"):
                kw["lora_targets"] = ("q_proj", "v_proj")
        w = make_workload(**kw)
        label = f"{Path(model).name if dry else model} {w.mode} {w.method} b{w.batch}x{w.seq_len}" + (
            " ckpt" if w.grad_checkpointing else "") + (" amp" if w.mixed_precision else "")
        t0 = time.perf_counter()
        try:
            rows.append(check(model, w, label, device))
        except MeasurementFailed as failed:  # one workload out of memory must not cost the others
            print(f"\n{label}: {failed}")
            rows.append(dict(label=label, failed=str(failed), measured=failed.measurement.to_dict()))
        except Exception as e:  # nor may any other error: the device time is spent once
            print(f"\n{label}: {type(e).__name__}: {e}")
            rows.append(dict(label=label, failed=f"{type(e).__name__}: {e}"))
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
        print(f"  ({time.perf_counter() - t0:.0f} s)")
        if os.environ.get("OUT"):  # after each workload: a run cut short keeps what it measured
            atomic_write_json(Path(os.environ["OUT"], "gpu_check.json"), rows)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


def check(model: str, w, label: str, device: str) -> dict:
    """Estimate, trace and measure one workload; print the phases side by side and explain the gap."""
    analytic = estimate_memory(model, w)
    try:
        traced = trace_memory(model, w)
    except Exception as e:  # the measurement is what the device is for: keep going without the trace
        print(f"\n{label}: no trace ({type(e).__name__}: {e})")
        traced = None
    measured = measure_workload(model, w, device=device)
    print(f"\n{label} on {measured.environment.device_name}")
    print(f"  {'phase':15s} {'analytic':>9s} {'traced':>9s} {'measured':>9s} {'a/m':>6s} {'t/m':>6s}")
    by_a = {p.name: p.bytes for p in analytic.phases}
    by_t = {p.name: p.bytes for p in traced.phases} if traced else {}
    phases = []
    for p in measured.phases:
        a, t, m = by_a.get(p.name, 0), by_t.get(p.name, 0), p.peak_allocated_bytes
        print(f"  {p.name:15s} {a / GiB:9.2f} {t / GiB:9.2f} {m / GiB:9.2f} {a / m if m else 0:6.2f} "
              f"{t / m if m else 0:6.2f}")
        phases.append(dict(phase=p.name, analytic=a, traced=t, measured=m,
                           measured_reserved=p.peak_reserved_bytes, device_used=p.device_used_bytes))
    if measured.device_bytes is not None:
        print(f"  reserved: estimated {analytic.peak_reserved_bytes / GiB:.2f}, traced "
              f"{traced.peak_reserved_bytes / GiB if traced else float('nan'):.2f}, measured "
              f"{measured.peak_reserved_bytes / GiB:.2f} GiB; "
              f"device: estimated {analytic.device_bytes / GiB:.2f}, measured {measured.device_bytes / GiB:.2f} GiB")
    e = explain(analytic, measured, traced=traced)
    print(f"  gap measured - analytic {e.gap_bytes / GiB:+.2f} GiB: " + "; ".join(
        f"{g.name.split(' (')[0]} {g.bytes / GiB:+.2f}" for g in e.gaps))
    print(f"  margin {e.margin:.0%} ({e.margin_reason})")
    return dict(label=label, phases=phases, environment=measured.to_dict()["environment"],
                estimate=dict(peak_allocated=analytic.peak_allocated_bytes, peak_reserved=analytic.peak_reserved_bytes,
                              device=analytic.device_bytes),
                traced=traced and dict(peak_allocated=traced.peak_allocated_bytes,
                                       peak_reserved=traced.peak_reserved_bytes, device=traced.device_bytes),
                measured=dict(peak_allocated=measured.peak_allocated_bytes,
                              peak_reserved=measured.peak_reserved_bytes, device=measured.device_bytes),
                explain=e.to_dict())


if __name__ == "__main__":
    main()
