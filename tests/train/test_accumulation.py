"""campaign batch: the accumulated gradient against the whole update's, on a tiny real Llama and BERT, in one
process and in two under torchrun (gloo); a planted per-micro-batch mean over variable lengths must fail."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from campaign.errors import InputError  # noqa: E402
from campaign.train.accumulation import check_accumulation  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_setup.py"
LENGTHS = (12, 40, 20, 33)
# per micro-batch of the example: row 0 has L tokens, row 1 L // 2 (right-padded); a causal LM predicts each token
# from the previous one, so a row of k tokens has k - 1 counted: (L - 1) + (L // 2 - 1)
TOKENS = tuple((L - 1) + (L // 2 - 1) for L in LENGTHS)


def test_the_per_micro_batch_mean_fails_on_variable_lengths_and_per_token_passes():
    wrong = check_accumulation(f"{EXAMPLE}:make_setup", normalization="micro_batch_mean")
    assert wrong.tokens_per_micro_batch == TOKENS == (16, 58, 28, 47) and wrong.tokens_per_update == 149
    assert (wrong.micro_batch, wrong.accumulation, wrong.processes, wrong.effective_batch) == (2, 4, 1, 8)
    assert wrong.normalization == "micro_batch_mean" and not wrong.passed
    fail = wrong.checks[0]
    assert fail.id == "batch.accumulation_equivalence" and fail.status == "fail" and "num_items_in_batch" in fail.fix
    right = check_accumulation(f"{EXAMPLE}:make_setup", normalization="token")
    assert right.passed and right.checks[0].status == "pass"
    by = {v.normalization: v for v in right.variants}
    assert by["token"].relative_error < 1e-5 and by["micro_batch_mean"].relative_error > 0.05


def _write_setup(tmp_path: Path, body: str) -> str:
    path = tmp_path / "setup.py"
    path.write_text("import torch\nimport transformers\n\n" + body, encoding="utf-8")
    return f"{path}:make_setup"


def test_equal_lengths_cannot_tell_the_normalizations_apart_and_say_so(tmp_path):
    """With every micro-batch holding the same number of tokens, mean / steps IS the per-token loss: both errors
    are float noise (a second way to see that the comparison itself is right), and the check warns."""
    ref = _write_setup(tmp_path, '''
def make_setup():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                                   num_hidden_layers=1, vocab_size=64, max_position_embeddings=64)
    g = torch.Generator().manual_seed(2)
    batches = []
    for _ in range(3):
        ids = torch.randint(1, 64, (2, 10), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    return {"model": transformers.LlamaForCausalLM(cfg), "batches": batches}
''')
    r = check_accumulation(ref)
    assert r.tokens_per_micro_batch == (18, 18, 18)                  # 2 rows x (10 - 1)
    assert all(v.relative_error < 1e-5 for v in r.variants) and r.passed
    assert {c.id: c.status for c in r.checks} == {"batch.accumulation_equivalence": "pass",
                                                   "batch.token_counts_vary": "warn"}


def test_a_bert_like_model_counts_masked_tokens_without_a_shift(tmp_path):
    ref = _write_setup(tmp_path, '''
def make_setup():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1,
                                  vocab_size=64, max_position_embeddings=64)
    g = torch.Generator().manual_seed(3)
    batches = []
    for length, masked in ((8, 2), (20, 7), (14, 4)):
        ids = torch.randint(5, 64, (1, length), generator=g)
        labels = torch.full_like(ids, -100)
        labels[0, :masked] = ids[0, :masked]            # the loss counts the masked positions only
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return {"model": transformers.BertForMaskedLM(cfg), "batches": batches, "normalization": "token"}
''')
    r = check_accumulation(ref)
    assert r.tokens_per_micro_batch == (2, 7, 4) and r.normalization == "token" and r.passed
    assert next(v for v in r.variants if v.normalization == "micro_batch_mean").relative_error > 1e-3


def test_two_processes_under_torchrun_reduce_token_counts_across_processes():
    """Rank 0 takes micro-batches 1-2 (16 + 58 tokens), rank 1 takes 3-4 (28 + 47): the global per-token loss
    matches the whole update; dividing by each process's own count does not (74 vs 75 tokens)."""
    r = check_accumulation(f"{EXAMPLE}:make_setup", processes=2, normalization="token")
    assert r.tokens_per_process == (TOKENS[0] + TOKENS[1], TOKENS[2] + TOKENS[3]) == (74, 75)
    assert (r.accumulation, r.effective_batch) == (2, 8) and r.passed
    by = {v.normalization: v for v in r.variants}
    assert by["token"].relative_error < 1e-5
    assert by["token_local"].relative_error > 1e-3 and by["micro_batch_mean"].relative_error > 0.05
    assert any("DistributedSampler" in n for n in r.notes)


