"""Models from the Hub: `campaign` run as a user runs it, the real huggingface_hub client talking to a Hub-shaped
server on the loopback address (tests/models/hub_server.py) through HF_ENDPOINT, with HF_HOME in the test's folder.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import tiny_llama
from tests.models.hub_server import GOOD_TOKEN, HubServer

pytest.importorskip("huggingface_hub")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

ROOT = Path(__file__).resolve().parents[2]
H, FF, V, KV = 64, 160, 1000, 32  # tiny_llama: hidden 64, intermediate 160, vocab 1000, 2 KV heads x head_dim 16


def llama_tensors(layers: int) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of tiny_llama(num_hidden_layers=layers), by name, as LlamaForCausalLM saves them."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H),
                                          "model.norm.weight": (H,)}
    for n in range(layers):
        p = f"model.layers.{n}."
        shapes.update({p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (KV, H),
                       p + "self_attn.v_proj.weight": (KV, H), p + "self_attn.o_proj.weight": (H, H),
                       p + "mlp.gate_proj.weight": (FF, H), p + "mlp.up_proj.weight": (FF, H),
                       p + "mlp.down_proj.weight": (H, FF), p + "input_layernorm.weight": (H,),
                       p + "post_attention_layernorm.weight": (H,)})
    return shapes


def by_hand(layers: int) -> int:
    """tiny_llama's parameter count: untied embedding and head, per layer q, k, v, o, gate, up, down and 2 norms."""
    return 2 * V * H + H + layers * (2 * H * H + 2 * KV * H + 3 * H * FF + 2 * H)


def model_files(layers: int = 2, shards: int = 2, **config) -> dict[str, bytes]:
    """A model repo's files: config.json, fp16 safetensors (sharded through an index when shards > 1)."""
    cfg = tiny_llama(num_hidden_layers=layers, torch_dtype="float16", **config)
    shapes = llama_tensors(layers)
    names = sorted(shapes)
    files = {"config.json": json.dumps(cfg).encode(), "README.md": b"# a tiny llama\n"}
    weight_map = {}
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors"
        files[file] = safetensors_numpy.save({n: np.ones(shapes[n], np.float16) for n in names[k::shards]})
        weight_map.update({n: file for n in names[k::shards]})
    if shards > 1:
        files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return files


def campaign(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "campaign", *args], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.fixture
def hub(tmp_path):
    with HubServer() as server:
        yield server


