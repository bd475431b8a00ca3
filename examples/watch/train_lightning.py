"""A tiny causal LM trained with Lightning as people write it: a LightningModule around a Hugging Face model, AdamW
with a warm-up schedule stepped per optimizer step (interval "step"), gradient accumulation. campaign watches it
unchanged:

    campaign check --no-resume -- python examples/watch/train_lightning.py

Lightning runs the forward and backward inside optimizer.step(closure): campaign reads each update after its
closure has run, so the update it checks is the one the optimizer applies.
"""
import argparse

import lightning.pytorch as pl
import torch
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--max_steps", type=int, default=20)
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--lr", type=float, default=1e-3)
cfg = parser.parse_args()


class CausalLM(pl.LightningModule):
    def __init__(self, lr: float, warmup: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             attention_dropout=0.1)
        self.model = LlamaForCausalLM(config)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        loss = self.model(input_ids=ids, labels=ids).loss
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        (ids,) = batch
        self.log("val_loss", self.model(input_ids=ids, labels=ids).loss)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup = self.hparams.warmup
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


torch.manual_seed(0)
ids = torch.randint(0, 64, (64, 12))
train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids[:48]), batch_size=4, shuffle=True)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids[48:]), batch_size=4)
trainer = pl.Trainer(accelerator="cpu", max_steps=cfg.max_steps, accumulate_grad_batches=cfg.accumulate,
                     val_check_interval=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(CausalLM(cfg.lr), train, val)
