"""What a training loop does beyond the model: a chunked or fused cross-entropy, the optimizer stepped in backward,
activations offloaded to the CPU. Each term's bytes worked out here from shapes; each key of a planted torchtune
recipe, on and off, moves the estimate by that amount."""
from __future__ import annotations

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload

V = 128_256  # Llama 3's vocabulary
TOKENS = 2 * 4096  # the issue's batch: 2 sequences of 4096 tokens


def phase(est, name):
    return next(p.bytes for p in est.phases if p.name == name)


def items(est, category="logits"):
    return {i.name: i.bytes for p in est.phases for i in p.items if i.category == category}


def test_chunked_loss_keeps_one_chunk_of_the_logits_gradients():
    # LoRA, no checkpointing: backward starts with every activation, the peak moment both times
    kw = dict(method="lora", batch=2, seq_len=4096, logits_held=False)
    full = estimate_memory("llama-3.1-8b", make_workload(**kw))
    chunked = estimate_memory("llama-3.1-8b", make_workload(loss="chunked", **kw))
    logits_fp32 = TOKENS * V * 4
    assert logits_fp32 == 4_202_692_608 and logits_fp32 / 2**30 == pytest.approx(3.91, abs=0.005)  # the issue's
    assert items(full)["logits gradients"] == 2 * logits_fp32  # 7.83 GiB: into and out of log_softmax
    assert items(chunked)["chunked loss: logits gradients"] == 2 * logits_fp32 // 8  # one of 8 chunks
    assert items(chunked)["chunked loss: saved for backward"] == logits_fp32  # every chunk's log_softmax output
    assert phase(full, "backward") - phase(chunked, "backward") == 2 * logits_fp32 * 7 // 8
    # forward at the loss: bf16 logits + fp32 upcast + fp32 log_softmax output, against bf16 logits (all chunks) +
    # every chunk's log_softmax output + one chunk's upcast
    assert phase(full, "forward") - phase(chunked, "forward") == TOKENS * V * (2 + 4 + 4) - TOKENS * V * (2 + 4 + 0.5)


def _linear_cross_entropy(hidden, weight, targets, chunks=8):
    """torchtune's LinearCrossEntropyLoss as its forward runs (cross_entropy_loss.py at bd2a0fc), written here: the
    scored positions kept (index_select), then per chunk the projection, its fp32 upcast and cross_entropy."""
    import torch
    import torch.nn.functional as F

    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    keep = torch.where(targets != -100)[0]
    hidden, targets = hidden.index_select(0, keep), targets.index_select(0, keep)
    total = torch.tensor(0.0)
    for h, t in zip(hidden.tensor_split(chunks), targets.tensor_split(chunks), strict=True):
        logits = F.linear(h, weight)
        total = total + F.cross_entropy(logits.float(), t, reduction="sum")
    return total / keep.numel()


