"""campaign batch on a model whose inputs have other names (issue 47): a nanoGPT-style plain nn.Module,
`forward(idx, targets=None) -> (logits, loss)`, the last position's logits only without targets, targets already
shifted and -1 where nothing is scored. The accumulated gradient is checked against one computed here by hand."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from campaign.errors import InputError  # noqa: E402
from campaign.train.accumulation import check_accumulation  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plain_setup.py"
# the example's micro-batches: 2 rows of 16 targets each, the documents ending after (16, 16), (16, 9), (5, 13)
# targets (the rest -1): nanoGPT's targets come shifted, so every one of them counts
TARGETS_PER_MICRO_BATCH = (16 + 16, 16 + 9, 5 + 13)


def _example() -> dict:
    return runpy.run_path(str(EXAMPLE))


def _flat_grad(model, loss) -> torch.Tensor:
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    return torch.cat([g.double().reshape(-1) for g in grads])


def test_a_nanogpt_loop_weighing_every_target_alike_passes():
    r = check_accumulation(f"{EXAMPLE}:make_setup")
    assert r.tokens_per_micro_batch == TARGETS_PER_MICRO_BATCH and r.tokens_per_update == 75
    assert (r.micro_batch, r.accumulation, r.effective_batch) == (2, 3, 6)
    assert r.normalization == "accumulate" and r.status == "pass"
    assert {v.normalization: v for v in r.variants}["accumulate"].relative_error < 1e-5
    assert any("'targets'" in n for n in r.notes)


def test_nanogpts_loss_over_steps_fails_by_the_error_worked_out_by_hand():
    """The reference: the whole update's summed target losses / its 75 targets; nanoGPT's loop: each micro-batch's
    own mean loss / 3. Both computed here from the model's own forward, in eval mode as the check runs."""
    made = _example()["make_setup"]()
    model, batches = made["model"], made["batches"]
    model.eval()
    idx = torch.cat([b["idx"] for b in batches])
    targets = torch.cat([b["targets"] for b in batches])
    logits, _ = model(idx, targets)
    whole = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                              ignore_index=-1, reduction="sum") / int((targets >= 0).sum())
    reference = _flat_grad(model, whole)
    buggy = _flat_grad(model, sum(model(b["idx"], b["targets"])[1] for b in batches) / len(batches))
    expected = float(torch.linalg.vector_norm(buggy - reference) / torch.linalg.vector_norm(reference))
    assert expected > 0.01                                # the micro-batches' target counts differ: a real error

    r = check_accumulation(f"{EXAMPLE}:mean_of_means")
    c = r.checks[0]
    assert r.status == "fail" and c.id == "batch.accumulation_equivalence" and c.status == "fail"
    mine = {v.normalization: v for v in r.variants}["accumulate"]
    assert mine.relative_error == pytest.approx(expected, rel=1e-4)
    assert f"{expected:.2%}" in c.seen


def test_batch_cli_exits_0_on_the_plain_loop_and_1_on_its_loss_over_steps(cli):
    assert cli("batch", f"{EXAMPLE}:make_setup").code == 0
    bad = cli("batch", f"{EXAMPLE}:mean_of_means")
    assert bad.code == 1 and bad.out.startswith("NOT EQUIVALENT")


