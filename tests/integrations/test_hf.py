"""The HF Trainer's own loop with one callback: the run recorded (parameters, metrics, checkpoints, status) and the
step checks on its real first updates, on a tiny Llama from a config, a plain PyTorch module and a peft model;
planted bugs each caught, correct setups passing."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from campaign.integrations.hf import CampaignCallback  # noqa: E402
from campaign.track.store import Store  # noqa: E402
from tests.conftest import tiny_llama  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    """16 sequences of 12 token ids, labels the inputs (a causal LM's own loss)."""

    def __init__(self, vocab: int = 1000) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (16, 12), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{k: v for k, v in tiny_llama().items() if k not in ("architectures",)})
    return transformers.LlamaForCausalLM(config).float()


def train(model, tmp_path, callback, *, warmup=0, steps=4, lr=1e-3, accumulation=1, save=2, dataset=None):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4, learning_rate=lr,
        warmup_steps=warmup, gradient_accumulation_steps=accumulation, logging_steps=1, save_steps=save,
        report_to=[], use_cpu=True, seed=0, disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset or Tokens(), callbacks=[callback])
    trainer.train()
    return trainer


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Store(tmp_path / ".campaign")


def _checks(callback) -> dict[str, str]:
    return {c.id: c.status for c in callback.result.checks}


def _seen(callback, check_id: str) -> str:
    return next(c.seen for c in callback.result.checks if c.id == check_id)


