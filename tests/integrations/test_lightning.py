"""Lightning's own loop with one callback, on the CPU: the run recorded and the step checks on its real first
updates; planted bugs caught, a correct setup (a plain module and a tiny Llama inside a LightningModule) passing."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from campaign.integrations.lightning import CampaignCallback  # noqa: E402
from campaign.track.store import Store  # noqa: E402


class Module(pl.LightningModule):
    """A small classifier; `frozen` stays frozen; `warmup` steps at learning rate 0 first."""

    def __init__(self, warmup: int = 0, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(8, 16)
        self.frozen = torch.nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.frozen(self.body(x))))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=self.hparams.lr)
        warmup = self.hparams.warmup
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.0 if step < warmup else 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def fit(module, tmp_path, callback, *, steps=4, accumulate=1):
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[callback],
                         accumulate_grad_batches=accumulate, log_every_n_steps=1)
    trainer.fit(module, data())
    return trainer


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Store(tmp_path / ".campaign")


def test_a_correct_lightning_run_is_recorded_and_passes(tmp_path, store):
    cb = CampaignCallback("classifier", root=store.root)
    fit(Module(), tmp_path, cb, accumulate=2)
    assert cb.result.status == "pass", cb.result.checks
    # the three checked steps are optimizer steps, not micro-batches: each at AdamW's lr, none at a stale 0
    assert cb.result.steps_checked == 3 and cb.result.learning_rates == (0.01, 0.01, 0.01)
    assert set(cb.result.trained) == {"body.weight", "body.bias", "head.weight", "head.bias"} == set(cb.result.changed)
    m = store.read(cb.run.id)
    assert m.status == "completed" and m.params["hparams"]["lr"] == 0.01
    assert m.params["trainer"]["accumulate_grad_batches"] == 2
    assert [r["step"] for r in store.metrics(m.id) if "loss" in r] == [1, 2, 3, 4]  # one record per optimizer step
    assert any(a.kind.startswith("checkpoint:") for a in m.artifacts)  # ModelCheckpoint's file


def test_a_warmup_at_rate_zero_is_not_verified(tmp_path, store):
    cb = CampaignCallback(check_steps=2, root=store.root)
    fit(Module(warmup=5), tmp_path, cb, steps=3)
    assert cb.result.learning_rates == (0.0, 0.0) and cb.result.status == "not verified"


def test_a_layer_declared_to_train_but_frozen_fails(tmp_path, store):
    cb = CampaignCallback(trainable=["body.*", "head.*", "frozen.*"], root=store.root)
    fit(Module(), tmp_path, cb, steps=2)
    assert {c.id: c.status for c in cb.result.checks}["trainer.updates"] == "fail"
    assert "frozen.weight" in cb.result.checks[2].seen


def test_a_frozen_layer_that_moves_fails(tmp_path, store):
    class Leaky(Module):  # the planted bug: the frozen layer updated by hand inside the step
        def training_step(self, batch, batch_idx):
            with torch.no_grad():
                self.frozen.weight.add_(0.01)
            return super().training_step(batch, batch_idx)

    cb = CampaignCallback(root=store.root)
    fit(Leaky(), tmp_path, cb, steps=2)
    assert {c.id: c.status for c in cb.result.checks}["trainer.frozen_unchanged"] == "fail"


def test_an_exception_in_the_step_marks_the_run_failed(tmp_path, store):
    class Broken(Module):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise RuntimeError("label 7 is out of range")
            return super().training_step(batch, batch_idx)

    cb = CampaignCallback(root=store.root)
    with pytest.raises(RuntimeError):
        fit(Broken(), tmp_path, cb)
    m = store.read(cb.run.id)
    assert m.status == "failed" and "label 7 is out of range" in m.reason


def test_an_hf_model_inside_a_lightning_module_passes(tmp_path, store):
    transformers = pytest.importorskip("transformers")
    from tests.conftest import tiny_llama

    class Causal(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            config = transformers.LlamaConfig(**{k: v for k, v in tiny_llama().items() if k != "architectures"})
            self.model = transformers.LlamaForCausalLM(config).float()

        def training_step(self, batch, batch_idx):
            (ids,) = batch
            return self.model(input_ids=ids, labels=ids).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    ids = torch.randint(0, 1000, (8, 12), generator=torch.Generator().manual_seed(0))
    cb = CampaignCallback(root=store.root)
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[cb])
    trainer.fit(Causal(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=4))
    assert cb.result.status == "pass", cb.result.checks
    assert "model.lm_head.weight" in cb.result.changed
    # the second update measured through the HF model's forward, beside the estimate read off its config: fp32
    # weights, gradients and AdamW's two moments are 16 bytes a parameter at the optimizer step
    phases = {p.name: p.peak_allocated_bytes for p in cb.result.memory.phases}
    assert list(phases) == ["forward", "backward", "optimizer step"]
    assert phases["optimizer step"] >= 16 * 214_336          # tests/integrations/test_memory.py: LLAMA
    assert all(0.8 <= r.ratio <= 1.25 for r in cb.result.memory_vs_estimate), cb.result.memory_vs_estimate


def test_a_training_step_that_switches_to_eval_fails_the_train_mode(tmp_path, store):
    class Dropping(Module):
        def __init__(self, evaluates):
            super().__init__()
            self.evaluates = evaluates
            self.drop = torch.nn.Dropout(0.3)

        def forward(self, x):
            return self.head(self.drop(torch.relu(self.frozen(self.body(x)))))

        def training_step(self, batch, batch_idx):
            if self.evaluates:                 # planted: the step's helper leaves the module in eval mode
                self.eval()
            return super().training_step(batch, batch_idx)

    for evaluates, expected in ((True, "fail"), (False, "pass")):
        cb = CampaignCallback(root=store.root, memory_update=0)
        fit(Dropping(evaluates), tmp_path, cb, steps=3)
        checks = {c.id: c.status for c in cb.result.checks}
        assert checks["trainer.train_mode"] == expected, cb.result.checks


def test_the_example_lightning_script_records_and_checks_its_run(tmp_path):
    pytest.importorskip("transformers")
    from tests.integrations.test_hf import run_example

    last = run_example("lightning_train.py", tmp_path)
    assert last.startswith("pass [('trainer.lr_applied', 'pass')")
    assert "('trainer.train_mode', 'pass')" in last and "('trainer.memory_as_estimated', 'pass')" in last
    # Lightning's checkpoint of update 2, resumed in a fresh process with the generators the module saved
    assert "('trainer.resume_next_loss', 'pass')" in last
    store = Store(tmp_path / ".campaign")
    [row] = store.list()
    m = store.read(row.id)
    assert m.status == "completed" and m.params["hparams"]["lr"] == 1e-3


def test_a_resume_check_on_too_short_a_training_is_skipped_not_passed(tmp_path, store):
    # 3 updates: the checkpoint of update 2 leaves one to compare, the test needs 2 after it (updates 3 and 4)
    cb = CampaignCallback(root=store.root, resume_check=True, memory_update=0)
    fit(Module(), tmp_path, cb, steps=3)
    checks = {c.id: c for c in cb.result.checks}
    assert checks["trainer.resume_next_loss"].status == "skipped"
    assert "the training has 3 updates; the test needs 4" in checks["trainer.resume_next_loss"].seen
    assert cb.result.status == "not verified" and not list(tmp_path.glob("campaign-resume*"))


def test_failed_checks_end_the_run_invalid_and_fail_on_fails_the_script(tmp_path, store):
    from campaign.errors import InputError
    from campaign.integrations.steps import ChecksFailed

    cb = CampaignCallback(trainable=["body.*", "head.*", "frozen.*"], root=store.root)
    fit(Module(), tmp_path, cb, steps=2)     # without fail_on the script goes on: the run says what happened
    m = store.read(cb.run.id)
    assert m.status == "invalid" and "trainer.updates" in m.reason, (m.status, m.reason)
    cb = CampaignCallback(trainable=["body.*", "head.*", "frozen.*"], fail_on="fail", root=store.root)
    with pytest.raises(ChecksFailed, match="trainer.updates fail"):
        fit(Module(), tmp_path, cb, steps=4)
    assert store.read(cb.run.id).status == "invalid"
    cb = CampaignCallback(fail_on="fail", root=store.root)   # a correct run is not failed
    fit(Module(), tmp_path, cb, steps=4)
    assert cb.result.status == "pass" and store.read(cb.run.id).status == "completed"
    cb = CampaignCallback(check_steps=2, fail_on="not verified", root=store.root)   # a skipped check fails it too
    with pytest.raises(ChecksFailed, match="NOT VERIFIED"):
        fit(Module(warmup=5), tmp_path, cb, steps=3)
    with pytest.raises(InputError, match="fail_on='maybe'"):
        CampaignCallback(fail_on="maybe", root=store.root)
