"""A light storage-lifetime tracker for traced steps: live bytes by category and by module, and phase peaks.

A TorchDispatchMode sees every tensor an op creates; each new storage is counted (rounded up to the CUDA
caching allocator's 512-byte granularity) until a weak reference to it fires. Categories follow PyTorch's
MemTracker: parameters and optimizer states registered up front, storages created in forward are activations,
in backward or the optimizer step temporaries, and gradients are re-labelled when they are accumulated. It does
one dictionary update per storage instead of MemTracker's per-module snapshots, so an 8B step traces in seconds.
"""
from __future__ import annotations

import re
import weakref
from collections import defaultdict
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .allocator import CachingAllocator
from .constants import MIN_BLOCK

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")


def storages(t: torch.Tensor) -> list[Any]:
    """The real storages behind a tensor: a wrapper subclass (DTensor, FSDP's sharded parameters) holds none of
    its own, only its inner tensors do (a DTensor's local shard)."""
    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        inner = (getattr(t, a) for a in attrs)
        return [st for x in inner if isinstance(x, torch.Tensor) for st in storages(x)]
    return [t.untyped_storage()]


def rounded(nbytes: int) -> int:
    """Bytes as the caching allocator hands them out: rounded up to its 512-byte blocks (constants.MIN_BLOCK)."""
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


class ModuleStack:
    """The modules running now, innermost last, named by their path from the root ('LlamaForCausalLM.model.norm').

    Global forward hooks only, as PyTorch's ModTracker names modules but without its backward hooks: those
    (register_multi_grad_hook) keep a model's parameters alive after the run, and the backward is attributed by
    category here, not by module.
    """

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stack: list[str] = []

    @property
    def current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    def _name(self, module: torch.nn.Module) -> str:
        name = self._names.get(module)
        if name is None:  # first seen: a root; name everything under it (a ModuleList never runs forward itself)
            root = type(module).__name__
            for path, sub in module.named_modules():
                self._names.setdefault(sub, f"{root}.{path}" if path else root)
            name = self._names[module]
        return name

    def _push(self, module: torch.nn.Module, _args: Any) -> None:
        self._stack.append(self._name(module))

    def _pop(self, _module: torch.nn.Module, _args: Any, _out: Any) -> None:
        if self._stack:
            self._stack.pop()

    def __enter__(self) -> ModuleStack:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._push),
                         register_module_forward_hook(self._pop, always_call=True)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._stack.clear()


class StorageTracker(TorchDispatchMode):
    """Track live storages; `phase(name)` starts a new peak; `snapshot()` returns the phase's peak breakdown."""

    def __init__(self, *, expandable: bool = False) -> None:
        super().__init__()
        self._info: WeakIdKeyDictionary = WeakIdKeyDictionary()  # storage -> [bytes, category, module, ref]
        self.by_category: dict[str, int] = defaultdict(int)
        self.by_module: dict[str, int] = defaultdict(int)
        self.total = 0
        self.category = "activations"
        self.peak_total = 0
        self.peak_categories: dict[str, int] = {}
        self.peak_modules: dict[str, int] = {}
        self.mods = ModuleStack()
        # the same allocations replayed through the caching-allocator model
        self.allocator = CachingAllocator(expandable=expandable)

    # -- registration -------------------------------------------------------------------------------------
    def register(self, tensor: torch.Tensor, category: str) -> None:
        """Count a tensor made outside the mode (parameters, optimizer states), or re-label a counted one."""
        for st in storages(tensor):
            info = self._info.get(st)
            if info is None:
                self._add(st, category, "")
            elif info[1] != category:
                self.by_category[info[1]] -= info[0]
                self.by_category[category] += info[0]
                info[1] = category

    def forget(self, tensor: torch.Tensor) -> None:
        """Stop counting a tensor that does not live on the device (PyTorch keeps optimizer step counters on the
        host unless the optimizer is fused)."""
        for st in storages(tensor):
            info = self._info.pop(st, None)
            if info is None:
                continue
            info[3] = None  # drop the weak reference: its callback will not fire
            self.allocator.free(id(info))
            self.total -= info[0]
            self.by_category[info[1]] -= info[0]
            if info[2]:
                self.by_module[info[2]] -= info[0]

    def track_gradients(self, params: Any) -> None:
        """Re-label each trainable parameter's .grad as a gradient once it is accumulated."""
        for p in params:
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda q: self.register(q.grad, "gradients"))

    # -- phases ---------------------------------------------------------------------------------------------
    def phase(self, category: str) -> None:
        """Start a phase: new storages get `category`; the peak restarts from what is live now."""
        self.category = category
        self.peak_total = self.total
        self.peak_categories = dict(self.by_category)
        self.peak_modules = dict(self.by_module)

    def snapshot(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """(peak bytes, bytes by category, activation bytes by module) at the current phase's peak."""
        return self.peak_total, {k: v for k, v in self.peak_categories.items() if v}, dict(self.peak_modules)

    # -- internals ------------------------------------------------------------------------------------------
    def _module(self) -> str:
        """The innermost running module, its root class name dropped and layer indices folded ('layers.*.mlp')."""
        name = self.mods.current
        if name is None:
            return "(outside modules: loss, autograd, optimizer)"
        if "." not in name:
            return f"{name} (top level: logits, loss)"
        name = name.split(".", 1)[1]
        for prefix in ("base_model.model.", "model."):
            while name.startswith(prefix):
                name = name[len(prefix):]
        return _LAYER_INDEX.sub(".*", name)

    def _add(self, st: Any, category: str, module: str) -> None:
        nbytes = rounded(st.nbytes())
        if nbytes == 0:
            return
        module = module if category == "activations" else ""
        info = [nbytes, category, module, None]

        def free(_ref: Any, info: list = info) -> None:
            self.allocator.free(id(info))
            self.total -= info[0]
            self.by_category[info[1]] -= info[0]
            if info[2]:
                self.by_module[info[2]] -= info[0]

        info[3] = weakref.ref(st, free)
        self._info[st] = info
        self.allocator.malloc(id(info), nbytes)
        self.total += nbytes
        self.by_category[category] += nbytes
        if module:
            self.by_module[module] += nbytes
        if self.total > self.peak_total:
            self.peak_total = self.total
            self.peak_categories = dict(self.by_category)
            self.peak_modules = dict(self.by_module)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        module = None
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                for st in storages(t):
                    if st not in self._info:
                        if module is None:
                            module = self._module()
                        self._add(st, self.category, module)
        return out

    def _resized(self, st: Any) -> None:
        """FSDP frees and refills unsharded parameters with storage.resize_(): follow the new size."""
        info = self._info.get(st)
        nbytes = rounded(st.nbytes())
        if info is None:
            if nbytes:
                self._add(st, self.category, self._module())
            return
        delta = nbytes - info[0]
        if delta == 0:
            return
        self.allocator.free(id(info))
        info[0] = nbytes
        if nbytes:
            self.allocator.malloc(id(info), nbytes)
        self.total += delta
        self.by_category[info[1]] += delta
        if info[2]:
            self.by_module[info[2]] += delta
        if self.total > self.peak_total:
            self.peak_total = self.total
            self.peak_categories = dict(self.by_category)
            self.peak_modules = dict(self.by_module)

    def __enter__(self) -> StorageTracker:
        self.mods.__enter__()
        original = self._original_resize = torch.UntypedStorage.resize_
        tracker = self

        def resize_(st: Any, size: int) -> Any:
            result = original(st, size)
            tracker._resized(st)
            return result

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._original_resize  # type: ignore[method-assign]
        self.mods.__exit__(*exc)
