"""Support answers fine-tuned on a causal LM: the data side `campaign inspect` reads (dataset, collate, tokenizer).

    campaign inspect examples/inspect_setup.py:make_setup        # max_length 28 and pad = eos: fails
    campaign inspect examples/inspect_setup.py:make_fixed_setup  # room for every answer, its own pad token: passes

The tokenizer is a word-level one built from the data (no download); the collate is the usual one: prompt + answer +
EOS, tokenized with truncation and padding, labels = input_ids with the prompt and the padding set to -100.
"""
import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

DATA = Path(__file__).resolve().parent / "data" / "support_answers.jsonl"
PROMPT = "question : {question} answer :"


def tokenizer(examples, pad=None):
    words = sorted({w for e in examples for w in (PROMPT.format(**e) + " " + e["answer"]).split()})
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "<pad>", *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token=pad)


def collate_for(tok, max_length, mask_by):
    def collate(examples):
        prompts = [PROMPT.format(**e) for e in examples]
        texts = [f"{p} {e['answer']} {tok.eos_token}" for p, e in zip(prompts, examples)]
        batch = tok(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        labels = batch["input_ids"].clone()
        if mask_by == "pad_token_id":
            labels[labels == tok.pad_token_id] = -100      # pad = eos: this masks every EOS too
        else:
            labels[batch["attention_mask"] == 0] = -100
        for row, prompt in enumerate(prompts):             # no loss on the prompt
            labels[row, :len(tok(prompt)["input_ids"])] = -100
        batch["labels"] = labels
        return batch
    return collate


def make_setup():
    data = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    tok = tokenizer(data)
    tok.pad_token = tok.eos_token                          # the usual line for a model without a pad token
    return {"dataset": data, "tokenizer": tok, "collate": collate_for(tok, 28, "pad_token_id"),
            "label_field": "label", "target_field": "answer"}


def make_fixed_setup():
    data = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    tok = tokenizer(data, pad="<pad>")
    return {"dataset": data, "tokenizer": tok, "collate": collate_for(tok, 64, "attention_mask"),
            "label_field": "label", "target_field": "answer"}
