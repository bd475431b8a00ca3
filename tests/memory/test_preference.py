"""Preference training (DPO, ORPO, CPO): the reference model (a frozen copy, or LoRA's base with the adapters
disabled), the reference forward's logits, the sequences' log-probabilities taken row by row (TRL's
selective_log_softmax), and chosen and rejected run in one forward. Counted by hand from shapes, and measured on
a DPO step of ours on a real tiny Llama with the storage tracker (the step as TRL's DPOTrainer runs it: the pairs
concatenated, the trained model's log-probs, then the reference's under no_grad, the sigmoid loss, backward, AdamW).
The recipes under tests/memory/recipes are the published ones (SOURCES.md there names each)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from campaign import estimate_memory
from campaign.errors import InputError
from campaign.memory import make_workload
from campaign.memory.training_config import workload_from_configs
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

RECIPES = Path(__file__).parent / "recipes"
H, INTER, L, S, PAIRS = 256, 688, 4, 128, 4
KV = 128  # 2 key/value heads of 64


def _cfg(vocab: int) -> dict:
    return tiny_llama(hidden_size=H, intermediate_size=INTER, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=L, vocab_size=vocab, max_position_embeddings=1024)


def _params(vocab: int) -> int:
    """The tiny Llama's parameters from its shapes: untied embedding and head, per layer q/o (h x h), k/v (h x 128),
    gate/up/down (h x inter) and two norms, the final norm."""
    layer = 2 * H * H + 2 * H * KV + 3 * H * INTER + 2 * H
    return 2 * vocab * H + L * layer + H


def _phases(vocab: int = 8000, **kw) -> dict:
    spec = spec_from_config(_cfg(vocab), name="tiny", source="test")
    w = make_workload(**({"batch": 2 * PAIRS, "seq_len": S, "loss": "logps", "logits_held": False} | kw))
    return {p.name: {i.name: i.bytes for i in p.items} for p in estimate_memory(spec, w).phases}


def test_the_reference_copy_is_the_weights_again_sharded_as_trl_prepares_it():
    P = _params(8000)
    assert _phases(reference="copy")["load"]["reference model (frozen copy)"] == 2 * P  # bf16
    # ZeRO-3 and FSDP shard it as they shard the trained weights; under ZeRO-1/2 TRL runs it at stage 0: whole
    zero3 = _phases(reference="copy", shard="zero3", gpus=4, mixed_precision=True)["load"]
    assert zero3["reference model (frozen copy)"] == -(-2 * P // 4)
    fsdp = _phases(reference="copy", shard="fsdp", gpus=4)["load"]
    assert fsdp["reference model (frozen copy)"] == -(-2 * P // 4)
    zero2 = _phases(reference="copy", shard="zero2", gpus=4, mixed_precision=True)["load"]
    assert zero2["reference model (frozen copy)"] == 2 * P
    # LoRA's reference with the adapters disabled is no copy; none keeps nothing
    assert "reference model (frozen copy)" not in _phases(reference="adapters-off", method="lora")["load"]
    assert "reference model (frozen copy)" not in _phases()["load"]


def test_the_reference_forward_and_the_log_probabilities_by_hand():
    V = 8000
    tokens = 2 * PAIRS * S
    forward = _phases(V, reference="copy")["forward"]
    # the logits and every row's bf16 log_softmax output, saved; then the reference's logits and one row's output
    assert forward["logps loss over the vocabulary"] == tokens * V * (2 + 2)
    assert forward["reference forward's logits (no grad)"] == (tokens + S) * V * 2
    backward = _phases(V)["backward"]
    # the rows' gradients gathered before unbind's backward stacks them, the stacked one: 2 x 2 B
    assert backward["logps loss: logits gradients"] == tokens * V * 4
    # fp32 logits go through logsumexp, which saves views: the logits and one row's temporary
    fp32 = _phases(V, dtype="fp32")["forward"]
    assert fp32["logps loss over the vocabulary"] == tokens * V * 4 + S * V * 4
    # LoRA's adapters-off reference runs the same forward; none runs none
    assert _phases(V, reference="adapters-off", method="lora")["forward"][
        "reference forward's logits (no grad)"] == (tokens + S) * V * 2
    assert "reference forward's logits (no grad)" not in _phases(V)["forward"]


def _logps(torch, logits, labels):
    rows = [torch.log_softmax(row, dim=-1).gather(-1, lab.unsqueeze(-1)).squeeze(-1)
            for row, lab in zip(logits, labels, strict=True)]
    return torch.stack(rows).sum(-1)


def _dpo_models(vocab: int, reference: str, lora: bool, *, adapter_autocast: bool = True):
    """torch, the trained model (a real tiny Llama in bf16, LoRA on every linear layer with `lora`) and its frozen
    copy for --reference copy (else None)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = _cfg(vocab)
    config = transformers.AutoConfig.for_model("llama", **{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    policy = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    ref = copy.deepcopy(policy).eval().requires_grad_(False) if reference == "copy" else None
    if lora:
        peft = pytest.importorskip("peft")
        policy = peft.get_peft_model(policy, peft.LoraConfig(r=8, target_modules="all-linear"),
                                     autocast_adapter_dtype=adapter_autocast)
    return torch, policy, ref


def _measured_dpo_step(vocab: int, reference: str, checkpointing: bool, lora: bool) -> int:
    """The peak live bytes of two DPO steps of ours on a real tiny Llama (bf16, AdamW)."""
    from campaign.memory.tracker import StorageTracker

    torch, policy, ref = _dpo_models(vocab, reference, lora)
    if checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.train()
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5, foreach=True)
    ids = torch.cat([torch.randint(0, vocab, (PAIRS, S)), torch.randint(0, vocab, (PAIRS, S))])  # chosen, rejected
    tracker = StorageTracker()
    for t in [*policy.parameters(), *policy.buffers(), ids, *(ref.parameters() if ref else ())]:
        tracker.register(t, "weights")

    def loss_of_pairs():
        out = policy(input_ids=ids, use_cache=False)
        logps = _logps(torch, out.logits[:, :-1], ids[:, 1:])
        with torch.no_grad():
            if ref is not None:
                ref_logps = _logps(torch, ref(input_ids=ids, use_cache=False).logits[:, :-1], ids[:, 1:])
            elif reference == "adapters-off":
                with policy.disable_adapter():
                    ref_logps = _logps(torch, policy(input_ids=ids, use_cache=False).logits[:, :-1], ids[:, 1:])
            else:
                ref_logps = torch.zeros_like(logps)
        chosen, rejected = (logps - ref_logps).chunk(2)
        return -torch.nn.functional.logsigmoid(0.1 * (chosen - rejected)).mean()  # `out` freed on return

    peaks = []
    with tracker:
        for _ in range(2):
            tracker.phase("activations")
            loss = loss_of_pairs()
            peaks.append(tracker.snapshot()[0])
            tracker.phase("temporaries")
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            peaks.append(tracker.snapshot()[0])
    return max(peaks)


@pytest.mark.parametrize("reference, checkpointing, lora", [
    ("copy", False, False), ("none", False, False), ("copy", True, False),
    ("adapters-off", False, True), ("adapters-off", True, True)])
def test_the_estimate_matches_a_tracked_dpo_step(reference, checkpointing, lora):
    vocab = 32000
    spec = spec_from_config(_cfg(vocab), name="tiny", source="test")
    w = make_workload(batch=2 * PAIRS, seq_len=S, reference=reference, loss="logps", logits_held=False,
                      grad_checkpointing=checkpointing, method="lora" if lora else "full", lora_rank=8)
    estimate = estimate_memory(spec, w).peak_allocated_bytes
    assert estimate == pytest.approx(_measured_dpo_step(vocab, reference, checkpointing, lora), rel=0.01)


def _measured_torchtune_dpo_step(vocab: int, reference: str, lora: bool) -> int:
    """The peak live bytes of two DPO steps of ours written as torchtune's DPO recipes run them (bd2a0fc:
    concatenated_forward, rlhf.get_batch_log_probs, the policy's logits deleted, then the reference forward under
    no_grad, whose logits the LoRA recipes keep through backward; the full recipe takes the log-probabilities of
    chosen and rejected in two calls and deletes the reference's logits) on a real tiny Llama in bf16; torchtune's
    model returns its logits upcast to fp32 (TransformerDecoder.unembed: .float())."""
    from campaign.memory.tracker import StorageTracker

    # torchtune's adapters are built in the model's dtype: no peft autocast to fp32
    torch, policy, ref = _dpo_models(vocab, reference, lora, adapter_autocast=False)
    policy.train()
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5, foreach=True)
    ids = torch.cat([torch.randint(0, vocab, (PAIRS, S)), torch.randint(0, vocab, (PAIRS, S))])  # chosen, rejected
    labels = ids[:, 1:].clone()
    tracker = StorageTracker()
    for t in [*policy.parameters(), *policy.buffers(), ids, labels, *(ref.parameters() if ref else ())]:
        tracker.register(t, "weights")

    def get_batch_log_probs(logits, rows):  # torchtune rlhf.get_batch_log_probs, temperature 1
        return torch.gather(torch.log_softmax(logits[:, :-1, :] / 1.0, -1), 2,
                            labels[rows].unsqueeze(2)).squeeze(2).sum(-1)

    def batch_logps(model):
        logits = model(input_ids=ids, use_cache=False).logits.float()  # torchtune's unembed
        if lora:  # lora_dpo_*.py: one call over chosen and rejected
            return get_batch_log_probs(logits, slice(None))
        # full_dpo_distributed.py: one call per half
        return torch.cat([get_batch_log_probs(logits[:PAIRS], slice(0, PAIRS)),
                          get_batch_log_probs(logits[PAIRS:], slice(PAIRS, None))])

    kept = []
    peaks = []
    with tracker:
        for _ in range(2):
            tracker.phase("activations")
            logps = batch_logps(policy)
            with torch.no_grad():
                if ref is not None:
                    ref_logits = ref(input_ids=ids, use_cache=False).logits.float()
                    ref_logps = torch.cat([get_batch_log_probs(ref_logits[:PAIRS], slice(0, PAIRS)),
                                           get_batch_log_probs(ref_logits[PAIRS:], slice(PAIRS, None))])
                    del ref_logits  # full_dpo_distributed.py deletes the reference's logits
                else:
                    with policy.disable_adapter():
                        ref_logits = policy(input_ids=ids, use_cache=False).logits.float()
                    ref_logps = get_batch_log_probs(ref_logits, slice(None))
                    kept.append(ref_logits)  # the LoRA recipes keep them to the step's end
            chosen, rejected = (logps - ref_logps).chunk(2)
            loss = -torch.nn.functional.logsigmoid(0.1 * (chosen - rejected)).mean()
            peaks.append(tracker.snapshot()[0])
            tracker.phase("temporaries")
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            kept.clear()
            peaks.append(tracker.snapshot()[0])
    return max(peaks)