class ShiftingGPT(torch.nn.Module):
    """A model that takes its targets unshifted (targets = idx) and shifts them in its own loss, nanoGPT-style
    otherwise: the check must read the shift from that loss, the second element of its tuple."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, idx, targets=None):
        x = torch.cumsum(self.embed(idx), dim=1)              # position t sees tokens <= t
        if targets is None:
            return self.head(x[:, [-1]]), None
        logits = self.head(x)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 32), targets[:, 1:].reshape(-1),
                                                 ignore_index=-1)
        return logits, loss


def _shifting_setup(loop):
    def make():
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(4)
        batches = []
        for kept in ((8, 8), (8, 3), (2, 5)):
            idx = torch.randint(0, 32, (2, 8), generator=g)
            targets = idx.clone()
            for row, k in enumerate(kept):
                targets[row, k:] = -1
            batches.append({"idx": idx, "targets": targets})
        return {"model": ShiftingGPT(), "batches": batches, "accumulate": loop,
                "loss": lambda model, batch: model(**batch)[1]}
    return make


def _per_target(model, micro_batches):
    total = sum(int((b["targets"][:, 1:] >= 0).sum()) for b in micro_batches)
    for b in micro_batches:
        _, loss = model(**b)
        (loss * int((b["targets"][:, 1:] >= 0).sum()) / total).backward()


def _over_steps(model, micro_batches):
    for b in micro_batches:
        (model(**b)[1] / len(micro_batches)).backward()


def test_a_model_that_shifts_its_own_targets_is_scored_shifted():
    r = check_accumulation(_shifting_setup(_per_target))
    # after the shift a row keeping k targets counts k - 1: (7 + 7), (7 + 2), (1 + 4)
    assert r.tokens_per_micro_batch == (14, 9, 5) and r.status == "pass"
    assert check_accumulation(_shifting_setup(_over_steps)).status == "fail"


def _plain_model():
    return _example()["GPT"]()


def _ids(rows: int, width: int) -> torch.Tensor:
    return torch.randint(0, 96, (rows, width), generator=torch.Generator().manual_seed(width))


@pytest.mark.parametrize("batches, fragment", [
    ([{"idx": _ids(2, 8), "tgt": _ids(2, 8)}] * 2,
     "none of them a target the model's forward takes (GPT.forward(idx, targets=None)); name the targets' field "
     "'labels'"),
    ([{"idx": _ids(2, 8), "targets": _ids(2, 8), "doc_ids": _ids(2, 8)}] * 2,
     "field 'doc_ids' is not a parameter of the model's forward (GPT.forward(idx, targets=None))"),
    ([{"idx": _ids(2, 8), "targets": _ids(2, 8)}, {"idx": _ids(2, 12), "targets": _ids(2, 12)}],
     "field 'idx' has sequence widths 8, 12 and campaign knows no pad value for it"),
    ([{"idx": _ids(2, 8), "targets": _ids(2, 8).float()}] * 2, "'targets' is float32, not integer class indices"),
])
def test_fields_that_cannot_be_checked_are_one_line_naming_the_field(batches, fragment):
    with pytest.raises(InputError) as e:
        check_accumulation(lambda: {"model": _plain_model(), "batches": batches, "normalization": "token",
                                    "loss": lambda model, batch: model(**batch)[1]})
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_bad_field_through_the_cli_is_exit_2_and_one_line(cli, tmp_path):
    setup = tmp_path / "setup.py"
    setup.write_text(f'''import runpy
import torch

GPT = runpy.run_path({str(EXAMPLE)!r})["GPT"]


def make_setup():
    ids = torch.randint(0, 96, (2, 8))
    return {{"model": GPT(), "batches": [{{"idx": ids, "y_true": ids}}] * 2, "loss": lambda m, b: m(b["idx"])[0].sum()}}
''', encoding="utf-8")
    r = cli("batch", f"{setup}:make_setup", "--normalization", "token")
    assert r.code == 2 and r.err.count("\n") == 1 and "'idx', 'y_true'" in r.err and "'labels'" in r.err, r.err


def test_a_field_with_no_pad_value_passes_when_every_micro_batch_has_one_width():
    """Widths that differ are padded where the value is known (the HF example's four lengths pass in
    test_accumulation.py); a field with no pad value passes when every micro-batch has one width: a per-position
    weight of the same width as idx, taken by a forward that takes **kwargs."""
    GPT = _example()["GPT"]

    class Weighted(GPT):
        def forward(self, idx, targets=None, **kwargs):
            return super().forward(idx, targets)

    def make():
        torch.manual_seed(0)
        batches = [{"idx": _ids(2, 8), "targets": _ids(2, 8).masked_fill(_ids(2, 8) < k, -1),
                    "weight": torch.ones(2, 8)} for k in (0, 30, 60)]
        return {"model": Weighted(), "batches": batches, "normalization": "token",
                "loss": lambda model, batch: model(**batch)[1]}

    r = check_accumulation(make)
    counts = tuple(int((_ids(2, 8) >= k).sum()) for k in (0, 30, 60))
    assert r.status == "pass" and r.tokens_per_micro_batch == counts and len(set(counts)) == 3


def test_campaign_check_takes_the_setups_loss_field_on_the_plain_model(cli):
    """The example's loss(model, batch) is nanoGPT's own loss: one step of it at initialization is near ln(96) (a
    uniform guess over the vocabulary), the step trains every parameter, and the verdict is a go."""
    r = cli("check", f"{EXAMPLE}:make_setup", "--json")
    assert r.code == 0, r.out + r.err
    got = r.json()
    status = {c["id"]: c["status"] for c in got["checks"]}
    assert got["status"] == "pass" and status["step.initial_loss"] == "pass" and status["step.train_mode"] == "pass"
    assert got["loss"] == pytest.approx(4.564, abs=0.1)           # ln 96 = 4.564