def test_a_correct_trainer_run_is_recorded_and_passes(tmp_path, store):
    cb = CampaignCallback("tiny-llama", hypothesis="it trains", root=store.root)
    train(llama(), tmp_path, cb, accumulation=2)
    m = store.read(cb.run.id)
    assert m.status == "completed"
    assert m.params["training_args"]["learning_rate"] == 1e-3
    assert m.params["trainer"]["gradient_accumulation_steps"] == 2 and m.params["trainer"]["world_size"] == 1
    losses = [r["loss"] for r in store.metrics(m.id) if "loss" in r]
    assert len(losses) == 4  # one per optimizer step (logging_steps=1, max_steps=4)
    checkpoints = sorted(a.kind for a in m.artifacts if a.kind.startswith("checkpoint"))
    assert checkpoints == ["checkpoint:step-2", "checkpoint:step-4"]
    assert cb.result.status == "pass", cb.result.checks
    assert set(cb.result.changed) == set(cb.result.trained) == {n for n, _ in llama().named_parameters()}
    saved = list((store.root / "records" / "trainer").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["result"]["status"] == "pass"


def test_a_warmup_at_rate_zero_is_not_verified_never_ready(tmp_path, store):
    # warm-up over 10 steps: the rate at the first of them is lr x 0/10 = 0 (transformers' linear schedule), and
    # with check_steps=1 no checked step moves anything
    cb = CampaignCallback(check_steps=1, root=store.root)
    train(llama(), tmp_path, cb, warmup=10, steps=2)
    assert cb.result.learning_rates == (0.0,)
    assert cb.result.status == "not verified"
    assert _checks(cb)["trainer.lr_applied"] == "skipped" and _checks(cb)["trainer.updates"] == "skipped"
    # past the warm-up's first step the rate is lr x 1/10: checked there, it passes
    cb = CampaignCallback(check_steps=2, root=store.root)
    train(llama(), tmp_path, cb, warmup=10, steps=2)
    assert cb.result.status == "pass" and cb.result.learning_rates[1] == pytest.approx(1e-4)


def test_a_module_declared_to_train_but_frozen_fails(tmp_path, store):
    model = llama()
    model.lm_head.weight.requires_grad_(False)  # the planted bug: frozen, though the plan says it trains
    cb = CampaignCallback(trainable=["model.*", "lm_head.weight"], root=store.root)
    train(model, tmp_path, cb, steps=2)
    assert _checks(cb)["trainer.updates"] == "fail" and "lm_head.weight" in _seen(cb, "trainer.updates")
    assert cb.result.status == "fail"


def test_a_trainable_pattern_that_matches_nothing_is_refused(tmp_path, store):
    from campaign.errors import InputError

    with pytest.raises(InputError, match="'lora' matches no parameter"):
        train(llama(), tmp_path, CampaignCallback(trainable=["lora"], root=store.root), steps=1)


def test_nan_gradients_fail_and_stop_training(tmp_path, store):
    model = llama()
    model.model.embed_tokens.register_forward_hook(lambda m, i, out: out * float("nan"))  # a NaN in the forward
    cb = CampaignCallback(stop_on_fail=True, root=store.root)
    trainer = train(model, tmp_path, cb, steps=4, save=100)
    assert _checks(cb)["trainer.grads_finite"] == "fail"
    assert trainer.state.global_step == 1  # stopped after the first step, not run to the end


def test_an_exception_marks_the_run_failed_with_its_reason(tmp_path, store):
    class Broken(Tokens):
        def __getitem__(self, i):
            if i >= 8:
                raise ValueError("row 8 has no text")
            return super().__getitem__(i)

    cb = CampaignCallback(root=store.root)
    with pytest.raises(ValueError):
        train(llama(), tmp_path, cb, dataset=Broken(), steps=4)
    m = store.read(cb.run.id)           # ended as the exception left train(), before the caller saw it
    assert m.status == "failed" and "row 8 has no text" in m.reason


class Plain(torch.nn.Module):
    """A plain PyTorch model the Trainer accepts: a forward returning {'loss': ...}."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(1000, 16)
        self.head = torch.nn.Linear(16, 1000)
        self.frozen = torch.nn.Linear(16, 16)
        self.frozen.requires_grad_(False)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.frozen(self.embed(input_ids)))
        return {"loss": torch.nn.functional.cross_entropy(logits.view(-1, 1000), labels.view(-1)), "logits": logits}


def test_a_plain_module_passes_and_its_frozen_layer_stays(tmp_path, store):
    cb = CampaignCallback(root=store.root)
    train(Plain(), tmp_path, cb, steps=2)
    assert cb.result.status == "pass", cb.result.checks
    assert "frozen.weight" not in cb.result.changed and "frozen.weight" not in cb.result.trained


def test_a_frozen_layer_that_moves_fails(tmp_path, store):
    class Leaky(Plain):  # the planted bug: a frozen layer updated in place by hand each forward
        def forward(self, input_ids, labels=None):
            with torch.no_grad():
                self.frozen.weight.mul_(0.99)
            return super().forward(input_ids, labels)

    cb = CampaignCallback(root=store.root)
    train(Leaky(), tmp_path, cb, steps=2)
    assert _checks(cb)["trainer.frozen_unchanged"] == "fail" and "frozen.weight" in cb.result.changed


def test_lora_passes_though_a_moves_only_from_the_second_step(tmp_path, store):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    cb = CampaignCallback(root=store.root)
    train(model, tmp_path, cb, steps=3)
    assert cb.result.status == "pass", cb.result.checks
    assert all("lora_" in n for n in cb.result.trained) and set(cb.result.changed) == set(cb.result.trained)
    m = store.read(cb.run.id)
    assert m.params["peft"]["default"]["r"] == 4
    # one step only: lora_A's gradient is zero while lora_B is zero, so A cannot have moved yet: not shown, so not
    # verified (no false alarm, no false go)
    cb = CampaignCallback(check_steps=1, root=store.root)
    train(peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])), tmp_path, cb,
          steps=1)
    assert _checks(cb)["trainer.updates"] == "skipped" and cb.result.status == "not verified"
    assert {n for n in cb.result.trained if n not in cb.result.changed} == {n for n in cb.result.trained
                                                                            if "lora_A" in n}


def test_a_lora_layer_left_out_of_the_optimizer_fails(tmp_path, store):
    peft = pytest.importorskip("peft")

    class Trainer(transformers.Trainer):  # the planted bug: a custom optimizer that forgets the v_proj adapters
        def create_optimizer(self):
            kept = [p for n, p in self.model.named_parameters() if p.requires_grad and "v_proj" not in n]
            self.optimizer = torch.optim.AdamW(kept, lr=self.args.learning_rate)
            return self.optimizer

    model = peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    cb = CampaignCallback(root=store.root)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4,
                                          learning_rate=1e-3, report_to=[], use_cpu=True, save_steps=100,
                                          disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    assert _checks(cb)["trainer.updates"] == "fail"
    assert "v_proj" in _seen(cb, "trainer.updates")


def run_example(name: str, folder: Path) -> str:
    """examples/trainer/NAME as a user runs it, in a fresh process from `folder` (its store there): the last line
    it prints."""
    import os
    import subprocess

    script = Path(__file__).resolve().parents[2] / "examples" / "trainer" / name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CAMPAIGN_ROOT", None)
    done = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()[-1]


def test_the_example_trainer_script_records_and_checks_its_run(tmp_path):
    last = run_example("train.py", tmp_path)
    assert last.startswith("pass [('trainer.lr_applied', 'pass')")
    # the Trainer's own checkpoint of update 2, resumed in a fresh process, gave updates 3 and 4 (dropout on)
    assert "('trainer.resume_next_loss', 'pass')" in last and "('trainer.memory_as_estimated', 'pass')" in last
    store = Store(tmp_path / ".campaign")
    [row] = store.list()
    m = store.read(row.id)
    assert m.status == "completed" and m.params["trainer"]["gradient_accumulation_steps"] == 2
    assert sorted(a.kind for a in m.artifacts if a.kind.startswith("checkpoint")) == ["checkpoint:step-2",
                                                                                       "checkpoint:step-4"]


def test_a_compute_loss_that_switches_to_eval_fails_the_train_mode(tmp_path, store):
    class Evaluating(transformers.Trainer):   # planted: a loss helper shared with evaluation calls model.eval()
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            model.eval()
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def with_dropout():
        torch.manual_seed(0)
        cfg = {k: v for k, v in tiny_llama(attention_dropout=0.1).items() if k != "architectures"}
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).float()

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4,
                                          learning_rate=1e-3, report_to=[], use_cpu=True, save_steps=100,
                                          disable_tqdm=True)
    cb = CampaignCallback(root=store.root, memory_update=0)
    Evaluating(model=with_dropout(), args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    assert _checks(cb)["trainer.train_mode"] == "fail" and "model.layers.0.self_attn" in _seen(cb, "trainer.train_mode")
    assert cb.result.status == "fail"
    cb = CampaignCallback(root=store.root, memory_update=0)    # the same Trainer without the planted line
    transformers.Trainer(model=with_dropout(), args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    assert _checks(cb)["trainer.train_mode"] == "pass" and cb.result.status == "pass", cb.result.checks


def test_failed_checks_end_the_run_invalid_and_fail_on_stops_and_fails_the_script(tmp_path, store):
    from campaign.integrations.steps import ChecksFailed

    model = llama()
    model.lm_head.weight.requires_grad_(False)  # the planted bug: frozen, though the plan says it trains
    cb = CampaignCallback(trainable=["model.*", "lm_head.weight"], root=store.root)
    train(model, tmp_path, cb, steps=2)
    m = store.read(cb.run.id)
    assert m.status == "invalid" and "trainer.updates" in m.reason, (m.status, m.reason)
    cb = CampaignCallback(trainable=["model.*", "lm_head.weight"], fail_on="fail", root=store.root)
    with pytest.raises(ChecksFailed, match="trainer.updates fail"):
        train(model, tmp_path / "again", cb, steps=4)
    assert store.read(cb.run.id).status == "invalid"
    assert max(r.get("step", 0) for r in store.metrics(cb.run.id)) < 4   # stopped at the verdict, not run on
    cb = CampaignCallback(fail_on="fail", root=store.root)   # a correct run is not failed
    train(llama(), tmp_path / "clean", cb, steps=3)
    assert cb.result.status == "pass" and store.read(cb.run.id).status == "completed"
