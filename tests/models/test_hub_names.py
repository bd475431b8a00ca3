"""Which names go to the Hub, and the one-line refusals made before any request (no server needed)."""
from __future__ import annotations

import json
import sys

import pytest

from campaign.errors import ConfigError, InputError, UnknownNameError
from campaign.models import load_spec
from campaign.models.hub import is_repo_id, split_revision
from tests.conftest import tiny_llama


@pytest.fixture(autouse=True)
def _empty_caches(tmp_path, monkeypatch):
    """No HF cache and no campaign Hub cache of the machine's: HF_HOME in the test's folder."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("typed, parts", [
    ("google/gemma-3-27b-it", ("google/gemma-3-27b-it", None)),
    ("google/gemma-3-27b-it@main", ("google/gemma-3-27b-it", "main")),
    ("acme/tiny@refs/pr/1", ("acme/tiny", "refs/pr/1")),
    ("some/dir@with-at", ("some/dir", "with-at")),
    ("not a repo@x", ("not a repo@x", None)),
])
def test_a_revision_follows_the_repo_id_after_an_at(typed, parts):
    assert split_revision(typed) == parts


@pytest.mark.parametrize("text, repo", [("acme/tiny", True), ("Qwen/Qwen2.5-7B", True), ("models/config.json", False),
                                        ("./acme/tiny", False), ("acme/../etc", False), ("llama-3.1-8b", False),
                                        ("a/b/c", False)])
def test_only_repo_shaped_names_go_to_the_hub(text, repo):
    assert is_repo_id(text) is repo


def test_without_huggingface_hub_a_repo_id_is_unknown_with_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as in an install without it: import fails
    with pytest.raises(UnknownNameError, match=r"unknown model 'acme/tiny'.*pip install 'campaign\[hub\]'"):
        load_spec("acme/tiny")


def test_a_catalog_name_and_a_local_dir_never_go_to_the_hub(monkeypatch, write_config):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # any attempt would raise
    assert load_spec("meta-llama/Llama-3.1-8B").source == "catalog:meta-llama/Llama-3.1-8B"
    d = write_config(tiny_llama(), "tiny")
    assert load_spec(str(d)).source == str(d / "config.json")


def test_revision_refusals(write_config):
    d = write_config(tiny_llama(), "tiny")
    with pytest.raises(InputError, match="local path, which has no revisions"):
        load_spec(str(d), revision="main")
    with pytest.raises(InputError, match="nothing after '@'"):
        load_spec("acme/tiny@")
    with pytest.raises(InputError, match="names revision 'a' and --revision says 'b'"):
        load_spec("acme/tiny@a", revision="b")
    with pytest.raises(InputError, match="not a Hub repo id"):
        load_spec("llama-3.1-8b", revision="main")


def test_a_damaged_cache_entry_is_one_line_naming_the_fix(tmp_path):
    snapshot = tmp_path / "hf" / "campaign" / "hub" / "models--acme--tiny" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(tiny_llama()))
    (snapshot / "safetensors-headers.json").write_text('{"files": {"model.safetensors": [1, 2]}}')
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("a" * 40)
    with pytest.raises(ConfigError, match="delete the folder and run the command again online"):
        load_spec("acme/tiny")


def test_remote_code_in_a_local_config_is_refused_the_same_way(write_config):
    pytest.importorskip("transformers")
    d = write_config(tiny_llama(model_type="acme_custom", auto_map={"AutoConfig": "configuration_acme.AcmeConfig"}))
    with pytest.raises(ConfigError, match=r"remote code \(configuration_acme.AcmeConfig, auto_map\).*known family"):
        load_spec(str(d))


@pytest.mark.parametrize("revision", ["..", "a/../b", "main ", "", "x\ny", "refs//pr"])
def test_a_revision_that_no_git_ref_can_be_is_refused_before_any_request(revision):
    with pytest.raises(InputError):
        load_spec(f"acme/tiny@{revision}" if revision else "acme/tiny", revision=revision or "")


def test_a_known_family_that_ships_code_keeps_its_own_error(write_config):
    """auto_map beside a model_type campaign builds: a bad field is that field's error, not a remote-code one."""
    d = write_config(tiny_llama(num_attention_heads=3, auto_map={"AutoModel": "modeling_x.X"}))
    with pytest.raises(ConfigError, match="num_attention_heads 3 is not a multiple of num_key_value_heads 2") as e:
        load_spec(str(d))
    assert "remote code" not in str(e.value)
