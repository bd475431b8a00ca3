"""campaign quant for real on the CPU: a tiny Llama built here, torchao's int8 and int4 weight-only formats, every
variant evaluated on the same batches; bytes against a count from shapes, quality against the model's own loss."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchao")
pytest.importorskip("scipy")

from campaign.compress import compare_quant  # noqa: E402
from campaign.compress.variant import digest  # noqa: E402
from campaign.errors import InputError  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HIDDEN, INTER, LAYERS, VOCAB, KV_HEADS, HEADS = 64, 128, 2, 256, 2, 4


def tiny_llama(dtype=torch.bfloat16):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, num_hidden_layers=LAYERS, vocab_size=VOCAB,
                         max_position_embeddings=128)
    return LlamaForCausalLM(config).to(dtype)


def batches(rows=6, length=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        ids = torch.randint(0, VOCAB, (rows, length), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


@pytest.fixture(scope="module")
def report():
    return compare_quant({"model": tiny_llama(), "batches": batches()}, formats=["int8", "int4"], group_size=32)


def linear_shapes():
    """(out, in) of every Linear a format converts: the projections of each block (not the LM head)."""
    head = HIDDEN // HEADS
    per_layer = [(HEADS * head, HIDDEN), (KV_HEADS * head, HIDDEN), (KV_HEADS * head, HIDDEN), (HIDDEN, HEADS * head),
                 (INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER)]
    return per_layer * LAYERS


def test_int8_weight_bytes_are_one_byte_per_element_plus_scales(report):
    ref, int8 = report.variants[0], report.variants[1]
    assert (ref.name, int8.name) == ("bf16", "int8")
    # torchao int8 weight-only: int8 data, an fp32 scale and an int8 zero point per output row
    quantized = sum(o * i * 1 + o * 4 + o * 1 for o, i in linear_shapes())
    assert int8.quantized_bytes_stored == quantized
    dense_params = VOCAB * HIDDEN * 2 + HIDDEN * (2 * LAYERS + 1)          # embeddings, LM head, norms (bf16)
    buffers = sum(b.numel() * b.element_size() for b in tiny_llama().buffers())
    assert int8.weight_bytes_stored == quantized + dense_params * 2 + buffers
    assert ref.weight_bytes_stored == (sum(o * i for o, i in linear_shapes()) + dense_params) * 2 + buffers
    # campaign memory's int8 layout has no zero point: the estimate is the hand count less one byte per row (and
    # less the rotary buffers, which a spec read from the config does not list)
    assert int8.weight_bytes_estimated == int8.weight_bytes_stored - sum(o for o, _ in linear_shapes()) - buffers
    assert ref.weight_bytes_estimated == ref.weight_bytes_stored - buffers
    # measured by the CPU allocator's records at its 512-byte granularity: at most 511 B more per tensor
    tensors = 3 * len(linear_shapes()) + 2 + 2 * LAYERS + 1 + 1
    assert int8.weight_bytes_stored <= int8.weight_bytes_measured <= int8.weight_bytes_stored + 511 * tensors


def test_int4_on_the_cpu_stores_a_byte_per_value_and_the_estimate_packs_two(report):
    int4 = report.variants[2]
    # torchao's CPU int4: int8 per value, a bf16 scale and an int8 zero point per group of 32 input columns
    assert int4.quantized_bytes_stored == sum(o * i + (o * i // 32) * 3 for o, i in linear_shapes())
    assert int4.weight_bytes_estimated < int4.weight_bytes_stored
    assert any("one per int8 byte" in n for n in report.notes)


def test_quality_is_the_models_own_loss_and_differences_are_tested(report):
    model = tiny_llama()
    with torch.no_grad():
        losses = [model(input_ids=b["input_ids"], labels=b["input_ids"]).loss.float().item() for b in batches()]
    ref = report.variants[0]
    assert ref.quality == pytest.approx(math.exp(sum(losses) / len(losses)), rel=1e-3)
    for v in report.variants[1:]:
        assert v.delta == pytest.approx(v.quality - ref.quality)
        assert v.test.startswith("paired t on per-example NLL (12 examples)")
        assert 0 <= v.p_value <= 1 and v.interval[0] <= v.interval[1]
    # int4 moves the loss more than int8 does
    assert abs(report.variants[2].delta) > abs(report.variants[1].delta)
    assert report.passed and report.evaluation.examples == 12 and report.evaluation.tokens == 288


def test_a_broken_guard_flags_the_variant_and_exit_is_1(cli):
    r = cli("quant", str(EXAMPLES / "quant_setup.py") + ":classifier_setup", "--guard", "accuracy>=0", "--json")
    assert r.code == 1, r.err
    d = r.json()
    by = {v["name"]: v for v in d["variants"]}
    assert d["status"] == "fail" and by["int4"]["status"] == "flagged" and by["int8"]["status"] == "pass"
    assert by["int4"]["flips"][0] > by["int4"]["flips"][1]
    assert by["int4"]["test"].startswith("McNemar")


def test_kv_is_estimated_per_precision(report):
    per_token = 2 * LAYERS * KV_HEADS * (HIDDEN // HEADS)     # K and V elements per token
    assert [(k.dtype, k.bytes) for k in report.kv] == [("bf16", per_token * 2 * 24), ("fp8", per_token * 24),
                                                        ("int8", per_token * 24)]


def test_gpu_formats_are_refused_on_the_cpu_in_one_line(cli):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InputError, match="needs a CUDA GPU"):
        compare_quant({"model": tiny_llama(), "batches": batches()}, formats=["nf4"])
    r = cli("quant", str(EXAMPLES / "quant_setup.py") + ":make_setup", "--formats", "fp8")
    assert r.code == 2 and "needs a CUDA GPU" in r.err and len(r.err.strip().splitlines()) == 1


def test_a_calibrated_format_without_calibration_data_is_refused():
    with pytest.raises(InputError, match="calibrates on data"):
        compare_quant({"model": tiny_llama(), "batches": batches()}, formats=["gptq"])


def test_a_calibrated_format_runs_on_the_cpu_and_names_its_calibration_data():
    cal = batches(seed=7)
    r = compare_quant({"model": tiny_llama(), "batches": batches(), "calibration": cal,
                       "calibration_name": "random ids, seed 7"}, group_size=32)
    assert [v.name for v in r.variants] == ["bf16", "int8", "int4", "awq-int8"]   # calibrated: by default with data
    assert r.calibration.name == "random ids, seed 7" and r.calibration.sha256 == digest(cal, "x").sha256
    awq, int8 = r.variants[3], r.variants[1]
    assert awq.calibration == r.calibration.sha256 and int8.calibration is None
    # AWQ's int8 weight adds the searched input scale: one bf16 per input column of each converted Linear
    assert awq.quantized_bytes_stored == int8.quantized_bytes_stored + sum(i * 2 for _, i in linear_shapes())
    assert awq.test.startswith("paired t") and not any("are the evaluation batches" in n for n in r.notes)
    assert not any("every searched AWQ scale is 1" in n for n in r.notes)     # scales searched on real activations
    same = compare_quant({"model": tiny_llama(), "batches": batches(), "calibration": batches()},
                         formats=["awq-int8"])
    assert any("are the evaluation batches" in n for n in same.notes)


def test_evaluation_sets_that_differ_between_variants_are_refused():
    model = tiny_llama()

    def mutating(m, batch):                      # changes the data the next variant sees
        batch["input_ids"][0, 0] = (batch["input_ids"][0, 0] + 1) % VOCAB
        return ["a"] * batch["input_ids"].shape[0]

    setup = {"model": model, "batches": batches(), "predict": mutating, "gold": ["a"] * 12}
    with pytest.raises(InputError, match="batches changed while variant bf16"):
        compare_quant(setup, formats=["int8"])

    def short(m, batch):
        return ["a"]

    with pytest.raises(InputError, match="1 predictions for a batch of 6 rows"):
        compare_quant({"model": model, "batches": batches(), "predict": short, "gold": ["a"] * 12}, formats=[])


def test_cli_writes_json_csv_and_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out_csv, out_png = tmp_path / "q.csv", tmp_path / "q.png"
    r = cli("quant", str(EXAMPLES / "quant_setup.py") + ":make_setup", "--formats", "int8", "--json",
            "--csv", str(out_csv), "--plot", str(out_png), "--guard", "perplexity<=1")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["schema"] == "campaign.quant/1" and [v["name"] for v in d["variants"]] == ["bf16", "int8"]
    rows = list(csv.DictReader(out_csv.open(encoding="utf-8")))
    assert [row["variant"] for row in rows] == ["bf16", "int8"]
    assert int(rows[1]["weight_bytes_stored"]) == d["variants"][1]["weight_bytes_stored"]
    assert out_png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, fragment", [
    (["--formats", "int3"], "unknown format 'int3'"),
    (["--reference", "int8"], "is a quantized format"),
    (["--guard", "perplexity=>1"], "is not of the form"),
    (["--plot", "q.txt"], "use .png, .svg or .pdf"),
])
def test_bad_input_is_one_line_and_exit_2(cli, argv, fragment):
    r = cli("quant", str(EXAMPLES / "quant_setup.py") + ":make_setup", *argv)
    assert r.code == 2 and fragment in r.err and len(r.err.strip().splitlines()) == 1


def test_memory_freed_shows_as_a_smaller_card():
    """The 8B model's estimate by format: bf16 needs a larger card than int8, int8 than int4 (campaign memory)."""
    from campaign.compress.estimates import estimate_weights
    from campaign.compress.formats import FORMATS
    from campaign.hardware import all_cards
    from campaign.models import load_spec

    spec = load_spec("llama-3.1-8b")
    memory = {c.name: c.memory_bytes for c in all_cards()}
    got = {f: estimate_weights(spec, FORMATS[f], FORMATS["bf16"], 128, 4096, 1) for f in ("bf16", "int8", "int4")}
    assert got["bf16"][0] > got["int8"][0] > got["int4"][0]
    assert got["bf16"][1] > got["int8"][1] > got["int4"][1]
    assert memory[got["bf16"][2]] > memory[got["int8"][2]] >= memory[got["int4"][2]]
    assert memory[got["bf16"][2]] >= got["bf16"][1]


