"""campaign check on planted bugs and on the correct setups beside them (issue 26): each check is for a class of bug,
so each is tried on a tiny Llama from a config, a plain nn.Module and a peft model."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from campaign.errors import InputError  # noqa: E402
from campaign.train.check import check  # noqa: E402

from .test_check import llama, lm_batches, status  # noqa: E402

QUICK = {"overfit_steps": 2, "overfit_drop": 0.01, "resume": False}


def lora(model=None, **kw):
    return peft.get_peft_model(model if model is not None else llama(),
                               peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], **kw))


class Plain(torch.nn.Module):
    """A plain language model: no get_input_embeddings, a forward that needs its labels and returns (loss, logits)
    as a dict. mix=True plants a reshape meant as a no-op that moves tokens between rows."""

    def __init__(self, mix: bool = False, vocab: int = 64) -> None:
        super().__init__()
        self.mix = mix
        self.embed = torch.nn.Embedding(vocab, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, input_ids, labels, attention_mask=None):
        h = self.embed(input_ids)
        b, s, d = h.shape
        if self.mix:
            h = h.transpose(0, 1).reshape(b, s, d)      # the bug: (s, b, d) read back as (b, s, d)
        logits = self.head(self.mlp(h))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)
        return {"loss": loss, "logits": logits}


def plain_batches(rows: int = 3, length: int = 8, vocab: int = 64):
    g = torch.Generator().manual_seed(4)
    out = []
    for _ in range(2):
        ids = torch.randint(0, vocab, (rows, length), generator=g)
        # the model does not shift: each position's label is the next token (none for the last)
        out.append({"input_ids": ids, "labels": torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)})
    return out


def plain(mix: bool = False) -> dict:
    torch.manual_seed(0)
    model = Plain(mix)
    return {"model": model, "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-2), "batches": plain_batches()}


def go(r) -> bool:
    """The verdict is a go, but for the adapter reload that live objects cannot run (a fresh process builds it)."""
    waits = {c.id for c in r.checks if c.status == "skipped" and c.gates}
    return r.passed or (r.status == "not verified" and waits == {"adapter.reload_equal"})


def mixing_hook(_module, _args, out):
    """Planted in a decoder layer of an HF or peft model: the same reshape, on the hidden states."""
    h = out[0] if isinstance(out, tuple) else out
    b, s, d = h.shape
    mixed = h.transpose(0, 1).reshape(b, s, d)
    return (mixed, *out[1:]) if isinstance(out, tuple) else mixed


def made_for(kind: str, lr: float = 1e-2) -> dict:
    """A correct setup of each kind: plain nn.Module, tiny Llama, LoRA on a tiny Llama."""
    if kind == "plain":
        return plain()
    model = llama() if kind == "llama" else lora()
    return {"model": model, "optimizer": torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr),
            "batches": lm_batches()}


def layers(model):
    return (model.base_model.model if hasattr(model, "peft_config") else model).model.layers


# -- 1. batch independence on any model -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_rows_mixed_by_a_reshape_fail_batch_independence_on_any_model(kind):
    if kind == "plain":
        made = plain(mix=True)
    else:
        model = llama() if kind == "llama" else lora()
        layers(model)[0].register_forward_hook(mixing_hook)
        made = {"model": model, "optimizer": torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                                               lr=1e-2), "batches": lm_batches()}
    r = check(lambda: made, **QUICK)
    c = next(c for c in r.checks if c.id == "batch.independent")
    assert c.status == "fail" and "depends on other rows" in c.seen
    assert r.status == "fail" and not r.passed


@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_rows_computed_apart_pass_batch_independence_on_any_model(kind):
    if kind == "plain":
        made = plain()
    else:
        model = llama() if kind == "llama" else lora()
        made = {"model": model, "optimizer": torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                                               lr=1e-2), "batches": lm_batches()}
    r = check(lambda: made, **QUICK)
    assert status(r, "batch.independent") == "pass"
    assert go(r), [c for c in r.checks if c.status in ("fail", "skipped")]


# -- 4. a summed loss, a scheduler on another optimizer, a step at learning rate 0 -----------------------------------

def summed(model, batch):
    out = model(**{k: v for k, v in batch.items() if k != "labels"}) if not isinstance(model, Plain) else \
        model(**batch)
    logits = out["logits"] if isinstance(out, dict) else out.logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             batch["labels"].reshape(-1), reduction="sum")


@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_a_loss_summed_over_tokens_fails_and_a_mean_passes(kind):
    for loss, expected in ((summed, "fail"), (None, "pass")):
        if kind == "plain":
            made = plain()
        else:
            model = llama() if kind == "llama" else lora()
            made = {"model": model, "optimizer": torch.optim.AdamW(
                [p for p in model.parameters() if p.requires_grad], lr=1e-3), "batches": lm_batches()}
        if loss is not None:
            made["loss"] = loss
        r = check(lambda made=made: made, **QUICK)
        c = next(c for c in r.checks if c.id == "step.initial_loss")
        assert c.status == expected, (loss, c)
        if expected == "fail":
            assert "summed" in c.seen and "divide by the tokens" in c.fix and r.status == "fail"


def test_a_scheduler_bound_to_another_optimizer_fails():
    model = llama()
    first = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(first, step_size=1, gamma=0.5)
    rebuilt = torch.optim.AdamW(model.parameters(), lr=1e-2)    # the bug: rebuilt after the scheduler was made
    r = check(lambda: {"model": model, "optimizer": rebuilt, "scheduler": sched, "batches": lm_batches()}, **QUICK)
    c = next(c for c in r.checks if c.id == "step.scheduler_bound")
    assert c.status == "fail" and "another optimizer" in c.seen and r.status == "fail"
    bound = torch.optim.lr_scheduler.StepLR(rebuilt, step_size=1, gamma=0.5)
    r = check(lambda: {"model": model, "optimizer": rebuilt, "scheduler": bound, "batches": lm_batches()}, **QUICK)
    assert status(r, "step.scheduler_bound") == "pass" and go(r)


@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_every_trainable_tensor_at_rate_0_is_not_verified_never_ready(kind):
    made = made_for(kind)
    opt = made["optimizer"]
    made["scheduler"] = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: step / 10)   # HF's warm-up from 0
    r = check(lambda: made, **QUICK)
    c = next(c for c in r.checks if c.id == "params.trainable_changed")
    assert c.status == "skipped" and c.gates and "later step" in c.fix
    assert r.status == "not verified" and not r.passed
    made["scheduler"].step()                                                # the fix: check a later step
    r = check(lambda: made, **QUICK)
    assert status(r, "params.trainable_changed") == "pass" and go(r)


# -- 6. overfitting one batch: a steady fall short of a fixed target is no bug -----------------------------------------

def dropout_llama():
    return llama(dropout=0.3)


@pytest.mark.parametrize("kind", ["dropout-llama", "lora-1e-3", "plain"])
def test_correct_setups_that_learn_slowly_do_not_fail_overfit(kind):
    model = dropout_llama() if kind == "dropout-llama" else lora() if kind == "lora-1e-3" else Plain()
    lr = 1e-3 if kind == "lora-1e-3" else 3e-4
    made = {"model": model, "optimizer": torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                                           lr=lr),
            "batches": plain_batches() if kind == "plain" else lm_batches()}
    r = check(lambda: made, overfit_steps=12, resume=False)
    c = next(c for c in r.checks if c.id == "step.overfit")
    assert c.status in ("pass", "warn"), c
    if c.status == "warn":
        assert "falls steadily" in c.seen and "trend" in c.seen
    assert go(r), [c for c in r.checks if c.status in ("fail", "skipped")]


@pytest.mark.parametrize("kind", ["dropout-llama", "peft", "plain"])
def test_an_update_that_does_not_reach_the_loss_fails_overfit_even_under_dropout_noise(kind):
    model = dropout_llama() if kind == "dropout-llama" else lora() if kind == "peft" else Plain()
    copies = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters() if p.requires_grad]
    made = {"model": model, "optimizer": torch.optim.AdamW(copies, lr=1e-2),     # planted: the wrong parameters
            "batches": plain_batches() if kind == "plain" else lm_batches()}
    r = check(lambda: made, overfit_steps=12, resume=False)
    c = next(c for c in r.checks if c.id == "step.overfit")
    assert c.status == "fail" and "no fall beyond the noise" in c.seen


# -- 7. declared patterns match peft's wrapped names ------------------------------------------------------------------

def test_modules_to_save_declared_by_the_models_own_name_passes():
    model = lora(modules_to_save=["lm_head"])
    r = check(lambda: {"model": model, "optimizer": torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=1e-3), "batches": lm_batches(),
        "trainable": ["*lora_*", "lm_head"]}, **QUICK)
    assert status(r, "params.trainable_as_declared") == "pass"
    r = check(lambda: {"model": model, "optimizer": torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=1e-3), "batches": lm_batches(),
        "trainable": ["*lora_*"]}, **QUICK)                                # planted: lm_head trains, undeclared
    c = next(c for c in r.checks if c.id == "params.trainable_as_declared")
    assert c.status == "fail" and "lm_head.modules_to_save" in c.seen


# -- 10. exits --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_a_trainable_pattern_matching_nothing_is_bad_input_naming_it(kind):
    made = made_for(kind)
    with pytest.raises(InputError, match="'lora' match no parameter"):
        check(lambda: {**made, "trainable": ["lora"]}, **QUICK)


def test_a_lora_model_whose_base_trains_too_is_not_full_fine_tuning():
    model = lora()
    for p in model.parameters():
        p.requires_grad_(True)                                              # planted: the base unfrozen
    r = check(lambda: {"model": model, "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3),
                       "batches": lm_batches()}, **QUICK)
    c = next(c for c in r.checks if c.id == "params.frozen_unchanged")
    assert c.status == "fail" and "full fine-tuning" not in c.seen and "LoRA" in c.seen
    r = check(lambda: {"model": (m := lora()), "optimizer": torch.optim.AdamW(
        [p for p in m.parameters() if p.requires_grad], lr=1e-3), "batches": lm_batches()}, **QUICK)
    assert status(r, "params.frozen_unchanged") == "pass"


@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_a_nan_loss_is_one_failure_not_a_cascade(kind):
    made = made_for(kind)
    made["loss"] = lambda mdl, b: summed(mdl, b) * float("nan")
    r = check(lambda: made, **QUICK)
    assert [c.id for c in r.checks if c.status == "fail"] == ["step.finite_loss"]
    assert not any("rows leak" in c.why or "nan%" in c.seen for c in r.checks)
    assert all(c.status == "skipped" and not c.gates for c in r.checks if c.id != "step.finite_loss")
    assert r.status == "fail" and r.overfit_losses == ()


@pytest.mark.parametrize("kind", ["plain", "llama", "peft"])
def test_a_forward_that_raises_batches_not_tensors_and_nothing_to_train_are_bad_input(kind):
    made = made_for(kind)
    lists = [{k: v.tolist() for k, v in b.items()} for b in made["batches"]]
    with pytest.raises(InputError, match="field 'input_ids' is a list, not a tensor"):
        check(lambda: {**made, "batches": lists}, **QUICK)
    with pytest.raises(InputError, match="raised ValueError in your model's forward or loss: planted"):
        check(lambda: {**made, "loss": lambda m, b: (_ for _ in ()).throw(ValueError("planted"))}, **QUICK)
    for p in made["model"].parameters():
        p.requires_grad_(False)
    with pytest.raises(InputError, match="no trainable parameter"):
        check(lambda: made, **QUICK)


def test_bad_setups_exit_2_with_one_line(cli, tmp_path):
    path = tmp_path / "setup.py"
    path.write_text("import torch\n\ndef make_setup():\n    m = torch.nn.Linear(4, 2)\n"
                    "    return {'model': m, 'optimizer': torch.optim.SGD(m.parameters(), lr=0.1), "
                    "'batches': [{'x': [[1.0] * 4], 'labels': [0]}], 'loss': lambda m, b: m(b['x']).sum()}\n")
    r = cli("check", f"{path}:make_setup", "--no-resume")
    assert r.code == 2 and "is a list, not a tensor" in r.err and r.err.count("\n") == 1


def test_a_nan_loss_renders_one_failure_and_no_empty_why():
    from campaign.cli import render
    from campaign.cli.render.train import render_check

    made = made_for("llama")
    made["loss"] = lambda mdl, b: summed(mdl, b) * float("nan")
    r = check(lambda: made, **QUICK)
    with render.console.capture() as captured:
        render_check(r)
    out = captured.get()
    assert out.startswith("NOT READY — 1 failed") and "why: ;" not in out and "rows leak" not in out
    assert out.count("fail —") == 1


def test_a_high_loss_over_a_few_rows_is_a_warning_not_a_summed_loss():
    """Four class labels, a loss 3x ln(C): a sum over 4 rows or a confidently wrong classifier, which 4 positions
    cannot tell apart; the summed-loss failure needs 16 positions or more."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 5))
    batch = {"input_ids": torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(3)),
             "labels": torch.tensor([0, 1, 2, 3])}

    def loss(m, b):
        return 3 * torch.nn.functional.cross_entropy(m(b["input_ids"]), b["labels"])

    r = check(lambda: {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1), "batches": [batch],
                       "loss": loss}, **QUICK)
    assert status(r, "step.initial_loss") == "warn"


class RowMix(torch.nn.Module):
    """Planted between two layers of a Sequential: the same reshape that moves tokens between rows."""

    def forward(self, h):
        b, s, d = h.shape
        return h.transpose(0, 1).reshape(b, s, d)


@pytest.mark.parametrize("mix", [False, True])
def test_a_model_called_by_the_users_own_loss_is_checked_for_independence(mix):
    torch.manual_seed(0)
    layers = [torch.nn.Embedding(50, 8), *([RowMix()] if mix else []), torch.nn.Linear(8, 50)]
    model = torch.nn.Sequential(*layers)
    ids = torch.randint(0, 50, (3, 6), generator=torch.Generator().manual_seed(3))

    def loss(m, b):                                     # Sequential takes no keyword: the loss calls it
        logits = m(b["input_ids"])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 50), b["labels"].reshape(-1))

    r = check(lambda: {"model": model, "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-2),
                       "batches": [{"input_ids": ids, "labels": ids}], "loss": loss}, **QUICK)
    assert status(r, "batch.independent") == ("fail" if mix else "pass")
    assert r.expected_loss == pytest.approx(math.log(50))
