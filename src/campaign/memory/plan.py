"""The memory, trace and kv commands' one call: an estimate of a workload (analytic, or traced on fake tensors) with
its fit on the cards; the KV cache with what fits a card beside the weights."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..checks import Check
from ..hardware.cards import all_cards as catalog_cards, find_card
from ..models.resolve import model_spec
from ..models.spec import ModelSpec
from ..results import Result
from ..units import GiB
from .breakdown import MemoryEstimate
from .device_map import DeviceMap, device_map_check
from .estimate import estimate_memory
from .fit import Fit, Frontier, card_estimate, fit_cards, frontier, max_value, training_bytes
from .kv import KVCard, KVEstimate, estimate_kv
from .offload import HostMemory, host_memory
from .recipe_keys import ConfigKey
from .trace import trace_memory
from .workload import Workload, make_workload, weights_format

# the cards shown when none is asked for: the common rentals, large to small, and one AMD card
FEATURED_CARDS = ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB", "A100-40GB", "L40S-48GB", "RTX-A6000-48GB",
                  "RTX-5090-32GB", "RTX-4090-24GB", "L4-24GB", "T4-16GB", "MI300X-192GB")


@dataclass(frozen=True)
class MemoryPlan(Result):
    """An estimate and its fit per card. `card`: the one card asked for (its fit is fits[0]), else None. Its check
    memory.fits: the card asked for holds the step with the reserve ('tight' fails); without a card the table is
    information, no check."""

    estimate: MemoryEstimate
    fits: tuple[Fit, ...]
    card: str | None = None
    frontier: Frontier | None = None  # --frontier: the edge of what fits the card, and what each change saves
    recipe: tuple[ConfigKey, ...] = ()  # --config: every key of the user's files, with its use
    host: HostMemory | None = None  # CPU offload: host RAM per process (memory/offload.py)
    host_memory_bytes: int | None = None  # --host-memory: the host RAM each process may take
    generic: str = ""  # the formulas' estimate used the generic activation model (a family they do not know)
    ref: str = ""  # the model as the user named it (for the trace command to run instead)
    device_map: DeviceMap | None = None  # --device-map: the layers per card and each card's peak (device_map.py)
    # the estimate's schema: load_estimate (campaign explain) reads what memory --json and trace --json write
    schema: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", self.estimate.schema)

    @property
    def checks(self) -> tuple[Check, ...]:
        return self._recipe_check() + self._family_check() + self._fit_check() + self._host_check()

    def _family_check(self) -> tuple[Check, ...]:
        """memory.family: the formulas know the model's family. A family they do not know gets the generic
        activation model (models/meta.py), whose activations, and so the fit, are a guess: with a card asked for,
        the check is skipped and the verdict "not verified" until a trace of the real step says."""
        if not self.generic or self.card is None:
            return ()
        return (Check("memory.family", "skipped", f"{self.estimate.model}: its family is not one the formulas "
                      f"model; {self.generic}",
                      "its activations, and so whether the step fits, are a guess",
                      f"trace its real step: campaign trace {self.ref or self.estimate.model} with the same "
                      f"options and --card {self.card}"),)

    def _host_check(self) -> tuple[Check, ...]:
        """memory.host: with CPU offload (ZeRO-Offload, ZeRO-3 or FSDP parameter offload), the host RAM what is
        offloaded takes per process fits --host-memory; without the figure the check is skipped (an offload run
        that overflows host RAM fails)."""
        if self.host is None:
            return ()
        need = self.host.bytes
        if self.host_memory_bytes is None:
            return (Check("memory.host", "skipped", f"CPU offload needs {need / GiB:,.2f} GiB of host RAM per process "
                          "(one per card of the node); no host RAM figure given",
                          "an offload that overflows host RAM stops the run",
                          "give --host-memory (the RAM per process, e.g. the node's RAM / its cards)"),)
        seen = (f"host RAM: needs {need / GiB:,.2f} GiB per process, --host-memory "
                f"{self.host_memory_bytes / GiB:,.2f} GiB")
        if need <= self.host_memory_bytes:
            return (Check("memory.host", "pass", seen + ": fits"),)
        return (Check("memory.host", "fail", seen + ": does not fit",
                      "what is offloaded (listed under Host RAM) does not fit host RAM: the run fails",
                      "more host RAM, more cards (a smaller partition each), or no offload"),)

    def _recipe_check(self) -> tuple[Check, ...]:
        """memory.recipe: every key of the user's recipe is counted or changes no memory; a key not modelled (or
        unknown) makes the estimate a bound, so the check is skipped and the verdict "not verified"."""
        if not self.recipe:
            return ()
        missing = [k for k in self.recipe if k.unmodelled]
        counted = sum(k.use == "modelled" for k in self.recipe)
        if not missing:
            return (Check("memory.recipe", "pass", f"{len(self.recipe)} keys read: {counted} modelled, the others "
                                                   "change no memory"),)
        named = "; ".join(f"{k.file}: {k.key}" + (f" ({k.why})" if k.why else "") for k in missing)
        return (Check("memory.recipe", "skipped", f"not modelled: {named}",
                      "what these keys do to memory is not counted: the estimate is a bound, not a verified figure",
                      "measure a step (campaign measure, or the run's own peak), or estimate without these keys "
                      "(remove them from a copy of the file) for a figure campaign stands behind"),)

    def _fit_check(self) -> tuple[Check, ...]:
        if self.card is None:
            return ()
        if self.device_map is not None:  # every card's own peak; the largest decides
            return (device_map_check(self.device_map, self.card),)
        f = self.fits[0]
        seen = (f"{f.card} ({f.usable_bytes / GiB:,.2f} GiB"
                + (f" left by vLLM's {f.vllm_bytes / GiB:,.2f}" if f.vllm_bytes else "") + f"): {f.verdict}, needs "
                f"{self.estimate.required_bytes / GiB:,.2f} GiB with the reserve "
                f"(headroom {f.headroom_bytes / GiB:+,.2f} GiB)")
        if f.verdict == "fits":
            return (Check("memory.fits", "pass", seen),)
        return (Check("memory.fits", "fail", seen, "a step that does not fit stops with an out-of-memory error" +
                      (" (tight: inside the reserve, it may run until fragmentation or a longer batch)"
                       if f.verdict == "tight" else ""),
                      "a larger card, a smaller batch or context, gradient checkpointing or a lighter method"),)

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the estimate's own JSON with the fits beside it, so that load_estimate (campaign explain) reads
        # what campaign memory --json and campaign trace --json write
        edge = {"frontier": self.frontier.to_dict()} if self.frontier else {}
        keys = {"config_keys": [k.to_dict() for k in self.recipe]} if self.recipe else {}
        host = {"host": self.host.to_dict() | {"host_memory_bytes": self.host_memory_bytes}} if self.host else {}
        cards = {"device_map": self.device_map.to_dict()} if self.device_map else {}
        return self.estimate.to_dict() | {"fits": [f.to_dict() for f in self.fits]} | edge | keys | host | cards


def plan_memory(model: str | Path | ModelSpec, workload: Workload, *, card: str | None = None,
                all_cards: bool = False, solve: bool = True, trace: bool = False, reserve: str | float = "10%",
                context_bytes: int | None = None, fragmentation: float | None = None,
                progress: Callable[[str], None] | None = None, edge: bool = False,
                host_memory_bytes: int | None = None) -> MemoryPlan:
    """Estimate the workload and fit it to cards: `card` (a name, alias or size like '24GiB'), else every catalog
    card with all_cards, else FEATURED_CARDS.

    trace: trace the step on fake tensors (trace_memory; the torch extra) instead of the formulas; its fits give the
    verdict only (the largest batch and context would each need more traces). solve: with the formulas, also the
    largest batch and longest context per card; edge: also the card's frontier (fit.frontier);
    host_memory_bytes: the host RAM per process the ZeRO-Offload check (memory.host) holds it to. reserve,
    context_bytes, fragmentation: as estimate_memory's; progress: trace_memory's.
    """
    spec = model_spec(model)
    options: dict[str, Any] = {"reserve": reserve, "fragmentation": fragmentation}
    if context_bytes is not None:
        options["context_bytes"] = context_bytes
    if workload.device_map != "none":
        return _plan_device_map(spec, workload, card, trace=trace, edge=edge, **options)
    if trace:
        if fragmentation is None:
            options.pop("fragmentation")
        est = trace_memory(model, workload, progress=progress, **options)
    elif card:  # the estimate the card is judged by in every view (the replay against it, where that can matter)
        est = card_estimate(spec, workload, training_bytes(find_card(card).memory_bytes, workload), **options)
    else:
        est = estimate_memory(spec, workload, **options)
    if card:
        cards = [find_card(card)]
    elif all_cards:
        cards = list(catalog_cards())
    else:
        cards = [find_card(n) for n in FEATURED_CARDS]
    fits = fit_cards(spec, workload, cards, solve=solve and not trace, estimate=est,
                     estimate_card=cards[0].memory_bytes if card and not trace else None, **options)
    if solve and not trace:
        est = replace(est, notes=est.notes + (SOLVE_NOTE,))
    if workload.vllm_share and workload.training:
        est = replace(est, notes=est.notes + (VLLM_NOTE.format(share=workload.vllm_share),))
    if solve and not trace and workload.rollouts and workload.training:
        est = replace(est, notes=est.notes + (ROLLOUTS_NOTE.format(rollouts=workload.rollouts),))
    edge_of = frontier(spec, workload, training_bytes(cards[0].memory_bytes, workload), cards[0].name,
                       **options) if edge and card else None
    return MemoryPlan(est, tuple(fits), card, edge_of, host=host_memory(spec, workload),
                      host_memory_bytes=host_memory_bytes, generic="" if trace else spec.generic,
                      ref=spec.name if isinstance(model, ModelSpec) else str(model))


def _plan_device_map(spec: ModelSpec, w: Workload, card: str | None, *, trace: bool, edge: bool,
                     **options: Any) -> MemoryPlan:
    """plan_memory with --device-map: one card size, every card's peak (device_map.py), the largest judged."""
    from ..errors import InputError
    from .device_map import plan_device_map

    if not card or trace or edge:
        raise InputError("--device-map splits the model by the card's size: give --card NAME (and neither --trace "
                         "nor --frontier)" if not card else "--device-map is estimated by the formulas: drop "
                         + ("--trace" if trace else "--frontier"))
    c = find_card(card)
    est, dm = plan_device_map(spec, w, c.name, c.memory_bytes, **options)
    worst = dm.cards[dm.deciding]
    fit = Fit(c.name, c.memory_bytes, est.verdict(c.memory_bytes) if not dm.offloaded else "does not fit",
              c.memory_bytes - worst.required_bytes)
    return MemoryPlan(est, (fit,), card, generic=spec.generic, ref=spec.name, device_map=dm)