def test_a_model_directory_is_loaded_in_its_saved_precision(tmp_path):
    tiny_llama().save_pretrained(tmp_path / "m")
    r = compare_quant({"model": str(tmp_path / "m"), "batches": batches()}, formats=["int8"])
    assert r.reference == "bf16" and [v.name for v in r.variants] == ["bf16", "int8"]
    assert r.variants[0].weight_bytes_stored > r.variants[1].weight_bytes_stored


def test_extraction_outputs_are_compared_with_regress_and_validity_guards():
    import importlib.util

    spec = importlib.util.spec_from_file_location("quant_example", EXAMPLES / "quant_setup.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    made = example.classifier_setup()

    def as_json(model, batch):                   # the answer as a JSON object; row 0 of each batch is cut off
        labels = example.predict(model, batch)
        return [json.dumps({"label": a})[:-1] if i == 0 else json.dumps({"label": a}) for i, a in enumerate(labels)]

    setup = {**made, "metric": "extraction", "predict": as_json, "gold": [{"label": g} for g in made["gold"]]}
    r = compare_quant(setup, formats=["int8"], guards=["valid_json>=0"])
    ref, int8 = r.variants
    assert ref.metrics["valid_json"] == pytest.approx(45 / 48) and int8.status == "pass"
    assert int8.test.startswith("McNemar") and int8.guards[0].metric == "valid_json"


def test_tensor_predictions_and_labels_in_the_batches_are_read_as_labels():
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    model = LlamaForSequenceClassification(LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER,
                                                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                                       num_hidden_layers=LAYERS, vocab_size=VOCAB, num_labels=2,
                                                       pad_token_id=0))
    data = [{**b, "labels": torch.arange(6) % 2} for b in batches()]
    r = compare_quant({"model": model, "batches": data,
                       "predict": lambda m, b: m(input_ids=b["input_ids"]).logits.argmax(-1)}, formats=["int8"])
    assert r.metric == "classification" and r.evaluation.examples == 12
    assert {k for k in r.variants[0].metrics if k.startswith("f1[")} <= {"f1[0]", "f1[1]"}


def test_memory_freed_reads_as_a_cheaper_card_from_the_price_file(tmp_path):
    """The 8B model in bf16 (16 GB of weights alone) cannot fit a 16 GB T4; in int4 it can. With a T4 at $0.35/h and
    an L4 at $0.80/h, bf16's cheapest card is the L4 and int4's the T4."""
    from campaign.compress.estimates import cheapest_card, estimate_weights
    from campaign.compress.formats import FORMATS
    from campaign.models import load_spec
    from campaign.plan.prices import load_prices

    prices = tmp_path / "prices.yaml"
    prices.write_text("source: test\ndate: 2026-11-30\ncurrency: USD\ncards:\n"
                      "  - {card: T4-16GB, hourly: '0.35'}\n  - {card: L4-24GB, hourly: '0.80'}\n")
    table = load_prices(prices)
    spec = load_spec("llama-3.1-8b")
    fits = {f: estimate_weights(spec, FORMATS[f], FORMATS["bf16"], 128, 4096, 1)[3] for f in ("bf16", "int4")}
    assert cheapest_card(table, fits["bf16"]) == ("L4-24GB", 80)
    assert cheapest_card(table, fits["int4"]) == ("T4-16GB", 35)
    assert cheapest_card(table, set()) == (None, None)
