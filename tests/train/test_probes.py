"""Held-out families of planted bugs for `campaign check` (issue 26): the train/eval mode of the step
(step.train_mode), masks and padding (batch.padding_ignored), the step run without gradients, labels lost in the
collate. Each on an HF model, a plain nn.Module and a peft model where it applies; correct setups pass."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from campaign.errors import InputError  # noqa: E402
from campaign.train.check import check  # noqa: E402
from tests.conftest import tiny_llama  # noqa: E402

FAST = {"resume": False, "overfit_steps": 1, "overfit_drop": 0.01}


def llama(dropout=0.1, **extra):
    torch.manual_seed(0)
    cfg = {k: v for k, v in tiny_llama(vocab_size=256, attention_dropout=dropout, pad_token_id=0, **extra).items()
           if k != "architectures"}
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).float()


def lm_batches(pad=(0, 3, 5), side="right", mask_labels=True):
    """Two batches of 3 rows of 12 positions, row i padded by pad[i] positions (id 0, attention_mask 0)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(2):
        ids = torch.randint(1, 256, (3, 12), generator=g)
        mask = torch.ones_like(ids)
        for row, n in enumerate(pad):
            if n:
                cut = slice(12 - n, 12) if side == "right" else slice(0, n)
                ids[row, cut], mask[row, cut] = 0, 0
        labels = ids.clone()
        if mask_labels:
            labels[mask == 0] = -100
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def setup(model, batches, **extra):
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return lambda: {"model": model, "batches": batches, "optimizer": optimizer, **extra}


def status(report, check_id):
    return next(c.status for c in report.checks if c.id == check_id)


def seen(report, check_id):
    return next(c.seen for c in report.checks if c.id == check_id)


def evaluating_loss(model, batch):       # planted: a loss helper shared with evaluation switches to eval mode
    model.eval()
    return model(**batch).loss


# ------------------------------------------------------------------------------------------------ the step's mode

def test_an_hf_model_with_dropout_trains_in_train_mode():
    r = check(setup(llama(), lm_batches()), **FAST)
    assert status(r, "step.train_mode") == "pass" and "2 dropout module(s)" in seen(r, "step.train_mode")


def test_an_hf_loss_that_switches_to_eval_fails_the_train_mode():
    r = check(setup(llama(), lm_batches(), loss=evaluating_loss), **FAST)
    assert status(r, "step.train_mode") == "fail" and r.status == "fail"
    assert "model.layers.0.self_attn" in seen(r, "step.train_mode")


class Tagger(torch.nn.Module):
    """A plain token classifier with dropout, an optional frozen teacher kept in eval (its dropout off on purpose)."""

    def __init__(self, teacher=False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(256, 16)
        self.drop = torch.nn.Dropout(0.2)
        self.head = torch.nn.Linear(16, 5)
        self.teacher = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5)) if teacher else None
        if teacher:
            self.teacher.requires_grad_(False)

    def forward(self, input_ids, attention_mask=None):
        h = self.embed(input_ids)
        if self.teacher is not None:
            h = h + self.teacher(h).detach()
        return self.head(self.drop(h))


def tag_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, 5), batch["tags"].reshape(-1), ignore_index=-100)


def tag_batches():
    g = torch.Generator().manual_seed(3)
    return [{"input_ids": torch.randint(1, 256, (4, 8), generator=g), "attention_mask": torch.ones(4, 8,
             dtype=torch.long), "tags": torch.randint(0, 5, (4, 8), generator=g)} for _ in range(2)]


def test_a_plain_module_whose_dropout_was_put_in_eval_fails():
    model = Tagger().train()
    model.drop.eval()                     # planted: the dropout switched off by hand, the model in train mode
    r = check(setup(model, tag_batches(), loss=tag_loss), **FAST)
    assert status(r, "step.train_mode") == "fail" and "drop" in seen(r, "step.train_mode")


