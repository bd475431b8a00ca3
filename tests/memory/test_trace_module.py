"""campaign trace FILE.py:FACTORY: the user's own nn.Module traced on fake tensors. Bytes worked out by hand from
the parameter shapes; the planted ops that cannot run without data are named with the module that called them."""
from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")

from campaign.errors import InputError  # noqa: E402
from campaign.memory.trace_module import plan_module  # noqa: E402
from campaign.train.setup import Setup  # noqa: E402

NET = """
import torch

class Net(torch.nn.Module):
    def __init__(self, gate=None):
        super().__init__()
        self.stem = torch.nn.Linear(64, 256)
        self.act = torch.nn.GELU()
        self.gate = gate or torch.nn.Identity()
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.gate(self.act(self.stem(x))))

def loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])

def setup(gate=None):
    torch.manual_seed(0)
    m = Net(gate)
    return {"model": m, "batches": [{"x": torch.randn(8, 64), "y": torch.randint(0, 10, (8,))}], "loss": loss,
            "optimizer": torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, foreach=True)}

def bare():
    return Net()

class NonzeroGate(torch.nn.Module):
    def forward(self, h):
        rows = torch.nonzero(h[:, 0] > 0).squeeze(1)   # the rows kept depend on the values
        return h[rows]

class ItemGate(torch.nn.Module):
    def forward(self, h):
        return h * 2 if h.mean().item() > 0 else h     # Python control flow on a value

def nonzero():
    return setup(NonzeroGate())

def item():
    return setup(ItemGate())
"""


