"""campaign check -- python SCRIPT (issue 47): the user's own script run unchanged, watched for a few updates. Each
check on a planted bug (a one-line edit of a script written as the field writes it) and on the clean script."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from campaign.errors import InputError  # noqa: E402
from campaign.train.watch_checks import watch  # noqa: E402

GPT = Path(__file__).resolve().parents[2] / "examples" / "watch" / "train_gpt.py"


def planted(tmp_path: Path, *edits: tuple[str, str], source: Path | str = GPT) -> str:
    text = source.read_text() if isinstance(source, Path) else source
    for old, new in edits:
        assert old in text, old          # the edit must apply: a test that plants nothing proves nothing
        text = text.replace(old, new)
    out = tmp_path / "train.py"
    out.write_text(text)
    return str(out)


def by_id(report):
    return {c.id: c for c in report.checks}


def test_watch_clean_gpt_passes_every_check(tmp_path):
    r = watch(["python", planted(tmp_path), "--max_iters", "20"], updates=3, timeout=120, resume=False)
    c = by_id(r)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert r.updates_watched == 3 and r.micro_batches == (2, 2, 2)       # --grad_accum 2
    # LambdaLR(min(1, (it + 1) / 10)) on lr 1e-3: 1e-4, 2e-4, 3e-4 at the first three updates
    assert [round(x[0], 10) for x in r.learning_rates] == [1e-4, 2e-4, 3e-4]
    # targets y = data[i+1:...]: the next token at every position (4 x 16 positions, 15 per row comparable)
    assert "the next token at 60 of 64" in c["batch.labels_aligned"].seen
    assert c["model.causal"].status == "pass"
    assert c["resume.next_step_equal"].gates is False


def test_watch_without_checkpoint_is_not_verified(tmp_path):
    r = watch(["python", planted(tmp_path), "--max_iters", "20"], updates=2, timeout=120)
    assert r.status == "not verified"
    assert by_id(r)["resume.next_step_equal"].status == "skipped"
    assert "wrote no checkpoint" in by_id(r)["resume.next_step_equal"].seen


def test_watch_names_the_checkpoint_but_does_not_go(tmp_path):
    out = tmp_path / "ck"
    r = watch(["python", planted(tmp_path), "--max_iters", "20", "--out_dir", str(out), "--checkpoint_interval",
               "1"], updates=2, timeout=120)
    c = by_id(r)["resume.next_step_equal"]
    assert r.status == "not verified" and "checkpoint at update 1" in c.seen and str(out / "ckpt.pt") in c.seen


def test_watch_model_left_in_eval_after_evaluation(tmp_path):
    script = planted(tmp_path, ("    model.train()\n    return sum", "    return sum"))
    r = watch(["python", script, "--max_iters", "20"], updates=3, timeout=120, resume=False)
    c = by_id(r)["step.train_mode"]
    assert c.status == "fail" and "update 1" in c.seen      # the evaluation runs at iteration 0, before update 1


def test_watch_without_zero_grad(tmp_path):
    script = planted(tmp_path, ("    optimizer.zero_grad(set_to_none=True)\n", ""))
    r = watch(["python", script, "--max_iters", "20"], updates=3, timeout=120, resume=False)
    c = by_id(r)["step.grads_zeroed"]
    # every one of the 29 parameter tensors (2 layers x 12 + wte, wpe, ln_f x 2, lm_head) carries its gradient
    assert c.status == "fail" and "before update 2, 29 of 29" in c.seen


def test_watch_scheduler_stepped_per_micro_batch(tmp_path):
    script = planted(tmp_path, ("        loss.backward()\n", "        loss.backward()\n        scheduler.step()\n"),
                     ("    optimizer.step()\n    scheduler.step()\n", "    optimizer.step()\n"))
    r = watch(["python", script, "--max_iters", "20"], updates=3, timeout=120, resume=False)
    c = by_id(r)["step.lr_per_update"]
    assert c.status == "fail" and "stepped 2 times" in c.seen          # --grad_accum 2


def test_watch_decoder_without_causal_mask(tmp_path):
    script = planted(tmp_path, ("        att = att.masked_fill(", "        att = att  # ("))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)["model.causal"]
    assert c.status == "fail" and "position 0" in c.seen              # attention over all: position 0 moves too


def test_watch_targets_not_shifted(tmp_path):
    script = planted(tmp_path, ("data[i + 1:i + 1 + block_size]", "data[i:i + block_size]"))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)["batch.labels_aligned"]
    assert c.status == "fail" and "copy its own token" in c.seen


def test_watch_trainable_parameter_left_out_of_the_optimizer(tmp_path):
    script = planted(tmp_path, ("torch.optim.AdamW(model.parameters(),", "torch.optim.AdamW(model.h.parameters(),"))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)
    # left out: wte, wpe, ln_f.weight, ln_f.bias, lm_head.weight: 5 of 29
    assert c["params.in_optimizer"].status == "fail" and "(5 of 29)" in c["params.in_optimizer"].seen
    assert c["params.trainable_changed"].status == "fail"


def test_watch_stops_a_script_that_never_steps(tmp_path):
    script = planted(tmp_path, source="import time\nprint('loading')\nwhile True:\n    time.sleep(0.05)\n")
    with pytest.raises(InputError, match=r"no optimizer update within 3 s .*it was in importing and starting"):
        watch(["python", script], timeout=3)


def test_watch_bad_commands_are_one_line(tmp_path):
    with pytest.raises(InputError, match="no such script"):
        watch(["python", str(tmp_path / "missing.py")])
    with pytest.raises(InputError, match="not a Python interpreter"):
        watch(["bash", "train.sh"])
    script = planted(tmp_path, source="raise ValueError('bad config')\n")
    with pytest.raises(InputError, match=r"raised ValueError at line 1: bad config"):
        watch(["python", script], timeout=60)


HF_LOOP = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
LORA
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model.train()
for step in range(10):
    ids = torch.randint(0, 64, (2, 12))
    labels = ids.clone()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''


def test_watch_hf_model_clean(tmp_path):
    r = watch(["python", planted(tmp_path, ("LORA", ""), source=HF_LOOP)], updates=2, timeout=120, resume=False)
    c = by_id(r)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    # labels = input_ids: the label is the position's own token at all 2 x 12 positions, and the model shifts
    seen = c["batch.labels_aligned"].seen
    assert "shifts the labels" in seen and "own token at 24 " in seen
    assert c["model.causal"].status == "pass"


def test_watch_hf_labels_shifted_twice(tmp_path):
    script = planted(tmp_path, ("LORA", ""), ("    labels = ids.clone()\n",
                                              "    labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], "
                                              "1)\n"), source=HF_LOOP)
    r = watch(["python", script], updates=2, timeout=120, resume=False)
    c = by_id(r)["batch.labels_aligned"]
    assert c.status == "fail" and "shifted twice" in c.seen


def test_watch_peft_lora_frozen_base(tmp_path):
    pytest.importorskip("peft")
    lora = ("from peft import LoraConfig, get_peft_model\n"
            "model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=['q_proj', 'v_proj']))")
    r = watch(["python", planted(tmp_path, ("LORA", lora), source=HF_LOOP)], updates=2, timeout=120, resume=False)
    c = by_id(r)
    # 2 layers x (q_proj, v_proj) x (A, B) = 8 LoRA tensors train; every other tensor stays frozen
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert "exactly the 8 trainable" in c["params.in_optimizer"].seen


TRAINER = '''
import sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
g = torch.Generator().manual_seed(0)
rows = [{"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(0, 64, (32, 12), generator=g)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=8, per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, learning_rate=1e-3, warmup_steps=2, report_to=[],
                         save_strategy="no", use_cpu=True, logging_steps=100, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=rows).train()
'''


def test_watch_through_the_hf_trainer_clean(tmp_path):
    script = planted(tmp_path, source=TRAINER)
    r = watch(["python", script, str(tmp_path / "out")], updates=3, timeout=180, resume=False)
    c = by_id(r)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert r.micro_batches == (2, 2, 2)                                 # gradient_accumulation_steps=2
    assert c["batch.labels_aligned"].status == "pass" and c["model.causal"].status == "pass"
    # the Trainer passes num_items_in_batch: the model's loss is already over the update's tokens, backpropagated as is
    assert c["step.accumulation"].status == "pass" and "by 1, 1)" in c["step.accumulation"].seen


ACCELERATE = '''
import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
data = torch.utils.data.DataLoader(torch.randint(0, 64, (32, 12)), batch_size=2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
model, optimizer, data, scheduler = accelerator.prepare(model, optimizer, data, scheduler)
model.train()
for ids in data:
    with accelerator.accumulate(model):
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
'''


def test_watch_through_accelerate_clean(tmp_path):
    pytest.importorskip("accelerate")
    r = watch(["python", planted(tmp_path, source=ACCELERATE)], updates=3, timeout=180, resume=False)
    assert r.status == "pass", [(x.id, x.status, x.seen) for x in r.checks]
    assert r.micro_batches == (2, 2, 2)
    # accelerator.backward divides by gradient_accumulation_steps=2
    c = by_id(r)["step.accumulation"]
    assert c.status == "pass" and "by 0.5, 0.5)" in c.seen


def test_check_dash_dash_python_runs_the_script(tmp_path):
    import json

    from typer.testing import CliRunner

    from campaign.cli import app

    script = planted(tmp_path, ("    optimizer.zero_grad(set_to_none=True)\n", ""))
    ran = CliRunner().invoke(app, ["check", "--updates", "2", "--no-resume", "--json", "--", "python", script,
                                   "--max_iters", "20"])
    assert ran.exit_code == 1, ran.output
    found = json.loads(ran.stdout)
    assert found["schema"] == "campaign.watch/1" and found["status"] == "fail"
    assert {c["id"]: c["status"] for c in found["checks"]}["step.grads_zeroed"] == "fail"


def test_watch_non_finite_loss(tmp_path):
    # a normalization by (steps - 2) instead of steps: with --grad_accum 2, a division by zero
    script = planted(tmp_path, ("loss = loss / cfg.grad_accum", "loss = loss / (cfg.grad_accum - 2)"))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)
    assert c["step.finite_loss"].status == "fail" and "update 1" in c["step.finite_loss"].seen
    assert c["step.finite_grads"].status == "fail"


def test_watch_frozen_parameter_that_moves(tmp_path):
    # wpe frozen (and left out of the optimizer), then nudged in place by the loop: 1 of the 28 + 1 tensors moves
    script = planted(tmp_path, ("model = GPT()\n", "model = GPT()\nmodel.wpe.weight.requires_grad_(False)\n"),
                     ("torch.optim.AdamW(model.parameters(),",
                      "torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],"),
                     ("    optimizer.step()\n", "    optimizer.step()\n    model.wpe.weight.data.mul_(0.99)\n"))
    r = watch(["python", script, "--max_iters", "20"], updates=2, timeout=120, resume=False)
    c = by_id(r)
    assert c["params.in_optimizer"].status == "pass" and "exactly the 28" in c["params.in_optimizer"].seen
    assert c["params.frozen_unchanged"].status == "fail" and "wpe.weight" in c["params.frozen_unchanged"].seen