@pytest.mark.parametrize("reference, lora", [("copy", False), ("adapters-off", True)])
def test_the_estimate_matches_a_tracked_torchtune_dpo_step(reference, lora):
    """torchtune's DPO log-probabilities (--loss logsoftmax): fp32 logits through one log_softmax, the reference's
    logits kept through backward by the LoRA recipe. TRL's row-by-row count (--loss logps) is far below it."""
    vocab = 32000
    spec = spec_from_config(_cfg(vocab), name="tiny", source="test")
    kw = dict(batch=2 * PAIRS, seq_len=S, reference=reference, logits_held=False,
              method="lora" if lora else "full", lora_rank=8, peft_autocast=False)
    estimate = estimate_memory(spec, make_workload(loss="logsoftmax", **kw)).peak_allocated_bytes
    measured = _measured_torchtune_dpo_step(vocab, reference, lora)
    assert estimate == pytest.approx(measured, rel=0.01)
    assert estimate_memory(spec, make_workload(loss="logps", **kw)).peak_allocated_bytes < 0.7 * measured


def test_the_cross_entropy_estimate_of_a_dpo_step_was_twice_the_loss():
    """Before: a DPO config read as supervised training, the loss counted as transformers' fp32 chain (and no
    reference). The logps loss counts what the step holds."""
    full = _phases(32000, loss="full", reference="copy")["forward"]
    logps = _phases(32000, reference="copy")["forward"]
    assert sum(full.values()) > 1.2 * sum(logps.values())


