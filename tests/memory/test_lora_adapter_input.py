"""What LoRA's adapters keep of their inputs for backward: a cast copy per adapter where peft casts (fp32 adapters on a
16-bit base) or autocast does, else the very tensor the base Linear read, kept once however many adapters read it.

Counted against a second method: the storages autograd saves in one forward of a tiny real Llama wrapped with real
peft (the harness of test_activations.py), and against figures worked out here from the shapes.
"""
from __future__ import annotations

import pytest

from campaign.memory import make_workload
from campaign.memory.activations import layer_saved, training_activations
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama
from tests.memory.test_activations import B, S, V, _saved_bytes

# tiny_llama: h 64, 4 heads x 16 = 64 (o_proj's input), 2 KV heads, MLP 160, 2 layers; LoRA rank 8 on all seven
# Linears of a layer: q, k, v, o, gate, up read 64 features, down 160
H, MLP, R, L, TOKENS = 64, 160, 8, 2, B * S


def _estimate(**options) -> int:
    """The estimate's saved bytes for the harness's step: the layers, and beside them the loss's fp32 log_softmax
    output (b x s x V x 4) and the int64 ids and labels."""
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    w = make_workload(mode="train", method="lora", batch=B, seq_len=S, lora_rank=R, **options)
    return training_activations(spec, w)[0] + TOKENS * V * 4 + 2 * TOKENS * 8


def _lora_terms(**options) -> dict[str, float]:
    """The LoRA terms of one layer, per token, by where the adapters sit (o_proj, attention inputs, MLP inputs)."""
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    w = make_workload(mode="train", batch=1, seq_len=16, lora_rank=R, **{"method": "lora", **options})
    return {name.split(" (")[0].removeprefix("LoRA on "): v for name, v in layer_saved(spec, w).terms
            if name.startswith("LoRA on")}


# per token and layer, from the shapes: fp32 adapters on the bf16 model keep a 4-byte copy of each of the seven
# inputs (6 x 64 + 160 features) and each lora_A's fp32 output (7 x 8); bf16 adapters keep, in 2 bytes, the attention
# norm's output once (q, k, v), the MLP norm's output once (gate, up), down's input (gate x up: 160), nothing for
# o_proj (SDPA keeps its output, o_proj's input) and the seven lora_A outputs
FP32_ADAPTERS = 4 * (6 * H + MLP) + 4 * 7 * R      # 2,400 B
BF16_ADAPTERS = 2 * (H + H + MLP) + 2 * 7 * R      # 688 B
GONE = (FP32_ADAPTERS - BF16_ADAPTERS) * TOKENS * L  # 1,712 B x 64 tokens x 2 layers = 219,136 B


def test_bf16_adapters_keep_no_fp32_copies_of_their_inputs():
    # the planted bug: counting fp32 copies for bf16 adapters puts the estimate 40% over what autograd saves
    measured = _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False, peft_autocast=False)
    assert _estimate(peft_autocast=False) == pytest.approx(measured, rel=0.03)


def test_fp32_adapters_keep_their_copies():
    # no false alarm: peft's default (autocast_adapter_dtype=True) casts each adapter's input to fp32
    measured = _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False)
    assert _estimate() == pytest.approx(measured, rel=0.03)


def test_the_bytes_that_go_with_bf16_adapters_by_hand():
    measured = {a: _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False, peft_autocast=a)
                for a in (True, False)}
    assert measured[True] - measured[False] == GONE == 219_136
    assert _estimate() - _estimate(peft_autocast=False) == GONE


def test_eager_attention_keeps_no_o_proj_input_so_bf16_adapters_keep_it():
    # eager attention's output goes through a contiguous copy that only o_proj's adapter keeps: 2 x 64 B a token
    measured = {a: _saved_bytes(tiny_llama(), "eager", "lora", ("all-linear",), False, peft_autocast=a)
                for a in (True, False)}
    assert measured[True] - measured[False] == GONE - 2 * H * TOKENS * L
    assert _estimate(attention="eager", peft_autocast=False) == pytest.approx(measured[False], rel=0.03)


@pytest.mark.parametrize("peft_autocast", [True, False])
def test_autocast_keeps_a_16_bit_copy_unless_input_and_adapters_are_16_bit(peft_autocast):
    # under torch.autocast fp32 adapters' input is cast to fp32 by peft, then back to bf16 for lora_A's matmul: a
    # copy per adapter (2 B); bf16 adapters on bf16 inputs are cast by neither
    measured = _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False, peft_autocast=peft_autocast,
                            autocast=True)
    assert _estimate(mixed_precision=True, peft_autocast=peft_autocast) == pytest.approx(measured, rel=0.03)


def test_fp32_adapters_on_an_fp32_base_share_their_inputs():
    # input and adapters both fp32 (an fp32 model, or a QLoRA base prepared by prepare_model_for_kbit_training):
    # nothing casts, and the inputs are kept once, in 4 bytes
    measured = _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False, dtype="float32")
    assert _estimate(dtype="fp32") == pytest.approx(measured, rel=0.03)


