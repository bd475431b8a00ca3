"""campaign quant on a lent GPU: the GPU formats (fp8, bitsandbytes NF4 and LLM.int8, torchao int4 packed for the
card) beside int8, each compared with the bf16 reference on the same batches: weights estimated, stored and measured
by the card's allocator, perplexity and its paired test, forward latency per token.

Usage: python benchmarks/gpu_quant_check.py            # on the GPU machine
       python benchmarks/gpu_quant_check.py --dry-run  # int8 and int4 on the CPU, to check the script itself
On a lent device machine (torch and transformers installed; torchao and bitsandbytes if present, else their formats
are recorded as refused):
    set -o pipefail; PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/gpu_quant_check.py 2>&1 | tee $OUT/log
Writes $OUT/quant_check.json after each format when OUT is set; a format that fails is recorded and the next runs.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from campaign.compress import compare_quant  # noqa: E402
from campaign.compress.formats import quiet_torchao  # noqa: E402
from campaign.io import atomic_write_json  # noqa: E402

FORMATS = {"cuda": ["int8", "int4", "fp8", "nf4", "bnb-int8"], "cpu": ["int8", "int4"]}


def setup(device: str) -> dict:
    """A random-weight Llama (about 0.4B parameters on the card, a tiny one on the CPU) and 8 rows of 512 tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    big = device == "cuda"
    config = LlamaConfig(hidden_size=1024 if big else 128, intermediate_size=4096 if big else 256,
                         num_attention_heads=16 if big else 4, num_key_value_heads=4 if big else 2,
                         num_hidden_layers=16 if big else 2, vocab_size=32000 if big else 512,
                         max_position_embeddings=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    length = 512 if big else 64
    batches = [{"input_ids": (ids := torch.randint(0, config.vocab_size, (4, length), generator=g)),
                "attention_mask": torch.ones_like(ids)} for _ in range(2)]
    return {"model": model, "batches": batches, "name": f"random llama {'0.4B' if big else 'tiny'}"}


def main() -> None:
    device = "cpu" if "--dry-run" in sys.argv else "cuda"
    with quiet_torchao():   # transformers imports torchao when it is installed
        made = setup(device)
    rows = []
    for fmt in FORMATS[device]:
        start = time.perf_counter()
        try:
            r = compare_quant(dict(made), formats=[fmt], guards=["perplexity<=1"])
        except Exception as e:  # recorded, the next format runs
            rows.append({"format": fmt, "failed": f"{type(e).__name__}: {e}"})
            print(f"{fmt}: FAILED {type(e).__name__}: {e}")
        else:
            ref, v = r.variants
            row = {"format": fmt, "device": r.device_name, "seconds": round(time.perf_counter() - start, 1),
                   "variants": [x.to_dict() for x in r.variants]}
            rows.append(row)
            print(f"{fmt} on {r.device_name}: weights est/stored/measured {v.weight_bytes_estimated}/"
                  f"{v.weight_bytes_stored}/{v.weight_bytes_measured} B (bf16 {ref.weight_bytes_stored}); "
                  f"perplexity {ref.quality:.3f} -> {v.quality:.3f} (p {v.p_value}); ms/token "
                  f"{ref.ms_per_token:.4f} -> {v.ms_per_token:.4f}; {v.status}")
        if os.environ.get("OUT"):
            atomic_write_json(Path(os.environ["OUT"], "quant_check.json"), rows)


if __name__ == "__main__":
    main()
