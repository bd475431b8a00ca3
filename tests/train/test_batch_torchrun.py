"""`campaign batch --processes 2` runs the setup's own accumulate on each rank under torchrun (gloo on the CPU, the
model wrapped in DDP), against the whole update's gradient computed on one process (issue 30).

Rank 0 takes micro-batches of 12 and 20 ids, rank 1 of 40 and 33 (examples/train_setup.py, reordered): 16 + 28 = 44
and 58 + 47 = 105 loss tokens (a causal LM: length - 1 for the full row, length // 2 - 1 for the half-masked one).
Dividing by the rank's own count weighs a token of rank 0 105/44 times one of rank 1; dividing by the all-reduced
149 (times the world size, since DDP averages) is the whole update."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from campaign.train.accumulation import check_accumulation  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PER_RANK = (16 + 28, 58 + 47)

SETUP = '''
import sys
import torch
import torch.distributed as dist

sys.path.insert(0, EXAMPLES)
from train_setup import make_setup


def reordered():
    made = make_setup()
    b = made["batches"]
    made["batches"] = [b[0], b[2], b[1], b[3]]          # rank 0: 12 and 20 ids; rank 1: 40 and 33
    return made


def token_sums(model, micro_batches):
    for b in micro_batches:
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
        yield torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["labels"][:, 1:].reshape(-1),
                                                ignore_index=-100, reduction="sum")


def local_count(model, micro_batches):       # planted: this rank's tokens (DDP then averages the ranks)
    n = sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro_batches)
    for s in token_sums(model, micro_batches):
        (s / n).backward()


def global_count(model, micro_batches):      # right: the all-reduced tokens, times the world size DDP divides by
    n = torch.tensor([sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro_batches)])
    dist.all_reduce(n)
    for s in token_sums(model, micro_batches):
        (s / n * dist.get_world_size()).backward()


def fails_on_rank_1(model, micro_batches):
    if dist.get_rank() == 1:
        raise ValueError("shard 1 holds no labels")
    global_count(model, micro_batches)


def planted():
    return {**reordered(), "accumulate": local_count}


def right():
    return {**reordered(), "accumulate": global_count}


def failing():
    return {**reordered(), "accumulate": fails_on_rank_1}
'''


@pytest.fixture
def setup_file(tmp_path: Path) -> str:
    path = tmp_path / "ddp_setup.py"
    path.write_text(f"EXAMPLES = {str(EXAMPLES)!r}\n" + SETUP, encoding="utf-8")
    return str(path)


def _local_count_error() -> float:
    """The planted loop's relative error worked out on one process by plain autograd: the DDP average of each rank's
    sum / own count, against the sum over all tokens / 149."""
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_setup import make_setup
    finally:
        sys.path.remove(str(EXAMPLES))
    made = make_setup()
    model, b = made["model"].eval(), made["batches"]
    shares = ([b[0], b[2]], [b[1], b[3]])

    def grad(weights: list[float], batches: list) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        for w, batch in zip(weights, batches, strict=True):
            (model(**batch).loss * w).backward()        # .loss: the mean over the batch's shifted tokens
        return torch.cat([p.grad.double().reshape(-1) for p in model.parameters()])

    counts = [16, 58, 28, 47]                           # per micro-batch, as in the module docstring
    ordered = [b[0], b[2], b[1], b[3]]
    n = [counts[0], counts[2], counts[1], counts[3]]
    ref = grad([k / sum(n) for k in n], ordered)
    local = grad([n[0] / PER_RANK[0] / 2, n[1] / PER_RANK[0] / 2, n[2] / PER_RANK[1] / 2, n[3] / PER_RANK[1] / 2],
                 [*shares[0], *shares[1]])
    return float(torch.linalg.vector_norm(local - ref) / torch.linalg.vector_norm(ref))


def test_torchrun_runs_the_users_accumulate_and_a_local_token_count_is_not_equivalent(setup_file, cli):
    r = check_accumulation(f"{setup_file}:planted", processes=2)
    assert r.tokens_per_process == PER_RANK and (r.processes, r.accumulation, r.effective_batch) == (2, 2, 8)
    assert r.normalization == "accumulate" and r.status == "fail"
    c = r.checks[0]
    assert c.status == "fail" and c.seen.startswith("your accumulation step: relative error"), c
    by = {v.normalization: v for v in r.variants}
    expected = _local_count_error()
    assert expected > 0.05                              # 105/44: far above float error
    assert by["accumulate"].relative_error == pytest.approx(expected, rel=1e-3)
    assert by["accumulate"].relative_error == pytest.approx(by["token_local"].relative_error, rel=1e-3)
    res = cli("batch", f"{setup_file}:planted", "--processes", "2")      # torchrun from the command line
    assert res.code == 1 and "NOT EQUIVALENT" in res.out, res.out


def test_torchrun_a_globally_normalized_accumulate_is_equivalent(setup_file):
    r = check_accumulation(f"{setup_file}:right", processes=2)
    assert r.normalization == "accumulate" and r.status == "pass" and r.tokens_per_process == PER_RANK
    by = {v.normalization: v for v in r.variants}
    assert by["accumulate"].relative_error < 1e-5 and by["accumulate"].cosine > 1 - 1e-9
    assert not any("runs in one process" in n for n in r.notes)


def test_torchrun_a_failing_rank_names_the_users_function_and_rank(setup_file, cli):
    res = cli("batch", f"{setup_file}:failing", "--processes", "2")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "accumulate raised ValueError: shard 1 holds no labels" in res.err
    assert f"{setup_file}:fails_on_rank_1 (line " in res.err and "on rank 1 of 2" in res.err


def test_torchrun_runs_an_hf_trainers_own_step_on_its_sharded_batches(tmp_path, monkeypatch):
    """A factory returning a Trainer: under torchrun its dataloader shards (a DistributedSampler), so each rank holds
    its own batches; the whole update is the ranks' shares gathered, not rank 0's batches alone (which erred
    0.99 relative, a false FAIL). Rows of 12 ids, 4 per micro-batch: 4 x 11 = 44 loss tokens on each rank."""
    from tests.train.test_loops import TRAINER

    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer_setup.py").write_text(TRAINER, encoding="utf-8")
    r = check_accumulation(f"{tmp_path / 'trainer_setup.py'}:correct", processes=2)
    assert r.normalization == "accumulate" and r.tokens_per_process == (44, 44) and r.tokens_per_update == 88
    assert r.checks[0].status == "pass" and r.passed, r.checks        # and a warning: every micro-batch has 44
    by = {v.normalization: v for v in r.variants}
    assert by["accumulate"].relative_error < 1e-5 and by["token"].relative_error < 1e-5
