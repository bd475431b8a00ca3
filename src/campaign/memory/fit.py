"""Card fit: the verdict per card, and the inverse solves (largest batch, longest context that fit)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..hardware.cards import Card
from ..models.spec import ModelSpec
from ..results import Record
from .breakdown import MemoryEstimate
from .estimate import estimate_memory
from .parsing import parse_reserve
from .search import largest_satisfying
from .workload import Workload, resized


@dataclass(frozen=True)
class Fit(Record):
    """Does the workload fit one card, with what headroom, and what is the most it could take."""

    card: str
    memory_bytes: int
    verdict: str  # fits | tight | does not fit
    headroom_bytes: int
    max_batch: int | None = None
    max_seq_len: int | None = None
    vllm_bytes: int = 0  # a colocated vLLM engine's share of the card (--vllm-share): the training has the rest

    @property
    def usable_bytes(self) -> int:
        """The card's memory the step is judged against: all of it, less a colocated vLLM engine's share."""
        return self.memory_bytes - self.vllm_bytes

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the bytes the step is judged against (usable_bytes), as the text's fit line says."""
        return {**super().to_dict(), "usable_bytes": self.usable_bytes}


def training_bytes(card_bytes: int, w: Workload) -> int:
    """What a card leaves the training: all of it, less a colocated vLLM engine's share (--vllm-share: vLLM
    reserves gpu_memory_utilization x the card's total memory at start, and keeps it)."""
    return card_bytes - vllm_bytes(card_bytes, w)


def vllm_bytes(card_bytes: int, w: Workload) -> int:
    """The colocated vLLM engine's share of the card (0 without one)."""
    return int(w.vllm_share * card_bytes) if w.training else 0


def max_value(spec: ModelSpec, workload: Workload, memory_bytes: int, field: str, *, limit: int,
              cache: dict[int, int] | None = None, **options: Any) -> int:
    """Largest `field` ('batch' or 'seq_len') in [0, limit] whose step fits (0: not even 1): exponential then binary
    search over fits() from the workload's own value, taking the fit to be monotone (a segment rounding can break
    that: tests/memory/test_solve.py lists where). A probe whose lower bound (no allocator overhead; `cache`, by
    value, may be shared by the cards of one workload) passes the card fails without a replay."""
    low = {} if cache is None else cache
    # with --completion-tokens C a sequence is a prompt and C tokens: the length solved is the prompt's, from 1 (the
    # answer C + it); with --rollouts the micro-batch takes at most the rollouts generated (TRL's per-card batch)
    offset = (workload.completion_tokens or 0) if field == "seq_len" and workload.training else 0
    if field == "batch" and workload.rollouts and workload.training:
        limit = min(limit, workload.rollouts)
    if offset:
        limit = max(0, limit - offset)

    def ok(n: int) -> bool:
        n += offset
        w = resized(workload, field, n)
        if options.get("fragmentation") is None:
            if n not in low:
                low[n] = estimate_memory(spec, w, **{**options, "fragmentation": 0.0}).required_bytes
            if low[n] > memory_bytes:
                return False
        return fits(spec, w, memory_bytes, **options)

    found = largest_satisfying(ok, limit, getattr(workload, field) - offset)
    return found + offset if found else 0


def fits(spec: ModelSpec, workload: Workload, memory_bytes: int, **options: Any) -> bool:
    """Whether the step fits the card as card_estimate judges it, the replay against the card first (where it releases
    nothing it is the one with room to spare too: one replay a probe)."""
    if options.get("fragmentation") is not None:
        return estimate_memory(spec, workload, **options).required_bytes <= memory_bytes
    on_card = estimate_memory(spec, workload, card_bytes=memory_bytes, **options)
    if on_card.required_bytes <= memory_bytes:
        return True
    if not on_card.released_bytes or (on_card.peak_allocated_bytes + on_card.device_bytes
                                      - on_card.peak_reserved_bytes > memory_bytes):
        return False  # the replay with room to spare is this one, or not even the allocated bytes fit
    return estimate_memory(spec, workload, **options).required_bytes <= memory_bytes


def card_estimate(spec: ModelSpec, workload: Workload, card_bytes: int, *, estimate: MemoryEstimate | None = None,
                  **options: Any) -> MemoryEstimate:
    """The estimate a card is judged by (--card, the summary, --all-cards, the solve): with room to spare where it
    fits; else replayed against the card (the allocator releasing its cached segments), unless not even the
    allocated bytes and the context fit. `estimate`: the one with room to spare, if made (a traced one stands)."""
    est = estimate or estimate_memory(spec, workload, **options)
    if (est.method == "formula" and options.get("fragmentation") is None and est.required_bytes > card_bytes
            and est.peak_allocated_bytes + est.device_bytes - est.peak_reserved_bytes <= card_bytes):
        return estimate_memory(spec, workload, card_bytes=card_bytes, **options)
    return est