def test_linear_cross_entropy_keeps_every_chunks_fp32_log_softmax_and_no_logits():
    """What autograd keeps of torchtune's LinearCrossEntropyLoss, counted on the loss itself (saved_tensors_hooks,
    each floating storage once; the weight and the per-chunk scalars excluded): every chunk's fp32 log_softmax output
    (4 B x positions x V) and the scored positions' hidden states (their index_select copy, in the compute dtype), no
    logits of any dtype; and the estimate's terms from the same shapes, against CEWithChunkedOutputLoss's, which
    keeps the model's bf16 logits."""
    import torch

    n, h, vocab = 2 * 48, 64, 1000
    hidden = torch.randn(2, 48, h, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(vocab, h, dtype=torch.bfloat16))
    targets = torch.randint(0, vocab, (2, 48))
    def saved_by_the_loss(trains: bool) -> int:
        weight.requires_grad_(trains)
        storages.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _linear_cross_entropy(hidden, weight, targets).backward()
        return sum(storages.values())

    storages: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if t.is_floating_point() and t.numel() > 1 and storage.data_ptr() != weight.untyped_storage().data_ptr():
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    # the hidden copy is the projection's input, kept for its weight's gradient only: a frozen head keeps none
    assert saved_by_the_loss(True) == n * vocab * 4 + n * h * 2
    assert saved_by_the_loss(False) == n * vocab * 4
    # the estimate for Llama 3.1 8B at 2 x 4096: the same terms from its shapes
    kw = dict(method="lora", batch=2, seq_len=4096, logits_held=False)
    linear = estimate_memory("llama-3.1-8b", make_workload(loss="linear", **kw))
    chunked = estimate_memory("llama-3.1-8b", make_workload(loss="chunked", **kw))
    assert items(linear)["linear loss: saved for backward"] == TOKENS * V * 4  # LoRA: the head frozen
    full = estimate_memory("llama-3.1-8b", make_workload(loss="linear", batch=2, seq_len=4096, logits_held=False))
    assert items(full)["linear loss: saved for backward"] == TOKENS * V * 4 + TOKENS * 4096 * 2
    assert items(linear)["linear loss: logits gradients"] == items(chunked)["chunked loss: logits gradients"]
    # forward at the loss: every chunk's log_softmax output + one chunk's bf16 projection and fp32 upcast + the
    # hidden copy, against chunked's bf16 logits of every chunk + log_softmax outputs + one chunk's upcast
    assert items(linear)["linear loss over the vocabulary"] == TOKENS * V * (4 + 6 / 8)
    assert items(chunked)["chunked loss over the vocabulary"] == TOKENS * V * (2 + 4 + 4 / 8)


def test_fused_linear_cross_entropy_keeps_no_vocabulary_sized_tensor():
    kw = dict(method="lora", batch=2, seq_len=4096, logits_held=False)
    fused = estimate_memory("llama-3.1-8b", make_workload(loss="fused", **kw))
    # Liger: chunk = next power of 2 of ceil(8192 / ceil(128256 / 4096) = 32) = 256 tokens; bf16 chunk logits,
    # and the hidden states' gradient (b x s x h, bf16) made in forward
    chunk_logits, grad_input = 256 * V * 2, TOKENS * 4096 * 2
    got = items(fused)
    assert got["fused loss over the vocabulary"] == chunk_logits + grad_input
    assert got["fused loss: saved for backward"] == grad_input
    assert not any("gradients" in name for name in got)


def test_optimizer_in_backward_holds_one_parameters_gradient():
    kw = dict(batch=1, seq_len=512, dtype="bf16", optimizer_impl="fused", logits_held=False)
    plain = estimate_memory("llama-3.2-3b", make_workload(**kw))
    inbwd = estimate_memory("llama-3.2-3b", make_workload(optimizer_in_backward=True, **kw))
    params = 3_212_749_824  # Llama 3.2 3B (tied embeddings)
    largest = V * 3072  # the embedding, its largest tensor
    assert plain.trainable_params == params
    # the step: weights + states, with all the bf16 gradients, or one tensor's
    assert phase(plain, "optimizer step") - phase(inbwd, "optimizer step") == 2 * (params - largest)
    assert items(inbwd, "gradients") == {"gradient of one parameter (stepped in backward)": 2 * largest}


def test_activation_offloading_moves_every_layers_input_but_the_last_to_the_cpu():
    kw = dict(batch=2, seq_len=4096, dtype="bf16", grad_checkpointing=True, loss="chunked", logits_held=False)
    kept = estimate_memory("llama-3.2-3b", make_workload(**kw))
    off = estimate_memory("llama-3.2-3b", make_workload(activation_offloading=True, **kw))
    layer_input = TOKENS * 3072 * 2  # b x s x h x bf16: 48 MiB, the issue's figure
    assert layer_input == 48 * 2**20
    assert phase(kept, "forward") - phase(off, "forward") == 27 * layer_input  # 28 layers, the last one stays
    with pytest.raises(InputError, match="add --grad-checkpointing"):
        make_workload(activation_offloading=True)


