"""torchtune's custom_sharded_layers: the token embedding and the output as FSDP units of their own
(training.shard_model calls fully_shard on each named module, then on the root), gathered only for their own forward
and backward instead of with the root unit from forward to backward. Bytes worked by hand from the shapes of a tiny
Llama."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from campaign.errors import InputError
from campaign.memory import make_workload
from campaign.memory.phases import step_items, training_phases
from campaign.memory.training_config import workload_from_configs
from campaign.models.architectures import spec_from_config
from tests.conftest import tiny_llama

RECIPES = Path(__file__).parent / "recipes"

# tiny_llama: hidden 64, intermediate 160, 4 heads of 16, 2 KV heads, 2 layers, vocab 1000, untied head
H = 64
BLOCK = (64 * 64 + 2 * 32 * 64 + 64 * 64) + 3 * 64 * 160 + 2 * 64  # q, k, v, o + gate, up, down + 2 norms = 43,136
EMBED = OUTPUT = 1000 * 64  # tok_embeddings, output: 64,000 each
NORM = 64


def phases(**kw):
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    w = make_workload(method="full", dtype="bf16", batch=1, seq_len=16, gpus=4, shard="fsdp", grad_checkpointing=True,
                      **kw)
    return {p.name: p for p in training_phases(spec, w)}, spec


def items(phase, name):
    return [i.bytes for i in phase.items if i.name == name]


def test_root_unit_without_and_with_the_custom_sharded_modules():
    plain, _ = phases()
    own, _ = phases(fsdp_embedding_units=True)
    # at the loss: the root unit + one block (the blocks resharded after forward, the last prefetched for backward);
    # as the last layer recomputes: two blocks (current + prefetched) + the root unit; bf16 (2 B)
    assert items(plain["forward"], "all-gathered parameters") == [(BLOCK + EMBED + OUTPUT + NORM) * 2]
    assert items(own["forward"], "all-gathered parameters") == [(BLOCK + NORM) * 2]
    assert items(plain["backward"], "all-gathered parameters") == [(2 * BLOCK + EMBED + OUTPUT + NORM) * 2]
    assert items(own["backward"], "all-gathered parameters") == [(2 * BLOCK + NORM) * 2]
    assert plain["forward"].bytes - own["forward"].bytes == (EMBED + OUTPUT) * 2


def test_the_output_and_embedding_units_at_their_own_backward():
    """The output gathered again with its unsharded gradient at the start of backward; the embedding (the last
    backward) gathered with its gradient at the end."""
    spec = spec_from_config(tiny_llama(), name="tiny", source="test")
    w = make_workload(method="full", dtype="bf16", batch=1, seq_len=16, gpus=4, shard="fsdp",
                      fsdp_embedding_units=True)
    base = step_items(spec, w)
    assert [(i.name, i.bytes) for i in base.head_unit] == [
        ("output projection gathered for its backward", OUTPUT * 2),
        ("gradient of the output projection (unsharded)", OUTPUT * 2)]
    assert [(i.name, i.bytes) for i in base.embed_unit] == [
        ("token embedding gathered for its backward", EMBED * 2),
        ("gradient of the token embedding (unsharded)", EMBED * 2)]
    lora = step_items(spec, make_workload(method="lora", dtype="bf16", gpus=4, shard="fsdp",
                                          fsdp_embedding_units=True))
    assert [i.bytes for i in lora.head_unit] == [OUTPUT * 2]  # frozen output: gathered, no gradient
    assert step_items(spec, make_workload(method="full", dtype="bf16", gpus=4, shard="fsdp")).head_unit == ()


def test_the_recomputing_backward_holds_only_the_final_norm_gradient():
    """Without the option the head's gradient (final norm + output) is alive as the last layer recomputes (the root
    reduces at the end of backward); with it, the output reduced after its own backward: the norm's only."""
    plain, spec = phases()
    own, _ = phases(fsdp_embedding_units=True)

    assert step_items(spec, make_workload(method="full", dtype="bf16", gpus=4, shard="fsdp")).head == OUTPUT + NORM
    assert step_items(spec, make_workload(method="full", dtype="bf16", gpus=4, shard="fsdp",
                                          fsdp_embedding_units=True)).head == NORM


