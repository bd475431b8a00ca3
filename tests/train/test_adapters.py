"""Adapters bound to their exact base: the binding's hash, the planned trainable count, the refusal of another base,
and campaign check's adapter checks on a real peft model."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from campaign.errors import InputError  # noqa: E402
from campaign.train.adapters import (  # noqa: E402
    base_state,
    binding_of,
    files_sha256,
    load_adapter,
    planned_trainable,
    save_adapter,
    weights_sha256,
)
from campaign.train.check import check  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "check_setup.py"


def base(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        vocab_size=100, max_position_embeddings=64))


def lora(model, **kw):
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], **kw))


def test_planned_trainable_is_rank_times_in_plus_out_of_each_adapted_layer():
    m = lora(base())
    # q_proj 32 -> 32 and v_proj 32 -> 16 (2 KV heads x 8), rank 4, two layers
    assert planned_trainable(m) == 2 * (4 * (32 + 32) + 4 * (32 + 16))
    assert planned_trainable(m) == sum(p.numel() for p in m.parameters() if p.requires_grad)


def test_the_base_hash_is_the_same_from_the_wrapped_model_the_bare_model_and_its_files(tmp_path):
    plain = base()
    plain.save_pretrained(tmp_path / "base")                 # untied: every tensor is in the file
    expected = weights_sha256(plain.state_dict())
    assert files_sha256(tmp_path / "base") == expected
    wrapped = lora(base())
    assert set(base_state(wrapped)) == set(plain.state_dict())
    assert binding_of(wrapped).weights_sha256 == expected
    assert weights_sha256(base(seed=1).state_dict()) != expected


def test_an_adapter_loads_on_its_base_and_is_refused_on_another(tmp_path):
    m = lora(base())
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_()                                   # a trained adapter: B no longer zero
    save_adapter(m, tmp_path / "adapter")
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    m.eval()
    with torch.no_grad():
        want = m(input_ids=ids).logits
        got = load_adapter(base(), tmp_path / "adapter").eval()(input_ids=ids).logits
    assert torch.equal(want, got)
    with pytest.raises(InputError, match="trained on another base") as e:
        load_adapter(base(seed=1), tmp_path / "adapter")
    assert len(str(e.value).splitlines()) == 1


def test_an_adapter_without_a_binding_is_refused(tmp_path):
    m = lora(base())
    m.save_pretrained(tmp_path / "plain")
    with pytest.raises(InputError, match="no binding"):
        load_adapter(base(), tmp_path / "plain")


def status(report, check_id: str) -> str:
    return next(c.status for c in report.checks if c.id == check_id)


def test_check_on_the_lora_example_binds_and_reloads_the_adapter():
    r = check(f"{EXAMPLE}:lora_setup")
    assert r.passed
    for cid in ("adapter.trainable_as_planned", "adapter.bound_to_base", "adapter.reload_equal",
                "params.frozen_unchanged", "params.trainable_as_declared"):
        assert status(r, cid) == "pass", cid
    # LoRA r=8 on q (64 -> 64) and v (64 -> 32) in 2 layers, plus the 3 x 64 classification head trained in full
    assert r.trainable_elements == 2 * (8 * (64 + 64) + 8 * (64 + 32)) + 3 * 64


def test_check_refuses_the_adapter_on_a_base_built_differently():
    r = check(f"{EXAMPLE}:lora_on_another_base", overfit_steps=1, overfit_drop=0.01)
    c = next(c for c in r.checks if c.id == "adapter.reload_equal")
    assert c.status == "fail" and "trained on another base" in c.seen


def test_a_base_tensor_left_trainable_is_beyond_the_plan():
    m = lora(base())
    m.base_model.model.model.norm.weight.requires_grad_(True)      # the planted bug: a base norm trains too
    r = check(lambda: {"model": m, "optimizer": torch.optim.AdamW([p for p in m.parameters() if p.requires_grad]),
                       "batches": [{"input_ids": torch.ones(2, 6, dtype=torch.long),
                                    "labels": torch.ones(2, 6, dtype=torch.long)}]},
              overfit_steps=1, overfit_drop=0.01)
    c = next(c for c in r.checks if c.id == "adapter.trainable_as_planned")
    assert c.status == "warn" and "(+32)" in c.seen
    assert status(r, "adapter.reload_equal") == "skipped"          # live objects: no fresh process


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_same_base_in_another_dtype_loads_and_says_so_another_base_does_not(tmp_path, dtype):
    m = lora(base())
    save_adapter(m, tmp_path / "adapter")
    with pytest.warns(UserWarning, match=f"in another dtype: {str(dtype).removeprefix('torch.')} here, float32"):
        loaded = load_adapter(base().to(dtype), tmp_path / "adapter")
    assert hasattr(loaded, "peft_config")
    with pytest.raises(InputError, match="trained on another base"):
        load_adapter(base(seed=1).to(dtype), tmp_path / "adapter")
    revised = base()
    with torch.no_grad():
        revised.lm_head.weight.add_(torch.randn_like(revised.lm_head.weight) * 1e-3)   # a revision: 5% of std
    with pytest.raises(InputError, match="trained on another base"):
        load_adapter(revised.to(dtype), tmp_path / "adapter")


def test_a_base_in_bf16_binds_and_loads_exactly(tmp_path):
    import warnings

    m = lora(base().to(torch.bfloat16))
    save_adapter(m, tmp_path / "adapter")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_adapter(base().to(torch.bfloat16), tmp_path / "adapter")          # the same dtype: no warning
    assert not [w for w in seen if "another dtype" in str(w.message)]
    with pytest.warns(UserWarning, match="bfloat16 when the adapter was trained"):
        load_adapter(base(), tmp_path / "adapter")                              # fp32 here