def test_the_issues_torchtune_full_finetune_peaks_at_the_optimizer_step_figures():
    """weights 5.98 + gradients 5.98 + states 11.97 = 23.94 GiB: the step of a bf16 full fine-tune of Llama 3.2 3B
    with bf16 AdamW states (torchtune trains in bf16)."""
    est = estimate_memory("llama-3.2-3b", make_workload(batch=2, seq_len=4096, dtype="bf16", loss="chunked",
                                                        grad_checkpointing=True, optimizer_impl="fused",
                                                        logits_held=False))
    params = 3_212_749_824
    assert phase(est, "optimizer step") == pytest.approx(params * (2 + 2 + 4), rel=1e-3)
    assert phase(est, "optimizer step") / 2**30 == pytest.approx(23.94, abs=0.01)


def _recipe(tmp_path, name, **changes):
    doc = {"model": {"_component_": "torchtune.models.llama3_2.llama3_2_3b"},
           "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": 4096},
           "batch_size": 2, "dtype": "bf16", "enable_activation_checkpointing": True,
           "optimizer": {"_component_": "torch.optim.AdamW", "fused": True, "lr": 2e-5},
           "loss": {"_component_": "torch.nn.CrossEntropyLoss"}, "optimizer_in_bwd": False,
           "enable_activation_offloading": False} | changes
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_each_loop_key_of_a_planted_torchtune_recipe_moves_the_estimate_by_its_term(cli, tmp_path):
    def run(name, **changes):
        r = cli("memory", "llama-3.2-3b", "--config", _recipe(tmp_path, name, **changes), "--json", "--no-solve")
        assert r.code == 0, r.err
        assert {k["use"] for k in r.json()["config_keys"]} <= {"modelled", "no memory"}
        return {p["name"]: p["bytes"] for p in r.json()["phases"]}

    base = run("base.yaml")
    chunked = run("chunked.yaml", loss={"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"})
    assert base["forward"] - chunked["forward"] == TOKENS * V * (4 - 0.5)  # the upcast copy, one chunk of it kept
    linear = run("linear.yaml", loss={"_component_": "torchtune.modules.loss.LinearCrossEntropyLoss"})
    # no bf16 logits (2 B) at all, one chunk's projection (2 / 8) and the scored positions' hidden copy (h x 2 B)
    assert chunked["forward"] - linear["forward"] == TOKENS * V * (2 - 2 / 8) - TOKENS * 3072 * 2
    offload = run("offload.yaml", enable_activation_offloading=True)
    assert base["forward"] - offload["forward"] == 27 * TOKENS * 3072 * 2
    inbwd = run("inbwd.yaml", optimizer_in_bwd=True)
    assert base["optimizer step"] - inbwd["optimizer step"] == 2 * (3_212_749_824 - V * 3072)


def test_bitsandbytes_32bit_adamw_keeps_fp32_states_on_a_bf16_model(tmp_path):
    """bitsandbytes' 32-bit AdamW (PagedAdamW, AdamW32bit; TrainingArguments' paged_adamw_32bit) makes both states in
    float32 whatever the parameter's dtype (Optimizer2State.init_state), where torch's AdamW makes them like the
    parameter: on Llama 3.2 1B in bf16 (1,235,814,400 parameters, the head tied) 8 B a parameter against 4, and no
    step temporary (a kernel per parameter, in place). torchtune's 7B_full_low_memory recipe names it."""
    P = 1_235_814_400

    def step(optimizer):
        est = estimate_memory("llama-3.2-1b", make_workload(optimizer=optimizer, dtype="bf16", batch=1, seq_len=128,
                                                            optimizer_impl="fused"))
        return {i.name: i.bytes for p in est.phases if p.name == "optimizer step" for i in p.items}

    assert step("adamw-32bit")["optimizer states"] == 8 * P
    assert step("adamw")["optimizer states"] == 4 * P
    recipe = tmp_path / "low.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"_component_": "torchtune.models.mistral.mistral_7b"},
        "tokenizer": {"_component_": "torchtune.models.mistral.mistral_tokenizer", "max_seq_len": 2048},
        "optimizer": {"_component_": "bitsandbytes.optim.PagedAdamW", "lr": 5e-6}, "optimizer_in_bwd": True,
        "batch_size": 2, "dtype": "bf16"}))
    from campaign.memory.training_config import workload_from_configs

    cfg = workload_from_configs([recipe])
    assert cfg.options["optimizer"] == "adamw-32bit" and not cfg.unmodelled
    assert any("paged states" in n for n in cfg.notes)


