"""A DDP loop with gradient accumulation, as nanoGPT writes it: the model returns its own loss, each micro-batch's
loss is divided by the number of micro-batches, and every micro-batch but the update's last runs under no_sync() so
that DDP all-reduces the accumulated gradient once. campaign watches it unchanged on 2 processes:

    campaign check --processes 2 --no-resume -- python examples/watch/train_ddp_accum.py

and checks, besides the data and the parameters, that each rank applies the mean of the ranks' gradients.
"""
import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
torch.manual_seed(0)                       # the same initial weights on every rank


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x, y):
        out = self.net(x)
        return out, torch.nn.functional.mse_loss(out, y)


model = DDP(Regressor().to(device), device_ids=[device.index] if cuda else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
accum = 2
g = torch.Generator().manual_seed(1000 + rank)          # each rank draws its own batches

model.train()
for _ in range(5):
    for micro in range(accum):
        x = torch.randn(4, 8, generator=g).to(device)
        y = x.sum(dim=1, keepdim=True)
        last = micro == accum - 1
        with contextlib.nullcontext() if last else model.no_sync():
            _, loss = model(x, y)
            loss = loss / accum
            loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
dist.destroy_process_group()