@pytest.mark.parametrize("options, o_proj, attention, mlp", [
    # fp32 adapters on bf16: fp32 copies of every input
    (dict(), 4 * (H + R), 4 * 3 * (H + R), 4 * (2 * H + MLP + 3 * R)),
    # bf16 adapters: nothing for o_proj's input (SDPA's output), q/k/v's and gate/up's once, down's
    (dict(peft_autocast=False), 2 * R, 2 * (H + 3 * R), 2 * (H + MLP + 3 * R)),
    # autocast: a 16-bit copy per adapter
    (dict(mixed_precision=True), 2 * (H + R), 2 * 3 * (H + R), 2 * (2 * H + MLP + 3 * R)),
    # QLoRA, k-bit prepared: fp32 inputs and adapters, nothing cast, each input once in 4 bytes
    (dict(method="qlora"), 4 * R, 4 * (H + 3 * R), 4 * (H + MLP + 3 * R)),
    # ... under autocast: a bf16 copy per adapter, not an fp32 one
    (dict(method="qlora", mixed_precision=True), 2 * (H + R), 2 * 3 * (H + R), 2 * (2 * H + MLP + 3 * R)),
    # ... not prepared (torchtune): bf16 inputs, fp32 adapters, fp32 copies
    (dict(method="qlora", kbit_upcast=False), 4 * (H + R), 4 * 3 * (H + R), 4 * (2 * H + MLP + 3 * R)),
    # ... bitsandbytes < 0.43.2 keeps every 4-bit linear's input: the adapters add their lora_A outputs only
    (dict(method="qlora", bnb_saves_input=True), 4 * R, 4 * 3 * R, 4 * 3 * R),
])
def test_lora_terms_by_hand(options, o_proj, attention, mlp):
    assert _lora_terms(**options) == {"o_proj": o_proj, "attention inputs": attention, "MLP inputs": mlp}


def test_the_labels_name_no_fp32_casts_where_there_are_none():
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    labels = {a: [n for n, _ in layer_saved(spec, make_workload(method="lora", peft_autocast=a)).terms
                  if n.startswith("LoRA")] for a in (True, False)}
    assert all("fp32 casts" in n for n in labels[True])
    assert not any("fp32" in n for n in labels[False])


def test_llama_3_1_8b_by_hand():
    # Llama-3.1-8B (h 4096, MLP 14336, 32 heads x 128, rank 16 on all seven Linears), per token and layer: fp32
    # adapters keep 4 x (6 x 4096 + 14336) + 4 x 7 x 16 = 156,096 B; bf16 ones 2 x (4096 + 4096 + 14336) + 2 x 7 x 16
    # = 45,280 B: 110,816 B less, 13.53 GiB at batch 2 x 2048 over 32 layers
    spec = spec_from_config(tiny_llama(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                       num_key_value_heads=8, num_hidden_layers=32, vocab_size=128256,
                                       max_position_embeddings=131072), name="llama-8b-shaped", source="test")
    lora = {a: sum(v for n, v in layer_saved(spec, make_workload(method="lora", peft_autocast=a)).terms
                   if n.startswith("LoRA")) for a in (True, False)}
    assert lora == {True: 156_096, False: 45_280}
    saved = {a: training_activations(spec, make_workload(method="lora", batch=2, seq_len=2048, peft_autocast=a))[0]
             for a in (True, False)}
    assert saved[True] - saved[False] == 110_816 * 32 * 2 * 2048


def test_qlora_adapters_without_peft_autocast_are_in_the_compute_dtype():
    """torchtune builds its QLoRA adapters under the recipe's dtype and TRL 0.22 on casts a k-bit model's adapters
    to bf16 (--no-peft-autocast, as the torchtune reader sets it): 2 B a weight; peft's default keeps them in fp32.
    Llama 3.1 8B, rank 8 on q and v: 32 layers x 8 x ((4096 + 4096) + (4096 + 1024)) weights."""
    from campaign.memory import estimate_memory, make_workload

    weights = 32 * 8 * ((4096 + 4096) + (4096 + 1024))

    def adapters(**kw):
        w = make_workload(method="qlora", lora_rank=8, lora_targets=("q_proj", "v_proj"), batch=1, seq_len=256, **kw)
        return next(i.bytes for p in estimate_memory("llama-3.1-8b", w).phases if p.name == "load" for i in p.items
                    if i.name.startswith("LoRA adapter weights"))

    assert adapters() == 4 * weights
    assert adapters(peft_autocast=False, kbit_upcast=False) == 2 * weights


def test_gpt2s_two_c_proj_linears_are_both_counted():
    """GPT-2 names its attention output and its MLP output projection alike (attn.c_proj 768 -> 768, mlp.c_proj
    3072 -> 768): a LoRA on c_proj targets both, and each adapter keeps its own input; the second was dropped."""
    from campaign.memory import make_workload
    from campaign.memory.states import lora_in_features
    from campaign.models import load_spec

    w = make_workload(method="lora", lora_targets=("c_attn", "c_proj"), batch=1, seq_len=64)
    assert lora_in_features(load_spec("gpt2"), w) == {"c_attn": 768, "c_proj": 768, "mlp.c_proj": 3072}


