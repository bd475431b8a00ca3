"""A tiny Llama with dropout, AdamW and a warm-up schedule: the setup `campaign check` runs every check on.

    campaign check examples/check_setup.py:make_setup          # every check passes
    campaign check examples/check_setup.py:forgets_rng          # its own checkpointing forgets the generators: fails
    campaign check examples/check_setup.py:lora_setup           # LoRA: trainable count, adapter bound to its base
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_setup(device="cpu"):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=256, max_position_embeddings=128, attention_dropout=0.1)
    model = LlamaForCausalLM(config).to(device)
    for p in model.model.embed_tokens.parameters():      # the embeddings stay frozen
        p.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 2))
    generator = torch.Generator().manual_seed(1)
    batches = []
    for length in (24, 32):
        ids = torch.randint(1, 256, (4, length), generator=generator)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "batches": batches,
            "trainable": ["model.layers", "model.norm", "lm_head"]}


def on_card():
    """The same setup on the GPU (benchmarks/gpu_train_check.py): the checks' tolerances for GPU kernels."""
    return make_setup(device="cuda")


def save_weights_and_optimizer(directory, model, optimizer, scheduler, position):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "position": position}, directory / "state.pt")


def load_weights_and_optimizer(directory, model, optimizer, scheduler):
    state = torch.load(directory / "state.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state["position"]


def forgets_rng():
    """The loop's own checkpointing, which saves weights, optimizer, scheduler and position, not the generators."""
    setup = make_setup()
    setup.update(save_checkpoint=save_weights_and_optimizer, load_checkpoint=load_weights_and_optimizer)
    return setup


def _lora_classifier(seed):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)                              # the base: a real run loads it from its folder instead
    base = LlamaForSequenceClassification(LlamaConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        vocab_size=256, max_position_embeddings=128, num_labels=3, pad_token_id=0))
    torch.manual_seed(0)
    # SEQ_CLS: LoRA on q_proj and v_proj, and the new classification head `score` trained in full (modules_to_save)
    config = LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    return get_peft_model(base, config)


def _classifier_setup(seed):
    model = _lora_classifier(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    generator = torch.Generator().manual_seed(2)
    batches = []
    for length in (24, 32):
        ids = torch.randint(1, 256, (6, length), generator=generator)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "labels": torch.tensor([0, 1, 2, 0, 1, 2])})
    return {"model": model, "optimizer": optimizer, "batches": batches, "trainable": ["*lora_*", "*score*"]}


def lora_setup():
    """A 3-class classifier with LoRA r=8: the adapter checks (trainable count, binding to the base, reload)."""
    return _classifier_setup(seed=0)


def lora_on_another_base():
    """The same, with a base that differs in every process (no fixed seed): its adapter is refused on reload."""
    import random

    return _classifier_setup(seed=random.SystemRandom().randrange(2**31))
