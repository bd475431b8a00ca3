"""`campaign check`, `batch` and `inspect` on a factory that returns the training loop itself: a transformers.Trainer
(its model, optimizer and scheduler as it builds them, its compute_loss and training_step, its dataloader's first
micro-batches, its tokenized dataset, collator and tokenizer) or a LightningModule with its dataloader. Planted bugs
in the loop's own code are caught; correct loops pass."""
from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TRAINER = textwrap.dedent('''
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


    class LeavesOutTheHead(Trainer):          # planted: a custom optimizer that forgets lm_head
        def create_optimizer(self):
            kept = [p for n, p in self.model.named_parameters() if not n.startswith("lm_head")]
            self.optimizer = torch.optim.AdamW(kept, lr=self.args.learning_rate)
            return self.optimizer


    class MeanPerMicroBatch(Trainer):         # planted: a compute_loss that drops num_items_in_batch: each
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(**inputs).loss       # micro-batch's mean, summed over the update, never divided


    class NoRng(Trainer):                     # planted: its checkpoints keep no random generators
        def _save_rng_state(self, output_dir):
            pass


    def build(kind=Trainer, lengths=(12,), dropout=0.0):
        torch.manual_seed(0)
        config = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                             num_hidden_layers=2, vocab_size=1000, max_position_embeddings=256,
                             attention_dropout=dropout)
        g = torch.Generator().manual_seed(1)
        rows = [torch.randint(0, 1000, (lengths[i % len(lengths)],), generator=g) for i in range(16)]
        args = TrainingArguments(output_dir="out", max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                                 gradient_accumulation_steps=2, report_to=[], use_cpu=True, disable_tqdm=True)
        return kind(model=LlamaForCausalLM(config), args=args, train_dataset=[{"input_ids": r, "labels": r}
                                                                              for r in rows])


    def correct():
        return build()


    def no_head():
        return build(LeavesOutTheHead)


    def mean_per_micro_batch():
        return build(MeanPerMicroBatch)


    def with_dropout():
        return build(dropout=0.1)


    def no_rng():
        return build(NoRng, dropout=0.1)
''')


@pytest.fixture
def setup_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "setup.py"
    path.write_text(TRAINER)
    return path


def test_the_trainers_own_objects_are_what_is_checked(setup_file):
    from campaign.train.setup import load_setup

    s = load_setup(f"{setup_file}:correct")
    # the Trainer's optimizer: AdamW with its two groups (weight decay off for the norms), its linear schedule
    assert type(s.optimizer).__name__ == "AdamW" and len(s.optimizer.param_groups) == 2
    decayed = {id(p) for p in s.optimizer.param_groups[0]["params"]}
    norms = [p for n, p in s.model.named_parameters() if "norm" in n]
    assert len(norms) == 5 and not any(id(p) in decayed for p in norms)       # 2 per layer x 2 + the final one
    assert type(s.scheduler).__name__ == "LambdaLR" and s.scheduler.optimizer is s.optimizer
    # its dataloader's first micro-batches: gradient_accumulation_steps (2) of per_device_train_batch_size (4) rows
    assert len(s.batches) == 2 and all(tuple(b["input_ids"].shape) == (4, 12) for b in s.batches)
    assert s.accumulate is not None and s.loss is not None


def test_check_on_a_correct_trainer_is_ready(cli, setup_file):
    r = cli("check", f"{setup_file}:correct", "--json", "--overfit-lr", "1e-2")
    checks = {c["id"]: c["status"] for c in json.loads(r.out)["checks"]}
    assert r.code == 0, checks
    assert checks["params.in_optimizer"] == "pass" and checks["resume.next_step_equal"] == "pass"


def test_check_on_a_trainer_whose_optimizer_forgets_the_head_fails(cli, setup_file):
    r = cli("check", f"{setup_file}:no_head", "--json", "--no-resume", "--overfit-steps", "2")
    failed = {c["id"]: c["seen"] for c in json.loads(r.out)["checks"] if c["status"] == "fail"}
    assert r.code == 1 and "lm_head.weight" in failed["params.in_optimizer"]