def test_a_frozen_teacher_kept_in_eval_is_no_false_alarm():
    model = Tagger(teacher=True).train()
    model.teacher.eval()
    r = check(setup(model, tag_batches(), loss=tag_loss), **FAST)
    assert status(r, "step.train_mode") == "pass", seen(r, "step.train_mode")
    assert "1 dropout module(s)" not in seen(r, "step.train_mode")      # two seen: the student's and the teacher's


def test_peft_lora_dropout_in_train_mode_and_a_loss_that_evaluates_fails():
    peft = pytest.importorskip("peft")

    def lora():
        return peft.get_peft_model(llama(dropout=0.0), peft.LoraConfig(r=4, lora_dropout=0.1,
                                                                         target_modules=["q_proj", "v_proj"]))

    ok = check(setup(lora(), lm_batches(), trainable=["*lora_*"]), **FAST)
    assert status(ok, "step.train_mode") == "pass"
    assert "4 dropout module(s)" in seen(ok, "step.train_mode")           # q and v of 2 layers
    bad = check(setup(lora(), lm_batches(), trainable=["*lora_*"], loss=evaluating_loss), **FAST)
    assert status(bad, "step.train_mode") == "fail"


def test_a_model_without_dropout_skips_the_mode_check_without_holding_the_verdict():
    r = check(setup(llama(dropout=0.0), lm_batches()), **FAST)
    assert status(r, "step.train_mode") == "skipped" and r.passed


# ------------------------------------------------------------------------------------------------ no gradients

def test_a_step_run_under_no_grad_is_refused_naming_the_loss():
    def no_grad_loss(model, batch):
        with torch.no_grad():
            return model(**batch).loss

    with pytest.raises(InputError, match="the first step raised RuntimeError"):
        check(setup(llama(), lm_batches(), loss=no_grad_loss), **FAST)


def test_a_backbone_run_under_no_grad_fails_the_gradients():
    def frozen_by_accident(model, batch):
        with torch.no_grad():             # planted: meant as "no grad for the mask", wraps the whole body
            h = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        logits = model.lm_head(h)
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), batch["labels"][:, 1:].reshape(-1))

    r = check(setup(llama(), lm_batches(), loss=frozen_by_accident), **FAST)
    assert status(r, "params.received_grad") == "fail" and "model.layers.0" in seen(r, "params.received_grad")


# ------------------------------------------------------------------------------------------------ labels lost

def test_labels_dropped_by_the_collate_are_refused():
    batches = [{k: v for k, v in b.items() if k != "labels"} for b in lm_batches()]
    with pytest.raises(InputError, match="needs 'labels'"):
        check(setup(llama(), batches), **FAST)


# ------------------------------------------------------------------------------------------------ padding

@pytest.mark.parametrize("side", ["right", "left"])
def test_an_hf_model_with_its_padding_masked_passes(side):
    r = check(setup(llama(dropout=0.0), lm_batches(side=side)), **FAST)
    assert status(r, "batch.padding_ignored") == "pass" and "8 padded positions" in seen(r, "batch.padding_ignored")


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_kept_in_the_labels_fails(side):
    r = check(setup(llama(dropout=0.0), lm_batches(side=side, mask_labels=False)), **FAST)
    assert status(r, "batch.padding_ignored") == "fail" and r.status == "fail"


def test_a_first_batch_without_padding_is_padded_for_the_check():
    r = check(setup(llama(dropout=0.0), lm_batches(pad=(0, 0, 0))), **FAST)
    assert status(r, "batch.padding_ignored") == "pass"
    assert "4 padding positions added" in seen(r, "batch.padding_ignored")


class Pooled(torch.nn.Module):
    """A plain sentence classifier: embeddings, a mean over the positions, a linear head."""

    def __init__(self, masked):
        super().__init__()
        torch.manual_seed(0)
        self.masked = masked
        self.embed, self.head = torch.nn.Embedding(256, 16), torch.nn.Linear(16, 3)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids)
        if not self.masked:               # planted: the mean over every position, padding included
            return self.head(h.mean(dim=1))
        m = attention_mask[..., None].float()
        return self.head((h * m).sum(1) / m.sum(1))


