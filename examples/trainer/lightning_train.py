"""A Lightning script as people write it, with one line added: callbacks=[CampaignCallback(...)].

    python examples/trainer/lightning_train.py   # CPU, seconds: a tiny Llama inside a LightningModule, 4 steps
    campaign runs list                            # the run, its hyperparameters and metrics

The callback checks Lightning's own first optimizer steps (what trains, what stays frozen, finite gradients, the
learning rate applied, dropout in training mode), measures the second update's forward, backward and optimizer
step beside `campaign memory`'s estimate, read through the Hugging Face model inside the module, and
(resume_check=True) resumes Lightning's own checkpoint of update 2 in a fresh process, which must give this run's
losses of updates 3 and 4. Lightning's checkpoint holds no random generator state (the attention's dropout draws
from it), so the module saves it and sets it back; update 2 ends an epoch, where a plain DataLoader resumes.
"""
import lightning.pytorch as pl
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from campaign.integrations.lightning import CampaignCallback


class CausalLM(pl.LightningModule):
    def __init__(self, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                             num_hidden_layers=2, vocab_size=1000, max_position_embeddings=256, attention_dropout=0.1)
        self.model = LlamaForCausalLM(config)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        loss = self.model(input_ids=ids, labels=ids).loss
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["torch_rng_state"] = torch.get_rng_state()

    def on_load_checkpoint(self, checkpoint):
        torch.set_rng_state(checkpoint["torch_rng_state"])


torch.manual_seed(0)
ids = torch.randint(0, 1000, (8, 12))
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=4)   # 2 updates an epoch
callback = CampaignCallback("tiny-llama-lightning", hypothesis="Lightning's own loop updates what it should",
                            resume_check=True)
trainer = pl.Trainer(accelerator="cpu", max_steps=4, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False, callbacks=[callback])
trainer.fit(CausalLM(), data)
print(callback.result.status, [(c.id, c.status) for c in callback.result.checks])