VLLM_NOTE = ("a vLLM engine colocated on the card (--vllm-share {share:g}, TRL's vllm_mode colocate and "
             "vllm_gpu_memory_utilization) holds that share of the card's memory: the usable figure is the rest, "
             "for the training (vLLM's sleep mode, which frees it during training, is not modelled)")
ROLLOUTS_NOTE = ("max batch is at most the {rollouts} rollouts a step trains on (TRL's per-card batch comes out of "
                 "them): a larger one needs more rollouts (--rollouts), whose cache the generation phase holds")
SOLVE_NOTE = ("max batch, max seq: found by a search that takes a larger batch or a longer context to need no less; "
              "the allocator can reserve a segment less at a larger one, so a smaller batch can come out tight: "
              "check the batch you pick with --batch")


def plan_kv(model: str | Path | ModelSpec, *, seq_len: int, batch: int = 1, dtype: str = "bf16",
            static: bool = False, max_seq_len: int | None = None, max_batch: int | None = None, block_size: int = 1,
            tp: int = 1, card: str | None = None, weights_dtype: str | None = None, reserve: str | float = "10%",
            context_bytes: int | None = None, fragmentation: float | None = None,
            expandable_segments: bool = False) -> KVEstimate:
    """The kv command's call: estimate_kv, and with `card` (a name, alias or size) what fits it beside the
    weights, by the same full inference estimate as estimate_memory (so kv and memory --infer agree).

    weights_dtype: how the weights are stored (default: the checkpoint's own format, as memory --infer; bf16 for a
    dense one). reserve, context_bytes, fragmentation, expandable_segments: as estimate_memory's.
    """
    spec = model_spec(model)
    est = estimate_kv(spec, seq_len=seq_len, batch=batch, dtype=dtype, static=static, max_seq_len=max_seq_len,
                      max_batch=max_batch, block_size=block_size, tp=tp)
    if not card:
        return est
    c = find_card(card)
    wdtype, group_size = weights_format(spec, weights_dtype, inference=True)
    w = make_workload(mode="infer", dtype=wdtype, group_size=group_size, kv_dtype=dtype, batch=batch,
                      seq_len=seq_len, gpus=tp, shard="tp" if tp > 1 else "none",
                      expandable_segments=expandable_segments)
    options: dict[str, Any] = {"reserve": reserve, "fragmentation": fragmentation}
    if context_bytes is not None:
        options["context_bytes"] = context_bytes
    full = card_estimate(spec, w, c.memory_bytes, **options)  # as memory --infer --card judges the card
    verdict = full.verdict(c.memory_bytes)
    longest = max_value(spec, w, c.memory_bytes, "seq_len", limit=spec.max_position, **options)
    most = max_value(spec, w, c.memory_bytes, "batch", limit=1 << 20, **options)
    return replace(est, card=KVCard(c.name, c.memory_bytes, w.dtype, full.required_bytes, verdict, verdict == "fits",
                                    longest, most, spec.max_position))
