"""The activation formula against a second method: the tensors autograd actually saves in a real tiny model.

saved_tensors_hooks see every tensor kept for backward; we sum their distinct storages (parameters excluded),
which is what stays alive between forward and backward.
"""
from __future__ import annotations

import pytest

from campaign.memory import make_workload
from campaign.memory.activations import training_activations
from campaign.memory.build import enable_checkpointing
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

B, S, V = 2, 32, 1000


def _saved_bytes(cfg: dict, attention: str, method: str, targets: tuple[str, ...], checkpointing: bool, *,
                 dtype: str = "bfloat16", peft_autocast: bool = True, autocast: bool = False,
                 lora_dropout: float = 0.0) -> int:
    """Bytes of the distinct storages one forward saves for backward. `dtype`: the weights' (a torch dtype's name);
    `peft_autocast`: peft's autocast_adapter_dtype (fp32 adapters on a 16-bit base); `autocast`: the forward under
    torch.autocast (bf16); `lora_dropout`: peft's."""
    torch = pytest.importorskip("torch")
    import transformers

    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = attention
    model = getattr(transformers, cfg["architectures"][0])(config).to(getattr(torch, dtype))
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_dropout=lora_dropout, target_modules=(
            "all-linear" if targets == ("all-linear",) else list(targets))), autocast_adapter_dtype=peft_autocast)
    if checkpointing:
        enable_checkpointing(model)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, cfg["vocab_size"], (B, S))
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with amp, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids, use_cache=False)
    return sum(saved.values())


@pytest.mark.parametrize("attention, method, targets, checkpointing, tolerance", [
    ("sdpa", "full", ("all-linear",), False, 0.01),
    ("eager", "full", ("all-linear",), False, 0.01),
    ("sdpa", "full", ("all-linear",), True, 0.01),
    ("sdpa", "lora", ("all-linear",), False, 0.03),
    ("eager", "lora", ("all-linear",), False, 0.03),
    ("sdpa", "lora", ("q_proj", "v_proj"), False, 0.03),
])
def test_llama_saved_activations_match_autograd(attention, method, targets, checkpointing, tolerance):
    cfg = tiny_llama()
    measured = _saved_bytes(cfg, attention, method, targets, checkpointing)
    spec = spec_from_config(cfg, name="tiny", source="test")
    w = make_workload(mode="train", method=method, batch=B, seq_len=S, attention=attention, lora_rank=8,
                      lora_targets=targets, grad_checkpointing=checkpointing)
    acts, _, _ = training_activations(spec, w)
    # beside the layers, the loss keeps log_softmax's fp32 output (b x s x V x 4) and the int64 ids/targets
    estimate = acts + B * S * V * 4 + 2 * B * S * 8
    assert estimate == pytest.approx(measured, rel=tolerance)


def test_checkpointing_keeps_one_hidden_state_per_layer():
    spec = spec_from_config(tiny_llama(num_hidden_layers=6), name="tiny", source="test")
    plain = training_activations(spec, make_workload(batch=2, seq_len=64))[0]
    ckpt = training_activations(spec, make_workload(batch=2, seq_len=64, grad_checkpointing=True))[0]
    final_norm = 2 * 64 * (4 * 64 + 4 + 2 * 2 * 64)
    assert ckpt == 6 * 2 * 64 * 64 * 2 + final_norm
    assert plain > 4 * ckpt


def test_activations_scale_linearly_with_tokens_under_sdpa():
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    a1 = training_activations(spec, make_workload(batch=1, seq_len=128))[0]
    a4 = training_activations(spec, make_workload(batch=4, seq_len=128))[0]
    assert a4 == 4 * a1


WIDE = dict(vocab_size=256, hidden_size=128, intermediate_size=352, num_attention_heads=8, num_key_value_heads=2,
            num_hidden_layers=3)
ATTN_ONLY = ("q_proj", "k_proj", "v_proj", "o_proj")
FAMILIES = {
    "qwen2": (dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"]), "sdpa", ("all-linear",), 0.03),
    "qwen3": (dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=16), "sdpa", ("all-linear",), 0.03),
    "mistral": (dict(model_type="mistral", architectures=["MistralForCausalLM"]), "eager", ("all-linear",), 0.03),
    "mixtral": (dict(model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=4,
                     num_experts_per_tok=2), "sdpa", ATTN_ONLY, 0.10),
    "qwen3_moe": (dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=4,
                       num_experts_per_tok=2, moe_intermediate_size=96, head_dim=16), "sdpa", ATTN_ONLY, 0.10),
    "phi3": (dict(model_type="phi3", architectures=["Phi3ForCausalLM"], pad_token_id=0, eos_token_id=1,
                  bos_token_id=1), "sdpa", ("all-linear",), 0.10),
    # Gemma's RMSNorm keeps an fp32 (1 + w) product; eager attention scores every key, a sliding layer's too
    "gemma": (dict(model_type="gemma", architectures=["GemmaForCausalLM"], head_dim=16,
                   hidden_act="gelu_pytorch_tanh"), "sdpa", ("all-linear",), 0.03),
    "gemma2": (dict(model_type="gemma2", architectures=["Gemma2ForCausalLM"], head_dim=16, sliding_window=16),
               "eager", ("all-linear",), 0.03),
    "gemma3_text": (dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], head_dim=16,
                         sliding_window=64), "sdpa", ("all-linear",), 0.03),
    "gpt2": (dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=128, n_layer=3, n_head=8,
                  n_positions=256), "eager", ("all-linear",), 0.15),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("method", ["full", "lora"])