def test_torchao_4bit_adamw_keeps_half_a_byte_and_a_scale_per_state():
    """torchao's AdamW4bit (TrainingArguments' adamw_torch_4bit, axolotl's optimizer: adamw_torch_4bit): each state is
    4-bit codes packed two to a byte plus one fp32 scale per block of 128, 2 x (0.5 + 4 / 128) = 1.0625 B a
    parameter. Counted on torchao's own state tensors, then on Llama 3.2 1B (1,235,814,400 parameters, bf16); the
    tensors under 4096 elements torchao keeps unquantized (its norms: 2048 x 33) are counted at the same rate, 0.5 MB
    low. The step's 25 B per element of the tensor stepping is what benchmarks/torchao_lowbit_step.py counts in the
    code inductor generates for it."""
    optim = pytest.importorskip("torchao.optim")
    import torch

    p = torch.nn.Parameter(torch.zeros(256, 4096, dtype=torch.bfloat16))
    opt = optim.AdamW4bit([p])
    states = [opt._new_buffer(p, True), opt._new_buffer(p, False)]  # what its step makes for exp_avg, exp_avg_sq
    held = sum(s.codes.nbytes + s.scale.nbytes for s in states)
    assert held == 2 * (p.numel() // 2 + p.numel() // 128 * 4)
    P = 1_235_814_400
    est = estimate_memory("llama-3.2-1b", make_workload(optimizer="adamw-4bit", batch=1, seq_len=128))
    step = {i.name: i.bytes for ph in est.phases if ph.name == "optimizer step" for i in ph.items}
    assert step["optimizer states"] == int(P * held / p.numel())
    # one tensor steps at a time: the largest, the tied embedding 128256 x 2048
    assert step["optimizer temporaries"] == 25 * 128256 * 2048


def test_torchao_8bit_adamw_has_bitsandbytes_states_and_a_step_per_tensor():
    """torchao's AdamW8bit (adamw_torch_8bit) keeps the states bitsandbytes' does (8-bit codes, an fp32 scale per 256:
    counted on torchao's own state tensors) but steps one tensor at a time through a compiled function holding both
    states in fp32: 8 B per element of the largest tensor (benchmarks/torchao_lowbit_step.py), where bitsandbytes'
    fused kernel holds none."""
    optim = pytest.importorskip("torchao.optim")
    import torch

    p = torch.nn.Parameter(torch.zeros(256, 4096, dtype=torch.bfloat16))
    opt = optim.AdamW8bit([p])
    states = [opt._new_buffer(p, True), opt._new_buffer(p, False)]
    held = sum(s.codes.nbytes + s.scale.nbytes for s in states)
    assert held == 2 * (p.numel() + p.numel() // 256 * 4)
    P = 1_235_814_400

    def step(optimizer):
        est = estimate_memory("llama-3.2-1b", make_workload(optimizer=optimizer, batch=1, seq_len=128))
        return {i.name: i.bytes for ph in est.phases if ph.name == "optimizer step" for i in ph.items}

    ao, bnb = step("adamw-8bit-ao"), step("adamw-8bit")
    assert ao["optimizer states"] == bnb["optimizer states"] == int(P * held / p.numel())
    assert ao["optimizer temporaries"] == 8 * 128256 * 2048 and "optimizer temporaries" not in bnb