def test_bad_reference_options_are_one_line():
    spec = spec_from_config(_cfg(8000), name="tiny", source="test")
    for kw, words in [({"reference": "base"}, "unknown"), ({"reference": "adapters-off"}, "--reference copy"),
                      ({"reference": "copy", "mode": "infer"}, "drop it for inference")]:
        with pytest.raises(InputError, match=words):
            estimate_memory(spec, make_workload(**kw))


# -- the recipe files --------------------------------------------------------------------------------------------


def _read(*names, reference=None, **kw):
    return workload_from_configs([RECIPES / n if not isinstance(n, Path) else n for n in names], reference=reference,
                                 **kw)


def _uses(cfg) -> dict:
    return {k.key: k.use for k in cfg.keys}


def test_the_handbook_dpo_recipe_is_pairs_and_asks_for_the_reference():
    cfg = _read("alignment_handbook_zephyr_dpo_full.yaml", "alignment_handbook_zero3.yaml")
    o = cfg.options
    assert o["batch"] == 16 and o["seq_len"] == 1024  # per_device_train_batch_size 8 pairs, max_length
    assert o["loss"] == "logps" and o["shard"] == "zero3" and o["gpus"] == 8 and o["zero_init"] is True
    uses = _uses(cfg)
    assert uses["beta"] == "not modelled"  # DPO or ORPO: the file does not say
    assert uses["gradient_checkpointing_kwargs"] == "modelled"  # use_reentrant: the same tensors kept
    assert uses["per_device_train_batch_size"] == "modelled" and uses["deepspeed_config.zero3_init_flag"] == "modelled"
    assert [k.key for k in cfg.unmodelled] == ["beta"]
    said = _read("alignment_handbook_zephyr_dpo_full.yaml", "alignment_handbook_zero3.yaml", reference="copy")
    assert said.unmodelled == ()


