"""Selective activation checkpointing: every K-th layer checkpointed (torchtitan selective_ac_option K, torchtune
ac_mode selective + ac_option K) and torchtitan's op-level policy (selective_ac_option op). Saved bytes worked out
here from the shapes; the op-level policy also checked against what torch.utils.checkpoint's selective checkpointing
really keeps for a tiny transformers Llama layer on the CPU."""
from __future__ import annotations

from collections import defaultdict

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import estimate_memory, make_workload
from campaign.memory.activations import checkpointed_layers, op_checkpoint_saved, training_activations
from campaign.memory.training_config import workload_from_configs
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config

# Llama 3.2 3B: 28 layers, h 3072, 24 heads of 128 (8 KV heads), MLP 8192; bf16 (2 B)
L, H, HEADS, KV, HD, INTER, C = 28, 3072, 24, 8, 128, 8192, 2
TOKENS = 2 * 4096
# what one layer saves without checkpointing, per token (full fine-tuning, SDPA), from transformers' Llama:
# two RMSNorms (fp32 input 4h, rsqrt 4, the bf16 normalized tensor and the output 2 x 2h), SDPA's q, k, v, its output
# (o_proj's input) and fp32 logsumexp per head, the MLP's gate output, SiLU output, up output and product
NORMS = 2 * (4 * H + 4 + 2 * C * H)
ATTENTION = C * (HEADS * HD + 2 * KV * HD) + C * HEADS * HD + 4 * HEADS
MLP = 4 * C * INTER
LAYER = NORMS + ATTENTION + MLP
INPUT = C * H  # a checkpointed layer's input
# torchtitan's op policy: the odd-numbered aten.mm of the layer's forward (q, k, v, o, gate, up, down: q, v, gate,
# down) and SDPA's outputs (the attention output and its fp32 logsumexp), besides the input
OP_KEPT = C * (HEADS * HD + KV * HD + INTER + H) + C * HEADS * HD + 4 * HEADS


def forward(**kw):
    w = make_workload(batch=2, seq_len=4096, dtype="bf16", logits_held=False, **kw)
    est = estimate_memory("llama-3.2-3b", w)
    return next(p.bytes for p in est.phases if p.name == "forward")


def test_one_layer_saves_what_the_shapes_give():
    assert LAYER == 131_176
    spec = load_spec("llama-3.2-3b")
    w = make_workload(batch=2, seq_len=4096, dtype="bf16")
    _, one = training_activations(spec, w, formula=False)[:2]
    assert one == TOKENS * LAYER


def test_every_second_layer_keeps_half_the_layers_whole():
    full = forward(grad_checkpointing=True)
    none = forward()
    every2 = forward(grad_checkpointing=True, checkpoint_every=2)
    every3 = forward(grad_checkpointing=True, checkpoint_every=3)
    # no checkpointing keeps every layer's tensors, full keeps every layer's input
    assert none - full == L * TOKENS * (LAYER - INPUT)
    # every 2nd: layers 2, 4, ..., 28 checkpointed (14), the other 14 keep everything
    assert every2 - full == 14 * TOKENS * (LAYER - INPUT)
    # every 3rd: layers 3, 6, ..., 27 (9 of 28), 19 keep everything
    assert every3 - full == 19 * TOKENS * (LAYER - INPUT)


def test_checkpointed_layers_count_from_one():
    spec = load_spec("llama-3.2-3b")
    assert [checkpointed_layers(spec, make_workload(grad_checkpointing=True, checkpoint_every=k))
            for k in (1, 2, 3, 5, 28)] == [28, 14, 9, 5, 1]
    assert checkpointed_layers(spec, make_workload()) == 0


def test_op_level_checkpointing_keeps_the_listed_ops_outputs():
    assert OP_KEPT == 36_960
    full = forward(grad_checkpointing=True)
    op = forward(grad_checkpointing=True, checkpoint_ops=True)
    assert op - full == L * TOKENS * OP_KEPT
    spec = load_spec("llama-3.2-3b")
    kept = dict(op_checkpoint_saved(spec, make_workload(grad_checkpointing=True, checkpoint_ops=True)).terms)
    assert set(kept) == {"q_proj output (mm #1)", "v_proj output (mm #3)", "gate_proj output (mm #5)",
                         "down_proj output (mm #7)", "attention output + logsumexp (SDPA)"}


TINY = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=128, hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, tie_word_embeddings=False, rms_norm_eps=1e-5)


def test_a_biased_projection_runs_addmm_and_shifts_the_count():
    # Qwen2-style q/k/v biases: aten.addmm, neither counted nor saved; the mm are o(1), gate(2), up(3), down(4)
    spec = spec_from_config(TINY | dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"]), name="tiny-qwen2",
                            source="test")
    kept = op_checkpoint_saved(spec, make_workload(grad_checkpointing=True, checkpoint_ops=True, dtype="bf16"))
    assert {n for n, _ in kept.terms} == {"o_proj output (mm #1)", "up_proj output (mm #3)",
                                          "attention output + logsumexp (SDPA)"}
    assert kept.per_token == 2 * 64 + 2 * 128 + 2 * 64 + 4 * 4


