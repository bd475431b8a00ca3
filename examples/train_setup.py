"""A tiny Llama and four micro-batches of different lengths: the setup `campaign batch` checks.

    campaign batch examples/train_setup.py:make_setup                          # the loop's loss / steps: fails
    campaign batch examples/train_setup.py:make_setup --normalization token    # tokens of the update: passes
    campaign batch examples/train_setup.py:make_setup --processes 2 --normalization token
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_setup():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=256, max_position_embeddings=128)
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(1)
    batches = []
    for length in (12, 40, 20, 33):                       # micro-batches of 2 rows, as a length-bucketed loader gives
        ids = torch.randint(1, 256, (2, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, length // 2:] = 0                         # the second row is shorter: right-padded
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return {"model": model, "batches": batches}