def fit_cards(spec: ModelSpec, workload: Workload, cards: Iterable[Card], *, solve: bool = True,
              estimate: MemoryEstimate | None = None, estimate_card: int | None = None, **options: Any) -> list[Fit]:
    """Verdict, headroom (card_estimate's) and, with `solve`, the largest batch and longest context per card.
    `estimate`: the workload's, if made; `estimate_card`: the card memory it is card_estimate's for, if any."""
    est = estimate or estimate_memory(spec, workload, **options)
    seq_limit = max(spec.max_position, workload.seq_len)
    out: list[Fit] = []
    batches, lengths = dict[int, int](), dict[int, int]()
    for card in cards:
        mb = mc = None
        usable = training_bytes(card.memory_bytes, workload)  # less a colocated vLLM engine's share
        if solve:
            mb = max_value(spec, workload, usable, "batch", limit=1 << 16, cache=batches, **options)
            mc = max_value(spec, workload, usable, "seq_len", limit=seq_limit, cache=lengths, **options)
        on_card = est if card.memory_bytes == estimate_card else card_estimate(
            spec, workload, usable, estimate=est, **options)
        out.append(Fit(card.name, card.memory_bytes, on_card.verdict(usable), usable - on_card.required_bytes, mb, mc,
                       vllm_bytes=card.memory_bytes - usable))
    return out


def kv_budget(spec: ModelSpec, workload: Workload, memory_bytes: int, *, reserve: str | float = "10%",
              **options: Any) -> int:
    """Bytes a KV cache may take on a card after everything else an inference holds (the vLLM pool the memory
    benchmark scores): the estimate's own cache taken out, its overhead (--fragmentation, else replayed) held fixed."""
    est = estimate_memory(spec, workload, reserve=reserve, **options)
    kv_now = next(i.bytes for i in est.items if i.category == "kv")
    share = options.get("fragmentation") or 0.0  # replayed: the cache's own 2 MiB-rounded segments, no more
    without = est.device_bytes - int(kv_now * (1 + share))
    fraction, absolute = parse_reserve(reserve)
    room = (memory_bytes - absolute) / (1 + fraction) - without
    return max(0, int(room / (1 + share)))


@dataclass(frozen=True)
class Frontier(Record):
    """The edge of what fits one card: rows (seq_len, max batch, the bytes it needs), and what each change modelled
    saves at the workload as given: what_if (change, flag, required bytes, bytes saved)."""

    card: str
    memory_bytes: int
    rows: tuple[tuple[int, int, int], ...]
    what_if: tuple[tuple[str, str, int, int], ...]


def frontier(spec: ModelSpec, workload: Workload, memory_bytes: int, card: str, **options: Any) -> Frontier:
    """Lengths 256, 512, ... up to the model's context (and the workload's own) with their largest batch, up to the
    first where none fits; then the workload with 8-bit AdamW, checkpointing, half the LoRA rank, where they apply."""
    lengths = sorted({n for n in (1 << k for k in range(8, 24)) if n <= spec.max_position} | {workload.seq_len})
    if workload.training and workload.completion_tokens:  # a prompt and its completion: longer than the completion
        lengths = [n for n in lengths if n > workload.completion_tokens]
    rows = []
    for n in lengths:
        if not (most := max_value(spec, w := resized(workload, "seq_len", n), memory_bytes, "batch", limit=1 << 16,
                                  **options)):
            break
        rows.append((n, most, card_estimate(spec, resized(w, "batch", most), memory_bytes, **options).required_bytes))
    changes: list[tuple[str, str, dict[str, Any]]] = []
    if workload.training and workload.optimizer in ("adamw", "adamw-32bit") and workload.method != "frozen":
        changes.append(("8-bit AdamW (bitsandbytes)", "--optimizer adamw-8bit", {"optimizer": "adamw-8bit"}))
    if workload.training and not workload.grad_checkpointing:
        changes.append(("gradient checkpointing", "--grad-checkpointing", {"grad_checkpointing": True}))
    if workload.adapters and workload.training and (half := workload.lora_rank // 2):
        changes.append((f"LoRA rank {half}", f"--lora-rank {half}", {"lora_rank": half}))
    need = [card_estimate(spec, replace(workload, **c), memory_bytes, **options).required_bytes
            for c in [dict[str, Any]()] + [change for _, _, change in changes]]
    return Frontier(card, memory_bytes, tuple(rows), tuple(
        (name, flag, after, need[0] - after) for (name, flag, _), after in zip(changes, need[1:], strict=True)))