@pytest.fixture
def hub_env(tmp_path, hub):
    """The environment of a user of the local Hub: HF_ENDPOINT, HF_HOME in tmp, no token, online."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p))
    return env


def file_bytes(hub: HubServer) -> int:
    """Body bytes the server sent of repo files (resolve and CDN paths), the API's JSON left out."""
    return sum(s.sent for s in hub.log if "/resolve/" in s.path or s.path.startswith("/cdn/"))


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def test_a_hub_model_is_estimated_as_the_same_model_from_a_local_folder_reading_only_config_and_headers(
        tmp_path, hub, hub_env):
    files = model_files(layers=2, shards=2)
    sha = hub.add("acme/tiny-llama", files)
    local = tmp_path / "tiny-llama-copy"
    local.mkdir()
    for name, data in files.items():
        (local / name).write_bytes(data)

    r = campaign("memory", "acme/tiny-llama", "--json", env=hub_env)
    assert r.returncode == 0, r.stderr
    from_hub = json.loads(r.stdout)
    from_folder = json.loads(campaign("memory", str(local), "--json", env=hub_env).stdout)
    # the same figures, every one: only the model's name and where it was read from differ
    assert _named(from_hub, f"hub:acme/tiny-llama@{sha}", "acme/tiny-llama") == _named(
        from_folder, str(local / "config.json"), local.name)

    # downloaded: the config, the index, and per shard its 8-byte length and the header it gives; no weights
    headers = {n: struct.unpack("<Q", d[:8])[0] for n, d in files.items() if n.endswith(".safetensors")}
    expected = len(files["config.json"]) + len(files["model.safetensors.index.json"]) + sum(
        8 + n for n in headers.values())
    assert file_bytes(hub) == expected
    assert expected < sum(len(files[n]) for n in headers) / 50  # a fiftieth of the weights' size
    assert all(s.range for s in hub.log if s.path.endswith(".safetensors") and s.sent)
    assert not any("README" in s.path for s in hub.log)

    # the parameter count is the headers': tiny_llama's by hand
    facts = json.loads(campaign("models", "acme/tiny-llama", "--json", env=hub_env).stdout)
    assert facts["params_exact"] == by_hand(2) and facts["params_method"] == "safetensors"

    # offline afterwards: no request, the same answer
    served = len(hub.log)
    offline = campaign("memory", "acme/tiny-llama", "--json", env={**hub_env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout) == from_hub and len(hub.log) == served


def _named(result: dict, source: str, name: str) -> str:
    """A result's JSON with its model's source (where it shows it) and name replaced by placeholders."""
    text = json.dumps(result, sort_keys=True)
    assert name in text
    return text.replace(source, "SOURCE").replace(name, "NAME")


def test_single_file_repo_and_revision(hub, hub_env):
    hub.add("acme/tiny-llama", model_files(layers=2, shards=1))
    small = hub.add("acme/tiny-llama", model_files(layers=1, shards=1), revision="one-layer")

    main = json.loads(campaign("models", "acme/tiny-llama", "--json", env=hub_env).stdout)
    assert main["num_layers"] == 2 and main["params_exact"] == by_hand(2)
    branch = campaign("models", "acme/tiny-llama", "--revision", "one-layer", "--json", env=hub_env)
    assert branch.returncode == 0, branch.stderr
    facts = json.loads(branch.stdout)
    assert facts["num_layers"] == 1 and facts["params_exact"] == by_hand(1)
    assert facts["source"] == f"hub:acme/tiny-llama@{small}"

    offline = {**hub_env, "HF_HUB_OFFLINE": "1"}
    for typed in ("acme/tiny-llama@one-layer", f"acme/tiny-llama@{small}"):
        assert json.loads(campaign("models", typed, "--json", env=offline).stdout)["num_layers"] == 1
    assert json.loads(campaign("models", "acme/tiny-llama", "--json", env=offline).stdout)["num_layers"] == 2

    err = one_line_error(campaign("models", "acme/tiny-llama", "--revision", "nope", env=hub_env))
    assert "no such revision" in err
    # memory, kv and trace take --revision as models does (the one-layer branch, read offline from the cache now)
    out = campaign("memory", "acme/tiny-llama", "--infer", "--revision", "one-layer", "--json", env=offline)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["params"] == by_hand(1)
    # kv: K and V in bf16 (2 B), 1 layer x (2 KV heads x head dim 16) x 64 tokens (2 layers on main)
    out = campaign("kv", "acme/tiny-llama", "--context", "64", "--revision", "one-layer", "--json", env=offline)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["bytes"] == 2 * 1 * KV * 64 * 2


def test_gated_repo_needs_a_token_that_accepted_the_licence(hub, hub_env):
    hub.add("acme/gated-llama", model_files(), gated=True)
    err = one_line_error(campaign("models", "acme/gated-llama", env=hub_env))
    assert "gated (HTTP 401)" in err and "HF_TOKEN" in err and "licence" in err
    err = one_line_error(campaign("models", "acme/gated-llama", env={**hub_env, "HF_TOKEN": "hf_someone_else"}))
    assert "gated (HTTP 403)" in err
    r = campaign("models", "acme/gated-llama", "--json", env={**hub_env, "HF_TOKEN": GOOD_TOKEN})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["params_exact"] == by_hand(2)


def test_missing_repo_is_one_line(hub, hub_env):
    err = one_line_error(campaign("memory", "acme/no-such-model", env=hub_env))
    assert "acme/no-such-model" in err and "no model repo of that name" in err and "HTTP 401" in err


def test_remote_code_is_refused_saying_what_is_missing(hub, hub_env):
    custom = tiny_llama(model_type="acme_custom", architectures=["AcmeForCausalLM"],
                        auto_map={"AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    hub.add("acme/custom", {"config.json": json.dumps(custom).encode(), "modeling_acme.py": b"raise SystemExit(9)\n"})
    err = one_line_error(campaign("memory", "acme/custom", env=hub_env))
    assert "remote code" in err and "modeling_acme.AcmeForCausalLM" in err and "'acme_custom'" in err
    assert "the config of the known family its architecture follows" in err
    assert not any("modeling_acme" in s.path for s in hub.log)  # never even downloaded

    # a known family that also ships code: estimated from the config, the code neither read nor run
    known = model_files(auto_map={"AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    hub.add("acme/llama-with-code", {**known, "modeling_acme.py": b"raise SystemExit(9)\n"})
    r = campaign("models", "acme/llama-with-code", "--json", env=hub_env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["params_exact"] == by_hand(2)


def test_a_server_that_does_not_answer_in_time_is_one_line(hub, hub_env):
    hub.add("acme/slow", model_files(), slow=True)
    start = time.monotonic()
    err = one_line_error(campaign("memory", "acme/slow", env={**hub_env, "HF_HUB_DOWNLOAD_TIMEOUT": "1"}))
    assert time.monotonic() - start < 20
    assert "no answer within 1 s" in err and "HF_HUB_OFFLINE=1" in err


def test_no_network_and_offline_are_one_line(hub_env):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = one_line_error(campaign("memory", "acme/tiny-llama", env={**hub_env, "HF_ENDPOINT": f"http://127.0.0.1:{port}"}))
    assert "cannot connect" in err
    err = one_line_error(campaign("memory", "acme/tiny-llama", env={**hub_env, "HF_HUB_OFFLINE": "1"}))
    assert "HF_HUB_OFFLINE" in err and "not in the local caches" in err


def test_a_server_that_sends_whole_files_for_a_range_is_refused_before_the_weights_are_read(hub, hub_env):
    hub.add("acme/no-ranges", model_files(), whole_files=True)
    err = one_line_error(campaign("memory", "acme/no-ranges", env=hub_env))
    assert "status 200, not 206" in err and "never the weights" in err


def test_a_corrupt_header_on_the_hub_is_one_line(hub, hub_env):
    files = model_files(shards=1)
    files["model.safetensors"] = (2**40).to_bytes(8, "little") + files["model.safetensors"][8:]
    hub.add("acme/corrupt", files)
    err = one_line_error(campaign("memory", "acme/corrupt", env=hub_env))
    assert "acme/corrupt: model.safetensors: header length 1099511627776" in err and "corrupt" in err

    incomplete = model_files(shards=2)
    del incomplete["model-00002-of-00002.safetensors"]
    hub.add("acme/incomplete", incomplete)
    err = one_line_error(campaign("memory", "acme/incomplete", env=hub_env))
    assert "lists 1 shard(s) the repo does not have" in err and "model-00002-of-00002.safetensors" in err


def test_a_model_read_from_the_hub_is_read_again_offline_by_the_library(hub, hub_env, tmp_path, monkeypatch):
    """What trace and measure do with a spec (memory/build.py reads its config again from spec.source), and a
    library call by repo id, once the model is in campaign's cache: no server needed."""
    sha = hub.add("acme/tiny-llama", model_files(layers=2, shards=1))
    assert campaign("models", "acme/tiny-llama", env=hub_env).returncode == 0
    hub.__exit__()
    monkeypatch.setenv("HF_HOME", hub_env["HF_HOME"])
    from campaign.memory.build import model_config
    from campaign.models import load_spec

    spec = load_spec("acme/tiny-llama")
    assert spec.source == f"hub:acme/tiny-llama@{sha}" and spec.params_exact == by_hand(2)
    cfg, again, directory = model_config(spec)
    assert cfg == tiny_llama(num_hidden_layers=2, torch_dtype="float16") and again is spec
    assert directory is not None and not list(directory.glob("*.safetensors"))  # no weights to load
