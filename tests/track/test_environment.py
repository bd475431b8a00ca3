"""The environment a run records: the slow facts (packages, torch, CUDA, GPUs) cached per host and Python environment,
refreshed whenever what they depend on changes, and a cache file that cannot be used ignored and rewritten."""
from __future__ import annotations

import json
import os
import sys

import pytest

from campaign.track import environment as env
from campaign.track.run import start_run


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own; the slow capture counted (and torch left out, it is tested once below)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(env.CACHE_VARIABLE, str(folder))
    calls = []

    def installed():
        calls.append(1)
        return {"packages": env._packages(), "torch": None, "cuda": None, "hip": None, "cudnn": None, "nccl": None,
                "driver": None, "gpus": (), "installed": env._every_distribution()}

    monkeypatch.setattr(env, "_installed", installed)
    return folder, calls


def _fake_dist(site, version: str):
    """A distribution 'campaign-fake' installed in a site folder of the test's own, as pip lays it out."""
    dist = site / "campaign_fake-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: campaign-fake\nVersion: {version}\n")
    return dist


def test_the_second_capture_is_served_from_the_cache_with_the_same_facts(cache):
    folder, calls = cache
    first = env.capture_environment()
    second = env.capture_environment()
    assert len(calls) == 1                                  # captured once, then read back
    assert second == first and second.to_dict() == first.to_dict()
    assert first.packages.get("campaign") and first.python == sys.version.split()[0]
    assert [p.name for p in folder.iterdir()] == [env.cache_path().name]


def test_an_installed_or_changed_distribution_refreshes_the_cache(cache, tmp_path, monkeypatch):
    _, calls = cache
    monkeypatch.setattr(env, "PACKAGES", (*env.PACKAGES, "campaign-fake"))
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "campaign-fake" not in env.capture_environment().packages
    dist = _fake_dist(site, "1.0")                          # installed
    assert env.capture_environment().packages["campaign-fake"] == "1.0"
    assert env.capture_environment().packages["campaign-fake"] == "1.0"
    assert len(calls) == 2
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: campaign-fake\nVersion: 2.0\n")  # edited in place
    later = os.stat(dist / "METADATA").st_mtime_ns + 10**9    # as a later edit would stamp it (coarse clocks)
    os.utime(dist / "METADATA", ns=(later, later))
    assert env.capture_environment().packages["campaign-fake"] == "2.0"
    assert len(calls) == 3
    # the lock of every distribution follows too, whether PACKAGES names it or not
    monkeypatch.setattr(env, "PACKAGES", tuple(p for p in env.PACKAGES if p != "campaign-fake"))
    assert env.capture_environment().installed["campaign-fake"] == "2.0"
    (dist / "METADATA").unlink()
    dist.rmdir()                                            # uninstalled
    captured = env.capture_environment()
    assert "campaign-fake" not in captured.packages and "campaign-fake" not in captured.installed
    assert len(calls) == 4


@pytest.mark.parametrize("variable", ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "LD_LIBRARY_PATH"])
def test_a_variable_that_picks_devices_or_libraries_refreshes_the_cache(cache, monkeypatch, variable):
    _, calls = cache
    monkeypatch.delenv(variable, raising=False)
    env.capture_environment()
    monkeypatch.setenv(variable, "1")
    got = env.capture_environment()
    assert len(calls) == 2
    if variable != "LD_LIBRARY_PATH":
        assert got.visible_devices == "1"
    env.capture_environment()
    assert len(calls) == 2


def test_another_driver_or_interpreter_refreshes_the_cache(cache, monkeypatch, tmp_path):
    _, calls = cache
    env.capture_environment()
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    monkeypatch.setattr(env, "DRIVER_FILES", (str(driver),))
    env.capture_environment()
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  560.35.03\n")   # upgraded
    env.capture_environment()
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    env.capture_environment()
    assert len(calls) == 4


@pytest.mark.parametrize("text", ["", "{not json", '{"schema": "campaign.environment-cache/1"}', "[1, 2]",
                                  "\udcff"])
def test_a_corrupt_cache_is_ignored_and_rewritten(cache, text):
    _, calls = cache
    fresh = env.capture_environment()
    path = env.cache_path()
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert env.capture_environment() == fresh
    assert len(calls) == 2
    doc = json.loads(path.read_text())                      # rewritten whole
    assert doc["schema"] == env.CACHE_SCHEMA and doc["facts"]["packages"] == fresh.packages
    assert env.capture_environment() == fresh and len(calls) == 2


def test_a_cache_entry_of_the_wrong_shape_is_not_served(cache):
    _, calls = cache
    fresh = env.capture_environment()
    path = env.cache_path()
    doc = json.loads(path.read_text())
    doc["facts"]["gpus"] = [{"name": "H100", "memory_bytes": "80GB"}]            # the right key, a wrong type
    path.write_text(json.dumps(doc))
    assert env.capture_environment() == fresh and len(calls) == 2


def test_an_unwritable_cache_folder_is_not_fatal(cache, tmp_path, monkeypatch):
    _, calls = cache
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(env.CACHE_VARIABLE, str(blocker / "cache"))
    first = env.capture_environment()
    assert env.capture_environment() == first and len(calls) == 2    # captured each time, still right


def test_cache_false_captures_afresh(cache):
    _, calls = cache
    env.capture_environment()
    env.capture_environment(cache=False)
    assert len(calls) == 2


def test_the_cached_environment_is_the_one_captured_with_torch(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv(env.CACHE_VARIABLE, str(tmp_path / "cache"))
    fresh = env.capture_environment(cache=False)
    assert fresh.torch is not None
    monkeypatch.setattr(env, "_installed", lambda: pytest.fail("served from the cache, not captured"))
    assert env.capture_environment() == fresh


def test_start_run_reports_its_phases(tmp_path, monkeypatch, cache):
    monkeypatch.chdir(tmp_path)
    data = [tmp_path / f"part-{i}.jsonl" for i in range(3)]
    for p in data:
        p.write_text("{}\n")
    phases: list[str] = []
    m = start_run("x", data=data, progress=phases.append)
    assert phases == ["code", "data 1/3", "data 2/3", "data 3/3", "environment", "manifest"]
    assert len(m.data) == 3 and m.environment["packages"]