@pytest.mark.parametrize("body, fragment", [
    ("def make_setup():\n    raise RuntimeError('no data here')\n", "raised RuntimeError: no data here"),
    ("def make_setup():\n    return {'model': torch.nn.Linear(2, 2)}\n", "must return the model and the batches"),
    ("def make_setup():\n    return {'model': 3, 'batches': [{}]}\n", "model is a int, not a torch.nn.Module"),
    ("def make_setup():\n    return {'model': torch.nn.Linear(2, 2), 'batches': [{'x': 1}]}\n", "needs 'labels'"),
    ("def other():\n    pass\n", "no function 'make_setup'"),
])
def test_a_bad_setup_is_one_line(cli, tmp_path, body, fragment):
    r = cli("batch", _write_setup(tmp_path, body))
    assert r.code == 2 and r.err.count("\n") == 1 and fragment in r.err, r.err


def test_cli_exit_codes_and_json(cli):
    r = cli("batch", f"{EXAMPLE}:make_setup", "--json")
    assert r.code == 1 and r.json()["schema"] == "campaign.batch/1" and r.json()["tokens_per_update"] == 149
    assert cli("batch", f"{EXAMPLE}:make_setup", "--normalization", "token").code == 0
    bad = cli("batch", f"{EXAMPLE}:make_setup", "--accumulation", "3", "--processes", "2")
    assert bad.code == 2 and "need 6 micro-batches; the setup gives 4" in bad.err
    with pytest.raises(InputError, match="FILE.py:FUNCTION"):
        check_accumulation("setup.py")
    json.dumps(check_accumulation(f"{EXAMPLE}:make_setup").to_dict())


def test_progress_names_each_gradient_and_bad_options_come_before_the_setup_is_built(tmp_path):
    phases: list[str] = []
    check_accumulation(f"{EXAMPLE}:make_setup", normalization="token", progress=phases.append)
    assert phases == [f"building the setup ({EXAMPLE}:make_setup)",
                      "gradient 1/3: the whole update at once (4 micro-batches)",
                      "gradient 2/3: accumulated over 4 micro-batches, token normalization",
                      "gradient 3/3: accumulated over 4 micro-batches, micro batch mean normalization"]
    marker = tmp_path / "imported"
    setup = _write_setup(tmp_path, f"open({str(marker)!r}, 'w').write('ran')\ndef make_setup():\n    pass\n")
    for kwargs, fragment in [({"processes": 0}, "processes 0"), ({"accumulation": 0}, "accumulation 0"),
                             ({"normalization": "mean"}, "normalization 'mean'")]:
        with pytest.raises(InputError, match=fragment):
            check_accumulation(setup, **kwargs)
    assert not marker.exists()


# -- the user's own accumulation step (issue 26 items 2, 9, 10) ------------------------------------------------------

LOOPS = '''
import torch
import transformers

from examples_train_setup import make_setup as llama_setup


class Plain(torch.nn.Module):
    """A plain language model (no get_input_embeddings); labels aligned with the logits, as its own loss uses them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 64)

    def forward(self, input_ids, attention_mask=None):
        return (self.head(torch.tanh(self.embed(input_ids))),)     # a tuple, as return_dict=False gives


def plain_setup():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    batches = []
    for length in (6, 20, 11):
        ids = torch.randint(0, 64, (2, length), generator=g)
        mask = torch.ones_like(ids)
        mask[1, length // 2:] = 0
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return {"model": Plain(), "batches": batches}


def peft_setup():
    import peft

    made = llama_setup()
    made["model"] = peft.get_peft_model(made["model"], peft.LoraConfig(r=4, lora_alpha=8,
                                                                       target_modules=["q_proj", "v_proj"]))
    for name, p in made["model"].named_parameters():    # B at 0 gives A no gradient: move B off 0 for the test
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    return made


def token_sum(model, batch):
    """(summed token losses, tokens) as a loop computes them from the logits."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = out[0] if isinstance(out, tuple) else out.logits
    labels = batch["labels"]
    if KIND != "plain":                                  # a causal LM: token t predicts t + 1
        logits, labels = logits[:, :-1], labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    return loss, int((labels != -100).sum())


def per_token(model, micro_batches):                  # right: every token of the update weighs the same
    total = sum(token_sum(model, b)[1] for b in micro_batches)
    for b in micro_batches:
        (token_sum(model, b)[0] / total).backward()


def mean_of_means(model, micro_batches):              # planted: each micro-batch's mean / steps
    for b in micro_batches:
        s, n = token_sum(model, b)
        (s / n / len(micro_batches)).backward()


def summed(model, micro_batches):                     # planted: summed, never divided
    for b in micro_batches:
        token_sum(model, b)[0].backward()


def base():
    return {"llama": llama_setup, "plain": plain_setup, "peft": peft_setup}[KIND]()


def right():
    return {**base(), "accumulate": per_token}


def means():
    return {**base(), "accumulate": mean_of_means, "normalization": "token"}   # declared token, yet the loop isn't


def sums():
    return {**base(), "accumulate": summed}


def no_loop():
    return base()


def raises():
    made = base()
    made["model"].forward = lambda **kw: (_ for _ in ()).throw(ValueError("shapes do not match (2, 7)"))
    return made
'''


