"""A tiny GPT trained the way nanoGPT's train.py does it: everything at module level, gradient accumulation, a
warm-up schedule, an evaluation every few iterations, a checkpoint now and then. campaign's example of a script it
watches unchanged:

    campaign check -- python examples/watch/train_gpt.py --max_iters 20

It resumes as nanoGPT does (--init_from resume reads OUT_DIR/ckpt.pt), restoring the weights, the optimizer, the
scheduler and the random generator that draws its batches and dropout masks; campaign checks that resume in a fresh
process:

    campaign check --resume-args "--init_from resume" -- python examples/watch/train_gpt.py --out_dir ck \
        --checkpoint_interval 1
"""
import argparse
import math
import os

import torch
import torch.nn as nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--max_iters", type=int, default=50)
parser.add_argument("--grad_accum", type=int, default=2)
parser.add_argument("--eval_interval", type=int, default=2)
parser.add_argument("--out_dir", default="")
parser.add_argument("--checkpoint_interval", type=int, default=2)
parser.add_argument("--init_from", choices=("scratch", "resume"), default="scratch")
cfg = parser.parse_args()

torch.manual_seed(1337)
block_size, vocab_size, n_embd, n_head, n_layer, batch_size = 16, 64, 32, 4, 2, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


data = torch.randint(vocab_size, (10_000,), generator=torch.Generator().manual_seed(0))


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = [model(*get_batch())[1].item() for _ in range(2)]
    model.train()
    return sum(losses) / len(losses)


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 10))

start = 0
if cfg.init_from == "resume":
    checkpoint = torch.load(os.path.join(cfg.out_dir, "ckpt.pt"), weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    torch.set_rng_state(checkpoint["rng"])
    start = checkpoint["iter"] + 1

for it in range(start, cfg.max_iters):
    if it % cfg.eval_interval == 0:
        print(f"iter {it}: val loss {estimate_loss():.4f}")
    for _micro_step in range(cfg.grad_accum):
        X, Y = get_batch()
        logits, loss = model(X, Y)
        loss = loss / cfg.grad_accum
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if cfg.out_dir and (it + 1) % cfg.checkpoint_interval == 0:
        os.makedirs(cfg.out_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(), "iter": it},
                   os.path.join(cfg.out_dir, "ckpt.pt"))