def test_what_settles_the_reference_in_the_file(tmp_path):
    import yaml

    base = {"output_dir": "o", "per_device_train_batch_size": 2, "beta": 0.1, "bf16": True}
    cases = [({"precompute_ref_log_probs": True}, "none"), ({"cpo_alpha": 1.0}, "none"),
             ({"loss_type": "simpo"}, "none")]
    for extra, reference in cases:
        path = tmp_path / "dpo.yaml"
        path.write_text(yaml.safe_dump(base | extra))
        cfg = workload_from_configs([path])
        assert cfg.options["reference"] == reference and cfg.options["batch"] == 4 and not cfg.unmodelled
        assert any("no max_length" in n for n in cfg.notes)  # the length counted is said
    # Liger's fused DPO loss: no vocabulary-sized tensor
    path = tmp_path / "liger.yaml"
    path.write_text(yaml.safe_dump(base | {"use_liger_kernel": True}))
    assert workload_from_configs([path], reference="copy").options["loss"] == "fused"
    # GRPO and KTO: not pairs; their keys are named as not modelled
    for extra, key in [({"num_generations": 8}, "num_generations"), ({"desirable_weight": 1.0}, "desirable_weight")]:
        path.write_text(yaml.safe_dump(base | extra))
        cfg = workload_from_configs([path])
        assert cfg.options["batch"] == 2 and "loss" not in cfg.options
        assert key in {k.key for k in cfg.unmodelled}


