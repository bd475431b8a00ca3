"""Inference loaded with transformers' `from_pretrained(..., device_map="auto")` over several cards: which card holds
which layers, as accelerate places them, and each card's own peak.

from_pretrained(device_map="auto" | "balanced" | "balanced_low_0") calls `get_balanced_memory` (a max_memory per
card: transformers 5's own copy, whose buffer differs from accelerate's, which transformers 4 calls) and then
`infer_auto_device_map` (accelerate/utils/modeling.py; transformers 5's copy splits alike), with the model's
`_no_split_modules` (its decoder layer class) as the modules never split. `split_modules` is that pair of functions
on a tree of module sizes worked out from the config's shapes (`module_tree`): whole decoder layers in order on card
0, 1, ..., the embedding first, the final norm and the LM head last (a tied head goes with the embedding); card 0
keeps room for the largest layer (accelerate's main device); what the cards cannot hold goes to the CPU or disk.

Each card then holds its weights and its layers' KV cache; the activations of a forward are on the card that runs
the current layer (the logits on the head's card). `card_estimates` gives each card's estimate through the same
allocator replay and overheads as a single card's (estimate.finish_estimate).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..models.spec import ModelSpec
from ..results import Record
from .breakdown import Item, MemoryEstimate, Phase
from .constants import CUDA_CONTEXT_BYTES
from .dtypes import ELEMENT_BYTES, QUANTIZED, linear_bytes
from .workload import Workload

OFFLOAD = "cpu"  # where accelerate puts what the cards cannot hold (the CPU, then the disk)
SOURCE = ("get_balanced_memory (transformers 5's own copy, or accelerate's: --balance) + infer_auto_device_map "
          "(accelerate/utils/modeling.py, the same in transformers/integrations/accelerate.py)")
_DEFAULT_CHUNK = Workload.__dataclass_fields__["prefill_chunk"].default  # --prefill-chunk not given


@dataclass
class Node:
    """One module: its bytes, its children in order (named_children), and whether accelerate may split it (a module
    with children not in no_split_module_classes). `tied`: the module whose weight this one's is (a tied LM head)."""

    name: str
    bytes: int
    children: list[Node]
    no_split: bool = False
    tied: str = ""

    @property
    def splittable(self) -> bool:
        return bool(self.children) and not self.no_split


def _group_bytes(spec: ModelSpec, w: Workload, g: Any) -> int:
    """Bytes of one copy of a parameter group as loaded: quantized block linears in their format, the rest in the
    16-bit (or fp32) dtype, as states.weight_bytes counts them."""
    from .states import is_router

    if w.dtype in QUANTIZED and g.role == "linear" and g.in_blocks and not is_router(g):
        lb = linear_bytes(w.dtype, g.shape[0], g.shape[1], group_size=w.group_size, double_quant=w.double_quant)
        return int(lb.data + lb.overhead)
    dense = w.dtype if w.dtype in ("fp32", "bf16", "fp16") else "bf16"
    return int(g.numel * ELEMENT_BYTES[dense])


