"""Liger's kernels (--liger-kernels rope,rms_norm,swiglu and --loss fused): what each changes in the tensors saved for
backward, worked out here from the shapes and from what liger_kernel's autograd functions save (ops/rms_norm.py
LigerRMSNormFunction: X, W, fp32 RSTD; ops/swiglu.py LigerSiLUMulFunction: the gate and up outputs;
ops/fused_linear_cross_entropy.py: grad_weight = zeros_like(weight) in forward when the head trains), against
transformers' LlamaRMSNorm (fp32 copy of the input and the rsqrt) and LlamaMLP (act_fn(gate) * up)."""
from __future__ import annotations

import json

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.activations import layer_saved
from campaign.memory.loss import backward_loss
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config

# Llama 3.2 1B: h 2048, I 8192, 32 query heads and 8 KV heads of 64, 16 layers, vocabulary 128256
H, INTER, NH, KV, HD, L, V = 2048, 8192, 32, 8, 64, 16, 128_256
B = 2  # bf16


def hf_layer(full: bool) -> int:
    """One Llama layer's saved bytes per token without Liger (SDPA, no LoRA), from the shapes."""
    norm = 4 * H + 4 + (2 * B * H if full else 0)  # fp32 input copy, fp32 rsqrt; normalized x and output
    attention = B * (NH + 2 * KV) * HD + B * NH * HD + 4 * NH  # q, k, v; output; fp32 logsumexp
    mlp = B * INTER * 3 + (B * INTER if full else 0)  # gate, silu(gate), up; product (down_proj's input)
    return 2 * norm + attention + mlp


# per norm: HF's fp32 copy of the input (4h) becomes Liger's bf16 input (2h); when the weight trains, HF's normalized
# bf16 product (kept by weight * x, 2h) is not kept either (the output, the next Linear's input, is in both)
NORM = {True: 4 * H - B * H + B * H, False: 4 * H - B * H}
NORM_SAVING = {full: 2 * NORM[full] for full in (True, False)}  # two norms a layer
MLP_SAVING = B * INTER  # silu(gate) no longer kept


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("kernels,saving", [
    ("", lambda full: 0),
    ("rope", lambda full: 0),
    ("rms_norm", lambda full: NORM_SAVING[full]),
    ("swiglu", lambda full: MLP_SAVING),
    ("swiglu,rope,rms_norm", lambda full: NORM_SAVING[full] + MLP_SAVING),
])
def test_each_kernel_changes_a_layers_saved_bytes_by_what_it_keeps(full, kernels, saving):
    w = make_workload(method="full" if full else "lora", lora_targets=("q_proj",), batch=1, seq_len=512,
                      liger_kernels=kernels)
    lora_q = 4 * (H + 16) if not full else 0  # peft's fp32 cast of q_proj's input and lora_A's output (rank 16)
    assert layer_saved(load_spec("llama-3.2-1b"), w).per_token == hf_layer(full) + lora_q - saving(full)


def test_full_finetune_figures_by_hand():
    # with weights training: HF's norm keeps 4h + 4 + 2 x 2h = 16,388 B a token, Liger's 2h + 4 + 2h = 8,196
    assert hf_layer(True) == 108_680
    w = make_workload(batch=1, seq_len=512, liger_kernels="rope,rms_norm,swiglu")
    assert layer_saved(load_spec("llama-3.2-1b"), w).per_token == 108_680 - 2 * 8_192 - 16_384 == 75_912


def test_the_whole_step_saves_that_much_less_over_every_layer_and_the_final_norm():
    kw = dict(batch=2, seq_len=1024, loss="fused", logits_held=False)
    spec = load_spec("llama-3.2-1b")
    plain = estimate_memory(spec, make_workload(**kw))
    liger = estimate_memory(spec, make_workload(liger_kernels="rope,rms_norm,swiglu", **kw))
    acts = [next(i.bytes for p in e.phases if p.name == "forward" for i in p.items if i.name == "activations")
            for e in (plain, liger)]
    tokens = 2 * 1024
    final_norm = (4 * H + 4 + 2 * B * H) - (B * H + 4 + B * H)
    assert final_norm == NORM[True]
    assert acts[0] - acts[1] == tokens * (L * (NORM_SAVING[True] + MLP_SAVING) + final_norm)