def test_berts_three_dense_linears_each_keep_their_lora_input():
    """BERT names three Linears of a block dense (attention.output.dense h -> h, intermediate.dense h -> inter,
    output.dense inter -> h): a LoRA on dense targets all three, each keeping an fp32 copy of its input and lora_A's
    output. One of them was counted (with the last one's width). By hand on a tiny BERT (h 128, inter 512, rank 8,
    2 layers, 64 tokens), and against autograd's saved tensors within 10%."""
    cfg = dict(model_type="bert", architectures=["BertForMaskedLM"], vocab_size=512, hidden_size=128,
               intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
               type_vocab_size=2, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    spec = spec_from_config(cfg, name="tiny", source="test")
    qkv, dense = ("query", "key", "value"), ("query", "key", "value", "dense")

    def estimate(targets):
        w = make_workload(mode="train", method="lora", batch=B, seq_len=S, lora_rank=8, lora_targets=targets)
        return training_activations(spec, w)[0]

    by_hand = B * S * 2 * ((128 + 128 + 512) * 4 + 3 * 8 * 4)
    assert estimate(dense) - estimate(qkv) == by_hand
    measured = _saved_bytes(cfg, "sdpa", "lora", dense, False) - _saved_bytes(cfg, "sdpa", "lora", qkv, False)
    assert by_hand == pytest.approx(measured, rel=0.10)


@pytest.mark.parametrize("cfg", [
    dict(model_type="opt", architectures=["OPTForCausalLM"], vocab_size=512, hidden_size=128, ffn_dim=512,
         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512, word_embed_proj_dim=128,
         dropout=0.0, attention_dropout=0.0, activation_dropout=0.0),
    dict(model_type="starcoder2", architectures=["Starcoder2ForCausalLM"], vocab_size=512, hidden_size=128,
         intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         max_position_embeddings=512, residual_dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0),
], ids=["opt", "starcoder2"])
def test_the_output_projections_of_opt_and_starcoder2_keep_their_lora_inputs(cfg):
    """OPT's attention output is out_proj, StarCoder2's MLP output c_proj: both were missed. LoRA on every linear
    beyond q, k, v adds, per token and layer, the attention output projection's fp32 copy (SDPA keeps its input
    already: lora_A's copy of it all the same) and the two MLP projections' fp32 copies, each with lora_A's output:
    (128 + 8) + (128 + 8) + (512 + 8), x 4 B; by hand, and as autograd keeps it."""
    spec = spec_from_config(cfg, name="tiny", source="test")

    def estimate(targets):
        w = make_workload(mode="train", method="lora", batch=B, seq_len=S, lora_rank=8, lora_targets=targets)
        return training_activations(spec, w)[0]

    qkv = ("q_proj", "k_proj", "v_proj")
    by_hand = B * S * 2 * 4 * ((128 + 8) + (128 + 8) + (512 + 8))
    assert estimate(("all-linear",)) - estimate(qkv) == by_hand
    measured = _saved_bytes(cfg, "sdpa", "lora", ("all-linear",), False) - _saved_bytes(cfg, "sdpa", "lora", qkv, False)
    assert measured == by_hand


@pytest.mark.parametrize("peft_autocast, element", [(True, 4), (False, 2)])
def test_lora_dropout_gives_each_adapter_its_own_input_and_a_mask(peft_autocast, element):
    """peft's lora_A(dropout(x)): above 0 each adapter keeps dropout's output (a new tensor, of the fp32 cast where
    one is made) and dropout keeps its mask. A GPU's native_dropout keeps a bool mask (1 B), which the estimate counts;
    this CPU's dropout multiplies by a noise tensor of the input's dtype and keeps that. Layer 0's q, k and v read an
    input that needs no gradient (the frozen embeddings'), so their dropout keeps no mask. Worked out per token: the
    estimate's difference, with the CPU's mask bytes and layer 0's three masks, is what autograd saves."""
    IN = 6 * H + MLP  # the seven adapters' input features: 544
    measured = {p: _saved_bytes(tiny_llama(), "sdpa", "lora", ("all-linear",), False, peft_autocast=peft_autocast,
                                lora_dropout=p) for p in (0.0, 0.05)}
    estimate = {p: _estimate(peft_autocast=peft_autocast, lora_dropout=p) for p in (0.0, 0.05)}
    # the estimate, per token and layer: dropout outputs and a 1-byte mask per feature, in place of the casts (fp32
    # adapters: 4 x 544) or the three shared inputs (bf16: 2 x (64 + 64 + 160); o_proj's is SDPA's output)
    before = element * IN if peft_autocast else element * (H + H + MLP)
    assert estimate[0.05] - estimate[0.0] == TOKENS * L * (element * IN + IN - before)
    cpu = TOKENS * L * (element * IN + element * IN - before) - TOKENS * element * 3 * H
    assert measured[0.05] - measured[0.0] == cpu