def loops(tmp_path: Path, kind: str) -> str:
    (tmp_path / "examples_train_setup.py").write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / f"loops_{kind}.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nKIND = {kind!r}\n" + LOOPS,
                    encoding="utf-8")
    return str(path)


KINDS = ["llama", "plain", "peft"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_users_own_accumulation_step_is_run_and_a_right_one_passes(tmp_path, kind, cli):
    path = loops(tmp_path, kind)
    r = check_accumulation(f"{path}:right")
    assert r.normalization == "accumulate" and r.passed and r.status == "pass"
    c = r.checks[0]
    assert c.status == "pass" and c.seen.startswith("your accumulation step: relative error")
    res = cli("batch", f"{path}:right")                    # item 9: a clean setup exits 0
    assert res.code == 0 and "EQUIVALENT" in res.out and "checked: your accumulation step" in res.out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("loop", ["means", "sums"])
def test_a_wrong_accumulation_step_fails_whatever_is_declared(tmp_path, kind, loop):
    r = check_accumulation(f"{loops(tmp_path, kind)}:{loop}", normalization="token")
    c = r.checks[0]
    assert r.normalization == "accumulate" and c.status == "fail" and r.status == "fail", c
    assert c.seen.startswith("your accumulation step: relative error")


def test_without_the_loop_or_a_declaration_it_is_not_verified_never_a_false_fail(tmp_path, cli):
    path = loops(tmp_path, "plain")
    r = check_accumulation(f"{path}:no_loop")
    c = r.checks[0]
    assert r.normalization == "" and c.status == "skipped" and c.gates and "accumulate" in c.fix
    assert r.status == "not verified"
    res = cli("batch", f"{path}:no_loop")
    assert res.code == 1 and res.out.startswith("NOT VERIFIED") and "your loop: not given" in res.out
    assert "why: ;" not in res.out
    assert check_accumulation(f"{path}:no_loop", normalization="token").passed      # the declared fallback


@pytest.mark.parametrize("kind", ["plain", "llama"])
def test_a_forward_that_raises_is_bad_input_naming_the_users_model(tmp_path, cli, kind):
    res = cli("batch", f"{loops(tmp_path, kind)}:raises")
    assert res.code == 2 and "raised ValueError: shapes do not match (2, 7)" in res.err
    assert res.err.count("\n") == 1


def test_a_failing_torchrun_worker_reports_its_own_exception():
    from campaign.train.accumulation import _cause

    stderr = """[rank0]: Traceback (most recent call last):
[rank0]:   File "setup.py", line 9, in make_setup
[rank0]: ValueError: the data folder /data/x does not exist
E1202 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "torch/distributed/run.py", line 9, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
campaign.train.ddp_worker FAILED
------------------------------------------------------------
Root Cause (first observed failure):
  exitcode  : 1 (pid: 7)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""
    assert _cause(stderr) == "ValueError: the data folder /data/x does not exist"


def test_the_examples_own_loops_pass_and_fail():
    right = check_accumulation(f"{EXAMPLE}:with_loop")
    assert right.normalization == "accumulate" and right.status == "pass"
    assert next(v for v in right.variants if v.normalization == "accumulate").relative_error < 1e-5
    wrong = check_accumulation(f"{EXAMPLE}:with_mean_of_means", normalization="token")
    assert wrong.status == "fail" and wrong.checks[0].seen.startswith("your accumulation step")


def test_a_nan_loss_is_one_failure_about_the_nan_not_a_relative_error(tmp_path, cli):
    path = loops(tmp_path, "plain")
    body = Path(path).read_text(encoding="utf-8") + '''

def nan_loop():
    made = right()
    with torch.no_grad():
        made["model"].head.bias[0] = float("nan")
    return made
'''
    Path(path).write_text(body, encoding="utf-8")
    r = check_accumulation(f"{path}:nan_loop")
    assert [c.status for c in r.checks if c.id == "batch.accumulation_equivalence"] == ["fail"]
    c = r.checks[0]
    assert "not finite" in c.seen and "nan%" not in c.seen
    res = cli("batch", f"{path}:nan_loop")
    assert res.code == 1 and "nan%" not in res.out


def test_gpt2_shifts_its_labels_though_its_class_name_does_not_say_so(tmp_path):
    """Issue 47: GPT2LMHeadModel (the default model of transformers' language-modeling examples) shifts its labels;
    whether it does is read from its own loss, not from a class name ending in ForCausalLM. Two micro-batches of
    different lengths, the loop's own accumulate weighting by tokens: equivalent, and tokens counted after the
    shift (a row of k tokens has k - 1)."""
    ref = _write_setup(tmp_path, '''
def make_setup():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=64)
    g = torch.Generator().manual_seed(2)
    batches = []
    for length in (10, 30):
        ids = torch.randint(1, 64, (2, length), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    return {"model": transformers.GPT2LMHeadModel(cfg), "batches": batches}
''')
    r = check_accumulation(ref, normalization="token")
    assert r.tokens_per_micro_batch == (18, 58)                      # 2 rows x (10 - 1), 2 rows x (30 - 1)
    assert r.passed and {v.normalization: v for v in r.variants}["token"].relative_error < 1e-5
