"""A plain DDP loop that checkpoints as people write it: rank 0 alone saves the weights, the optimizer, the
scheduler and the update count every --save-every updates; --resume loads them on every rank and goes on from the
saved update (the same epoch of the DistributedSampler, the batches already trained on skipped). Under torchrun:

    torchrun --nproc-per-node 2 examples/watch/train_ddp_resume.py --out ckpt            # then again with --resume

campaign checks the resume on 2 processes: the script run again under torchrun with --resume, each rank's first
update compared with the same rank's update after the checkpoint in the uninterrupted run:

    campaign check --processes 2 --resume-args "--resume" -- python examples/watch/train_ddp_resume.py --out ckpt
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="out-ddp")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--updates", type=int, default=40)
args = parser.parse_args()

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

model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device),
            device_ids=[device.index] if cuda else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
checkpoint = os.path.join(args.out, "ckpt.pt")
step = 0
if args.resume:
    state = torch.load(checkpoint, map_location=device, weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    step = state["step"]

model.train()
while step < args.updates:
    epoch, skip = divmod(step, len(loader))
    sampler.set_epoch(epoch)
    for i, (xb, yb) in enumerate(loader):
        if i < skip:                       # trained on before the checkpoint
            continue
        loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if step % args.save_every == 0 and rank == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "step": step}, checkpoint)
        if step >= args.updates:
            break
dist.destroy_process_group()