def test_tied_head_is_not_modelled_and_keeps_the_root():
    spec = spec_from_config(tiny_llama(tie_word_embeddings=True), name="tied", source="test")
    w = make_workload(method="full", dtype="bf16", batch=1, seq_len=16, gpus=4, shard="fsdp",
                      fsdp_embedding_units=True)
    fwd = next(p for p in training_phases(spec, w) if p.name == "forward")
    assert items(fwd, "all-gathered parameters") == [(BLOCK + EMBED + NORM) * 2]  # one block at the loss


def test_the_option_needs_fsdp():
    with pytest.raises(InputError, match="--shard fsdp"):
        make_workload(method="full", gpus=4, shard="zero3", fsdp_embedding_units=True)


def write(tmp_path, doc):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_published_70b_full_recipe_reads_custom_sharded_layers():
    """pytorch/torchtune 70B_full.yaml (0502cc55): custom_sharded_layers: ['tok_embeddings', 'output']."""
    recipe = RECIPES / "torchtune_llama3_1_70B_full.yaml"
    got = workload_from_configs([recipe], gpus=8)
    assert got.options["fsdp_embedding_units"] is True
    assert got.options["shard"] == "fsdp" and got.options["offload_params"] == "cpu"
    assert not [k for k in got.unmodelled if k.key == "custom_sharded_layers"]


def test_another_list_or_one_card_is_not_modelled(tmp_path):
    doc = yaml.safe_load((RECIPES / "torchtune_llama3_1_70B_full.yaml").read_text())
    doc["custom_sharded_layers"] = ["output"]
    got = workload_from_configs([write(tmp_path, doc)], gpus=8)
    assert "fsdp_embedding_units" not in got.options
    assert [k.key for k in got.unmodelled] == ["custom_sharded_layers"]
    lora = yaml.safe_load((RECIPES / "torchtune_llama3_1_70B_lora.yaml").read_text())
    lora["custom_sharded_layers"] = ["tok_embeddings", "output"]
    one = workload_from_configs([write(tmp_path, lora)])
    assert "fsdp_embedding_units" not in one.options and one.options.get("shard") is None


def test_70b_recipe_moves_the_forward_by_the_two_unit_weights(cli, tmp_path):
    """Llama 3.1 70B: embedding and output 128,256 x 8,192 each, bf16 on the card gathered: the forward (the loss,
    both resharded) drops by 2 x 1,050,673,152 x 2 B."""
    recipe = RECIPES / "torchtune_llama3_1_70B_full.yaml"
    doc = yaml.safe_load(recipe.read_text())
    del doc["custom_sharded_layers"]
    args = ("--gpus", "8", "--seq-len", "2048", "--json", "--no-solve")
    own = cli("memory", "llama-3.1-70b", "--config", str(recipe), *args).json()
    plain = cli("memory", "llama-3.1-70b", "--config", str(write(tmp_path, doc)), *args).json()

    def forward(d):
        return next(p["bytes"] for p in d["phases"] if p["name"] == "forward")

    assert forward(plain) - forward(own) == 2 * 128256 * 8192 * 2


def test_the_reference_row_given_by_its_recipe_reads_as_the_recipe_file():
    """benchmarks/memory_reference.py's torchtune 70B full row carries its recipe's keys (`config`): they read into
    the workload `campaign memory --config 70B_full.yaml --gpus 8 --seq-len 2048` gets from the file (the published
    recipe, tests/memory/recipes)."""
    import importlib.util
    import json

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("memory_reference", root / "benchmarks" / "memory_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = json.loads((root / "benchmarks" / "memory_reference_data.json").read_text(encoding="utf-8"))
    entry = next(e for e in data["entries"] if e["id"] == "torchtune-llama3.1-70b-full-fsdp-cpu-offload-8xa100-bs2-"
                 "packed2048")
    got = module.workload_for(entry)
    options = workload_from_configs([RECIPES / "torchtune_llama3_1_70B_full.yaml"], gpus=8).options
    assert got == make_workload(**{**options, "gpus": 8, "seq_len": 2048})
    assert got.fsdp_embedding_units and got.offload_params == "cpu" and got.loss == "chunked"
