"""A plain GPT-2 (124M, from its config: no download) training loop on random tokens, for benchmarks/watch_speed.py:
the watched run's overhead on a model of real size.

    .venv/bin/python benchmarks/watch_speed.py benchmarks/watch_train_gpt2.py --tokens 128
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=512)
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--iters", type=int, default=1000)
cfg = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
model.train()
for _ in range(cfg.iters):
    ids = torch.randint(0, 50257, (cfg.batch, cfg.tokens), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