def test_the_qlora_dpo_recipe_runs_with_its_adapters_off(cli):
    recipe = str(RECIPES / "alignment_handbook_zephyr_dpo_qlora.yaml")
    unsaid = cli("memory", "mistral-7b", "--config", recipe, "--card", "RTX-4090-24GB", "--json", "--no-solve")
    assert unsaid.code == 1 and unsaid.json()["status"] == "not verified"
    # TRL >= 0.22 does not call peft's prepare_model_for_kbit_training: the head stays bf16 (--no-kbit-upcast)
    said = cli("memory", "mistral-7b", "--config", recipe, "--reference", "adapters-off", "--no-kbit-upcast",
               "--card", "RTX-4090-24GB", "--json", "--no-solve")
    got = said.json()
    assert got["workload"]["method"] == "qlora" and got["workload"]["batch"] == 8
    forward = next(p for p in got["phases"] if p["name"] == "forward")
    names = {i["name"]: i["bytes"] for i in forward["items"]}
    assert "reference model (frozen copy)" not in names
    # Mistral 7B's vocabulary 32,768, 8 sequences of 1,024 and one row: bf16 logits of the reference forward
    assert names["reference forward's logits (no grad)"] == (8 * 1024 + 1024) * 32768 * 2
    full = cli("memory", "mistral-7b", "--config", str(RECIPES / "alignment_handbook_zephyr_dpo_full.yaml"),
               "--config", str(RECIPES / "alignment_handbook_zero3.yaml"), "--reference", "copy", "--json",
               "--no-solve").json()
    load = next(p for p in full["phases"] if p["name"] == "load")
    copy_bytes = next(i["bytes"] for i in load["items"] if i["name"] == "reference model (frozen copy)")
    assert copy_bytes == -(-full["params"] * 2 // 8)  # bf16 under ZeRO-3's cast, sharded over 8 cards


def test_axolotl_rl_names_the_trainer(tmp_path):
    import yaml

    base = {"base_model": "mistralai/Mistral-7B-v0.1", "sequence_len": 2048, "micro_batch_size": 2, "bf16": True,
            "rl_beta": 0.1, "datasets": [{"path": "x", "type": "chatml.intel"}]}
    path = tmp_path / "axolotl.yml"
    for extra, reference in [({"rl": "dpo"}, "copy"), ({"rl": "dpo", "adapter": "lora", "lora_r": 8}, "adapters-off"),
                             ({"rl": "orpo"}, "none")]:
        path.write_text(yaml.safe_dump(base | extra))
        cfg = workload_from_configs([path])
        assert cfg.options["reference"] == reference and cfg.options["batch"] == 4 and cfg.options["loss"] == "logps"
        assert not cfg.unmodelled
    path.write_text(yaml.safe_dump(base | {"rl": "kto"}))
    cfg = workload_from_configs([path])
    assert cfg.options["batch"] == 2 and [k.key for k in cfg.unmodelled] == ["rl"]


def test_a_k_bit_trl_recipe_says_what_newer_trl_does():
    cfg = _read("alignment_handbook_zephyr_dpo_qlora.yaml", reference="adapters-off", model_type="mistral")
    assert cfg.options["method"] == "qlora" and cfg.options["lora_rank"] == 128
    assert any("TRL 0.22" in n and "--no-kbit-upcast --no-peft-autocast" in n for n in cfg.notes)


def test_torchtunes_dpo_recipe_runs_pairs_and_a_reference(tmp_path):
    """torchtune's 8B_lora_dpo.yaml (verbatim, SOURCES.md): batch_size 4 pairs is 8 rows in one forward, the
    reference the model with its adapters disabled (lora_dpo_*.py: disable_adapter); a full fine-tune's reference is
    a frozen copy (full_dpo_distributed.py, ref_checkpointer); SimPO none. The recipes' log-probabilities are fp32
    logits through one log_softmax over the whole vocabulary (--loss logsoftmax), not TRL's row by row."""
    recipe = RECIPES / "torchtune_llama3_1_8B_lora_dpo.yaml"
    cfg = workload_from_configs([recipe], gpus=2)
    o = cfg.options
    assert (o["batch"], o["reference"], o["loss"], o["method"], o["seq_len"]) == (8, "adapters-off",
                                                                                 "logsoftmax", "lora", 1024)
    assert not cfg.unmodelled
    doc = yaml.safe_load(recipe.read_text())

    def read(name, changed):
        path = tmp_path / name
        path.write_text(yaml.safe_dump(changed))
        return workload_from_configs([path], gpus=2).options

    full = read("full.yaml", dict(doc, model={"_component_": "torchtune.models.llama3_1.llama3_1_8b"},
                                  ref_checkpointer={}))
    assert full["reference"] == "copy"
    simpo = read("simpo.yaml", dict(doc, loss={"_component_": "torchtune.modules.rlhf.loss.SimPOLoss"}))
    assert simpo["reference"] == "none"
    sft = read("sft.yaml", {k: v for k, v in doc.items() if k != "loss"})
    assert sft["batch"] == 4 and "reference" not in sft
