"""The per-sequence part of a checkpointed backward (issue 32 item 6): the logits path at its start, the recompute of
the last layer after it; counted by hand from shapes, and measured on a real tiny Llama's step with the storage
tracker (Trainer semantics: the model output dropped before backward; each gradient dropped as it lands, as ZeRO-3
moves it into its partition, so that what grows with the batch is the activation path alone: DeepSpeed's stage3.py
partition_grads copies the gradient into the flat partition, then `param.grad = None`)."""
from __future__ import annotations

import pytest

from campaign import estimate_memory
from campaign.memory import make_workload
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

H, INTER, L, S = 128, 448, 4, 256


def _cfg(vocab: int) -> dict:
    return tiny_llama(hidden_size=H, intermediate_size=INTER, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=L, vocab_size=vocab, max_position_embeddings=1024)


def _backward(vocab: int, batch: int, **kw) -> object:
    spec = spec_from_config(_cfg(vocab), name="tiny", source="test")
    w = make_workload(batch=batch, seq_len=S, grad_checkpointing=True, mixed_precision=True, gpus=8, shard="zero3",
                      **kw)
    return next(p for p in estimate_memory(spec, w).phases if p.name == "backward")


def _slope(vocab: int, **kw) -> int:
    return _backward(vocab, 2, **kw).bytes - _backward(vocab, 1, **kw).bytes


def test_logits_path_per_sequence_by_hand():
    V = 4000
    checkpoints = L * S * H * 2  # each layer's bf16 input
    final_norm = S * (4 * H + 4 + 2 * 2 * H)  # fp32 input and rsqrt; the normalized tensor and the LM head's input
    # log_softmax's fp32 output (saved), the fp32 gradient into it and the one its backward returns
    loss = S * V * (4 + 4 + 4)
    assert _slope(V, logits_held=False) == checkpoints + final_norm + loss
    # a loop that keeps `outputs` in scope holds the bf16 logits through backward too
    assert _slope(V) == checkpoints + final_norm + loss + S * V * 2


def test_recompute_moment_by_hand():
    # a small vocabulary: the last layer's recompute is the backward's peak
    V = 256
    back = _backward(V, 1, logits_held=False)
    assert back.moment.startswith("the last layer recomputed")
    items = {i.name: i.bytes for i in back.items}
    assert items["checkpointed layer inputs"] == L * S * H * 2
    per_token = (2 * (4 * H + 4 + 2 * 2 * H)  # two RMSNorms: fp32 input, rsqrt, normalized tensor, Linear input
                 + 2 * (4 * 32 + 2 * 2 * 32)  # SDPA's q (4 heads x 32) and k, v (2 heads)
                 + 2 * 4 * 32 + 4 * 4  # its output (o_proj's input) and fp32 logsumexp per head
                 + 2 * INTER * 4)  # gate output, SiLU output, up output, their product
    grads = S * 2 * (2 * INTER + 2 * H)  # the MLP's widest activation gradients
    assert items["backward temporaries"] == S * per_token + grads


def _measured_slope(vocab: int) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from campaign.memory.build import enable_checkpointing
    from campaign.memory.tracker import StorageTracker

    cfg = _cfg(vocab)
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    peaks = []
    for batch in (1, 2):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
        enable_checkpointing(model)
        model.train()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
        ids = torch.randint(0, vocab, (batch, S))
        tracker = StorageTracker()
        for t in [*model.parameters(), *model.buffers(), ids]:
            tracker.register(t, "weights")
        with tracker:
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss  # the output dropped: Trainer.compute_loss
            tracker.phase("temporaries")
            loss.backward()
        peaks.append(tracker.snapshot()[0])
    return peaks[1] - peaks[0]


@pytest.mark.parametrize("vocab, tolerance", [(4000, 0.005), (256, 0.05)])
def test_per_sequence_backward_matches_the_tracked_step(vocab, tolerance):
    # V 4000: the loss's backward is the peak; V 256: the last layer's recompute (its activation gradients are
    # counted as the MLP's widest, a few percent above the step's)
    assert _slope(vocab, logits_held=False) == pytest.approx(_measured_slope(vocab), rel=tolerance)


def _one_card_backward(batch: int, **kw) -> object:
    spec = spec_from_config(_cfg(256), name="tiny", source="test")
    w = make_workload(batch=batch, seq_len=S, grad_checkpointing=True, optimizer="sgd", logits_held=False, **kw)
    return next(p for p in estimate_memory(spec, w).phases if p.name == "backward")


def test_head_gradients_at_the_recompute_by_hand():
    back = _one_card_backward(16)
    assert back.moment.startswith("the last layer recomputed")
    items = {i.name: i.bytes for i in back.items}
    assert items["gradients of the head"] == (H + 256 * H) * 2  # final norm and untied lm_head, bf16
    # zero_grad without set_to_none keeps every gradient: counted whole once, not the head's again
    kept = {i.name: i.bytes for i in _one_card_backward(16, grads_kept=True).items}
    assert "gradients of the head" not in kept and "gradients (kept by zero_grad)" in kept
    # ZeRO-3's flat partition holds them (counted as kept)
    assert all(i.name != "gradients of the head" for i in _backward(256, 1, logits_held=False).items)


def test_one_card_checkpointed_backward_matches_the_tracked_step():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from campaign.memory.build import enable_checkpointing
    from campaign.memory.tracker import StorageTracker

    cfg = _cfg(256)
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    enable_checkpointing(model)
    model.train()
    ids = torch.randint(0, 256, (16, S))
    tracker = StorageTracker()
    for t in [*model.parameters(), *model.buffers(), ids]:
        tracker.register(t, "weights")
    with tracker:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        tracker.phase("temporaries")
        loss.backward()  # the first step: gradients made as the backward runs, no optimizer states yet
    estimate = sum(i.bytes for i in _one_card_backward(16).items if i.name != "optimizer states")
    assert estimate == pytest.approx(tracker.snapshot()[0], rel=0.03)
