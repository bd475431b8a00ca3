"""campaign check --resume-args ARGS -- python SCRIPT (issue 47): the script's own checkpoint, written within the
watched updates, reloaded by the script itself in a fresh process; its first update compared with the
uninterrupted run's next one. Planted: a resume that restarts the data order, drops the optimizer state, drops the
scheduler; clean: examples/watch/train_gpt.py resuming as nanoGPT does."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from campaign.train.watch_checks import watch  # noqa: E402

from .test_watch import by_id, planted  # noqa: E402

RESUME = ("--init_from", "resume")


def resumed(tmp_path: Path, script: str, updates: int = 3, interval: int = 2):
    r = watch(["python", script, "--max_iters", "20", "--out_dir", str(tmp_path / "ck"), "--checkpoint_interval",
               str(interval)], updates=updates, timeout=120, resume_args=RESUME)
    return r, by_id(r)["resume.next_step_equal"]


def test_watch_resume_clean_gpt(tmp_path):
    r, c = resumed(tmp_path, planted(tmp_path))
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # --checkpoint_interval 2: saved after update 2, so update 3 is compared; LambdaLR min(1, (it + 1) / 10) on 1e-3
    # gives 3e-4 at update 3; AdamW keeps step, exp_avg and exp_avg_sq for each of the 29 tensors: 87
    assert "checkpoint at update 2, its first update against update 3" in c.seen
    assert "the same 2 micro-batches, learning rates 0.0003 " in c.seen and "(87 tensors)" in c.seen
    assert "all 29 parameter tensors equal" in c.seen


def test_watch_resume_that_restarts_the_data_order(tmp_path):
    script = planted(tmp_path, ('    torch.set_rng_state(checkpoint["rng"])\n', ""))
    r, c = resumed(tmp_path, script)
    assert r.status == "fail" and c.status == "fail"
    assert "data order restarted" in c.seen and "the first differs" in c.seen
    assert "optimizer state differs" not in c.seen        # the optimizer was restored: only the batches moved


def test_watch_resume_that_drops_the_optimizer_state(tmp_path):
    script = planted(tmp_path, ('    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""))
    r, c = resumed(tmp_path, script)
    assert c.status == "fail"
    # a fresh AdamW holds no state before its first step: 0 of the 87 tensors
    assert "optimizer state differs (0 tensors against 87" in c.seen
    assert "another batch" not in c.seen and "parameter tensors differ" in c.seen


def test_watch_resume_that_drops_the_scheduler(tmp_path):
    script = planted(tmp_path, ('    scheduler.load_state_dict(checkpoint["scheduler"])\n', ""))
    r, c = resumed(tmp_path, script)
    assert c.status == "fail"
    # the optimizer's state restores the rate (3e-4), but the scheduler restarts: saved after 2 steps, fresh at 0
    assert "scheduler position [2] against [0]" in c.seen and "optimizer state differs" not in c.seen


def test_watch_resume_with_arguments_that_do_not_resume(tmp_path):
    script = planted(tmp_path)
    r = watch(["python", script, "--max_iters", "20", "--out_dir", str(tmp_path / "ck")], updates=3, timeout=120,
              resume_args=("--init_from", "bogus"))
    c = by_id(r)["resume.next_step_equal"]
    assert c.status == "fail" and "did not resume" in c.seen and "--init_from bogus" in c.seen


def test_watch_resume_without_arguments_says_how(tmp_path):
    r = watch(["python", planted(tmp_path), "--max_iters", "20", "--out_dir", str(tmp_path / "ck")], updates=3,
              timeout=120)
    c = by_id(r)["resume.next_step_equal"]
    assert r.status == "not verified" and c.status == "skipped" and "--resume-args" in c.fix


def test_check_resume_args_on_the_command_line(tmp_path):
    import json

    from typer.testing import CliRunner

    from campaign.cli import app

    ran = CliRunner().invoke(app, ["check", "--resume-args", "--init_from resume", "--json", "--", "python",
                                   planted(tmp_path), "--max_iters", "20", "--out_dir", str(tmp_path / "ck")])
    assert ran.exit_code == 0, ran.output
    found = {c["id"]: c["status"] for c in json.loads(ran.stdout)["checks"]}
    assert found["resume.next_step_equal"] == "pass"

    from campaign.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["check", "--resume-args", "'unclosed", "--", "python", planted(tmp_path)])
    assert ended.value.code == 2


TRAINER = '''
import sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.1)
model = LlamaForCausalLM(config)
g = torch.Generator().manual_seed(0)
rows = [{"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(0, 64, (32, 12), generator=g)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=8, per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, learning_rate=1e-3, warmup_steps=4, report_to=[],
                         save_strategy="steps", save_steps=2, use_cpu=True, logging_steps=100, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=rows).train()
'''


def test_watch_resume_through_the_hf_trainer(tmp_path):
    # no --resume-args: the checkpoint is a Trainer's (checkpoint-2), so the fresh process's Trainer.train is made
    # to resume from it, as trainer.train(resume_from_checkpoint=...) does
    r = watch(["python", planted(tmp_path, source=TRAINER), str(tmp_path / "out")], updates=3, timeout=180)
    c = by_id(r)["resume.next_step_equal"]
    assert c.status == "pass", c.seen
    assert "resume_from_checkpoint='checkpoint-2'" in c.seen and "against update 3" in c.seen
    assert "the same 2 micro-batches" in c.seen          # gradient_accumulation_steps=2


def test_watch_resume_through_the_hf_trainer_that_restarts_the_data(tmp_path):
    script = planted(tmp_path, ("disable_tqdm=True)", "disable_tqdm=True, ignore_data_skip=True)"), source=TRAINER)
    r = watch(["python", script, str(tmp_path / "out")], updates=3, timeout=180)
    c = by_id(r)["resume.next_step_equal"]
    assert c.status == "fail" and "data order restarted" in c.seen


def test_watch_plain_script_saving_into_a_checkpoint_folder_is_not_taken_for_a_trainer(tmp_path):
    # a folder named like the Trainer's (checkpoint-1), written by the script's own torch.save: no Trainer to resume
    r = watch(["python", planted(tmp_path), "--max_iters", "20", "--out_dir", str(tmp_path / "checkpoint-1")],
              updates=3, timeout=120)
    c = by_id(r)["resume.next_step_equal"]
    assert c.status == "skipped" and "how it resumes from it was not given" in c.seen


def test_resume_compare_tolerance_is_a_few_ulps_of_each_tensors_largest_value():
    from campaign.train.watch_resume import ULPS, compare

    eps = torch.finfo(torch.float32).eps                  # 2**-23
    a = torch.tensor([2.0, -0.5, 0.25])                    # largest |value| 2: allowed 4 * 2**-23 * 2 = 2**-20
    near = a + torch.tensor([0.0, 2.0 ** -21, 0.0])        # half the allowance
    far = a + torch.tensor([0.0, 2.0 ** -19, 0.0])         # twice the allowance
    assert ULPS * eps * 2.0 == 2.0 ** -20

    def capture(p):
        return {"update": 3, "saved_at": 2, "checkpoint": "ck.pt", "batches": [{"input_ids": "x"}], "losses": [1.0],
                "lrs": [1e-3], "schedulers": [], "optimizer": {"0.step": torch.tensor(2.0)}, "params": {"w": p}}

    assert compare(capture(a), capture(near))["params_differ"] == []
    f = compare(capture(a), capture(far))
    assert f["params_differ"] == ["w"] and f["params_worst"] == pytest.approx(2.0 ** -19 / 2.0)
    assert f["batches_equal"] and f["optimizer_differ"] == []


PEFT_RESUME = '''
import os
import sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

out_dir, resume = sys.argv[1], "--resume" in sys.argv
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1,
                                                            target_modules=["q_proj", "v_proj"]))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
start = 0
if resume:
    state = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    start = state["step"] + 1
model.train()
for step in range(start, 10):
    ids = torch.randint(0, 64, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    os.makedirs(out_dir, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(), "step": step}, os.path.join(out_dir, "ckpt.pt"))
'''


def test_watch_resume_peft_lora_clean(tmp_path):
    pytest.importorskip("peft")
    script = planted(tmp_path, source=PEFT_RESUME)
    r = watch(["python", script, str(tmp_path / "ck")], updates=2, timeout=120, resume_args=("--resume",))
    c = by_id(r)["resume.next_step_equal"]
    # saved after every update: the last save before the stop is after update 1, so update 2 is compared; 8 LoRA
    # tensors (2 layers x q, v x A, B) with AdamW's step, exp_avg, exp_avg_sq: 24 optimizer tensors
    assert c.status == "pass", c.seen
    assert "checkpoint at update 1, its first update against update 2" in c.seen and "(24 tensors)" in c.seen
