"""A plain nn.Module in the style of nanoGPT: `forward(idx, targets=None)` returns `(logits, loss)`, the logits of
the last position only when no targets are given, and the setup gives the loss with its `loss(model, batch)` field.

    campaign check examples/plain_setup.py:make_setup          # every check on one step of it
    campaign batch examples/plain_setup.py:make_setup          # its loop's accumulate (tokens of the update): passes
    campaign batch examples/plain_setup.py:mean_of_means       # each micro-batch's mean / steps: fails
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, BLOCK = 96, 16


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(0.1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=VOCAB, block_size=BLOCK, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight                   # weight tying
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 1))

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:                                                   # inference: the last position's logits only
            logits, loss = self.lm_head(x[:, [-1], :]), None
        return logits, loss


def get_batch(data, starts, ends):
    """Rows of BLOCK tokens from the token stream and their next tokens; past a document's end the targets are -1."""
    x = torch.stack([data[i:i + BLOCK] for i in starts])
    y = torch.stack([data[i + 1:i + 1 + BLOCK] for i in starts])
    for row, end in enumerate(ends):
        y[row, end:] = -1
    return {"idx": x, "targets": y}


def accumulate(model, micro_batches):
    """The loop's accumulation step: each micro-batch's mean loss weighed by its share of the update's targets, so
    that every target of the update weighs the same (in one process: under DDP the share is of the all-reduced
    count, times the world size, and `campaign batch --processes 2` says this one is NOT EQUIVALENT)."""
    total = sum(int((b["targets"] != -1).sum()) for b in micro_batches)
    for b in micro_batches:
        _, loss = model(**b)
        (loss * int((b["targets"] != -1).sum()) / total).backward()


def loss_over_steps(model, micro_batches):
    """nanoGPT's `loss / gradient_accumulation_steps`: a target of a micro-batch with fewer of them weighs more."""
    for b in micro_batches:
        _, loss = model(**b)
        (loss / len(micro_batches)).backward()


def make_setup():
    torch.manual_seed(0)
    model = GPT()
    data = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1))
    # three micro-batches of 2 rows, the documents ending early in some rows: 32, 25 and 18 targets
    batches = [get_batch(data, (0, 40), (BLOCK, BLOCK)), get_batch(data, (90, 130), (BLOCK, 9)),
               get_batch(data, (200, 260), (5, 13))]
    return {"model": model, "batches": batches,
            "loss": lambda model, batch: model(batch["idx"], batch["targets"])[1],
            "optimizer": torch.optim.AdamW(model.parameters(), lr=3e-3),
            "accumulate": accumulate}


def mean_of_means():
    return {**make_setup(), "accumulate": loss_over_steps}
