"""The user's code calling sys.exit / exit() inside check, batch, inspect and quant: exit 2 with one line naming it,
whatever code it exited with. exit(0) used to make the command exit 0 with no output, so a CI step
`campaign check setup.py:make && train` went ahead; exit(5) exited 5. Ctrl-C stays the user's interrupt (130)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

COMMANDS = ("check", "batch", "inspect", "quant")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("code", ["0", "5", "None", "'bye'"])
def test_a_factory_that_exits_is_exit_2_naming_it(cli, tmp_path, command, code):
    path = tmp_path / "setup.py"
    path.write_text(f"import sys\n\ndef make():\n    sys.exit({code})\n")
    r = cli(command, f"{path}:make")
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.out == ""
    assert f"{path}:make called exit(" in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_a_setup_file_that_exits_while_loading_is_exit_2(cli, tmp_path, command):
    path = tmp_path / "setup.py"
    path.write_text("raise SystemExit(0)\n\ndef make():\n    return {}\n")
    r = cli(command, f"{path}:make")
    assert r.code == 2 and f"{path} called exit(0) while loading" in r.err


@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_in_the_factory_is_the_users_interrupt_not_swallowed(cli, tmp_path, command):
    path = tmp_path / "setup.py"
    path.write_text("def make():\n    raise KeyboardInterrupt\n")
    r = cli(command, f"{path}:make")
    assert r.code == 130 and "error" not in r.err   # the interrupt, as Ctrl-C anywhere else


LOSS_EXITS = '''
import sys
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10)

    def forward(self, input_ids, labels=None):
        return {"logits": self.out(self.embed(input_ids))}


def make():
    torch.manual_seed(0)
    model = Model()
    batches = [{"input_ids": torch.tensor([[1, 2, 3], [4, 5, 6]]), "labels": torch.tensor([[1, 2, 3], [4, 5, 6]])}
               for _ in range(2)]

    def loss(m, b):
        sys.exit(0)

    def accumulate(m, micro_batches):
        sys.exit(0)

    return {"model": model, "batches": batches, "loss": loss, "accumulate": accumulate,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
'''


@pytest.mark.parametrize("command", ["check", "batch"])
def test_a_loss_that_exits_0_while_the_command_runs_it_is_exit_2(cli, tmp_path, command):
    path = tmp_path / "setup.py"
    path.write_text(LOSS_EXITS)
    r = cli(command, f"{path}:make", *(["--no-resume"] if command == "check" else []))
    assert r.code == 2, (r.code, r.out, r.err)
    assert f"{path}:make called exit(0) while campaign ran it" in r.err


def test_a_collate_that_exits_is_exit_2(cli, tmp_path):
    path = tmp_path / "setup.py"
    path.write_text("import sys\n\ndef make():\n    return {'dataset': [{'text': 'a'}], 'collate': lambda xs: "
                    "sys.exit(0), 'tokenizer': None}\n")
    r = cli("inspect", f"{path}:make")
    assert r.code == 2, (r.code, r.out, r.err)
    assert "called exit(0)" in r.err
