"""One variant built from the reference model, measured with the project's protocol (MemoryMeter: a 'load' phase,
then an 'evaluate' phase), evaluated on the setup's batches and timed; the batches counted and hashed, so that every
variant provably saw the same data. torch is imported inside the functions that run it."""
from __future__ import annotations

import copy
import gc
import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..memory.measure import MemoryMeter
from ..models.resolve import require_safetensors
from .formats import Format, apply, awq_scales, stored_bytes, torch_dtype
from .result import DataDigest
from .setup import QuantSetup
from .usercode import user_code_error

LATENCY_REPEATS = 5


def reference_model(s: QuantSetup, reference: Format | None) -> Any:
    import torch

    model = s.model
    if isinstance(model, (str, Path)):
        from transformers import AutoModelForCausalLM

        dtype = torch_dtype(reference.name) if reference else "auto"
        model = AutoModelForCausalLM.from_pretrained(str(require_safetensors(model)), dtype=dtype,
                                                     use_safetensors=True)
    elif callable(model) and not isinstance(model, torch.nn.Module):
        try:
            model = model()
        except (Exception, SystemExit) as e:
            raise user_code_error(e, f"{s.source}: the model function {getattr(model, '__name__', '')!r}".replace(
                " ''", ""), "fix the function that builds the model (it ran before any variant)") from None
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{s.source}: model is a {type(model).__name__}, not a torch.nn.Module")
    return model


def precision_of(model: Any) -> str:
    import torch

    for p in model.parameters():
        if p.is_floating_point():
            return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(p.dtype, "fp32")
    return "fp32"


def run_variant(f: Format, reference: Any, s: QuantSetup, examples: list[str], *, device: str,
                group_size: int, calibration: list[Any] | None = None) -> dict[str, Any]:
    """Load (copy, cast, move, quantize) and evaluate one variant under its own MemoryMeter; then time it."""
    import torch

    meter = MemoryMeter(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0   # a fresh CPU meter starts at zero
    with meter.around(f.name):
        with meter.phase("load"):
            variant = copy.deepcopy(reference).to(device)
            apply(f, variant, keep=s.keep, group_size=group_size, device=device,
                  calibration=(calibration or s.calibration) if f.calibrated else None)
        with meter.phase("evaluate"), torch.no_grad():
            outcomes = _outcomes(variant, s, examples, device)
    measured = meter.result()
    load, evaluate = measured.phases[0], measured.phases[1]
    counted = stored_bytes(variant)
    scales = awq_scales(variant) if f.name == "awq-int8" else None
    with torch.no_grad():
        ms = _latency(variant, s, device)
    del variant
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"outcomes": outcomes, "stored": counted["quantized"] + counted["dense"], "quantized": counted["quantized"],
            "measured": load.allocated_bytes - before,
            "peak": max(load.peak_allocated_bytes, evaluate.peak_allocated_bytes),
            "ms_per_token": ms, "awq_scales": scales}


KV_PROJECTIONS = ("k_proj", "v_proj")
FP8_MAX = 448.0          # float8 e4m3's largest finite value


def kv_outcomes(reference: Any, s: QuantSetup, examples: list[str], dtype: str, *,
                device: str) -> tuple[list[Any], str] | None:
    """The reference model's outcomes on the evaluation batches with its keys and values rounded to `dtype` where
    they are made (the outputs of every k_proj and v_proj), as a cache in that precision holds them; and how. None
    when the model has no such projections (the effect is then only estimated).
    fp8: cast to float8 e4m3 at scale 1, saturated at +/-448 (vLLM's default fp8 cache); int8: symmetric, one
    absmax scale per token and head; fp32, bf16, fp16: a cast."""
    import torch

    heads = _kv_head_dim(reference)
    names = [n for n, m in reference.named_modules() if n.rsplit(".", 1)[-1] in KV_PROJECTIONS and
             isinstance(m, torch.nn.Linear)]
    if not names:
        return None
    model = copy.deepcopy(reference).to(device)
    handles = [model.get_submodule(n).register_forward_hook(lambda _m, _i, out: _round_kv(out, dtype, heads))
               for n in names]
    try:
        with torch.no_grad():
            out = _outcomes(model, s, examples, device)
    finally:
        for h in handles:
            h.remove()
        del model
        gc.collect()
    how = {"fp8": "K and V cast to float8 e4m3 (scale 1, saturated at +/-448)",
           "int8": f"K and V rounded to int8, one absmax scale per token and head of {heads or 'the whole row'}"
                   f"{' elements' if heads else ''}"}.get(dtype, f"K and V cast to {dtype}")
    return out, f"measured: {how} at the outputs of {len(names)} k_proj/v_proj layers (before RoPE)"


def _kv_head_dim(model: Any) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    head = getattr(config, "head_dim", None)
    if not head and getattr(config, "hidden_size", None) and getattr(config, "num_attention_heads", None):
        head = config.hidden_size // config.num_attention_heads
    return int(head) if head else None