def r512(n: int) -> int:
    """The CUDA caching allocator's block: every allocation is a multiple of 512 bytes."""
    return -(-n // 512) * 512


# by hand, fp32: stem weight 256 x 64, bias 256; head weight 10 x 256, bias 10
WEIGHTS = r512(256 * 64 * 4) + r512(256 * 4) + r512(10 * 256 * 4) + r512(10 * 4)   # 77,312 B
BATCH = r512(8 * 64 * 4) + r512(8 * 8)                                              # x fp32, y int64


@pytest.fixture
def net_file(tmp_path):
    path = tmp_path / "my_setup.py"
    path.write_text(textwrap.dedent(NET))
    return path


def _items(phase) -> dict[str, int]:
    return {i.name: i.bytes for i in phase.items}


def test_a_custom_module_is_traced_with_its_own_optimizer(net_file):
    plan = plan_module(f"{net_file}:setup")
    phases = {p.name: p for p in plan.estimate.phases}
    assert list(phases) == ["load", "forward", "backward", "optimizer step"]
    assert _items(phases["load"]) == {"weights": WEIGHTS, "activations": BATCH}
    fwd = _items(phases["forward"])
    # SGD with momentum: one buffer per parameter, alive from the first step on, as large as the weights
    assert fwd["weights"] == WEIGHTS and fwd["optimizer states"] == WEIGHTS
    # the forward keeps at least the stem's output and the GELU's (8 x 256 fp32 each) besides the batch
    assert fwd["activations"] >= BATCH + 2 * r512(8 * 256 * 4)
    assert _items(phases["optimizer step"])["gradients"] == WEIGHTS
    assert plan.estimate.params == 64 * 256 + 256 + 256 * 10 + 10
    assert plan.estimate.trainable_params == plan.estimate.params
    assert plan.optimizer == "torch.optim.sgd.SGD"
    assert plan.inputs == (("x", "8 x 64 float32"), ("y", "8 int64"))
    assert plan.estimate.workload.optimizer == "sgd" and plan.estimate.workload.batch == 8


def test_frozen_parameters_get_no_gradient_or_state(net_file):
    namespace: dict = {}
    exec(compile(net_file.read_text(), str(net_file), "exec"), namespace)
    made = namespace["setup"]()
    made["model"].stem.requires_grad_(False)
    made["optimizer"] = torch.optim.SGD([p for p in made["model"].parameters() if p.requires_grad], lr=0.1,
                                        momentum=0.9, foreach=True)
    plan = plan_module(Setup(**made, source="frozen stem"))
    head = r512(10 * 256 * 4) + r512(10 * 4)
    step = _items(next(p for p in plan.estimate.phases if p.name == "optimizer step"))
    assert step["gradients"] == head and step["optimizer states"] == head
    assert plan.estimate.trainable_params == 256 * 10 + 10


def test_the_users_module_is_left_untouched(net_file):
    namespace: dict = {}
    exec(compile(net_file.read_text(), str(net_file), "exec"), namespace)
    made = namespace["setup"]()
    before = {k: v.clone() for k, v in made["model"].state_dict().items()}
    plan_module(Setup(**made, source="mine"))
    after = made["model"].state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # real tensors still, values unchanged
    assert made["optimizer"].state == {}    # the user's optimizer never stepped


@pytest.mark.parametrize("factory, op", [("nonzero", "torch.nonzero"), ("item", "Tensor.item()")])
def test_an_op_that_needs_the_data_is_named_with_its_module(net_file, cli, factory, op):
    r = cli("trace", f"{net_file}:{factory}")
    assert r.code == 2
    line = r.err.strip().removeprefix("campaign: error: ")
    assert "\n" not in line and "Traceback" not in r.err
    gate = {"nonzero": "NonzeroGate", "item": "ItemGate"}[factory]
    assert f"{op} (aten." in line and f"the module Net.gate ({gate})" in line


def test_a_correct_setup_traces_without_an_alarm(net_file, cli):
    r = cli("trace", f"{net_file}:setup", "--card", "rtx-4090", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["status"] == "pass" and out["method"] == "traced"
    assert out["module"]["class"].endswith("Net") and out["module"]["optimizer"] == "torch.optim.sgd.SGD"
    assert [p["name"] for p in out["phases"]] == ["load", "forward", "backward", "optimizer step"]


def test_a_card_too_small_fails(net_file, cli):
    r = cli("trace", f"{net_file}:setup", "--card", "0.4GiB")   # the CUDA context alone takes 500 MiB
    assert r.code == 1


def test_a_bare_module_is_refused_in_one_line(net_file, cli):
    r = cli("trace", f"{net_file}:bare")
    assert r.code == 2
    assert "returned a bare Net" in r.err and "'batches': [batch]" in r.err and r.err.count("\n") == 1


def test_options_of_a_built_model_are_refused(net_file, cli):
    r = cli("trace", f"{net_file}:setup", "--seq-len", "512")
    assert r.code == 2 and "--seq-len does not apply to your own model" in r.err
    assert cli("trace", f"{net_file}:setup", "--expandable-segments").code == 0


def test_a_missing_factory_is_one_line(net_file, cli):
    r = cli("trace", f"{net_file}:nothing_here")
    assert r.code == 2 and "no function 'nothing_here'" in r.err


def test_a_user_optimizer_is_rebuilt_with_its_settings(net_file):
    namespace: dict = {}
    exec(compile(net_file.read_text(), str(net_file), "exec"), namespace)
    made = namespace["setup"]()
    made["optimizer"] = torch.optim.Adam(made["model"].parameters(), lr=1e-3, foreach=True)
    plan = plan_module(Setup(**made, source="adam"))
    step = _items(next(p for p in plan.estimate.phases if p.name == "optimizer step"))
    assert step["optimizer states"] == 2 * WEIGHTS   # exp_avg and exp_avg_sq; the step counters stay on the host
    assert plan.optimizer == "torch.optim.adam.Adam"


def test_an_optimizer_over_foreign_tensors_is_refused(net_file):
    namespace: dict = {}
    exec(compile(net_file.read_text(), str(net_file), "exec"), namespace)
    made = namespace["setup"]()
    made["optimizer"] = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    with pytest.raises(InputError, match="not parameters of the model"):
        plan_module(Setup(**made, source="foreign"))
