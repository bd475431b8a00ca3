"""The measuring protocol on the CPU (real tensors, real allocation tracking), scripts, and explain."""
from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from campaign.memory import make_workload
from campaign.memory.explain import explain
from campaign.memory.measurement import Environment, Measurement, PhaseMeasurement, load_measurement
from tests.conftest import tiny_llama

torch = pytest.importorskip("torch")
from campaign.memory.measure import MemoryMeter  # noqa: E402
from campaign.memory.protocol import MeasurementFailed, measure_script, measure_workload  # noqa: E402


def test_phases_record_allocated_and_peak_by_hand():
    meter = MemoryMeter("cpu")
    with meter.phase("load"):
        kept = torch.empty(1000, dtype=torch.float32)  # 4000 B -> one 4096 B block
    with meter.phase("work"):
        tmp = torch.empty(2000, dtype=torch.float32)  # 8000 B -> 8192 B, freed before the phase ends
        del tmp
        small = torch.empty(10, dtype=torch.float16)  # 20 B -> 512 B
    load, work = meter.phases
    assert load.peak_allocated_bytes == load.allocated_bytes == 4096
    assert work.peak_allocated_bytes == 4096 + 8192
    assert work.allocated_bytes == 4096 + 512
    assert work.reserved_bytes == work.allocated_bytes and work.device_used_bytes is None
    assert kept.numel() and small.numel()
    m = meter.result(label="hand")
    assert m.peak_phase == "work" and m.environment.device == "cpu" and m.environment.torch == torch.__version__


def test_the_cpu_counter_is_the_allocators_not_the_storage_tracker():
    """A storage made without any tensor op is invisible to a TorchDispatchMode (trace's storage tracker) but is
    memory the CPU allocator hands out: the meter counts it, the tracker does not, so the two are two counts."""
    from campaign.memory.tracker import StorageTracker

    meter, tracker = MemoryMeter("cpu"), StorageTracker()
    with tracker, meter.phase("raw storage"):
        raw = torch.UntypedStorage(10_000)                 # 10,000 B -> 10,240 B in 512 B blocks
    (phase,) = meter.phases
    assert phase.allocated_bytes == phase.peak_allocated_bytes == 10_240
    assert tracker.total == 0 and raw.nbytes() == 10_000


def test_the_cpu_counter_refuses_to_run_inside_another_profiler():
    from campaign.errors import InputError

    meter = MemoryMeter("cpu")
    with torch.profiler.profile(), pytest.raises(InputError, match="profiler, which is already running"):
        with meter.phase("p"):
            pass
    assert meter.phases == []


