"""An accelerate loop as people write it: Accelerator(), the model, optimizer, dataloader and scheduler given to
accelerator.prepare, gradient accumulation under accelerator.accumulate, accelerator.backward. Run as

    accelerate launch examples/watch/train_accelerate.py      # or: torchrun --nproc-per-node 2 ...

campaign watches it unchanged, on one process or on 2 under torchrun (gloo on the CPU):

    campaign check --processes 2 --no-resume -- python examples/watch/train_accelerate.py

accelerate wraps the model in DistributedDataParallel, gives each rank its share of the batches and skips DDP's
all-reduce (no_sync) on the micro-batches before an update's last.
"""
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(gradient_accumulation_steps=2, cpu=not torch.cuda.is_available())
set_seed(0)                                # the same initial weights on every rank

g = torch.Generator().manual_seed(0)
x = torch.randn(256, 16, generator=g)
y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

model.train()
for _epoch in range(3):
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
accelerator.end_training()
