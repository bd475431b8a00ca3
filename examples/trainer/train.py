"""A Hugging Face Trainer script as people write it, with one line added: callbacks=[CampaignCallback(...)].

    python examples/trainer/train.py        # CPU, seconds: a tiny Llama built from a config, 4 steps
    campaign runs list                      # the run, its parameters, metrics and checkpoints

The callback checks the Trainer's first updates (what trains, what stays frozen, finite gradients, the learning
rate applied), measures the second update's forward, backward and optimizer step beside `campaign memory`'s
estimate, and (resume_check=True) resumes the Trainer's own checkpoint of update 2 in a fresh process, which must
give this run's losses of updates 3 and 4.
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from campaign.integrations.hf import CampaignCallback

torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                     num_hidden_layers=2, vocab_size=1000, max_position_embeddings=256, attention_dropout=0.1)
model = LlamaForCausalLM(config)
ids = torch.randint(0, 1000, (16, 12))
dataset = [{"input_ids": row, "labels": row} for row in ids]

args = TrainingArguments(output_dir="out", max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                         gradient_accumulation_steps=2, logging_steps=1, save_steps=2, report_to=[], use_cpu=True,
                         disable_tqdm=True)
callback = CampaignCallback("tiny-llama-trainer", hypothesis="the Trainer's own loop updates what it should",
                            resume_check=True)
Trainer(model=model, args=args, train_dataset=dataset, callbacks=[callback]).train()
print(callback.result.status, [(c.id, c.status) for c in callback.result.checks])