def test_measure_workload_load_phase_is_the_weights(write_config):
    d = write_config(tiny_llama(), "tiny")
    m = measure_workload(str(d), make_workload(batch=2, seq_len=16), device="cpu")
    assert [p.name for p in m.phases] == ["load", "forward", "backward", "optimizer step"]
    import transformers

    cfg = tiny_llama()
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    model = transformers.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    r512 = lambda n: -(-n // 512) * 512  # noqa: E731
    expected = sum(r512(t.numel() * t.element_size()) for t in [*model.parameters(), *model.buffers()])
    assert m.phases[0].allocated_bytes == expected
    # the optimizer step holds weights + bf16 grads + two AdamW moments at least
    params = sum(r512(p.numel() * 2) for p in model.parameters())
    assert m.phases[-1].peak_allocated_bytes >= 4 * params


def test_measure_loads_a_model_dirs_safetensors(tmp_path):
    """A saved model dir is loaded, not rebuilt: the loaded weights are the saved ones, the load phase holds
    exactly their bytes (each rounded to 512 B), and the record says where they came from."""
    import transformers

    from campaign.memory.build import instantiate, weights_to_load, workload_class_and_config

    cfg = tiny_llama()
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(3)
    saved = transformers.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    d = tmp_path / "saved"
    saved.save_pretrained(d)                                             # config.json + model.safetensors
    w = make_workload(batch=2, seq_len=16)
    import json as _json

    on_disk = _json.loads((d / "config.json").read_text())
    assert weights_to_load(on_disk, d, "auto") == d and weights_to_load(on_disk, d, "random") is None
    cls, conf = workload_class_and_config(transformers, on_disk, w)
    net = instantiate(cls, conf, torch.bfloat16, w, weights_dir=d, device="cpu")
    for (name, a), (_, b) in zip(saved.state_dict().items(), net.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    m = measure_workload(str(d), w, device="cpu", weights="load")
    r512 = lambda n: -(-n // 512) * 512  # noqa: E731
    # transformers reads the file into one buffer that the parameters view: the CPU allocator hands out one block
    # of the file's size (header included), and one per buffer (the rotary frequencies), each rounded to 512 B
    file_bytes = (d / "model.safetensors").stat().st_size
    expected = r512(file_bytes) + sum(r512(t.numel() * t.element_size()) for t in saved.buffers())
    assert m.phases[0].allocated_bytes == expected
    assert m.weights == f"loaded from {d}" and load_measurement(m.save(tmp_path / "m.json")).weights == m.weights


def test_weights_that_cannot_be_loaded_are_refused(tmp_path, write_config):
    from campaign.errors import InputError
    from campaign.memory.build import weights_to_load

    d = write_config(tiny_llama(), "bin-only")
    (d / "pytorch_model.bin").write_bytes(b"not unpickled")
    assert weights_to_load(tiny_llama(), d, "auto") is None              # random weights, the .bin untouched
    with pytest.raises(InputError, match="never unpickled"):
        weights_to_load(tiny_llama(), d, "load")
    with pytest.raises(InputError, match="catalog model"):
        weights_to_load(tiny_llama(), None, "load")
    q = write_config(tiny_llama(quantization_config={"quant_method": "gptq", "bits": 4}), "gptq")
    (q / "model.safetensors").write_bytes(b"")                         # only its presence is looked at
    assert weights_to_load(tiny_llama(quantization_config={}), q, "auto") is None
    with pytest.raises(InputError, match="quantized checkpoint"):
        weights_to_load(tiny_llama(quantization_config={}), q, "load")
    partial = write_config(tiny_llama(), "partial")                    # an HF snapshot with config + index only
    (partial / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-00001-of-00002.safetensors"}}')
    assert weights_to_load(tiny_llama(), partial, "auto") is None
    from campaign.errors import ConfigError

    with pytest.raises(ConfigError, match="not on disk"):
        weights_to_load(tiny_llama(), partial, "load")
    with pytest.raises(InputError, match="unknown weights"):
        weights_to_load(tiny_llama(), d, "pretrained")
    m = measure_workload(str(d), make_workload(mode="infer", batch=1, seq_len=8), device="cpu")
    assert m.weights == "random (from the config)"


def test_saved_measurement_round_trips(tmp_path, write_config):
    d = write_config(tiny_llama(), "tiny")
    m = measure_workload(str(d), make_workload(mode="infer", batch=1, seq_len=16), device="cpu")
    path = m.save(tmp_path / "m.json")
    again = load_measurement(path)
    assert again.to_dict() == json.loads(json.dumps(m.to_dict()))
    assert [p.name for p in again.phases] == ["load", "prefill", "decode"]


SCRIPT = """
import torch, campaign
meter = campaign.current_meter()
with meter.phase("load"):
    w = torch.empty(256, 256)
with meter.phase("forward"):
    x = torch.empty(512, 256)
    {crash}
"""


def test_script_with_phases(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(crash="pass"))
    m = measure_script(path, device="cpu")
    assert [p.name for p in m.phases] == ["load", "forward"]
    assert m.phases[1].peak_allocated_bytes == 256 * 256 * 4 + 512 * 256 * 4


def test_script_without_phases_is_one_phase(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text("import torch\na = torch.empty(1024)\nb = torch.empty(2048)\ndel b\n")
    m = measure_script(path, device="cpu")
    assert [p.name for p in m.phases] == ["script"] and m.phases[0].peak_allocated_bytes == 4096 + 8192


def test_crashing_script_reports_its_phase_and_keeps_the_record(cli, tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(SCRIPT.format(crash="raise ValueError('shape mismatch')"))
    with pytest.raises(MeasurementFailed) as info:
        measure_script(path, device="cpu")
    assert info.value.measurement.failed_phase == "forward"
    out = tmp_path / "m.json"
    r = cli("measure", "--script", str(path), "--device", "cpu", "--out", str(out))
    assert r.code == 1 and "failed in phase 'forward'" in r.err and "Traceback" not in r.err
    saved = json.loads(out.read_text())
    assert saved["outcome"] == "failed" and saved["status"] == "fail" and saved["failed_phase"] == "forward"
    # the phase that failed is kept, marked incomplete, with the peak it reached before the error
    assert [(p["name"], p["complete"]) for p in saved["phases"]] == [("load", True), ("forward", False)]
    assert saved["phases"][1]["peak_allocated_bytes"] == 256 * 256 * 4 + 512 * 256 * 4


def test_script_arguments_reach_the_script(cli, tmp_path):
    path = tmp_path / "args.py"
    seen = tmp_path / "argv.json"
    path.write_text(f"import pathlib, json, sys\npathlib.Path({str(seen)!r}).write_text(json.dumps(sys.argv[1:]))\n")
    r = cli("measure", "--script", str(path), "--device", "cpu", "--", "--lr", "1e-4", "--epochs", "2")
    assert r.code == 0, r.err
    assert json.loads(seen.read_text()) == ["--lr", "1e-4", "--epochs", "2"]


def test_a_model_that_fails_in_its_forward_is_reported_with_the_phase(cli, tmp_path, write_config):
    """GPT-2 has learned positions: a context past n_positions fails inside the forward (as an OOM would)."""
    cfg = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=32, n_layer=2, n_head=2, n_positions=16,
               vocab_size=100)
    d = write_config(cfg, "short-gpt2")
    with pytest.raises(MeasurementFailed) as info:
        measure_workload(str(d), make_workload(batch=2, seq_len=32), device="cpu")
    m = info.value.measurement
    assert m.outcome == "failed" and m.failed_phase == "forward" and m.error.startswith("IndexError")
    assert [(p.name, p.complete) for p in m.phases] == [("load", True), ("forward", False)]
    out = tmp_path / "m.json"
    r = cli("measure", str(d), "--batch", "2", "--seq-len", "32", "--device", "cpu", "--out", str(out))
    assert r.code == 1 and "failed in phase 'forward': IndexError" in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert load_measurement(out).failed_phase == "forward"


def test_a_frozen_model_is_measured_as_a_forward_without_autograd(write_config):
    d = write_config(tiny_llama(), "tiny")
    m = measure_workload(str(d), make_workload(method="frozen", batch=2, seq_len=16), device="cpu")
    assert [p.name for p in m.phases] == ["load", "forward"]
    # the bf16 logits and their fp32 upcast are alive together at the loss
    assert m.phases[1].peak_allocated_bytes - m.phases[0].allocated_bytes >= 2 * 16 * 1000 * (2 + 4)


def test_the_meter_lets_the_model_go(write_config):
    """A notebook measures several workloads in one process: nothing of a measured model may stay alive."""
    import gc

    d = write_config(tiny_llama(vocab_size=1237), "tiny")       # a shape no other test builds
    measure_workload(str(d), make_workload(batch=2, seq_len=16), device="cpu")
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is torch.nn.Parameter and tuple(o.shape) == (1237, 64)]
    assert alive == []


def _measurement(peaks: dict[str, int], device_used: int | None = None, reserved_extra: int = 0) -> Measurement:
    env = Environment("cuda" if device_used else "cpu", "test", None, "x", None, None, None, "3", "linux")
    phases = tuple(PhaseMeasurement(n, b, b, b + reserved_extra, b + reserved_extra, device_used, 0.1)
                   for n, b in peaks.items())
    return Measurement(phases, env, label="t")


MiB = 2**20


def made_estimate(phases: dict[str, int], reserved: int, device: int, method: str = "formula", **workload):
    """An estimate with round figures in MiB: one item per phase, the headline figures given."""
    from campaign.memory.breakdown import Item, MemoryEstimate, Phase

    rows = tuple(Phase(n, (Item(n, b * MiB, "", "activations"),)) for n, b in phases.items())
    peak = max(rows, key=lambda p: p.bytes)
    return MemoryEstimate(model="", workload=make_workload(**workload), params=0, trainable_params=0, phases=rows,
                          peak_phase=peak.name, items=peak.items, peak_allocated_bytes=max(phases.values()) * MiB,
                          peak_reserved_bytes=reserved * MiB, device_bytes=device * MiB,
                          required_bytes=device * MiB * 11 // 10, reserve_bytes=device * MiB // 10, method=method)


def made_measurement(phases: dict[str, int], reserved: int, device: int, **workload) -> Measurement:
    env = Environment("cuda", "test card", None, "x", "12.8", None, None, "3", "linux")
    rows = tuple(PhaseMeasurement(n, b * MiB, b * MiB, reserved * MiB, reserved * MiB, device * MiB, 0.1)
                 for n, b in phases.items())
    return Measurement(rows, env, label="t", workload=make_workload(**workload).to_dict() if workload else None)


ESTIMATED = {"load": 1000, "forward": 2000, "backward": 3000, "optimizer step": 2500}


def test_explain_attributes_the_gap_and_sizes_the_margin_by_hand():
    from campaign import find_card

    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    # backward 10% over the estimate; reserved - allocated 400 (estimated 300); context 670 (estimated 500)
    measured = made_measurement({**ESTIMATED, "backward": 3300}, reserved=3700, device=4370)
    card = find_card("l4")
    cards = [replace(card, name="exact", memory_bytes=4560 * MiB),
             replace(card, name="between", memory_bytes=4400 * MiB),
             replace(card, name="small", memory_bytes=4000 * MiB)]
    e = explain(analytic, measured, cards=cards)
    gaps = {g.name.split(" (")[0]: g.bytes // MiB for g in e.gaps}
    assert gaps == {"tensors at the peak": 300, "allocator fragmentation": 100, "CUDA context and libraries": 170}
    assert e.gap_bytes == (4370 - 3800) * MiB                      # the parts sum to the device gap
    # worst excess: the device, 4370 / 3800 = +15% (backward +10%), + 5 points -> 20%
    assert e.margin == 0.20 and "15%" in e.margin_reason
    assert e.planned_device_bytes == 3800 * MiB * 12 // 10          # the estimate x (1 + margin)
    assert [v for _c, _m, v in e.verdicts] == ["fits", "tight", "does not fit"]
    # an excess of exactly 10% is a 10% excess (not 11% from float noise: 3300 / 3000 - 1 = 0.10000000000000009)
    exact = explain(analytic, made_measurement({**ESTIMATED, "backward": 3300}, reserved=3600, device=3800))
    assert exact.margin == 0.15


def test_a_trace_splits_the_tensors_gap():
    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    traced = made_estimate({**ESTIMATED, "backward": 3200}, reserved=3450, device=3950, method="traced")
    e = explain(analytic, made_measurement({**ESTIMATED, "backward": 3300}, reserved=3700, device=4370), traced=traced)
    gaps = {g.name.split(" (")[0]: g.bytes // MiB for g in e.gaps}
    assert gaps["activation model"] == 200 and gaps["workspaces and GPU kernels"] == 100
    assert e.gap_bytes == (4370 - 3800) * MiB
    assert [r.traced_bytes // MiB for r in e.rows] == [1000, 2000, 3200, 2500]


def test_explain_refuses_another_workload_and_gives_no_margin_from_a_failed_run():
    from campaign.errors import InputError

    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800, batch=64, seq_len=256)
    with pytest.raises(InputError, match="batch 2 vs 64; seq-len 32 vs 256"):
        explain(analytic, made_measurement(ESTIMATED, reserved=3300, device=3800, batch=2, seq_len=32))
    ok = made_measurement({"load": 1000, "forward": 2000}, reserved=3300, device=3800, batch=64, seq_len=256)
    failed = Measurement(ok.phases, ok.environment, "t", ok.workload, "failed", "backward", "OutOfMemoryError: CUDA")
    e = explain(analytic, failed)
    assert e.margin is None and e.planned_device_bytes is None and e.verdicts == ()
    assert any("failed in phase 'backward'" in n for n in e.notes)


def test_cli_explain_on_a_cpu_measurement(cli, tmp_path, write_config):
    d = write_config(tiny_llama(), "tiny")
    out = tmp_path / "m.json"
    r = cli("measure", str(d), "--batch", "2", "--seq-len", "16", "--device", "cpu", "--out", str(out))
    assert r.code == 0, r.err
    r = cli("explain", str(d), "--batch", "2", "--seq-len", "16", "--measured", str(out), "--trace", "--json")
    assert r.code == 0, r.err
    e = json.loads(r.out)
    measured = json.loads(out.read_text())
    analytic = json.loads(cli("memory", str(d), "--batch", "2", "--seq-len", "16", "--json").out)
    traced = json.loads(cli("trace", str(d), "--batch", "2", "--seq-len", "16", "--json").out)
    # on the CPU the gap is in the tensors only, split at the traced peak: each part against the three records
    # (the formula, the trace on fake tensors, the CPU allocator's count), obtained here independently of explain
    gaps = {g["name"].split(" (")[0]: g["bytes"] for g in e["gaps"]}
    assert gaps == {"activation model": traced["peak_allocated_bytes"] - analytic["peak_allocated_bytes"],
                    "workspaces and GPU kernels": measured["peak_allocated_bytes"] - traced["peak_allocated_bytes"]}
    assert e["margin"] >= 0.05
    r = cli("explain", str(d), "--batch", "4", "--seq-len", "16", "--measured", str(out))
    assert r.code == 2 and "another workload" in r.err and "batch 2 vs 4" in r.err and "Traceback" not in r.err


def test_explain_rejects_unrelated_phases():
    from campaign import estimate_memory
    from campaign.errors import InputError

    with pytest.raises(InputError, match="no measured phase matches"):
        explain(estimate_memory("gpt2", make_workload()), _measurement({"warmup": 10}))


class _FakeCuda:
    """A stand-in for torch.cuda's allocator counters (no GPU in CI): bytes allocated now and the peak since the
    last reset, as the caching allocator keeps them; `sticky` makes synchronize fail like a crashed kernel."""

    def __init__(self) -> None:
        self.allocated = self.peak = 0
        self.resets = 0
        self.sticky = False

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def free(self, n: int) -> None:
        self.allocated -= n

    def synchronize(self) -> None:
        if self.sticky:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def reset_peak_memory_stats(self) -> None:
        self.resets += 1
        self.peak = self.allocated

    def mem_get_info(self) -> tuple[int, int]:
        if self.sticky:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 10_000 - self.allocated - 500, 10_000  # 500 B of context

    def memory_allocated(self) -> int:
        return self.allocated

    def max_memory_allocated(self) -> int:
        return self.peak

    memory_reserved = memory_allocated
    max_memory_reserved = max_memory_allocated


def _gpu_meter() -> tuple[MemoryMeter, _FakeCuda]:
    from types import SimpleNamespace

    from campaign.memory.measure import _CudaCounters

    meter, cuda = MemoryMeter("cpu"), _FakeCuda()
    meter._backend = _CudaCounters(SimpleNamespace(cuda=cuda))
    return meter, cuda


def test_on_the_gpu_path_a_run_with_phases_adds_none_and_a_crash_keeps_its_phase():
    meter, cuda = _gpu_meter()
    with meter.around("script"):
        with meter.phase("load"):
            cuda.alloc(1000)
        with meter.phase("forward"):
            cuda.alloc(3000)
            cuda.free(3000)
    assert [(p.name, p.peak_allocated_bytes, p.allocated_bytes) for p in meter.phases] == [
        ("load", 1000, 1000), ("forward", 4000, 1000)]
    assert meter.phases[1].device_used_bytes == 1500 and cuda.resets == 3
    meter, cuda = _gpu_meter()
    with meter.around("script"):
        cuda.alloc(2000)
        cuda.free(1500)
    assert [(p.name, p.peak_allocated_bytes) for p in meter.phases] == [("script", 2000)]
    meter, cuda = _gpu_meter()
    with pytest.raises(RuntimeError), meter.around("script"):
        with meter.phase("load"):
            cuda.alloc(1000)
        with meter.phase("forward"):
            cuda.alloc(700)
            cuda.sticky = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    failed = meter.phases[-1]
    assert (failed.name, failed.complete, failed.peak_allocated_bytes, failed.device_used_bytes) == (
        "forward", False, 1700, None)
    assert meter.failure(RuntimeError("x")).failed_phase == "forward"


def test_phases_do_not_nest_and_sys_exit_0_completes(tmp_path):
    from campaign.errors import InputError

    meter = MemoryMeter("cpu")
    with pytest.raises(InputError, match="do not nest"), meter.phase("outer"), meter.phase("inner"):
        pass
    assert meter.current is None
    path = tmp_path / "exits.py"
    path.write_text("import sys, torch, campaign\nwith campaign.current_meter().phase('load'):\n"
                    "    w = torch.empty(100)\n    sys.exit(0)\n")
    m = measure_script(path, device="cpu")
    assert m.outcome == "ok" and [(p.name, p.complete) for p in m.phases] == [("load", True)]


def test_explain_a_script_without_phases_and_refuse_other_records():
    from campaign.errors import InputError

    analytic = made_estimate(ESTIMATED, reserved=3300, device=3800)
    env = Environment("cuda", "test card", None, "x", "12.8", None, None, "3", "linux")
    script = Measurement((PhaseMeasurement("script", 500 * MiB, 3150 * MiB, 3500 * MiB, 3500 * MiB, 4000 * MiB,
                                           9.0),), env, label="train.py")
    e = explain(analytic, script)
    assert [(r.analytic_bytes // MiB, r.measured_bytes // MiB) for r in e.rows] == [(3000, 3150)]
    assert e.margin == 0.11                  # device 4000 / 3800 = +5.3% -> 6%, + 5 points
    other = Measurement(script.phases, env, label="gpt2", workload=make_workload().to_dict())
    analytic = replace(analytic, model="tiny")
    with pytest.raises(InputError, match="'gpt2', the estimate of 'tiny'"):
        explain(analytic, other)
    with pytest.raises(InputError, match="campaign trace --json"):
        explain(analytic, script, traced=analytic)


def test_configs_transformers_cannot_build_are_refused_before_running(write_config):
    from campaign.errors import ConfigError
    from campaign.memory.trace import trace_memory

    unknown = write_config(tiny_llama(architectures=["LlamaForCausalLMX"]), "unknown-class")
    broken = write_config(tiny_llama(rope_scaling={"rope_type": "nonsense", "factor": 2.0}), "broken-rope")
    w = make_workload(batch=1, seq_len=8)
    for d, message in ((unknown, "has no class 'LlamaForCausalLMX'"), (broken, "cannot build LlamaForCausalLM")):
        with pytest.raises(ConfigError, match=message):
            trace_memory(str(d), w)
        with pytest.raises(ConfigError, match=message):
            measure_workload(str(d), w, device="cpu")


def test_driver_version_from_the_files_the_drivers_publish(tmp_path):
    from campaign.memory.measure import driver_version

    proprietary = tmp_path / "nvidia"
    proprietary.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                           "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    open_module = tmp_path / "nvidia-open"
    open_module.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
                           "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\n")
    amd = tmp_path / "amdgpu" / "version"
    amd.parent.mkdir()
    amd.write_text("6.8.5\n")
    missing = tmp_path / "absent"
    assert driver_version((missing, proprietary)) == "535.104.05"
    assert driver_version((open_module,)) == "560.35.03"
    assert driver_version((missing, amd)) == "amdgpu 6.8.5"
    assert driver_version((missing,)) is None


def test_without_torch_trace_and_measure_name_the_extra(cli, monkeypatch, write_config, tmp_path):
    d = write_config(tiny_llama(), "tiny")
    m = made_measurement(ESTIMATED, reserved=3300, device=3800).save(tmp_path / "m.json")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if the torch extra were not installed
    for args in (("trace", str(d)), ("measure", str(d), "--device", "cpu"),
                 ("explain", str(d), "--measured", str(m), "--trace")):
        r = cli(*args)
        assert r.code == 2 and "pip install 'campaign[torch]'" in r.err and "Traceback" not in r.err, args