def test_a_plain_pooling_that_ignores_the_mask_fails_and_a_masked_one_passes():
    def loss(model, batch):
        return torch.nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), batch["y"])

    batches = [dict(b, y=torch.tensor([0, 1, 2])) for b in lm_batches()]
    for b in batches:
        b.pop("labels")
    bad = check(setup(Pooled(masked=False), batches, loss=loss), **FAST)
    assert status(bad, "batch.padding_ignored") == "fail"
    ok = check(setup(Pooled(masked=True), batches, loss=loss), **FAST)
    assert status(ok, "batch.padding_ignored") == "pass"


def test_a_peft_classifier_that_finds_its_padding_by_the_pad_id_passes():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = {k: v for k, v in tiny_llama(vocab_size=256, pad_token_id=0, num_labels=3).items() if k != "architectures"}
    base = transformers.LlamaForSequenceClassification(transformers.LlamaConfig(**cfg)).float()
    model = peft.get_peft_model(base, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["q_proj", "v_proj"]))
    batches = [dict(b, labels=torch.tensor([0, 1, 2])) for b in lm_batches()]
    r = check(setup(model, batches, trainable=["*lora_*", "*score*"]), **FAST)
    assert status(r, "batch.padding_ignored") == "pass", seen(r, "batch.padding_ignored")


# ------------------------------------------------------------------------------------------------ labels carried

def test_labels_equal_to_the_ids_fit_a_model_that_shifts():
    r = check(setup(llama(dropout=0.0), lm_batches()), **FAST)
    c = next(c for c in r.checks if c.id == "batch.labels_aligned")
    # 3 rows of 12 with 0, 3 and 5 positions padded: 28 loss positions, each label its own token
    assert c.status == "pass" and "the model shifts the labels itself" in c.seen
    assert "own token at 28 and the next token at" in c.seen and "of 28 loss positions" in c.seen


def test_labels_shifted_in_the_collate_and_again_in_the_model_fail():
    batches = lm_batches(pad=(0, 0, 0))
    for b in batches:                     # planted: the collate shifts, the model shifts again
        b["labels"] = torch.cat([b["input_ids"][:, 1:], torch.full_like(b["input_ids"][:, :1], -100)], dim=1)
    r = check(setup(llama(dropout=0.0), batches), **FAST)
    assert status(r, "batch.labels_aligned") == "fail" and "shifted twice" in seen(r, "batch.labels_aligned")
    assert "next token at 33 of 33 loss positions" in seen(r, "batch.labels_aligned")     # 3 rows x 11


def test_a_peft_model_shifts_as_its_base():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(llama(dropout=0.0), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    r = check(setup(model, lm_batches(), trainable=["*lora_*"]), **FAST)
    assert status(r, "batch.labels_aligned") == "pass"


class NoShift(torch.nn.Module):
    """A plain language model whose loss does not shift: its labels must already be the next tokens."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = torch.nn.Embedding(256, 16), torch.nn.Linear(16, 256)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(self.embed(input_ids))
        if labels is None:
            return {"logits": logits}
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), labels.reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


def test_a_model_that_does_not_shift_given_its_own_tokens_as_labels_fails_and_shifted_ones_pass():
    bad = check(setup(NoShift(), lm_batches(pad=(0, 0, 0))), **FAST)
    assert status(bad, "batch.labels_aligned") == "fail" and "copy its own token" in seen(bad, "batch.labels_aligned")
    batches = lm_batches(pad=(0, 0, 0))
    for b in batches:
        b["labels"] = torch.cat([b["input_ids"][:, 1:], torch.full_like(b["input_ids"][:, :1], -100)], dim=1)
    ok = check(setup(NoShift(), batches), **FAST)
    assert status(ok, "batch.labels_aligned") == "pass" and "does not shift" in seen(ok, "batch.labels_aligned")