def _leaf(name: str) -> str:
    """A group's module path: 'self_attn.q_proj.bias' -> 'self_attn.q_proj'."""
    for suffix in (".bias", ".weight"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def module_tree(spec: ModelSpec, w: Workload, *, rotary: bool = True) -> list[Node]:
    """The top-level modules of a decoder LM as transformers builds it (LlamaForCausalLM's layout, which the
    families campaign models share): `model` (the embedding, `layers.0..L-1`, the final norm, the rotary
    embedding's inv_freq and original_inv_freq buffers, head_dim / 2 fp32 values each) and `lm_head` (0 bytes when
    tied: its weight is the embedding's). Each decoder layer holds 1 / L of the block groups (a layer that differs,
    as a MoE's dense first layers, is counted at the mean)."""
    L = max(1, spec.num_layers)
    blocks = [g for g in spec.groups if g.in_blocks]
    first = next((i for i, g in enumerate(spec.groups) if g.in_blocks), len(spec.groups))
    head = [g for g in spec.groups if not g.in_blocks and g.name == "lm_head"]
    before = [g for g in spec.groups[:first] if not g.in_blocks]
    after = [g for g in spec.groups[first:] if not g.in_blocks and g.name != "lm_head"]

    def leaves(groups: list, per: int, prefix: str) -> list[Node]:
        out: dict[str, int] = {}
        for g in groups:
            out[_leaf(g.name)] = out.get(_leaf(g.name), 0) + _group_bytes(spec, w, g) * g.count // per
        return [Node(f"{prefix}{name}", size, []) for name, size in out.items()]

    layers = []
    for i in range(spec.num_layers):
        parts = leaves(blocks, L, f"model.layers.{i}.")
        layers.append(Node(f"model.layers.{i}", sum(p.bytes for p in parts), parts, no_split=True))
    inner = leaves(before, 1, "model.") + [Node("model.layers", sum(n.bytes for n in layers), layers)]
    inner += leaves(after, 1, "model.")
    if rotary:
        inner.append(Node("model.rotary_emb", 2 * (spec.head_dim // 2) * 4, []))
    top = [Node("model", sum(n.bytes for n in inner), inner)]
    embedding = next((n.name for n in inner if n.name != "model.layers"), "")
    if head:
        top += leaves(head, 1, "")
    elif spec.tie_embeddings:
        top.append(Node("lm_head", 0, [], tied=embedding))
    return top


def _walk(nodes: list[Node]) -> list[Node]:
    out = []
    for n in nodes:
        out.append(n)
        out += _walk(n.children)
    return out


def balanced_memory(tree: list[Node], max_memory: list[int], *, low_zero: bool = False,
                    user_set: bool = True, rule: str = "transformers") -> list[int]:
    """get_balanced_memory over the cards' max_memory (bytes each): every card but the last capped at model / cards
    + a buffer; low_zero (balanced_low_0): card 0 gets only what the others cannot hold. One card without a user
    max_memory: 90% of it (from_pretrained passes none). The buffer, `rule`: transformers 5's own copy
    (transformers/integrations/accelerate.py) takes 1.25 x max(the largest no-split layer, the largest module holding
    tensors); accelerate's (transformers 4's from_pretrained calls it) 1.25 x max(the first no-split layer, the mean
    leaf module)."""
    out = list(max_memory)
    n = len([m for m in out if m > 0])
    if n == 0:
        return out
    if n == 1:
        low_zero = False
        if user_set is False:
            out[0] = int(out[0] * 0.9)
    total = sum(t.bytes for t in tree)
    per_gpu = total // (n - 1 if low_zero else n)
    nodes = _walk(tree)
    layers = [x.bytes for x in nodes if x.no_split]
    # leaf modules holding tensors (a tied head holds none: named_parameters lists the embedding's weight once)
    leaves = [x.bytes for x in nodes if not x.children and not x.tied]
    if rule == "transformers":
        per_gpu += int(1.25 * max(max(layers, default=0), max(leaves, default=0)))
    else:
        per_gpu += int(1.25 * max(layers[0] if layers else 0, int(sum(leaves) / max(len(leaves), 1))))
    ids = [i for i, m in enumerate(out) if m > 0]
    for i in ids[:-1]:
        out[i] = min(out[0] if low_zero and i == 0 else per_gpu, out[i])
    if low_zero:
        out[0] = min(max(0, total - sum(out[i] for i in ids[1:])), out[0])
    return out


def _max_layer(nodes: list[Node]) -> tuple[int, list[str]]:
    """accelerate's get_max_layer_size: the largest module that is not split (a leaf or a no-split layer)."""
    size, names = 0, []
    todo = list(nodes)
    while todo:
        n = todo.pop(0)
        if not n.splittable:
            if n.bytes > size:
                size, names = n.bytes, [n.name]
            elif n.bytes == size:
                names.append(n.name)
        else:
            todo = n.children + todo
    return size, names


def split_modules(tree: list[Node], max_memory: list[int]) -> dict[str, int | str]:
    """accelerate's infer_auto_device_map on the tree: module name -> card index, or OFFLOAD for what no card holds.
    Modules go in order to the current card while they fit under its max_memory (card 0 less the largest remaining
    layer, kept for a layer brought back from the CPU); one that does not fit is split into its children if it can
    be, else the next card takes it. A tied head goes with the module whose weight it shares."""
    todo = list(tree)
    placed: dict[str, int | str] = {}
    used = [0] * len(max_memory)
    card = 0
    max_size, max_names = _max_layer(todo)
    while todo:
        n = todo.pop(0)
        max_names = [x for x in max_names if x != n.name and not x.startswith(n.name + ".")]
        if not max_names:
            max_size, max_names = _max_layer(todo)
        if card >= len(max_memory):  # past the last card: the CPU (then the disk) takes the rest
            placed[n.name] = OFFLOAD
            continue
        ties = [t for t in todo if t.tied and (t.tied == n.name or t.tied.startswith(n.name + "."))]
        size = n.bytes + sum(t.bytes for t in ties)
        limit = max_memory[card] - (max_size if card == 0 else 0)
        if used[card] + size <= limit:
            used[card] += size
            placed[n.name] = card
            for t in ties:
                todo.remove(t)
                placed[t.name] = card
            continue
        if n.splittable:
            todo = n.children + todo
            max_size, max_names = _max_layer(todo)
            continue
        if card == 0:
            used[card] += max_size
        card += 1
        todo.insert(0, n)
    return placed


@dataclass(frozen=True)
class CardShare(Record):
    """One card of a device map: the decoder layers it holds (first, last; None: none), whether it has the
    embedding and the head, its weights and KV cache, and its own estimate's figures."""

    card: int
    layers: tuple[int, int] | None
    embedding: bool
    head: bool
    max_memory_bytes: int
    weights_bytes: int
    kv_bytes: int
    peak_allocated_bytes: int
    required_bytes: int

    @property
    def layer_count(self) -> int:
        return 0 if self.layers is None else self.layers[1] - self.layers[0] + 1


@dataclass(frozen=True)
class DeviceMap(Record):
    """A from_pretrained(device_map=...) placement over `gpus` cards of `card_bytes` each: per card its share,
    `deciding` the card with the largest requirement, `offloaded` the modules accelerate puts on the CPU or disk
    (the model does not fit the cards: from_pretrained runs them from host memory, or fails)."""

    policy: str
    gpus: int
    card_bytes: int
    cards: tuple[CardShare, ...]
    deciding: int
    offloaded: tuple[str, ...] = ()
    offloaded_layers: int = 0


def device_of(placed: dict[str, int | str], name: str) -> int | str:
    """The card (or OFFLOAD) of module `name` in a device map whose entries may be its parents ('model')."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in placed:
            return placed[".".join(parts[:k])]
    return placed.get("", OFFLOAD)  # accelerate's whole model on one device


def layer_split(placed: dict[str, int | str], num_layers: int) -> list[int | str]:
    """The card (or OFFLOAD) of each decoder layer."""
    return [device_of(placed, f"model.layers.{i}") for i in range(num_layers)]


def device_map_estimates(spec: ModelSpec, w: Workload, card_bytes: int, *, reserve: str | float = "10%",
                         context_bytes: int = CUDA_CONTEXT_BYTES,
                         fragmentation: float | None = None) -> tuple[DeviceMap, list[MemoryEstimate]]:
    """The placement of `spec` over w.gpus cards of `card_bytes` (each card's max_memory: what torch finds free on
    it, the card less the CUDA context) and each card's estimate: its weights, its layers' KV cache, one layer's
    temporaries when it holds a layer, the logits on the head's card (a dynamic cache: one layer's K or V copied as it
    grows); the allocator overhead, context and reserve as a single card's (finish_estimate). The cache is split by
    layer count (a model whose layers differ in window has each card's share at the mean)."""
    from .activations import inference_temporaries, logits_bytes
    from .estimate import finish_estimate
    from .kv import estimate_kv
    from .phases import _load_items

    low_zero = w.device_map == "balanced_low_0"
    tree = module_tree(spec, w)
    free = [max(0, card_bytes - context_bytes)] * w.gpus
    max_memory = balanced_memory(tree, free, low_zero=low_zero, user_set=False, rule=w.balance)
    placed = split_modules(tree, max_memory)
    nodes = {n.name: n for n in _walk(tree)}
    split = layer_split(placed, spec.num_layers)
    one = replace(w, gpus=1, shard="none")
    kv = estimate_kv(spec, seq_len=w.seq_len, batch=w.batch, dtype=w.cache_dtype)
    # transformers' generate prefills the whole batch in one forward: batch x context tokens, unless --prefill-chunk
    # says otherwise (its default, 8192, is vLLM's chunked prefill, which a device_map load does not run)
    chunk = w.prefill_chunk if w.prefill_chunk != _DEFAULT_CHUNK else w.batch * w.seq_len
    pre_tmp = inference_temporaries(spec, one, min(w.batch * w.seq_len, chunk))
    dec_tmp = inference_temporaries(spec, one, w.batch, decode=True)
    lg, lg_formula = logits_bytes(spec, one)
    head_name = "lm_head"
    embed_name = next((n.name for n in tree[0].children if n.name != "model.layers"), "")

    def card_of(name: str) -> int | str:
        return device_of(placed, name)

    shares, estimates = [], []
    L = max(1, spec.num_layers)
    for c in range(w.gpus):
        mine = [i for i, d in enumerate(split) if d == c]
        own = [n for n in _walk(tree) if not n.children and card_of(n.name) == c]
        weights = sum(n.bytes for n in own)
        has_head = card_of(head_name) == c if head_name in nodes else False
        kv_c = kv.bytes * len(mine) // L
        items = [Item("weights", weights, f"{len(mine)} of {spec.num_layers} decoder layers"
                      + (", the embedding" if card_of(embed_name) == c else "")
                      + (", the LM head" if has_head and nodes[head_name].bytes else "")
                      + (" (tied to the embedding)" if has_head and not nodes[head_name].bytes else "")
                      + f" as accelerate places them on card {c}", "weights", SOURCE)]
        if c == 0:
            items += [Item("buffers", nbytes, what, "weights", "transformers module buffers")
                      for what, nbytes in spec.buffers]
        kv_item = Item("KV cache", kv_c, f"{kv.bytes:,} B x {len(mine)} / {spec.num_layers} layers (each layer's "
                       "cache on its layer's card)", "kv", "campaign kv")
        growth = [Item("cache copy in torch.cat (one layer's K or V)", kv_c // (2 * len(mine)),
                       f"this card's KV cache / (2 x {len(mine)} layers): the old tensor alive while the longer one "
                       "is made", "kv", "transformers DynamicCache.update")] if w.kv_cache == "dynamic" and mine else []
        run = [Item("prefill temporaries", pre_tmp.bytes, pre_tmp.formula + " (on the card running the layer)",
                    "temporaries")] if mine else []
        dec = [Item("decode temporaries", dec_tmp.bytes, dec_tmp.formula, "temporaries")] if mine else []
        logits = [Item("logits", lg, lg_formula + " (on the LM head's card)", "logits",
                       "transformers generate")] if has_head else []
        load = Phase("load", tuple(_load_items(spec, one) + items), f"weights on card {c}")
        prefill = Phase("prefill", tuple(items + [kv_item] + run + logits), "prefill, cache filled")
        decode = Phase("decode", tuple(items + [kv_item] + growth + dec + logits), "last token, cache full")
        sub = replace(spec, num_layers=max(1, len(mine)))  # the replay's per-layer cache and passes: this card's
        est = finish_estimate(sub, one, (load, prefill, decode), reserve=reserve, context_bytes=context_bytes,
                              fragmentation=fragmentation, method="formula")
        est = replace(est, model=spec.name, workload=w, params=spec.inventory_params)
        estimates.append(est)
        shares.append(CardShare(c, (mine[0], mine[-1]) if mine else None, card_of(embed_name) == c, has_head,
                                max_memory[c], weights, kv_c, est.peak_allocated_bytes, est.required_bytes))
    offloaded = tuple(name for name, d in placed.items() if d == OFFLOAD)
    deciding = max(range(w.gpus), key=lambda i: shares[i].required_bytes)
    dm = DeviceMap("balanced_low_0" if low_zero else "balanced", w.gpus, card_bytes, tuple(shares), deciding,
                   offloaded, sum(d == OFFLOAD for d in split))
    return dm, estimates


def plan_device_map(spec: ModelSpec, w: Workload, card_name: str, card_bytes: int, *, reserve: str | float = "10%",
                    context_bytes: int | None = None,
                    fragmentation: float | None = None) -> tuple[MemoryEstimate, DeviceMap]:
    """plan_memory's view of a device map: the deciding card's estimate (the one whose requirement is largest: the
    fit is judged by it) and the placement. Refuses what the split does not model (one line)."""
    from ..errors import InputError

    if spec.encoder or spec.encdec is not None:
        raise InputError(f"{spec.name}: --device-map is modelled for decoder LMs (layers in order, a KV cache per "
                         "layer); estimate it without --device-map")
    spec.formulas_hold()
    dm, estimates = device_map_estimates(spec, w, card_bytes, reserve=reserve, fragmentation=fragmentation,
                                         context_bytes=CUDA_CONTEXT_BYTES if context_bytes is None else context_bytes)
    est = estimates[dm.deciding]
    note = (f"device_map={w.device_map!r} over {w.gpus} x {card_name}: per card the layers accelerate places there, "
            f"their KV cache, one layer's temporaries; card {dm.deciding} needs the most and decides the fit (the "
            "breakdown is its own)")
    if w.device_map == "auto":
        note += "; 'auto' is accelerate's 'balanced'"
    return replace(est, notes=(note,) + est.notes), dm


def device_map_check(dm: DeviceMap, card: str) -> Any:
    """memory.fits for a device map: every card holds its share with the reserve, and no layer goes to the CPU or
    disk (accelerate would place it there when the cards cannot hold the model)."""
    from ..checks import Check
    from ..units import GiB

    rows = "; ".join(f"card {s.card}: {s.required_bytes / GiB:,.2f} GiB" for s in dm.cards)
    seen = f"{dm.gpus} x {card} ({dm.card_bytes / GiB:,.2f} GiB), device_map {dm.policy}: {rows}"
    if dm.offloaded:
        return Check("memory.fits", "fail", seen + f"; accelerate puts {', '.join(dm.offloaded)} on the CPU or disk"
                     + (f" ({dm.offloaded_layers} decoder layers)" if dm.offloaded_layers else ""),
                     "the cards cannot hold the weights: those modules run from host memory (very slow), or the load "
                     "fails", "more or larger cards, or a quantized --dtype")
    worst = dm.cards[dm.deciding]
    if worst.required_bytes <= dm.card_bytes:
        return Check("memory.fits", "pass", seen + f": every card fits (card {worst.card} needs the most)")
    return Check("memory.fits", "fail", seen + f": card {worst.card} does not fit",
                 "a card that does not fit stops the generation with an out-of-memory error",
                 "more or larger cards, a shorter context or fewer sequences, or a quantized --dtype / --kv-dtype")
