"""`campaign check --processes 2` runs one update of the setup's own step under torchrun (gloo on the CPU, the model
wrapped in DDP), batch r on rank r, and checks the ranks hold the same weights after it and applied the average of
their local gradients (issue 30).

The example setup (examples/check_setup.py:make_setup) gives 2 batches of 4 rows, 24 and 32 ids: rank 0 takes the
first, rank 1 the second. The planted setup keeps a learned temperature of its loss outside the model, held by the
optimizer: DDP never all-reduces it, so each rank steps it with its own gradient and the ranks drift apart."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from campaign.train.ddp_check import check_ddp  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SETUP = '''
import sys
import torch
import torch.distributed as dist

sys.path.insert(0, EXAMPLES)
from check_setup import make_setup


def with_temperature():
    made = make_setup()
    temperature = torch.ones((), requires_grad=True)     # planted: beside the model, so DDP never reduces it
    model = made["model"]

    def loss(m, batch):
        logits = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        return torch.nn.functional.cross_entropy((logits / temperature).reshape(-1, logits.shape[-1]),
                                                 batch["labels"][:, 1:].reshape(-1))

    params = [p for p in model.parameters() if p.requires_grad] + [temperature]
    return {**made, "optimizer": torch.optim.SGD(params, lr=0.1), "scheduler": None, "loss": loss}


def raises_on_rank_1():
    made = make_setup()

    def shard_loss(m, batch):
        if dist.get_rank() == 1:
            raise ValueError("shard 1 holds no labels")
        return m(**batch).loss

    return {**made, "loss": shard_loss}
'''


@pytest.fixture
def setup_file(tmp_path: Path) -> str:
    path = tmp_path / "ddp_check_setup.py"
    path.write_text(f"EXAMPLES = {str(EXAMPLES)!r}\n" + SETUP, encoding="utf-8")
    return str(path)


def _one_process() -> tuple[list[float], float]:
    """Each rank's loss and the norm of the average of the two local gradients, worked out on one process by plain
    autograd: the example's model, batch r under the random state the setup leaves (the dropout masks)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from check_setup import make_setup
    finally:
        sys.path.remove(str(EXAMPLES))
    made = make_setup()
    model = made["model"].train()
    state = torch.get_rng_state()
    held = [p for g in made["optimizer"].param_groups for p in g["params"]]
    losses, grads = [], []
    for batch in made["batches"]:
        torch.set_rng_state(state)
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([p.grad.double().reshape(-1) for p in held]))
    return losses, float(torch.linalg.vector_norm((grads[0] + grads[1]) / 2))


def test_torchrun_the_example_step_keeps_the_ranks_in_sync(cli, tmp_path):
    setup = f"{EXAMPLES / 'check_setup.py'}:make_setup"
    r = check_ddp(setup, 2)
    assert r.passed and [c.status for c in r.checks] == ["pass", "pass"], r.checks
    assert r.out_of_sync == () and r.grad_relative_error < 1e-5 and r.backend == "gloo"
    losses, norm = _one_process()
    assert losses[0] != pytest.approx(losses[1], rel=1e-3)          # the ranks really had different batches
    assert list(r.losses) == pytest.approx(losses, rel=1e-5)
    assert r.applied_grad_norm == pytest.approx(norm, rel=1e-5)
    out = tmp_path / "ddp.json"
    res = cli("check", setup, "--processes", "2", "--out", str(out))
    assert res.code == 0 and "IN SYNC" in res.out and "ddp.params_in_sync: " in res.out, res.out
    assert json.loads(out.read_text())["schema"] == "campaign.check_ddp/1"


def test_torchrun_a_tensor_beside_the_model_drifts_apart(setup_file, cli):
    r = check_ddp(f"{setup_file}:with_temperature", 2)
    assert r.status == "fail"
    by = {c.id: c for c in r.checks}
    assert by["ddp.params_in_sync"].status == "fail" and by["ddp.grads_reduced"].status == "fail"
    assert r.out_of_sync == ("a tensor of shape () the optimizer holds outside the model",)   # the model's own agree
    assert r.grad_relative_error > 1e-3
    res = cli("check", f"{setup_file}:with_temperature", "--processes", "2")
    assert res.code == 1 and "NOT IN SYNC" in res.out, res.out


def test_torchrun_a_failing_rank_names_the_users_function_and_rank(setup_file, cli):
    res = cli("check", f"{setup_file}:raises_on_rank_1", "--processes", "2")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert "raised ValueError: shard 1 holds no labels" in res.err
    assert f"{setup_file}:shard_loss (line " in res.err and "on rank 1 of 2" in res.err


def test_check_refuses_one_process_under_processes(cli):
    res = cli("check", f"{EXAMPLES / 'check_setup.py'}:make_setup", "--processes", "0")
    assert res.code == 2 and "--processes 0 must be a whole number >= 2" in res.err, res.err
