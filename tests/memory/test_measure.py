"""The measuring protocol on the CPU (real tensors, real allocation tracking), scripts, and explain."""
from __future__ import annotations

import json

import pytest

from campaign.memory import make_workload
from campaign.memory.explain import explain
from campaign.memory.measure import Environment, Measurement, PhaseMeasurement, load_measurement
from tests.conftest import tiny_llama

torch = pytest.importorskip("torch")
from campaign.memory.measure import MemoryMeter  # noqa: E402
from campaign.memory.protocol import ScriptFailed, measure_script, measure_workload  # noqa: E402


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

    from campaign.memory.build import instantiate, model_class_and_config, weights_to_load

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
    cls, conf = model_class_and_config(transformers, on_disk, w)
    net = instantiate(cls, conf, torch.bfloat16, w, weights_dir=d, device="cpu")
    for (name, a), (_, b) in zip(saved.state_dict().items(), net.state_dict().items()):
        assert torch.equal(a, b), name
    m = measure_workload(str(d), w, device="cpu", weights="load")
    r512 = lambda n: -(-n // 512) * 512  # noqa: E731
    expected = sum(r512(t.numel() * t.element_size()) for t in [*saved.parameters(), *saved.buffers()])
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
    with pytest.raises(ScriptFailed) as info:
        measure_script(path, device="cpu")
    assert info.value.measurement.failed_phase == "forward"
    out = tmp_path / "m.json"
    r = cli("measure", "--script", str(path), "--device", "cpu", "--out", str(out))
    assert r.code == 2 and "failed in phase 'forward'" in r.err and "Traceback" not in r.err
    saved = json.loads(out.read_text())
    assert saved["status"] == "failed" and [p["name"] for p in saved["phases"]] == ["load"]


def _measurement(peaks: dict[str, int], device_used: int | None = None, reserved_extra: int = 0) -> Measurement:
    env = Environment("cuda" if device_used else "cpu", "test", None, "x", None, None, None, "3", "linux")
    phases = tuple(PhaseMeasurement(n, b, b, b + reserved_extra, b + reserved_extra, device_used, 0.1)
                   for n, b in peaks.items())
    return Measurement(phases, env, label="t")


def test_explain_margin_and_gaps_by_hand():
    from campaign import plan_memory

    est = plan_memory("gpt2", batch=4, seq_len=512)
    by_phase = {p.name: p.bytes for p in est.phases}
    measured = {n: b for n, b in by_phase.items()}
    measured["backward"] = int(by_phase["backward"] * 1.12)  # the model under-estimates backward by 12%
    gib = 2**30
    m = _measurement(measured, device_used=est.device_bytes + gib, reserved_extra=gib // 2)
    e = explain(est, m)
    device_excess = (est.device_bytes + gib) / est.device_bytes - 1
    worst = max(0.12, device_excess)
    assert e.margin == pytest.approx(-(-round(worst * 10000) // 100) / 100 + 0.05, abs=0.011)
    gaps = {g.name.split(" (")[0]: g for g in e.gaps}
    assert gaps["allocator fragmentation"].measured_bytes == gib // 2
    assert gaps["tensors at the peak"].measured_bytes == max(measured.values())
    assert e.planned_device_bytes == int((est.device_bytes + gib) * (1 + e.margin))


def test_explain_rejects_unrelated_phases():
    from campaign import plan_memory
    from campaign.errors import InputError

    with pytest.raises(InputError, match="no measured phase matches"):
        explain(plan_memory("gpt2"), _measurement({"warmup": 10}))
