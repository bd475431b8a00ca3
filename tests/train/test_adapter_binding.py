"""The adapter's binding names its base: the repo id or folder, the HF cache snapshot's commit, the weights' hash and
fingerprint; what cannot be named (a base built in memory, a repo id without a revision) is warned in one line."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from campaign.errors import InputError  # noqa: E402
from campaign.train.adapters import BINDING, load_adapter, save_adapter  # noqa: E402

FIX = "load the base with from_pretrained from a named repo or folder"


def base(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        vocab_size=100, max_position_embeddings=64, tie_word_embeddings=False))


def lora(model):
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def expected_fingerprint(model) -> dict[str, list[float]]:
    """Recomputed here from the plain model's tensors in numpy: [elements, L2 norm, 8 projections on the signs drawn
    from a generator seeded by the element count]."""
    out = {}
    for name, t in model.state_dict().items():
        if not t.is_floating_point():
            continue
        x = t.detach().reshape(-1).double().numpy()
        signs = torch.randint(0, 2, (8, x.size), generator=torch.Generator().manual_seed(x.size),
                              dtype=torch.int8).numpy().astype(np.float64) * 2 - 1
        out[name] = [float(x.size), float(np.sqrt(np.sum(x * x))), *(float(v) for v in signs @ x)]
    return out


def saved(model, folder: Path) -> tuple[dict, list[str]]:
    """Save the adapter; its binding and the messages of the warnings that say what of the base is unnamed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_adapter(model, folder)
    return (json.loads((folder / BINDING).read_text()),
            [str(w.message) for w in caught if FIX in str(w.message)])


def assert_fingerprint(binding: dict, want: dict[str, list[float]]) -> None:
    assert set(binding["values"]) == set(want)
    for name, row in want.items():
        assert binding["values"][name] == pytest.approx(row, rel=1e-9, abs=1e-9), name


def test_a_base_built_in_memory_is_warned_and_still_bound_by_its_weights(tmp_path):
    want = expected_fingerprint(base())
    binding, warned = saved(lora(base()), tmp_path / "adapter")
    assert binding["base"] == "" and binding["revision"] is None
    assert len(warned) == 1 and "no name" in warned[0] and "\n" not in warned[0]
    assert_fingerprint(binding, want)
    assert binding["tensors"] == len(want) == 2 * 9 + 3   # per layer 7 projections + 2 norms; embed, norm, head


def test_a_base_loaded_from_its_hf_cache_snapshot_is_named_with_its_commit(tmp_path):
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    base().save_pretrained(snapshot)
    want = expected_fingerprint(base())
    binding, warned = saved(lora(transformers.LlamaForCausalLM.from_pretrained(snapshot)), tmp_path / "adapter")
    assert (binding["base"], binding["revision"], warned) == ("org/tiny", "abc123", [])
    assert_fingerprint(binding, want)
    # the same weights under another snapshot are another revision: refused, naming both
    other = tmp_path / "models--org--tiny" / "snapshots" / "def456"
    base().save_pretrained(other)
    with pytest.raises(InputError, match="revision abc123 of org/tiny; this base is revision def456"):
        load_adapter(transformers.LlamaForCausalLM.from_pretrained(other), tmp_path / "adapter")
    load_adapter(transformers.LlamaForCausalLM.from_pretrained(snapshot), tmp_path / "adapter")


def test_a_base_loaded_from_a_folder_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    base().save_pretrained(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    binding, warned = saved(lora(transformers.LlamaForCausalLM.from_pretrained("tiny")), tmp_path / "adapter")
    assert (binding["base"], binding["revision"], warned) == (str((tmp_path / "tiny").resolve()), None, [])
    assert_fingerprint(binding, expected_fingerprint(base()))


def test_a_repo_id_without_a_revision_is_named_and_its_missing_revision_warned(tmp_path):
    model = base()
    model.config._name_or_path = "org/tiny"     # as from_pretrained("org/tiny") leaves it: no commit kept
    binding, warned = saved(lora(model), tmp_path / "adapter")
    assert (binding["base"], binding["revision"]) == ("org/tiny", None)
    assert len(warned) == 1 and "revision of org/tiny is not recorded" in warned[0]
