"""A plain DDP loop as people write it for torchrun: the process group from torchrun's environment (gloo on the CPU,
NCCL on GPUs), a DistributedSampler giving each rank its share of the data, the model wrapped in
DistributedDataParallel. campaign watches it unchanged on 2 processes:

    campaign check --processes 2 --no-resume -- python examples/watch/train_ddp.py

and checks that the ranks fed different batches and hold bitwise equal parameters after each update.
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
torch.manual_seed(0)                       # the same initial weights on every rank

g = torch.Generator().manual_seed(0)
x = torch.randn(256, 16, generator=g)
y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
sampler = DistributedSampler(TensorDataset(x, y), shuffle=True, seed=0)
loader = DataLoader(TensorDataset(x, y), batch_size=8, sampler=sampler)

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(32, 1)).to(device)
model = DDP(model, device_ids=[device.index] if cuda else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

model.train()
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
dist.destroy_process_group()
