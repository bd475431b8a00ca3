"""A tiny Llama and four micro-batches of different lengths: the setup `campaign batch` checks.

    campaign batch examples/train_setup.py:make_setup                          # the loop's loss / steps: fails
    campaign batch examples/train_setup.py:make_setup --normalization token    # tokens of the update: passes
    campaign batch examples/train_setup.py:make_setup --processes 2 --normalization token
    campaign batch examples/train_setup.py:with_loop                           # your loop's own step: passes
    campaign batch examples/train_setup.py:with_mean_of_means                  # a loop's loss / steps: fails
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


def per_token(model, micro_batches):
    """The loop's accumulation step: every token of the update weighs the same (the summed token losses of each
    micro-batch divided by the tokens of the whole update; a causal LM predicts token t + 1 from token t)."""
    total = sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro_batches)
    for b in micro_batches:
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["labels"][:, 1:].reshape(-1),
                                                 ignore_index=-100, reduction="sum")
        (loss / total).backward()


def mean_of_means(model, micro_batches):
    """The common loop: each micro-batch's mean loss (the model's own) divided by the accumulation steps."""
    for b in micro_batches:
        (model(**b).loss / len(micro_batches)).backward()


def with_loop():
    return {**make_setup(), "accumulate": per_token}


def with_mean_of_means():
    return {**make_setup(), "accumulate": mean_of_means}