def test_the_resume_test_uses_the_trainers_own_checkpoint(cli, setup_file):
    # the Trainer's save_model, _save_optimizer_and_scheduler and _save_rng_state write it; the fresh process builds
    # the Trainer again and reads it with the methods train(resume_from_checkpoint=...) calls
    quick = ("--json", "--overfit-steps", "2", "--overfit-drop", "0.01")
    ok = json.loads(cli("check", f"{setup_file}:with_dropout", *quick).out)
    checks = {c["id"]: c for c in ok["checks"]}
    assert checks["resume.next_step_equal"]["status"] == "pass" and ok["status"] == "pass", checks
    assert "rng_state.pth" in checks["resume.files_written"]["seen"]
    assert "scheduler.pt" in checks["resume.files_written"]["seen"]
    bad = json.loads(cli("check", f"{setup_file}:no_rng", *quick).out)
    failed = [c["id"] for c in bad["checks"] if c["status"] == "fail"]
    assert failed == ["resume.next_step_equal"]      # with dropout on, the resumed step draws other masks


def test_batch_runs_the_trainers_own_accumulation(cli, setup_file):
    ok = cli("batch", f"{setup_file}:correct", "--json")
    assert ok.code == 0 and json.loads(ok.out)["normalization"] == "accumulate"
    # planted: the update's gradient is the sum of 2 micro-batch means, twice the whole update's: relative error 1
    bad = cli("batch", f"{setup_file}:mean_per_micro_batch", "--json")
    variants = {v["normalization"]: v for v in json.loads(bad.out)["variants"]}
    assert bad.code == 1
    assert variants["accumulate"]["relative_error"] == pytest.approx(1.0, abs=1e-4)
    assert variants["accumulate"]["cosine"] == pytest.approx(1.0, abs=1e-6)


INSPECT = textwrap.dedent('''
    import torch
    from transformers import (DataCollatorForLanguageModeling, LlamaConfig, LlamaForCausalLM, Trainer,
                              TrainingArguments)
    from tests.train.test_inspect import train_tokenizer

    TEXTS = ["q1 q2 => a1 a2", "q1 => a1 a2 a3", "q1 q2 q3 q4 => a1", "q3 => a2"]


    class KeepsPadding:                       # planted: labels copied from the padded ids, padding not masked
        def __init__(self, tok):
            self.tok = tok

        def __call__(self, examples):
            batch = self.tok.pad(examples, return_tensors="pt")
            batch["labels"] = batch["input_ids"].clone()
            return batch


    def build(collator):
        tok = train_tokenizer(TEXTS)
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                             num_hidden_layers=1, vocab_size=len(tok), max_position_embeddings=64)
        dataset = [tok(t) for t in TEXTS]     # already tokenized, as a Trainer's dataset is
        args = TrainingArguments(output_dir="out", max_steps=1, per_device_train_batch_size=2, report_to=[],
                                 use_cpu=True, disable_tqdm=True)
        return Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=dataset, processing_class=tok,
                       data_collator=collator(tok))


    def correct():
        return build(lambda tok: DataCollatorForLanguageModeling(tok, mlm=False))


    def keeps_padding():
        return build(KeepsPadding)
''')


def test_inspect_reads_the_trainers_tokenized_dataset_through_its_collator(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "data_setup.py"
    path.write_text(INSPECT)
    ok = cli("inspect", f"{path}:correct", "--json")
    report = json.loads(ok.out)
    assert ok.code == 0, report["checks"]
    assert report["examples"] == 4
    bad = cli("inspect", f"{path}:keeps_padding", "--json")
    failed = [c["id"] for c in json.loads(bad.out)["checks"] if c["status"] == "fail"]
    assert bad.code == 1 and "inspect.loss_on_padding" in failed


LIGHTNING = textwrap.dedent('''
    import torch
    import lightning.pytorch as pl


    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.body, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.head(torch.relu(self.body(x)))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 10)}

        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


    class DetachedHead(Classifier):           # planted: the head's input detached, so body never learns
        def forward(self, x):
            return self.head(torch.relu(self.body(x)).detach())


    def correct():
        return Classifier()


    def detached():
        module = DetachedHead()
        return module, module.train_dataloader()     # the module with its dataloader, as a pair
''')


def test_check_on_a_lightning_module_with_its_dataloader(cli, tmp_path, monkeypatch):
    pytest.importorskip("lightning.pytorch")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "pl_setup.py"
    path.write_text(LIGHTNING)
    ok = cli("check", f"{path}:correct", "--json", "--no-resume")
    checks = {c["id"]: c["status"] for c in json.loads(ok.out)["checks"]}
    assert ok.code == 0, checks
    assert checks["step.scheduler_bound"] == "pass" and checks["batch.independent"] == "pass"
    bad = cli("check", f"{path}:detached", "--json", "--no-resume", "--overfit-steps", "2")
    failed = {c["id"]: c["seen"] for c in json.loads(bad.out)["checks"] if c["status"] == "fail"}
    assert bad.code == 1 and "body.weight" in failed["params.received_grad"]
