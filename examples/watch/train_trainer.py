"""A Hugging Face Trainer script as people write it (no campaign line in it): a tiny Llama built from a config,
a list of tokenized examples, TrainingArguments with gradient accumulation. Run as

    python examples/watch/train_trainer.py          # or: torchrun --nproc-per-node 2 examples/watch/train_trainer.py

campaign watches it unchanged, on one process or on 2 under torchrun (gloo on the CPU):

    campaign check --processes 2 --no-resume -- python examples/watch/train_trainer.py

Under torchrun the Trainer wraps the model in DistributedDataParallel, gives each rank its share of the examples,
skips DDP's all-reduce (no_sync) on the micro-batches before an update's last, and counts the loss's tokens over
every rank.
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                     num_hidden_layers=1, vocab_size=256, max_position_embeddings=64, attention_dropout=0.1)
model = LlamaForCausalLM(config)
ids = torch.randint(0, 256, (64, 12), generator=torch.Generator().manual_seed(1))
dataset = [{"input_ids": row, "labels": row} for row in ids]

args = TrainingArguments(output_dir=sys.argv[1] if len(sys.argv) > 1 else "out", max_steps=6,
                         per_device_train_batch_size=2, gradient_accumulation_steps=2, learning_rate=1e-3,
                         warmup_steps=2, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                         disable_tqdm=True, seed=0)
Trainer(model=model, args=args, train_dataset=dataset).train()
