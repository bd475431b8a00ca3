"""A tiny Llama with dropout, AdamW and a warm-up schedule: the setup `campaign check` runs every check on.

    campaign check examples/check_setup.py:make_setup          # every check passes
    campaign check examples/check_setup.py:forgets_rng          # its own checkpointing forgets the generators: fails
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_setup():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=256, max_position_embeddings=128, attention_dropout=0.1)
    model = LlamaForCausalLM(config)
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
