"""Hours of a run when nothing was measured: an estimate from FLOPs, said to be one.

Training FLOPs per token = 6 x trainable params + 4 x frozen params (a frozen weight still carries the forward and
the gradient into its input, not its own gradient: 2 + 2 instead of 2 + 2 + 2), + 2 x params more with gradient
checkpointing (one extra forward), + the attention term 12 x layers x heads x head_dim x seq_len (Chowdhery et al.
2022, PaLM, Appendix B; 6N + 12LHQT). Inference: 2 x params + 4 x layers x heads x head_dim x seq_len. Divided by
the card's dense bf16 FLOP/s (campaign cards) x cards x MFU. The memory plan (campaign memory) says whether the
micro-batch fits the card and the largest that does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..results import Record

# Model FLOPs utilization when nothing was measured: Llama 3 pre-training reported 38-43% BF16 MFU on H100s
# (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4). Small fine-tuning batches often reach less:
# measure a step and pass --mfu.
MFU = 0.40
MFU_SOURCE = "Llama 3 pre-training: 38-43% BF16 MFU on H100 (The Llama 3 Herd of Models, 2024, Table 4)"


@dataclass(frozen=True)
class RuntimeEstimate(Record):
    """One run's hours on one card model: FLOPs / (bf16 FLOP/s x cards x MFU). how is always 'estimated'."""

    model: str
    card: str
    cards: int
    method: str
    tokens: int
    params: int
    trainable_params: int
    flops: float
    formula: str
    mfu: float
    hours: float
    memory_verdict: str         # fits | tight | does not fit (the memory plan, per card)
    max_batch: int | None
    how: str = "estimated"
    phase: str = ""             # the plan phase it was made for, when there is one
    memory_generic: str = ""    # the fit used the generic activation model (a family the formulas do not know)
    ref: str = ""               # the model as the plan names it


def run_flops(params: int, trainable: int, *, layers: int, attention_dim: int, seq_len: int, tokens: int,
              train: bool = True, grad_checkpointing: bool = False) -> tuple[float, str]:
    """FLOPs of a run over `tokens` tokens and the formula in words (see the module docstring)."""
    frozen = max(params - trainable, 0)
    attn = layers * attention_dim * seq_len
    if not train:
        per_token = 2 * params + 4 * attn
        return float(per_token) * tokens, "(2 x params + 4 x layers x attn dim x seq) x tokens"
    per_token = 6 * trainable + 4 * frozen + (2 * params if grad_checkpointing else 0) + 12 * attn
    words = "(6 x trainable + 4 x frozen" + (" + 2 x params (recompute)" if grad_checkpointing else "") + \
        " + 12 x layers x attn dim x seq) x tokens"
    return float(per_token) * tokens, words


def estimate_runtime(model: str | Path, workload: object, *, tokens: int, card: str, mfu: float = MFU) -> \
        RuntimeEstimate:
    """Hours of one run of `workload` (campaign.make_workload; its gpus = cards per run) over `tokens` tokens on
    `card`, from FLOPs; with the memory plan's verdict and largest micro-batch on that card.

    Raises:
        InputError: a card without a bf16 FLOP/s figure, tokens < 1 or an MFU outside (0, 1].
    """
    from ..hardware import find_card
    from ..memory.plan import plan_memory

    if tokens < 1:
        raise InputError(f"tokens {tokens!r} must be at least 1; give the tokens a run processes")
    if not 0 < mfu <= 1:
        raise InputError(f"MFU {mfu!r} must be in (0, 1]; e.g. 0.4")
    c = find_card(card)
    if not c.bf16_dense_flops:
        raise InputError(f"card {c.name!r} has no bf16 FLOP/s figure; give the run's hours instead of an estimate")
    plan = plan_memory(model, workload, card=c.name)  # type: ignore[arg-type]
    est, fit = plan.estimate, plan.fits[0]
    spec_layers, dim = _attention(model)
    w = est.workload
    train = w.mode == "train"
    trainable = est.trainable_params
    params = est.params + (trainable if w.method in ("lora", "qlora") else 0)
    flops, formula = run_flops(params, trainable if train else 0, layers=spec_layers, attention_dim=dim,
                               seq_len=w.seq_len, tokens=tokens, train=train,
                               grad_checkpointing=w.grad_checkpointing)
    hours = flops / (c.bf16_dense_flops * w.gpus * mfu) / 3600
    return RuntimeEstimate(est.model, c.name, w.gpus, w.method, tokens, params, trainable, flops, formula, mfu, hours,
                           fit.verdict, fit.max_batch, memory_generic=plan.generic, ref=str(model))


def _attention(model: str | Path) -> tuple[int, int]:
    """(layers, heads x head_dim) of the model."""
    from ..models.resolve import model_spec

    spec = model_spec(model)
    return spec.num_layers, spec.num_heads * spec.head_dim
