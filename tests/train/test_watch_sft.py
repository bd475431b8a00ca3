"""campaign check -- python sft.py (issue 47): TRL's SFTTrainer with a LoRA adapter (examples/watch/sft.py), watched
unchanged. TRL runs the model through its fused LM head (no logits), under bf16 autocast and gradient checkpointing;
the checks read what the trainer fed. Planted: a max_length that cuts every answer and its EOS, labels shifted in
the collate and again by the model; clean: room for every answer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from campaign.train.watch_batches import batch_facts  # noqa: E402
from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

SFT = Path(__file__).resolve().parents[2] / "examples" / "watch" / "sft.py"
# TRL's default SFTConfig: batch 4 per device here, 2 micro-batches per update
ROWS_PER_UPDATE = 4 * 2


def data(tmp_path: Path) -> str:
    """48 question-answer pairs: example i has a question of 2 + i % 12 words (a prompt of "question : ... answer :",
    5 to 16 tokens) and an answer of 8 + i % 5 words (9 to 13 tokens with its EOS)."""
    rows = [{"question": " ".join(f"q{i}w{j}" for j in range(2 + i % 12)),
             "answer": " ".join(f"a{i}w{j}" for j in range(8 + i % 5))} for i in range(48)]
    out = tmp_path / "pairs.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(out)


def run(tmp_path: Path, *args: str, script: str | None = None, updates: int = 2):
    r = watch(["python", script or str(SFT), "--data", data(tmp_path), "--output_dir", str(tmp_path / "out"), *args],
              updates=updates, timeout=240, resume=False)
    return r, by_id(r)


def test_watch_sft_lora_clean(tmp_path):
    r, c = run(tmp_path, updates=3)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert r.model == "PeftModelForCausalLM" and r.micro_batches == (2, 2, 2)
    # LoRA r=4 on q_proj and v_proj of 2 layers: 2 x 2 x (A, B) = 8 tensors train; the base's 21 stay frozen
    assert "exactly the 8 trainable" in c["params.in_optimizer"].seen
    assert "21 frozen" in c["params.frozen_unchanged"].seen
    # every answer keeps the EOS TRL appends (the tokenizer's </s>, id 2): 3 updates x 8 rows
    ended = c["batch.answer_truncated"]
    assert f"all {3 * ROWS_PER_UPDATE} rows with an answer end with one token (id 2)" in ended.seen
    # TRL's fused LM head returns no logits: the labels and causality are read from the model's plain forward
    assert "shifts the labels" in c["batch.labels_aligned"].seen and c["model.causal"].status == "pass"
    assert c["step.accumulation"].status == "pass" and "bfloat16" in c["step.accumulation"].seen


def test_watch_sft_max_length_cuts_every_answer(tmp_path):
    # max_length 12: the prompts of 12 tokens or more (questions of 9 to 13 words: 5 in every 12 examples, 20 of 48)
    # are left with no answer token and dropped by TRL; every other prompt (5 to 11 tokens) plus its answer (9 to 13)
    # is over 12, so each of the 28 kept rows is cut at 12 and loses its EOS
    r, c = run(tmp_path, "--max_length", "12")
    cut = c["batch.answer_truncated"]
    assert cut.status == "fail" and r.status == "fail"
    assert f"all {2 * ROWS_PER_UPDATE} rows with an answer end at exactly 12 tokens" in cut.seen
    assert "truncation at 12 cut every answer and its EOS" in cut.seen


SHIFTED = '''import torch
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

collate = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)


def shifted(examples):
    batch = collate(examples)
    batch["labels"] = torch.nn.functional.pad(batch["labels"][:, 1:], (0, 1), value=-100)
    return batch


trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(pairs), processing_class=tokenizer,
                     peft_config=lora, data_collator=shifted)'''


def test_watch_sft_labels_shifted_twice(tmp_path):
    script = planted(tmp_path, ("trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(pairs), "
                                "processing_class=tokenizer,\n                     peft_config=lora)", SHIFTED),
                     source=SFT)
    r, c = run(tmp_path, script=script)
    labels = c["batch.labels_aligned"]
    assert labels.status == "fail" and "shifted twice" in labels.seen and r.status == "fail"


def test_batch_facts_answers_all_cut_at_one_length():
    # two micro-batches of width 6, prompts of 1, 2, 3 and 2 tokens, answers running to the last column on 4
    # different tokens
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 9, 10, 11, 12], [5, 7, 11, 12, 13, 14], [5, 8, 9, 12, 13, 15]])
    labels = torch.tensor([[-100, 6, 7, 8, 9, 10], [-100, -100, 9, 10, 11, 12], [-100, -100, -100, 12, 13, 14],
                           [-100, -100, 9, 12, 13, 15]])
    f = batch_facts([((), {"input_ids": ids[:2], "labels": labels[:2]}),
                     ((), {"input_ids": ids[2:], "labels": labels[2:]})], "input_ids", "labels")
    assert f["cut_at_length"] == 6 and f["prompt_lengths"] == [1, 3] and f["final_tokens"] == 4
    assert not f["all_at_edge_unended"]
    # the same rows in one micro-batch: one width proves nothing (a batch padded to its longest row has one)
    one = batch_facts([((), {"input_ids": ids, "labels": labels})], "input_ids", "labels")
    assert one["cut_at_length"] is None and one["all_at_edge_unended"]


def test_batch_facts_one_length_with_one_prompt_length_is_not_called_cut():
    # every prompt 2 tokens, every answer 4 tokens without EOS, in two micro-batches: one length by construction
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 9, 10, 11, 12], [5, 7, 11, 12, 13, 14]])
    labels = torch.tensor([[-100, -100, 7, 8, 9, 10], [-100, -100, 9, 10, 11, 12], [-100, -100, 11, 12, 13, 14]])
    f = batch_facts([((), {"input_ids": ids[:1], "labels": labels[:1]}),
                     ((), {"input_ids": ids[1:], "labels": labels[1:]})], "input_ids", "labels")
    assert f["cut_at_length"] is None and f["all_at_edge_unended"]


def test_batch_facts_padded_batches_are_not_called_cut_at_one_length():
    # two micro-batches of other widths (6 and 5): rows end where their answers end, not at one length
    a = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 9, 10, 11, 12]])
    la = torch.tensor([[-100, 6, 7, 8, 9, 10], [-100, -100, 9, 10, 11, 12]])
    b = torch.tensor([[5, 7, 11, 12, 13], [5, 7, 8, 12, 15]])
    lb = torch.tensor([[-100, -100, -100, 12, 13], [-100, 7, 8, 12, 15]])
    f = batch_facts([((), {"input_ids": a, "labels": la}), ((), {"input_ids": b, "labels": lb})], "input_ids",
                    "labels")
    assert f["cut_at_length"] is None and f["all_at_edge_unended"]
