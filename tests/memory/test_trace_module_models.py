"""campaign trace FILE.py:FACTORY on the models users rent cards for (a ResNet-50, a ViT, a diffusion UNet): each
phase's traced peak within 5% of a measurement of the same step with real tensors on the CPU.

The measurement shares no code with the tracer: it runs the factory's real model, batch, loss and optimizer for the
same two steps under torch's own profiler (torch.profiler with profile_memory=True), which records every
allocation and free of PyTorch's CPU allocator with its size and time. The live bytes start from the tensors alive
before the profile (the parameters, buffers and the batch, summed here from their storages), each allocation and
free is added in order, and a phase's peak is the highest level inside its record_function range (the second
step's forward with its loss, backward and optimizer.step(), as the trace reports). Sizes are counted in the CUDA
caching allocator's 512-byte blocks on both sides, the unit campaign reports. The optimizers are built with
foreach=True, the path torch takes on a card (the CPU would take the per-tensor loop by default).

transformers' ResNet-50 stands for torchvision's: the same network (bottleneck blocks [3, 4, 6, 3], stride in the
3x3 convolution, v1.5), with torchvision's published count of 25,557,032 parameters checked below. torchvision's
PyPI wheels are CUDA builds whose import fails against the CPU torch of this project's machines; the torchvision
test runs where it imports.
"""
from __future__ import annotations

import runpy
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from campaign.memory.trace_module import plan_module  # noqa: E402
from campaign.train.setup import Setup  # noqa: E402

TOLERANCE = 0.05
PHASES = ("load", "forward", "backward", "optimizer step")

SETUPS = """
import torch

def _hf_loss(model, batch):
    return model(**batch).loss

def resnet50():
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    model = ResNetForImageClassification(ResNetConfig(num_labels=1000))   # ResNetConfig() is ResNet-50
    batch = {"pixel_values": torch.randn(2, 3, 64, 64), "labels": torch.randint(0, 1000, (2,))}
    return {"model": model, "batches": [batch], "loss": _hf_loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)}

def vit():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=64, patch_size=8, hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                       intermediate_size=768, num_labels=10)
    model = ViTForImageClassification(config)
    batch = {"pixel_values": torch.randn(2, 3, 64, 64), "labels": torch.randint(0, 10, (2,))}
    return {"model": model, "batches": [batch], "loss": _hf_loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)}

def unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    model = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                        block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                        up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
    batch = {"sample": torch.randn(2, 3, 32, 32), "timestep": torch.tensor([10, 500]),
             "noise": torch.randn(2, 3, 32, 32)}

    def loss(model, b):   # the denoising loss: predict the noise
        return torch.nn.functional.mse_loss(model(b["sample"], b["timestep"]).sample, b["noise"])

    return {"model": model, "batches": [batch], "loss": loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)}

def torchvision_resnet50():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    batch = {"x": torch.randn(2, 3, 64, 64), "y": torch.randint(0, 1000, (2,))}

    def loss(model, b):
        return torch.nn.functional.cross_entropy(model(b["x"]), b["y"])

    return {"model": model, "batches": [batch], "loss": loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)}
"""


def r512(n: int) -> int:
    return -(-n // 512) * 512


def measured_peaks(made: dict) -> dict[str, int]:
    """The same two steps with real CPU tensors; per phase, the peak of PyTorch's CPU allocator's live bytes in
    512-byte blocks, from torch.profiler's memory events (see the module's docstring)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    model, batch, loss_fn, optimizer = made["model"], made["batches"][0], made["loss"], made["optimizer"]
    alive = {}
    for t in [*model.parameters(), *model.buffers(), *(v for v in batch.values() if isinstance(v, torch.Tensor))]:
        alive[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    start = sum(r512(n) for n in alive.values())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for step in range(2):
            with record_function(f"forward {step}"):
                loss = loss_fn(model, batch)
            with record_function(f"backward {step}"):
                loss.backward()
                del loss
            with record_function(f"optimizer step {step}"):
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    events = list(prof.profiler.kineto_results.events())
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    ranges = {e.name()[:-2]: (e.start_ns(), e.start_ns() + e.duration_ns()) for e in events
              if e.name() in ("forward 1", "backward 1", "optimizer step 1")}
    blocks = [(t, r512(n) if n > 0 else -r512(-n)) for t, n in memory]
    peaks = {"load": start}
    for name, (begin, end) in ranges.items():
        level = start + sum(d for t, d in blocks if t < begin)   # live when the phase begins
        peak = level
        for t, d in blocks:
            if begin <= t <= end:
                level += d
                peak = max(peak, level)
        peaks[name] = peak
    return peaks


@pytest.fixture(scope="module")
def setups_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models_setup.py"
    path.write_text(textwrap.dedent(SETUPS))
    return path


def _compare(setups_file, factory: str, params: int | None = None) -> dict[str, tuple[int, int]]:
    made = runpy.run_path(str(setups_file))[factory]()   # one build: the trace leaves the model untouched
    traced = {p.name: p.bytes for p in plan_module(Setup(**made, source=factory)).estimate.phases}
    if params is not None:
        assert sum(p.numel() for p in made["model"].parameters()) == params
    measured = measured_peaks(made)
    table = {name: (traced[name], measured[name]) for name in PHASES}
    for name, (t, m) in table.items():
        assert abs(t - m) <= TOLERANCE * m, f"{factory} {name}: traced {t:,} B, measured {m:,} B"
    return table


def test_resnet50_phases_match_a_cpu_measurement(setups_file):
    _compare(setups_file, "resnet50", params=25_557_032)   # torchvision's published count for ResNet-50


def test_vit_phases_match_a_cpu_measurement(setups_file):
    _compare(setups_file, "vit")


def test_diffusion_unet_phases_match_a_cpu_measurement(setups_file):
    pytest.importorskip("diffusers")
    _compare(setups_file, "unet")


def test_torchvision_resnet50_phases_match_a_cpu_measurement(setups_file):
    try:
        import torchvision  # noqa: F401
    except Exception as e:   # a CUDA wheel against a CPU torch raises RuntimeError, not ImportError
        pytest.skip(f"torchvision does not import here: {type(e).__name__}")
    _compare(setups_file, "torchvision_resnet50", params=25_557_032)
