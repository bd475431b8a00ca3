"""campaign check -- python SCRIPT (issue 47): the gradient the loop accumulated over an update's micro-batches
against one backward of the model's own loss over the same examples stacked. Planted: the loss not divided by the
accumulation steps, micro-batch means averaged over micro-batches of unequal token counts; clean: nanoGPT-style
accumulation, an HF loop that weighs every token alike, the Trainer (num_items_in_batch)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from campaign.train.watch_accumulation import concatenate  # noqa: E402
from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402


def test_watch_accumulation_clean_gpt(tmp_path):
    r = watch(["python", planted(tmp_path), "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)["step.accumulation"]
    # loss / grad_accum with --grad_accum 2 on micro-batches of 4 x 16 targets each: 0.5 and 0.5
    assert c.status == "pass" and "scaled the model's own loss by 0.5, 0.5" in c.seen


def test_watch_accumulation_loss_not_divided_by_the_steps(tmp_path):
    script = planted(tmp_path, ("        loss = loss / cfg.grad_accum\n", ""))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)["step.accumulation"]
    # two micro-batches of equal token counts, each backpropagated whole: the sum of two means is twice the mean of
    # the update, so |2g - g| / |g| = 100%
    assert c.status == "fail" and "is 100.00% off" in c.seen and "not divided by the 2" in c.seen


HF_ACCUMULATION = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
g = torch.Generator().manual_seed(0)


def micro_batch(length, answer):
    # dynamic padding: each micro-batch as long as its rows; the loss on the last `answer` tokens only
    ids = torch.randint(3, 64, (2, length), generator=g)
    ids[:, -1] = 2                                  # each answer ends with EOS
    labels = ids.clone()
    labels[:, :length - answer] = -100
    return ids, labels


for step in range(10):
    batches = [micro_batch(6, 2), micro_batch(14, 10)]
    tokens = sum(int((labels[:, 1:] != -100).sum()) for _, labels in batches)
    for ids, labels in batches:
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
        n = int((labels[:, 1:] != -100).sum())
        loss = out.loss * n / tokens
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''


def test_watch_accumulation_hf_token_weighted_clean(tmp_path):
    r = watch(["python", planted(tmp_path, source=HF_ACCUMULATION)], updates=2, timeout=120, resume=False)
    c = by_id(r)["step.accumulation"]
    # the model's loss is the mean over the shifted targets: 2 x 2 and 2 x 10 of them, 24 in all; the loop weighs
    # each micro-batch's mean by its share: 4/24 and 20/24
    assert c.status == "pass" and "by 0.1667, 0.8333" in c.seen, c.seen
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]


def test_watch_accumulation_peft_token_weighted_clean(tmp_path):
    pytest.importorskip("peft")
    lora = ("model = LlamaForCausalLM(config)\nfrom peft import LoraConfig, get_peft_model\n"
            "model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=['q_proj', 'v_proj']))\n")
    script = planted(tmp_path, ("model = LlamaForCausalLM(config)\n", lora),
                     ("torch.optim.AdamW(model.parameters(),",
                      "torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],"),
                     source=HF_ACCUMULATION)
    r = watch(["python", script], updates=2, timeout=120, resume=False)
    c = by_id(r)["step.accumulation"]
    assert c.status == "pass" and "by 0.1667, 0.8333" in c.seen, c.seen


def test_watch_accumulation_hf_mean_of_means(tmp_path):
    script = planted(tmp_path, ("        loss = out.loss * n / tokens\n", "        loss = out.loss / 2\n"),
                     source=HF_ACCUMULATION)
    r = watch(["python", script], updates=2, timeout=120, resume=False)
    c = by_id(r)["step.accumulation"]
    assert c.status == "fail" and "by 0.5, 0.5" in c.seen and "a token of a short micro-batch" in c.seen
    # 4 and 20 targets weighed 1/2 each instead of 4/24 and 20/24: the error is a share of the gradient, well
    # beyond float32's 1e-4
    rel = float(c.seen.split(" is ")[1].split("%")[0]) / 100
    assert 0.05 < rel < 2


def test_stacking_micro_batches_pads_with_the_ignore_index():
    ids_a, ids_b = torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6, 7, 8]])
    lab_a, lab_b = torch.tensor([[-100, 2, 3]]), torch.tensor([[-100, -100, 6, 7, 8]])
    args, kwargs = concatenate([((), {"input_ids": ids_a, "labels": lab_a, "num_items_in_batch": torch.tensor(5),
                                      "use_cache": False}),
                                ((), {"input_ids": ids_b, "labels": lab_b, "num_items_in_batch": torch.tensor(5),
                                      "use_cache": False})])
    assert args == () and set(kwargs) == {"input_ids", "labels", "use_cache"}
    assert kwargs["input_ids"].tolist() == [[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]]
    assert kwargs["labels"].tolist() == [[-100, 2, 3, -100, -100], [-100, -100, 6, 7, 8]]


LIGHTNING = '''
import torch
import lightning as L
from transformers import LlamaConfig, LlamaForCausalLM


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        self.model = LlamaForCausalLM(config)

    def training_step(self, batch, i):
        return self.model(input_ids=batch, labels=batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


torch.manual_seed(0)
data = torch.utils.data.DataLoader(torch.randint(0, 64, (64, 12)), batch_size=2)
trainer = L.Trainer(max_steps=8, accelerator="cpu", accumulate_grad_batches=2, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Module(), data)
'''


def test_watch_accumulation_lightning_clean(tmp_path):
    pytest.importorskip("lightning")
    r = watch(["python", planted(tmp_path, source=LIGHTNING)], updates=2, timeout=180, resume=False)
    c = by_id(r)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # Lightning divides each micro-batch's loss by accumulate_grad_batches=2; the labels are the ids tensor itself
    assert c["step.accumulation"].status == "pass" and "by 0.5, 0.5)" in c["step.accumulation"].seen
    assert c["batch.labels_aligned"].status == "pass" and "labels against input_ids" in c["batch.labels_aligned"].seen