def test_other_families_within_their_tolerance(family, method):
    """Llama-like families agree within 3%; the rest are reported with the tolerance they reach."""
    overrides, attention, targets, tolerance = FAMILIES[family]
    cfg = tiny_llama(**WIDE, **overrides)
    measured = _saved_bytes(cfg, attention, method, targets, False)
    spec = spec_from_config(cfg, name="tiny", source="test")
    w = make_workload(mode="train", method=method, batch=B, seq_len=S, attention=attention, lora_rank=8,
                      lora_targets=targets)
    acts, _, _ = training_activations(spec, w)
    logits_saved = 4 + (2 if family == "gemma2" else 0)  # log_softmax output; Gemma 2's soft-capping tanh
    estimate = acts + B * S * spec.vocab_size * logits_saved + 2 * B * S * 8
    assert estimate == pytest.approx(measured, rel=tolerance)


def test_deepspeed_runs_layer_norm_in_the_16_bit_module_autocast_in_fp32():
    # gpt2 (h 768, two LayerNorms a block, full fine-tuning): each LayerNorm keeps its input, 8 B of mean/rstd, and
    # the Linear after it its 16-bit output (2 x 768). Under torch.autocast (--mixed-precision over fp32 weights)
    # layer_norm runs in fp32, so the input is 4 B a value; DeepSpeed ZeRO casts the module to 16 bits and runs no
    # autocast (engine.py _cast_module_mixed_precision), so it is 2 B.
    from campaign.memory.activations import layer_saved
    from campaign.models import load_spec

    spec = load_spec("gpt2")
    outputs = 2 * (8 + 2 * 768)

    def layer_norms(**kw) -> float:
        return dict(layer_saved(spec, make_workload(seq_len=512, mixed_precision=True, **kw)).terms)[
            "layernorm inputs and outputs"]

    assert layer_norms(dtype="fp32") == 2 * 4 * 768 + outputs == 9232
    for shard in ("zero1", "zero2", "zero3"):
        assert layer_norms(gpus=8, shard=shard) == 2 * 2 * 768 + outputs == 6160, shard
    assert layer_norms(gpus=8, shard="fsdp") == 9232   # FSDP under the Trainer keeps autocast


def test_deepspeed_runs_gpt2_softmax_in_16_bits_and_opt_upcasts_its_own():
    # eager attention, per token per key (attention_per_token): gpt2 has 12 heads and attention dropout 0.1. Under
    # autocast softmax outputs fp32 (4 B), GPT-2 casts it to V's dtype, dropout keeps its 1-byte mask and the matmul
    # with V dropout's 16-bit output (2): 12 x 7 = 84 (test_eager_attention_keeps_what_autograd_saves counts it).
    # In DeepSpeed's 16-bit module (no autocast) GPT2Attention's softmax runs in 16 bits: 12 x (2 + 2 + 1) = 60.
    # OPT upcasts its softmax itself (softmax(dtype=float32).to(query.dtype)): under ZeRO its fp32 output and 16-bit
    # copy stay, as under autocast.
    from campaign.memory.activations import layer_saved
    from campaign.models import load_spec
    from campaign.models.architectures import spec_from_config

    gpt2 = load_spec("gpt2")

    def per_key(spec, **kw) -> float:
        return layer_saved(spec, make_workload(seq_len=512, mixed_precision=True, attention="eager",
                                               **kw)).attention_per_token

    assert per_key(gpt2, dtype="fp32") == 12 * (4 + 2 + 1) == 84
    for shard in ("zero1", "zero2", "zero3"):
        assert per_key(gpt2, gpus=8, shard=shard) == 12 * (2 + 3) == 60, shard
    assert per_key(gpt2, gpus=8, shard="fsdp") == 84  # FSDP under the Trainer keeps autocast
    opt = spec_from_config(dict(model_type="opt", architectures=["OPTForCausalLM"], vocab_size=50272,
                                hidden_size=2048, ffn_dim=8192, num_hidden_layers=24, num_attention_heads=32,
                                max_position_embeddings=2048, word_embed_proj_dim=2048, do_layer_norm_before=True,
                                activation_function="relu", dropout=0.1, attention_dropout=0.0, enable_bias=True),
                           name="opt-1.3b", source="facebook/opt-1.3b config.json")
    # 32 heads, attention_dropout 0.0: the fp32 output and the 16-bit copy, in fp16 or bf16, under DeepSpeed or
    # autocast (OPT casts with .to(query.dtype) whatever the dtype); in fp32 the output alone (the cast is a no-op)
    assert per_key(opt, gpus=8, shard="zero2", dtype="fp16") == 32 * (4 + 2) == per_key(opt, dtype="fp32") == 192
    assert per_key(opt, gpus=8, shard="zero2", dtype="bf16") == 192
    assert layer_saved(opt, make_workload(seq_len=512, dtype="fp32", attention="eager")).attention_per_token == 32 * 4