def test_head_norms_are_liger_s_where_its_patch_of_a_loaded_model_reaches_them():
    # apply_liger_kernel_to_qwen3(model=...) (the Trainer's use_liger_kernel) patches the layer norms, not the
    # attention's q_norm / k_norm: Qwen3 0.6B's 16 + 8 heads of 128 keep HF's fp32 input, rsqrt and product
    spec = load_spec("qwen3-0.6b")
    heads, hd = 16 + 8, 128

    def qk(spec, kernels):
        terms = dict(layer_saved(spec, make_workload(batch=1, seq_len=256, liger_kernels=kernels)).terms)
        return next(v for k, v in terms.items() if k.startswith("q/k norms"))

    assert qk(spec, "") == qk(spec, "rms_norm") == 4 * heads * (hd + 1) + B * heads * hd
    # apply_liger_kernel_to_gemma3_text patches them: each head's bf16 input and one fp32 rstd per head
    gemma3 = spec_from_config(dict(GEMMA, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
                                   sliding_window=512), name="tiny-gemma3", source="test")
    heads = 4 + 2
    assert qk(gemma3, "") == 4 * heads * (32 + 1) + 4 * heads * 32  # Gemma's (1 + w) product is fp32
    assert qk(gemma3, "rms_norm") == B * heads * 32 + 4 * heads


# a small Gemma: h 128, I 352, 4 heads and 2 KV heads of 32, 2 layers
GEMMA = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, num_hidden_layers=2, hidden_act="gelu_pytorch_tanh", max_position_embeddings=1024)


@pytest.mark.parametrize("model_type,post_norms", [("gemma", False), ("gemma2", True), ("gemma3_text", True)])
@pytest.mark.parametrize("full", [True, False])
def test_gemma_norms_and_geglu_by_hand(model_type, post_norms, full):
    """GemmaRMSNorm keeps its fp32 input, rsqrt and, when the weight trains, the fp32 (1 + w) product; Liger's
    LigerRMSNormForGemma keeps the bf16 input and the rstd. The input and pre-feedforward norms' outputs are the next
    Linear's input (kept when it trains); Gemma 2/3's post norms feed the residual add. GEGLU keeps gate and up."""
    h, inter = 128, 352
    cfg = dict(GEMMA, model_type=model_type, architectures=["X"], sliding_window=512)
    spec = spec_from_config(cfg, name="tiny-gemma", source="test")
    w = dict(method="full" if full else "lora", lora_targets=("q_proj",), batch=1, seq_len=256)
    hf = dict(layer_saved(spec, make_workload(**w)).terms)
    liger = dict(layer_saved(spec, make_workload(**w, liger_kernels="rms_norm,geglu")).terms)
    pre, post = (2, 2) if post_norms else (2, 0)
    hf_norm = 4 * h + 4 + (4 * h if full else 0)
    assert hf["rmsnorm inputs (fp32) and outputs"] == pre * (hf_norm + (B * h if full else 0)) + post * hf_norm
    assert liger["Liger RMSNorm inputs, rstd and outputs"] == pre * (B * h + 4 + (B * h if full else 0)) + \
        post * (B * h + 4)
    assert hf["MLP gate/up/activation/product"] - liger["MLP gate/up (Liger GEGLU)/product"] == B * inter


def test_mixtral_s_fused_experts_keep_gate_up_weights_and_indices():
    """transformers 5's Mixtral with Liger's swiglu runs LigerExperts (ops/fused_moe.py LigerFusedMoEFunction), which
    saves per routed token its gate/up output (2 x I), its fp32 routing weight and three int32 indices, and the
    layer's input once; HF's experts keep each routed token's copy, gate, silu, up, product and output."""
    spec = load_spec("Mixtral-8x7B-Instruct-v0.1")  # h 4096, experts' I 14336, 2 of 8 experts per token
    h, inter, k = 4096, 14336, 2

    def moe(method, kernels):
        terms = dict(layer_saved(spec, make_workload(method=method, lora_targets=("q_proj",), batch=1,
                                                     seq_len=256, liger_kernels=kernels)).terms)
        return next(v for n, v in terms.items() if n.startswith("MoE MLP"))

    router = (B + 4) * 8  # the router's logits and fp32 probabilities, as before
    assert moe("full", "swiglu") == k * (2 * B * inter + 4 + 3 * 4) + router
    assert moe("full", "") == k * (B * h + B * inter * 4 + B * h) + router
    assert moe("lora", "swiglu") == k * (2 * B * inter + 4 + 3 * 4) + B * h + router  # the input, no norm keeps it


def fused(est, name):
    return next(i.bytes for p in est.phases for i in p.items if i.name == name)


def test_fused_loss_holds_the_heads_weight_gradient_when_the_head_trains():
    spec = load_spec("llama-3.2-1b")
    tokens = 512
    chunk = 16  # next power of 2 of ceil(512 / ceil(128256 / 2048) = 63) = 9
    kept = chunk * V * B + tokens * H * B  # one chunk's bf16 logits, the bf16 hidden states' gradient
    full = estimate_memory(spec, make_workload(batch=1, seq_len=tokens, loss="fused"))
    assert fused(full, "fused loss over the vocabulary") == kept + V * H * B

    def at_backward(**kw):  # the start of backward (a full fine-tune's backward peaks at its end)
        return backward_loss(spec, make_workload(batch=1, seq_len=tokens, loss="fused", **kw), B, 0)[0].bytes

    assert at_backward() == tokens * H * B + V * H * B
    assert at_backward(mixed_precision=True) == tokens * H * B + V * H * 4  # zeros_like of the fp32 weight
    assert at_backward(method="lora") == tokens * H * B  # a frozen head: grad_weight is None
    lora = estimate_memory(spec, make_workload(batch=1, seq_len=tokens, loss="fused", method="lora"))
    assert fused(lora, "fused loss over the vocabulary") == kept


