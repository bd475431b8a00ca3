"""A tiny Llama and its evaluation data: the setup `campaign quant` compares quantization variants on.

    campaign quant examples/quant_setup.py:make_setup                      # perplexity: bf16, int8, int4
    campaign quant examples/quant_setup.py:classifier_setup --guard "f1[refund]>=-0.05"
    campaign quant examples/quant_setup.py:calibrated_setup --formats int8,awq-int8 --equivalence-margin 0.01

A real setup loads its model (or returns its directory) and tokenizes held-out text instead; every variant is
evaluated on exactly the batches returned here.
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

CONFIG = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=512, max_position_embeddings=256)


def make_setup():
    """Perplexity on 16 rows of 64 tokens; the model in bf16 is the reference."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(torch.bfloat16)
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(2):
        ids = torch.randint(0, 512, (8, 64), generator=generator)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return {"model": model, "batches": batches, "metric": "perplexity", "name": "tiny-llama (examples)"}


LABELS = ("billing", "refund", "shipping")


def predict(model, batch):
    """One label per row: the class with the largest logit."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return [LABELS[i] for i in logits.argmax(-1).tolist()]


def classifier_setup():
    """A 3-class classifier on 48 examples, compared by accuracy and per-class F1 (campaign regress)."""
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(LlamaConfig(**CONFIG, num_labels=3, pad_token_id=0))
    generator = torch.Generator().manual_seed(2)
    batches, gold = [], []
    for _ in range(3):
        ids = torch.randint(1, 512, (16, 32), generator=generator)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        with torch.no_grad():   # gold: the fp32 model's own answer, with every 5th example relabelled
            answers = predict(model, batches[-1])
        gold += [LABELS[(LABELS.index(a) + 1) % 3] if (len(gold) + i) % 5 == 0 else a for i, a in enumerate(answers)]
    return {"model": model, "batches": batches, "metric": "classification", "predict": predict, "gold": gold,
            "name": "tiny-llama classifier (examples)"}


def calibrated_setup():
    """make_setup with two named calibration sets: awq-int8 is fitted to each and the two fits are compared (on
    real data: a sample of the training text against a sample of the domain's text)."""
    made = make_setup()
    generator = torch.Generator().manual_seed(3)
    sets = {name: [{"input_ids": torch.randint(0, 512, (8, 64), generator=generator)}] for name in ("set A", "set B")}
    return {**made, "calibration": sets}
