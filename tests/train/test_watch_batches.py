"""campaign check -- python SCRIPT (issue 47): the batches the loop fed its model, read from the tensors it fed
(no tokenizer, no target field): padding left out of the loss and of the attention, answers not cut by truncation
(their EOS kept). Planted: a max_length that cuts answers, labels on the padding, an attention mask over the
padding; clean: the same SFT-style loop with room for every answer."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from campaign.train.watch_batches import batch_facts  # noqa: E402
from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

# four examples (prompt tokens, answer tokens + EOS): 3 + 4, 5 + 6, 4 + 3 and 6 + 8 tokens long, i.e. 7, 11, 7, 14;
# one batch of all four per update, right-padded to the longest with PAD = 0, EOS = 2, other ids from 3 up
SFT = '''
import sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM

MAX_LENGTH = int(sys.argv[1]) if len(sys.argv) > 1 else 64
PAD, EOS = 0, 2
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
g = torch.Generator().manual_seed(0)
examples = [(torch.randint(3, 64, (p,), generator=g).tolist(), torch.randint(3, 64, (a - 1,), generator=g).tolist()
             + [EOS]) for p, a in ((3, 4), (5, 6), (4, 3), (6, 8))]


def collate(rows):
    ids = [(p + a)[:MAX_LENGTH] for p, a in rows]
    labels = [([-100] * len(p) + a)[:MAX_LENGTH] for p, a in rows]
    width = max(map(len, ids))
    batch_ids = torch.tensor([x + [PAD] * (width - len(x)) for x in ids])
    batch_labels = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
    return batch_ids, batch_labels, mask


optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
for step in range(10):
    ids, labels, mask = collate(examples)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''


def fed(tmp_path, *edits, args=()):
    r = watch(["python", planted(tmp_path, *edits, source=SFT), *args], updates=2, timeout=120, resume=False)
    return r, by_id(r)


def test_watch_fed_batches_clean(tmp_path):
    r, c = fed(tmp_path)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # two updates of four rows: every answer ends on EOS (id 2); the rows of 7, 11 and 7 tokens are padded to 14
    assert "all 8 rows with an answer end with one token (id 2)" in c["batch.answer_truncated"].seen
    assert "the 6 padded rows of 8 fed" in c["batch.padding_masked"].seen


def test_watch_fed_batches_truncation_cuts_answers(tmp_path):
    r, c = fed(tmp_path, args=("10",))
    cut = c["batch.answer_truncated"]
    # max_length 10 cuts the rows of 11 and 14 tokens in both updates: 4 of 8 rows, the other 4 end on EOS
    assert cut.status == "fail" and r.status == "fail"
    assert "4 of 8 rows with an answer" in cut.seen and "end token (id 2) that 4 other rows" in cut.seen


def test_watch_fed_batches_loss_on_padding(tmp_path):
    r, c = fed(tmp_path, ("[-100] * (width - len(y))", "[PAD] * (width - len(y))"))
    pad = c["batch.padding_masked"]
    assert pad.status == "fail" and "6 of the 6 padded rows (of 8 fed) have a target" in pad.seen


def test_watch_fed_batches_mask_over_padding(tmp_path):
    r, c = fed(tmp_path, ("[1] * len(x) + [0] * (width - len(x))", "[1] * width"))
    pad = c["batch.padding_masked"]
    # the 7-token rows end in 7 PADs, the 11-token row in 3: 3 rows per update, 6 of 8
    assert pad.status == "fail" and "6 of 8 rows fed end in a run of one repeated token" in pad.seen


def test_batch_facts_without_a_shared_end_token_is_not_called_cut():
    # three rows whose answers all run to the last column on different tokens: cut, or no EOS at all
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 10], [5, 7, 11, 12]])
    labels = torch.tensor([[-100, -100, 7, 8], [-100, 6, 9, 10], [-100, -100, 11, 12]])
    f = batch_facts([((), {"input_ids": ids, "labels": labels})], "input_ids", "labels")
    assert f["completion_rows"] == 3 and f["end_token"] is None and f["cut"] == 0 and f["all_at_edge_unended"]


TRAINER_SFT = '''
import sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

MAX_LENGTH = int(sys.argv[2])
PAD, EOS = 0, 2
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
g = torch.Generator().manual_seed(0)
rows = [{"prompt": torch.randint(3, 64, (p,), generator=g).tolist(),
         "answer": torch.randint(3, 64, (a - 1,), generator=g).tolist() + [EOS]}
        for p, a in ((3, 4), (5, 6), (4, 3), (6, 8))] * 4


def collate(batch):
    ids = [(r["prompt"] + r["answer"])[:MAX_LENGTH] for r in batch]
    labels = [([-100] * len(r["prompt"]) + r["answer"])[:MAX_LENGTH] for r in batch]
    width = max(map(len, ids))
    return {"input_ids": torch.tensor([x + [PAD] * (width - len(x)) for x in ids]),
            "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels]),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])}


args = TrainingArguments(output_dir=sys.argv[1], max_steps=8, per_device_train_batch_size=4, learning_rate=1e-3,
                         report_to=[], save_strategy="no", use_cpu=True, logging_steps=100, disable_tqdm=True,
                         remove_unused_columns=False)
Trainer(model=model, args=args, train_dataset=rows, data_collator=collate).train()
'''


@pytest.mark.parametrize("max_length", [64, 10])
def test_watch_fed_batches_through_the_trainer(tmp_path, max_length):
    # the Trainer's own collate and shuffled sampler, no target field given: 2 updates x 4 rows
    script = planted(tmp_path, source=TRAINER_SFT)
    r = watch(["python", script, str(tmp_path / "out"), str(max_length)], updates=2, timeout=180, resume=False)
    c = by_id(r)["batch.answer_truncated"]
    if max_length == 64:
        assert c.status == "pass" and "all 8 rows with an answer end with one token (id 2)" in c.seen
    else:       # rows of 11 and 14 tokens cut to 10, the ones of 7 end on EOS
        assert c.status == "fail" and "end token (id 2)" in c.seen