def test_refusals_are_one_line():
    with pytest.raises(InputError, match=r"modelled for llama, .*, gemma3_text models, not microsoft/phi-4 \(phi3\)"):
        estimate_memory("phi-4", make_workload(liger_kernels="rms_norm"))
    with pytest.raises(InputError, match="gemma-2-9b-it.s gated MLP is Liger.s geglu .*; write geglu"):
        estimate_memory("gemma-2-9b-it", make_workload(liger_kernels="swiglu"))
    with pytest.raises(InputError, match="gated MLP is Liger's swiglu .*; write swiglu"):
        estimate_memory("llama-3.2-1b", make_workload(liger_kernels="geglu"))
    with pytest.raises(InputError, match="--loss fused"):
        make_workload(liger_kernels="rms_norm,fused_linear_cross_entropy")
    with pytest.raises(InputError, match="layer_norm is not a Liger kernel campaign models"):
        make_workload(liger_kernels="layer_norm")
    with pytest.raises(InputError, match="drop it for inference"):
        make_workload(mode="infer", liger_kernels="rope")


def test_the_flag_on_the_command_line(cli):
    got = cli("memory", "llama-3.2-1b", "--liger-kernels", "swiglu,rms_norm", "--batch", "1", "--seq-len", "512",
              "--json", "--no-solve")
    assert got.code == 0, got.err
    plain = cli("memory", "llama-3.2-1b", "--batch", "1", "--seq-len", "512", "--json", "--no-solve")
    # the peak is the optimizer step for a full fine-tune at 512 tokens; the forward phase shows the saving
    forward = [next(p["bytes"] for p in r.json()["phases"] if p["name"] == "forward") for r in (plain, got)]
    assert forward[0] - forward[1] == 512 * (L * (NORM_SAVING[True] + MLP_SAVING) + NORM[True])  # and final norm
    bad = cli("memory", "llama-3.2-1b", "--liger-kernels", "geglu")  # Llama's gated MLP is swiglu
    assert bad.code == 2 and bad.err.count("\n") == 1 and "Traceback" not in bad.err


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith((".yaml", ".yml")) else json.dumps(doc))
    return path


def test_use_liger_kernel_is_liger_s_defaults_for_llama(tmp_path):
    args = write(tmp_path, "training_args.json", {"output_dir": "o", "use_liger_kernel": True, "bf16": True})
    cfg = workload_from_configs([args], model_type="llama")
    assert cfg.options["loss"] == "fused" and cfg.options["liger_kernels"] == "rope,rms_norm,swiglu"
    assert {k.key: k.use for k in cfg.keys}["use_liger_kernel"] == "modelled"
    # Gemma's gated MLP is Liger's geglu
    gemma = workload_from_configs([args], model_type="gemma2")
    assert gemma.options["loss"] == "fused" and gemma.options["liger_kernels"] == "rope,rms_norm,geglu"
    # a model whose Liger patches are not modelled: the fused loss still is, the layer kernels noted
    phi = workload_from_configs([args], model_type="phi3")
    assert phi.options["loss"] == "fused" and "liger_kernels" not in phi.options
    assert any("not phi3" in n and "upper bound" in n for n in phi.notes)


def test_liger_kernel_config_overrides_the_defaults_one_by_one(tmp_path):
    base = {"output_dir": "o", "use_liger_kernel": True, "bf16": True}
    args = write(tmp_path, "a.json", base | {"liger_kernel_config": {"rope": False,
                                                                       "fused_linear_cross_entropy": False}})
    cfg = workload_from_configs([args], model_type="llama")
    assert cfg.options["loss"] == "full" and cfg.options["liger_kernels"] == "rms_norm,swiglu"
    assert {k.key: k.use for k in cfg.keys}["liger_kernel_config"] == "modelled"
    # Liger's unfused cross_entropy kernel, or a kernel campaign does not model: named, the rest still read
    other = write(tmp_path, "b.json", base | {"liger_kernel_config": {"swiglu": False, "cross_entropy": True,
                                                                        "fused_linear_cross_entropy": False}})
    cfg = workload_from_configs([other], model_type="llama")
    assert cfg.options["liger_kernels"] == "rope,rms_norm"
    assert [k.key for k in cfg.unmodelled] == ["liger_kernel_config"]
    # a DPO config with Liger: its fused DPO loss, no vocabulary-sized tensor
    dpo = write(tmp_path, "c.json", base | {"beta": 0.1, "per_device_train_batch_size": 2})
    assert workload_from_configs([dpo], model_type="llama", reference="copy").options["loss"] == "fused"
    off = write(tmp_path, "d.json", base | {"beta": 0.1, "use_liger_kernel": False})
    assert workload_from_configs([off], model_type="llama", reference="copy").options["loss"] == "logps"


