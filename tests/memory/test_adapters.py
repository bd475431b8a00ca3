"""LoRA adapters follow the run: their dtype by peft's rule per version, sharded under FSDP and ZeRO-3, and a QLoRA
base under FSDP all-gathered as its 4-bit storage; each against a hand count from the shapes."""
from __future__ import annotations

import pytest

from campaign.memory import estimate_memory, make_workload
from campaign.memory.phases import step_items
from campaign.memory.states import adapter_dtype
from campaign.models import load_spec
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

# Llama 3.2 1B: 16 layers, hidden 2048, 8 KV heads x 64: LoRA rank 16 on q_proj (2048 -> 2048) and v_proj (2048 -> 512)
PT_1B = 16 * 16 * ((2048 + 2048) + (2048 + 512))


def _step(**kw):
    est = estimate_memory(load_spec("llama-3.2-1b"), make_workload(method="lora", lora_rank=16, batch=1, seq_len=256,
                                                                   lora_targets=("q_proj", "v_proj"), **kw))
    return {i.name: i.bytes for i in next(p for p in est.phases if p.name == "optimizer step").items}


def test_peft_upcasts_adapters_on_a_16_bit_base_since_0_12():
    step = _step()
    assert step["LoRA adapter weights (fp32)"] == 4 * PT_1B
    assert step["gradients"] == 4 * PT_1B and step["optimizer states"] == 2 * 4 * PT_1B


def test_without_peft_autocast_adapters_grads_and_states_are_in_the_base_dtype():
    step = _step(peft_autocast=False)  # peft < 0.12 or autocast_adapter_dtype=False: lora update_layer's self.to(dtype)
    assert "LoRA adapter weights (fp32)" not in step
    assert step["LoRA adapter weights (bf16)"] == 2 * PT_1B
    assert step["gradients"] == 2 * PT_1B and step["optimizer states"] == 2 * 2 * PT_1B  # AdamW: zeros_like(param)
    # a quantized base's storage is not floating: peft leaves the adapters in fp32
    qlora = estimate_memory(load_spec("llama-3.2-1b"), make_workload(method="qlora", lora_rank=16, batch=1, seq_len=256,
                                                                     lora_targets=("q_proj", "v_proj"),
                                                                     peft_autocast=False))
    load = {i.name: i.bytes for i in next(p for p in qlora.phases if p.name == "load").items}
    assert load["LoRA adapter weights (fp32)"] == 4 * PT_1B


def test_fsdp_shards_the_adapters_with_their_block():
    step = _step(gpus=4, shard="fsdp")
    assert step["LoRA adapter weights (fp32)"] == 4 * PT_1B // 4
    assert _step(gpus=4, shard="none")["LoRA adapter weights (fp32)"] == 4 * PT_1B  # DDP: a full replica


def test_qlora_under_fsdp_gathers_its_4_bit_storage():
    # Llama 3.1 8B, nf4 without double quantization: 0.5 B per weight + a 4 B absmax per 64 weights = 9/16 B
    block = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096
    per_block = block * 9 // 16 + 2 * 4096 * 2                    # + the block's two norms in bf16
    root = (2 * 128_256 * 4096 + 4096) * 2                          # embeddings, head, final norm in bf16
    est = estimate_memory(load_spec("llama-3.1-8b"), make_workload(method="qlora", double_quant=False, gpus=8,
                                                                   shard="fsdp", batch=1, seq_len=512))
    forward = {i.name: i.bytes for i in next(p for p in est.phases if p.name == "forward").items}
    assert forward["all-gathered parameters"] == per_block + root  # at the loss: the root + one block
    gathered = {i.name: i.bytes for i in step_items(load_spec("llama-3.1-8b"), make_workload(
        method="qlora", double_quant=False, gpus=8, shard="fsdp", batch=1, seq_len=512)).fwd_only}
    assert gathered["all-gathered parameters"] == 2 * per_block + root  # in backward: current + prefetched
    assert gathered["all-gathered parameters"] < 2 * block * 2 + root  # not a bf16 copy of the blocks


def test_deepspeed_casts_the_adapters_and_keeps_their_fp32_master():
    # bf16 enabled: the engine casts every floating parameter (adapters too) to bf16; ZeRO keeps fp32 master
    # weights and Adam states of the trainable partition, gradients in bf16
    step = _step(gpus=4, shard="zero2", mixed_precision=True)
    assert step["LoRA adapter weights (bf16)"] == 2 * PT_1B
    assert step["fp32 master weights"] == 4 * PT_1B // 4
    assert step["optimizer states"] == 2 * 4 * PT_1B // 4 and step["gradients"] == 2 * PT_1B // 4
    # without DeepSpeed's bf16 section nothing casts them: peft's fp32
    assert "LoRA adapter weights (fp32)" in _step(gpus=4, shard="zero2")


@pytest.mark.parametrize("autocast", [True, False])
def test_the_installed_peft_gives_the_adapters_the_dtype_the_estimate_counts(autocast):
    # the rule read against the library itself: a bf16 base, get_peft_model with and without autocast_adapter_dtype
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = tiny_llama()
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    base = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
                                autocast_adapter_dtype=autocast)
    dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
    spec = spec_from_config(cfg, name="tiny", source="test")
    w = make_workload(method="lora", lora_rank=4, lora_targets=("q_proj", "v_proj"), peft_autocast=autocast)
    assert dtypes == {getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[adapter_dtype(w)])}
    est = estimate_memory(spec, w)
    lora = next(i for i in next(p for p in est.phases if p.name == "load").items if i.name.startswith("LoRA"))
    assert lora.bytes == sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "lora_" in n)