def _sac_policy(meta):
    """torchtitan's _custom_policy (parallelize_llama.py): save the _save_list ops' outputs, all but every second mm.
    The CPU's SDPA kernel stands in for CUDA's flash/efficient ones, which the CPU does not run."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def test_op_policy_matches_what_selective_checkpointing_keeps_on_a_real_layer():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k not in ("model_type", "architectures")},
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).float()
    layer = model.model.layers[0]
    b, s = 2, 32
    x = torch.randn(b, s, 64, requires_grad=True)
    positions = torch.arange(s).unsqueeze(0).expand(b, s)
    cos_sin = model.model.rotary_emb(x, positions)
    storages = []

    def context_fn():
        fwd, recompute = create_selective_checkpoint_contexts(_sac_policy(defaultdict(int)))
        storages.append(fwd.storage)
        return fwd, recompute

    out = checkpoint(layer, x, position_embeddings=cos_sin, attention_mask=None, use_reentrant=False,
                     context_fn=context_fn)
    out = out[0] if isinstance(out, tuple) else out
    kept: dict[int, int] = {}  # by storage, as the allocator holds them
    for by_index in storages[0].values():
        for entry in by_index.values():
            for t in (entry if isinstance(entry, (tuple, list)) else (entry,)):
                val = getattr(t, "val", t)
                if isinstance(val, torch.Tensor):
                    kept[val.untyped_storage().data_ptr()] = val.untyped_storage().nbytes()
    out.sum().backward()  # the recompute runs against the kept outputs
    assert x.grad is not None
    spec = spec_from_config(TINY, name="tiny-llama", source="test")
    w = make_workload(grad_checkpointing=True, checkpoint_ops=True, dtype="fp32", batch=b, seq_len=s)
    assert sum(kept.values()) == b * s * op_checkpoint_saved(spec, w).per_token


def test_a_torchtune_recipe_with_selective_ac_is_read(tmp_path):
    def read(**changes):
        doc = {"model": {"_component_": "torchtune.models.llama3_2.llama3_2_3b"},
               "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": 4096},
               "batch_size": 2, "dtype": "bf16", "enable_activation_checkpointing": False} | changes
        path = tmp_path / "recipe.yaml"
        path.write_text(yaml.safe_dump(doc))
        return workload_from_configs([path])

    cfg = read(ac_mode="selective", ac_option=2)
    assert cfg.options["grad_checkpointing"] is True and cfg.options["checkpoint_every"] == 2
    uses = {k.key: k.use for k in cfg.keys}
    assert uses["ac_mode"] == uses["ac_option"] == "modelled"
    assert read(ac_mode="selective", ac_option="3").options["checkpoint_every"] == 3
    assert "checkpoint_every" not in read(ac_mode="full").options and read(ac_mode="full").options[
        "grad_checkpointing"] is True
    # torchtune applies ac_mode only with enable_activation_checkpointing false; with both, neither runs
    assert read(ac_mode="selective", ac_option=2, enable_activation_checkpointing=True).options[
        "grad_checkpointing"] is False
    with pytest.raises(InputError, match="ac_option 'op'"):
        read(ac_mode="selective", ac_option="op")


def test_the_recipe_moves_the_estimate_by_the_layers_it_leaves_whole(cli, tmp_path):
    def run(name, **changes):
        doc = {"model": {"_component_": "torchtune.models.llama3_2.llama3_2_3b"},
               "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": 4096},
               "batch_size": 2, "dtype": "bf16", "enable_activation_checkpointing": False} | changes
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc))
        r = cli("memory", "llama-3.2-3b", "--config", str(path), "--json", "--no-solve")
        assert r.code == 0, r.err
        return {p["name"]: p["bytes"] for p in r.json()["phases"]}

    full, every2 = run("full.yaml", ac_mode="full"), run("every2.yaml", ac_mode="selective", ac_option=2)
    assert every2["forward"] - full["forward"] == 14 * TOKENS * (LAYER - INPUT)


@pytest.mark.parametrize("args, says", [
    (("--checkpoint-every", "2"), "add --grad-checkpointing"),
    (("--checkpoint-ops",), "add --grad-checkpointing"),
    (("--grad-checkpointing", "--checkpoint-every", "0"), "positive number of layers"),
    (("--grad-checkpointing", "--checkpoint-every", "29"), "checkpoints none"),
    (("--grad-checkpointing", "--checkpoint-every", "2", "--checkpoint-ops"), "give one"),
    (("--grad-checkpointing", "--checkpoint-ops", "--method", "lora"), "--method full"),
    (("--grad-checkpointing", "--checkpoint-ops", "--attention", "eager"), "--attention sdpa"),
    (("--grad-checkpointing", "--checkpoint-every", "2", "--activation-offloading"), "every layer checkpointed"),
])
def test_each_refusal_is_one_line_exit_2(cli, args, says):
    r = cli("memory", "llama-3.2-3b", *args, "--no-solve")
    assert r.code == 2
    assert says in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_op_level_is_refused_for_a_layer_it_does_not_know():
    spec = spec_from_config(dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=128, n_embd=64,
                                 n_layer=2, n_head=4, n_positions=64), name="tiny-gpt2", source="test")
    with pytest.raises(InputError, match="Llama-shaped"):
        op_checkpoint_saved(spec, make_workload(grad_checkpointing=True, checkpoint_ops=True))


def test_selective_checkpointing_is_refused_for_an_encoder_decoder():
    t5 = spec_from_config(dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, num_layers=2,
                               num_heads=4, d_kv=16, d_ff=128, vocab_size=128), name="t5", source="test")
    with pytest.raises(InputError, match="encoder-decoder"):
        training_activations(t5, make_workload(grad_checkpointing=True, checkpoint_every=2))


def test_the_headline_names_the_checkpointing_mode(cli):
    def first(*args):
        r = cli("memory", "llama-3.2-3b", "--grad-checkpointing", *args, "--no-solve")
        assert r.code == 0, r.err
        return " ".join(r.out.split("\n")[0:2])

    assert "grad checkpointing every 2 layers" in first("--checkpoint-every", "2")
    assert "selective (op) checkpointing" in first("--checkpoint-ops")
    assert ", grad checkpointing ·" in first()