def _round_kv(x: Any, dtype: str, head: int | None) -> Any:
    import torch

    if dtype == "fp8":
        return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(x.dtype)
    if dtype == "int8":
        shape = x.shape
        g = x.float().reshape(*shape[:-1], -1, head) if head and shape[-1] % head == 0 else x.float().unsqueeze(-2)
        scale = g.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
        return (torch.round(g / scale).clamp(-127, 127) * scale).reshape(shape).to(x.dtype)
    return x.to(torch_dtype(dtype)).to(x.dtype)


def _to(batch: Mapping[str, Any], device: str) -> dict[str, Any]:
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items()}


def batch_rows(batch: Mapping[str, Any]) -> int:
    for v in batch.values():
        if hasattr(v, "shape") and len(v.shape):
            return int(v.shape[0])
    raise InputError("an evaluation batch holds no tensor to count its rows from; give tensors (input_ids, ...)")


def batch_tokens(batch: Mapping[str, Any]) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    if "input_ids" in batch:
        return int(batch["input_ids"].numel())
    return batch_rows(batch)


def example_ids(s: QuantSetup) -> list[str]:
    n = sum(batch_rows(b) for b in s.batches)
    if s.ids is None:
        return [str(i) for i in range(n)]
    ids = [str(i) for i in s.ids]
    if len(ids) != n or len(set(ids)) != n:
        raise InputError(f"{s.source}: ids must be {n} unique values, one per example in batch order; got "
                         f"{len(ids)} ({len(set(ids))} distinct)")
    return ids


def _outcomes(model: Any, s: QuantSetup, examples: list[str], device: str) -> list[Any]:
    """Per example in order: (summed NLL, scored tokens) for perplexity, else the prediction."""
    out: list[Any] = []
    for b in s.batches:
        if s.metric == "perplexity":
            out.extend(_nll(model, b, device))
        else:
            rows = batch_rows(b)
            try:
                preds = list(s.predict(model, _to(b, device)))  # type: ignore[misc]
            except InputError:
                raise
            except (Exception, SystemExit) as e:
                raise user_code_error(e, f"{s.source}: predict", "fix predict(model, batch) in the setup") from None
            if len(preds) != rows:
                raise InputError(f"{s.source}: predict returned {len(preds)} predictions for a batch of {rows} rows; "
                                 "the evaluation sets would differ between variants: return one per row")
            out.extend(scalar(p) for p in preds)
    if len(out) != len(examples):
        raise InputError(f"{len(out)} outcomes for {len(examples)} examples; the evaluation sets differ")
    return out


def scalar(value: Any) -> Any:
    """A one-element tensor or a numpy scalar as the Python value it holds; anything else as it is."""
    if hasattr(value, "item") and (not hasattr(value, "numel") or value.numel() == 1) and \
            getattr(value, "ndim", 0) in (0, 1):
        return value.item()
    return value


def _nll(model: Any, batch: Mapping[str, Any], device: str) -> list[tuple[float, int]]:
    import torch

    b = _to(batch, device)
    labels = b.get("labels", b["input_ids"]).clone()
    if "labels" not in b and "attention_mask" in b:
        labels[b["attention_mask"] == 0] = -100
    inputs = {k: v for k, v in b.items() if k != "labels"}
    logits = model(**inputs).logits.float()
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(shift_logits.transpose(1, 2), shift_labels, ignore_index=-100,
                                            reduction="none")
    mask = shift_labels != -100
    sums, counts = (nll * mask).sum(1).tolist(), mask.sum(1).tolist()
    if min(counts) == 0:
        raise InputError("an evaluation row has no scored token (labels all -100 after the shift); drop it or "
                         "unmask its text")
    return [(float(x), int(c)) for x, c in zip(sums, counts, strict=True)]


def _latency(model: Any, s: QuantSetup, device: str) -> float | None:
    """Milliseconds per input token of the first batch's forward (or predict): the fastest of 5 after a warm-up
    (the least disturbed by other work on the machine)."""
    import torch

    b = _to(s.batches[0], device)
    run = (lambda: model(**{k: v for k, v in b.items() if k != "labels"})) if s.metric == "perplexity" \
        else (lambda: s.predict(model, b))  # type: ignore[misc]
    run()
    times = []
    for _ in range(LATENCY_REPEATS):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * min(times) / max(1, batch_tokens(s.batches[0]))


def digest(batches: Sequence[Mapping[str, Any]] | None, name: str) -> DataDigest:
    """Name, counts and sha256 of a list of batches (tensor names, dtypes, shapes and bytes, in order)."""
    import torch

    h = hashlib.sha256()
    examples = tokens = 0
    for b in batches or ():
        examples += batch_rows(b)
        tokens += batch_tokens(b)
        for key in sorted(b):
            v = b[key]
            h.update(key.encode())
            if hasattr(v, "detach"):
                t = v.detach().cpu().contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            else:
                h.update(repr(v).encode())
    return DataDigest(name, len(batches or ()), examples, tokens, h.hexdigest())