def _saved_per_score(attention, autocast, dtype, dropout: float) -> dict[str, int]:
    """Bytes per attention score that autograd keeps for one call of transformers' `attention` function (q, k, v
    in `dtype`; `autocast`: the dtype CUDA autocast runs matmul in, or None), by dtype: counted with
    saved_tensors_hooks, each storage once. CUDA's rules are applied by a TorchFunctionMode, as CPU autocast lists
    softmax otherwise and CPU dropout keeps its scaled noise: matmul's inputs cast to the autocast dtype, softmax's
    to fp32 (torch's autocast op lists), dropout as CUDA's fused native_dropout (a bool mask) when p > 0."""
    import types

    import torch
    from torch.overrides import TorchFunctionMode

    functional = torch.nn.functional

    class CudaRules(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            if autocast is not None and func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__):
                args = tuple(a.to(autocast) for a in args)
            if autocast is not None and func in (functional.softmax, torch.softmax, torch.Tensor.softmax):
                args = (args[0].float(), *args[1:])
            if func is functional.dropout:
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                return torch.ops.aten.native_dropout(args[0], p, True)[0] if p > 0 else args[0]
            return func(*args, **kwargs)

    saved: dict[int, tuple[torch.dtype, int]] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = (t.dtype, t.untyped_storage().nbytes())
        return t

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=dtype, requires_grad=True) for _ in range(3))
    value = v.to(autocast) if autocast is not None else v  # under autocast V comes out of a Linear in its dtype
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), CudaRules():
        attention(types.SimpleNamespace(training=True), q, k, value, None, scaling=0.25, dropout=dropout)
    scores = 2 * 4 * 8 * 8
    out: dict[str, int] = {}
    for d, nbytes in saved.values():
        if nbytes == scores * torch.empty((), dtype=d).element_size():  # the (batch, heads, query, key) tensors
            name = str(d).removeprefix("torch.")
            out[name] = out.get(name, 0) + nbytes // scores
    return out


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_eager_attention_keeps_what_autograd_saves(model):
    # counted, not derived: transformers' own eager attention functions run under CUDA's rules, each case against
    # layer_saved's bytes per token per key on a 12-head model with and without attention dropout
    import torch
    from transformers.models.bert.modeling_bert import eager_attention_forward as bert
    from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward as gpt2

    from campaign.memory.activations import layer_saved
    from campaign.models.architectures import spec_from_config

    attention = {"gpt2": gpt2, "bert": bert}[model]
    config = {"gpt2": dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=512, n_embd=768,
                           n_layer=2, n_head=12, n_positions=512),
              "bert": dict(model_type="bert", architectures=["BertForMaskedLM"], vocab_size=512, hidden_size=768,
                           num_hidden_layers=2, num_attention_heads=12, intermediate_size=3072,
                           max_position_embeddings=512)}[model]
    no_dropout = {"gpt2": dict(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0),
                  "bert": dict(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)}[model]
    cases = (  # workload, autocast, dtype of the tensors
        (dict(dtype="fp32", mixed_precision=True), torch.bfloat16, torch.float32),  # autocast over fp32 weights
        (dict(dtype="fp32"), None, torch.float32),
        (dict(gpus=8, shard="zero2", mixed_precision=True), None, torch.bfloat16),  # DeepSpeed's 16-bit module
    )
    for p, overrides in ((0.1, {}), (0.0, no_dropout)):
        spec = spec_from_config({**config, **overrides}, name=model, source="test")
        assert spec.num_heads == 12 and (spec.dropout > 0) == (p > 0)
        for kw, autocast, dtype in cases:
            counted = _saved_per_score(attention, autocast, dtype, p)
            w = make_workload(seq_len=512, attention="eager", **kw)
            assert layer_saved(spec, w).attention_per_token == 12 * sum(counted.values()), (p, kw, counted)
    # under autocast with dropout: softmax's fp32 output, the mask, one 16-bit copy (the matmul's input)
    assert _saved_per_score(attention, torch.bfloat16, torch.float32, 0.1) == {"float32": 4, "bool": 1,
                                                                               "bfloat16": 2}


def test_eager_attention_scores_every_key_of_a_sliding_layer_too():
    """HF's eager attention multiplies q by every key and masks the rest: a sliding layer's scores are s x s, as a
    full layer's (Gemma 2 9B: 42 layers, half of them sliding over 4096 keys, 16 heads)."""
    from campaign.models import load_spec

    spec = load_spec("gemma-2-9b-it")
    per_key = 16 * (4 + 2 + 2)  # fp32 softmax, its bf16 copy (the matmul with V's input), the soft-capping tanh

    def per_token(s):
        w = make_workload(batch=1, seq_len=s, attention="eager")
        return training_activations(spec, w)[0] / s

    # from 4096 to 8192 tokens every layer's scores grow by 4096 keys a token, the sliding layers' included
    assert per_token(8192) - per_token(4096) == 42 * per_key * 4096