def test_axolotl_liger_keys_each_read(tmp_path):
    path = write(tmp_path, "axolotl.yml", {
        "base_model": "meta-llama/Llama-3.2-1B", "sequence_len": 1024, "micro_batch_size": 1,
        "plugins": ["axolotl.integrations.liger.LigerPlugin"], "liger_rope": False, "liger_rms_norm": True,
        "liger_glu_activation": True, "liger_fused_linear_cross_entropy": True})
    cfg = workload_from_configs([path], model_type="llama")
    assert cfg.options["liger_kernels"] == "rms_norm,swiglu" and cfg.options["loss"] == "fused"
    uses = {k.key: k.use for k in cfg.keys}
    assert all(uses[k] == "modelled" for k in ("liger_rope", "liger_rms_norm", "liger_glu_activation",
                                               "liger_fused_linear_cross_entropy"))
    by_hand = make_workload(batch=1, seq_len=1024, liger_kernels="rms_norm,swiglu", loss="fused", logits_held=False)
    spec = load_spec("llama-3.2-1b")
    assert estimate_memory(spec, make_workload(**cfg.options)).required_bytes == \
        estimate_memory(spec, by_hand).required_bytes


def test_the_headline_names_the_loss_and_the_kernels(cli):
    r = cli("memory", "llama-3.2-1b", "--liger-kernels", "rope,rms_norm,swiglu", "--loss", "fused", "--no-solve")
    assert r.code == 0, r.err
    assert ", fused loss, Liger rope,rms_norm,swiglu ·" in " ".join(r.out.split("\n")[0:2])


def test_a_gemma_recipe_s_glu_kernel_is_geglu(tmp_path):
    # liger_kernel_config's swiglu is not a keyword of apply_liger_kernel_to_gemma2: Liger drops it (geglu stays on)
    args = write(tmp_path, "a.json", {"output_dir": "o", "use_liger_kernel": True, "bf16": True,
                                      "liger_kernel_config": {"swiglu": False, "rope": False}})
    cfg = workload_from_configs([args], model_type="gemma2")
    assert cfg.options["liger_kernels"] == "rms_norm,geglu"
    assert any("swiglu is not a keyword of Liger's apply_liger_kernel_to_gemma2" in n for n in cfg.notes)
    # axolotl's liger_glu_activation is geglu on Gemma (its plugin passes it as the apply function's geglu)
    ax = write(tmp_path, "ax.yml", {"base_model": "google/gemma-2-9b-it", "sequence_len": 2048, "micro_batch_size": 1,
                                    "liger_rms_norm": True, "liger_glu_activation": True})
    assert workload_from_configs([ax], model_type="gemma2").options["liger_kernels"] == "rms_norm,geglu"
    # on Qwen3, axolotl's class patch reaches the q/k norms, counted as HF's: said to be an upper bound
    qwen = workload_from_configs([ax], model_type="qwen3")
    assert qwen.options["liger_kernels"] == "rms_norm,swiglu"
    assert any("q/k norms" in n and "upper bound" in n for n in qwen.notes)


def test_axolotl_s_whole_liger_block_is_read_on_a_modelled_model(tmp_path):
    # axolotl's LigerPlugin passes only the keywords the model's apply function takes: Gemma 2's has no layer_norm,
    # so liger_layer_norm changes nothing (read, with a note); the plugins list of LigerPlugin alone is read too
    block = {"plugins": ["axolotl.integrations.liger.LigerPlugin"], "liger_rope": True, "liger_rms_norm": True,
             "liger_glu_activation": True, "liger_layer_norm": True, "liger_fused_linear_cross_entropy": True}
    ax = write(tmp_path, "ax.yml", {"base_model": "google/gemma-2-9b-it", "sequence_len": 2048,
                                    "micro_batch_size": 1, **block})
    cfg = workload_from_configs([ax], model_type="gemma2")
    assert not cfg.unmodelled and cfg.options["liger_kernels"] == "rope,rms_norm,geglu"
    assert {k.key: k.use for k in cfg.keys}["liger_layer_norm"] == "modelled"
    assert any("takes no layer_norm" in n for n in cfg.notes)
    # on a model whose Liger patches are not modelled, both stay named
    other = workload_from_configs([ax], model_type="phi3")
    assert {k.key for k in other.unmodelled} >= {"plugins", "liger_layer_norm"}
