"""campaign quant's verdict is a promise: a precision listed as a variant is really cast to it (bytes counted from
parameter shapes, quality from the cast model's own loss), a NaN or inf model fails quant.finite with or without
guards, equivalence at a stated margin matches statsmodels' ttost_paired, an exception in the user's model is one
line naming the user's code (exit 2), and an AWQ whose every scale is 1 says it is int8 bit for bit."""
from __future__ import annotations

import json
import math
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchao")
pytest.importorskip("scipy")

from campaign.compress import compare_quant  # noqa: E402
from campaign.errors import InputError  # noqa: E402
from tests.compress.test_quant import HIDDEN, LAYERS, VOCAB, batches, linear_shapes, tiny_llama  # noqa: E402

# every parameter of the tiny Llama, from its shapes: the block projections, embeddings, LM head, the norms
PARAMS = sum(o * i for o, i in linear_shapes()) + VOCAB * HIDDEN * 2 + HIDDEN * (2 * LAYERS + 1)


def buffer_elements() -> int:
    return sum(b.numel() for b in tiny_llama().buffers())


def per_example_nll(model, data) -> list[float]:
    """Each row's mean token NLL, by hand: logits in fp32, next-token cross entropy, averaged over the row."""
    out = []
    with torch.no_grad():
        for b in data:
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), b["input_ids"][:, 1:],
                                                    reduction="none")
            out += nll.mean(1).tolist()
    return out


@pytest.fixture(scope="module")
def fp32_reference():
    """An fp32 model compared with bf16, fp16 and int8 variants of it."""
    return compare_quant({"model": tiny_llama(torch.float32), "batches": batches()}, reference="fp32",
                         formats=["bf16", "fp16", "int8"])


def test_a_precision_listed_as_a_variant_is_cast_to_it(fp32_reference):
    r = fp32_reference
    by = {v.name: v for v in r.variants}
    assert [v.name for v in r.variants] == ["fp32", "bf16", "fp16", "int8"]
    # stored bytes from the shapes: 4 bytes per element in fp32, 2 in bf16 and fp16 (parameters and buffers)
    assert by["fp32"].weight_bytes_stored == (PARAMS + buffer_elements()) * 4
    assert by["bf16"].weight_bytes_stored == (PARAMS + buffer_elements()) * 2
    assert by["fp16"].weight_bytes_stored == (PARAMS + buffer_elements()) * 2
    # quality: the cast model's own loss, computed here by transformers
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        model = tiny_llama(torch.float32).to(dtype)
        with torch.no_grad():
            losses = [model(input_ids=b["input_ids"], labels=b["input_ids"]).loss.float().item() for b in batches()]
        assert by[name].quality == pytest.approx(math.exp(sum(losses) / len(losses)), rel=1e-4)
        # the cast changes the outputs, so the difference is not identically zero and the test is a real one
        assert by[name].delta != 0 and by[name].p_value < 1
    assert r.passed and {c.id: c.status for c in r.checks}["quant.finite"] == "pass"


def test_the_reference_precision_of_a_bf16_model_listed_as_fp32_is_converted():
    r = compare_quant({"model": tiny_llama(), "batches": batches()}, formats=["fp32"])
    ref, fp32 = r.variants
    assert (ref.name, fp32.name) == ("bf16", "fp32")
    assert ref.weight_bytes_stored == (PARAMS + buffer_elements()) * 2
    assert fp32.weight_bytes_stored == (PARAMS + buffer_elements()) * 4
    assert fp32.delta != 0                       # fp32 arithmetic on the same (exactly widened) weights


def nan_planted(where: str):
    model = tiny_llama(torch.float32)
    with torch.no_grad():
        if where == "weight":               # one weight NaN: every variant, the reference included, is NaN
            model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
        else:                               # beyond fp16's range (65504): inf in the fp16 cast only
            model.model.embed_tokens.weight[:, 0] = 1e5
    return model


def test_a_nan_reference_fails_quant_finite_without_guards():
    r = compare_quant({"model": nan_planted("weight"), "batches": batches()}, reference="fp32", formats=["int8"])
    checks = {c.id: c for c in r.checks}
    assert checks["quant.finite"].status == "fail" and r.status == "fail"
    assert "fp32 (the reference): perplexity nan" in checks["quant.finite"].seen
    assert r.variants[1].p_value is None and r.variants[1].status == "flagged"


def test_a_variant_that_overflows_to_nan_fails_and_exits_1(tmp_path, cli):
    setup = tmp_path / "setup.py"
    setup.write_text(textwrap.dedent('''
        from tests.compress.test_quant import batches
        from tests.compress.test_quant_checks import nan_planted


        def make():
            return {"model": nan_planted("fp16-overflow"), "batches": batches()}
    '''))
    r = cli("quant", f"{setup}:make", "--reference", "fp32", "--formats", "bf16,fp16", "--guard", "perplexity<=1000",
            "--json")
    assert r.code == 1, r.err
    d = json.loads(r.out)
    checks = {c["id"]: c for c in d["checks"]}
    by = {v["name"]: v for v in d["variants"]}
    assert d["status"] == "fail" and checks["quant.finite"]["status"] == "fail"
    assert checks["quant.finite"]["seen"] == "fp16: perplexity nan"
    assert by["fp16"]["quality"] is None and by["fp16"]["status"] == "flagged" and by["fp16"]["p_value"] is None
    assert by["bf16"]["finite"] and math.isfinite(by["bf16"]["quality"])
    text = cli("quant", f"{setup}:make", "--reference", "fp32", "--formats", "fp16")
    assert text.code == 1 and "FAILED (perplexity not finite: fp16)" in text.out


def peaked():
    """The fp32 model with its LM head x 30: confident logits, so casting to bf16 moves each example's NLL by far
    more than fp32 rounding (the hand computation and the command's agree to ~1e-6)."""
    model = tiny_llama(torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(30)
    return model


def test_equivalence_at_a_margin_matches_statsmodels():
    import numpy as np
    from statsmodels.stats.weightstats import ttost_paired

    ref = per_example_nll(peaked(), batches())
    var = per_example_nll(peaked().to(torch.bfloat16), batches())
    d = [v - b for v, b in zip(var, ref, strict=True)]
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))
    assert abs(mean) > 100 * 1e-6 and se > 100 * 1e-6                # far above the rounding of either side
    wide, tight = abs(mean) + 4 * se, abs(mean) + 0.5 * se
    for margin, equivalent in ((wide, True), (tight, False)):
        r = compare_quant({"model": peaked(), "batches": batches()}, formats=["bf16"], margin=margin)
        e = r.variants[1].equivalence
        expected = ttost_paired(np.array(var), np.array(ref), -margin, margin)[0]
        assert e.p_value == pytest.approx(expected, rel=1e-3), (margin, e.p_value, expected)
        assert e.equivalent is equivalent and e.difference == pytest.approx(mean, rel=1e-3, abs=1e-5)
        check = {c.id: c for c in r.checks}["equivalence.within_margin"]
        assert check.status == ("pass" if equivalent else "fail") and r.status == check.status


def test_equivalence_of_accuracy_in_points_in_the_cli(cli, tmp_path):
    import csv
    from pathlib import Path

    out = tmp_path / "q.csv"
    setup = Path(__file__).resolve().parents[2] / "examples" / "quant_setup.py"
    r = cli("quant", f"{setup}:classifier_setup", "--formats", "int8", "--equivalence-margin", "0.5", "--json")
    d = json.loads(r.out)
    int8 = d["variants"][1]
    # 48 examples: a difference of a few flips lies well inside +/-50 points
    assert int8["equivalence"]["margin"] == 0.5 and int8["equivalence"]["p_value"] < 0.05
    assert {c["id"]: c["status"] for c in d["checks"]}["equivalence.within_margin"] == "pass" and r.code == 0
    text = cli("quant", f"{setup}:classifier_setup", "--formats", "int8", "--equivalence-margin", "0.5",
               "--csv", str(out))
    assert "int8: equivalent within ±50 points (TOST p = " in text.out
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert rows[0]["equivalence_p_value"] == "" and rows[1]["equivalence_margin"] == "0.5"
    assert float(rows[1]["equivalence_p_value"]) == pytest.approx(int8["equivalence"]["p_value"], rel=1e-3)
    bad = cli("quant", f"{setup}:classifier_setup", "--equivalence-margin", "-1")
    assert bad.code == 2 and "margin -1.0" in bad.err and len(bad.err.strip().splitlines()) == 1
    whole = cli("quant", f"{setup}:classifier_setup", "--equivalence-margin", "1")   # any accuracy is within +/-1
    assert whole.code == 2 and "a margin of 1 or more holds for any variant" in whole.err


class RaisingModel(torch.nn.Module):
    """A user's model whose forward fails on the evaluation batches."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, input_ids, attention_mask=None):
        raise ValueError("planted: this forward does not run")


def failing_factory():
    raise RuntimeError("planted: the factory fails")


def test_an_exception_in_the_users_model_names_the_users_code():
    data = [{"input_ids": torch.zeros(2, 4, dtype=torch.long)}]
    with pytest.raises(InputError, match=r"raised ValueError in .*test_quant_checks\.py:forward \(line \d+\): planted"):
        compare_quant({"model": RaisingModel(), "batches": data}, formats=[])
    with pytest.raises(InputError, match=r"'failing_factory' raised RuntimeError in .*test_quant_checks\.py:"
                                         r"failing_factory \(line \d+\): planted"):
        compare_quant({"model": failing_factory, "batches": data}, formats=[])


def test_an_exception_inside_a_library_says_so_not_the_users_code():
    # a transformers model (as loaded from a folder: it runs no code of the user's) given token 12 with a vocabulary
    # of 10: torch raises in its embedding; the line names that frame as a library's and points at what the library
    # was given, not at "your forward"
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config)
    data = [{"input_ids": torch.full((2, 4), 12, dtype=torch.long)}]
    with pytest.raises(InputError) as raised:
        compare_quant({"model": model, "batches": data}, formats=[])
    line = str(raised.value)
    assert "IndexError in " in line and "torch" in line
    assert "inside a library (no frame outside the installed packages)" in line
    assert "check what the library was given (the batches, the format)" in line
    assert "test_quant_checks.py" not in line and len(line.splitlines()) == 1


def test_an_exception_or_exit_in_a_setup_files_model_is_exit_2(tmp_path, cli):
    setup = tmp_path / "broken_setup.py"
    setup.write_text(textwrap.dedent('''
        import sys

        import torch


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(8, 8)

            def forward(self, input_ids, attention_mask=None):
                return self.proj(input_ids)          # a LongTensor into a float Linear: torch raises


        def exiting():
            sys.exit(0)


        def make():
            return {"model": Model(), "batches": [{"input_ids": torch.zeros(2, 8, dtype=torch.long)}]}


        def make_exiting():
            return {"model": exiting, "batches": [{"input_ids": torch.zeros(2, 8, dtype=torch.long)}]}


        def setup_exits():
            sys.exit(5)
    '''))
    r = cli("quant", f"{setup}:make", "--formats", "int8")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"in {setup}:forward (line 13): " in r.err and "variant" in r.err
    r = cli("quant", f"{setup}:make_exiting", "--formats", "int8")
    assert r.code == 2 and f"exited (0) in {setup}:exiting (line 17)" in r.err, r.err
    r = cli("quant", f"{setup}:setup_exits")
    assert r.code == 2 and f"{setup}:setup_exits" in r.err and len(r.err.strip().splitlines()) == 1, r.err


class SignEmbedding(torch.nn.Module):
    """Embeddings of +/-1 into one Linear: every input channel's mean |x| is 1, so AWQ's searched scale is 1 for
    every ratio it tries, and awq-int8 is int8 itself."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Embedding(16, 32)
        self.proj = torch.nn.Linear(32, 3)
        with torch.no_grad():
            self.emb.weight.copy_(torch.where(torch.rand(16, 32, generator=g) < 0.5, -1.0, 1.0))
            self.proj.weight.copy_(torch.randn(3, 32, generator=g))

    def forward(self, input_ids, attention_mask=None):
        return self.proj(self.emb(input_ids)).mean(1)


def test_awq_whose_every_scale_is_1_says_it_is_int8():
    g = torch.Generator().manual_seed(3)
    data = [{"input_ids": torch.randint(0, 16, (8, 6), generator=g)} for _ in range(2)]
    cal = [{"input_ids": torch.randint(0, 16, (8, 6), generator=g)}]
    model = SignEmbedding()
    gold = [int(x) for b in data for x in model(b["input_ids"]).argmax(-1)]
    r = compare_quant({"model": model, "batches": data, "metric": "classification", "gold": gold,
                       "predict": lambda m, b: m(b["input_ids"]).argmax(-1).tolist(), "calibration": cal},
                      formats=["int8", "awq-int8"])
    by = {v.name: v for v in r.variants}
    note = [n for n in r.notes if "every searched AWQ scale is 1" in n]
    assert note and note[0].startswith("awq-int8: every searched AWQ scale is 1 (1 Linear layers) and its outcomes "
                                       "are int8's")
    assert by["awq-int8"].quality == by["int8"].quality
    # the only extra tensor is the scale itself: one fp32 per input column of the converted Linear
    assert by["awq-int8"].quantized_bytes_stored == by["int8"].quantized_bytes_stored + 32 * 4


def test_kv_precisions_are_measured_on_the_same_examples(fp32_reference):
    """fp8 and int8 KV caches: the reference's perplexity with its keys and values rounded by hand here (float8
    e4m3 saturated at 448; int8 with one absmax scale per token and 16-element head) and the paired test."""
    rows = {k.dtype: k for k in fp32_reference.kv}
    ref = fp32_reference.variants[0]
    assert rows["fp32"].quality == ref.quality and rows["fp32"].delta == 0.0

    def fp8(x):
        return x.clamp(-448, 448).to(torch.float8_e4m3fn).to(x.dtype)

    def int8(x):
        g = x.reshape(*x.shape[:-1], -1, HIDDEN // 4)                  # 4 heads of 16
        scale = g.abs().amax(-1, keepdim=True) / 127
        return (torch.round(g / scale) * scale).reshape(x.shape)

    for dtype, rounding in (("fp8", fp8), ("int8", int8)):
        model = tiny_llama(torch.float32)
        for layer in model.model.layers:
            for proj in (layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.register_forward_hook(lambda _m, _i, out, f=rounding: f(out))
        with torch.no_grad():
            losses = [model(input_ids=b["input_ids"], labels=b["input_ids"]).loss.item() for b in batches()]
        row = rows[dtype]
        assert row.quality == pytest.approx(math.exp(sum(losses) / len(losses)), rel=1e-5)
        assert row.delta == pytest.approx(row.quality - ref.quality) and row.delta != 0
        assert 0 < row.p_value <= 1 and row.measured.startswith("measured: K and V")
        assert "4 k_proj/v_proj layers" in row.measured


def test_kv_precisions_without_key_and_value_projections_stay_estimated():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB, n_positions=64))
    r = compare_quant({"model": model, "batches": batches(length=12)}, formats=[])
    assert [k.dtype for k in r.kv] == ["fp32", "fp8", "int8"]
    assert all(k.measured == "" and k.quality is None for k in r.kv)      # GPT-2's c_attn holds Q, K and V at once
    assert any("its effect on quality is not measured here" in n for n in r.notes)


def test_two_calibration_sets_are_each_fitted_and_compared():
    from campaign.compress.variant import digest

    sets = {"seed 7": batches(seed=7), "seed 9": batches(rows=2, seed=9)}
    r = compare_quant({"model": tiny_llama(), "batches": batches(), "calibration": sets}, formats=["awq-int8"])
    by = {v.name: v for v in r.variants}
    assert list(by) == ["bf16", "awq-int8 (seed 7)", "awq-int8 (seed 9)"]
    assert [(c.name, c.examples, c.sha256) for c in r.calibrations] == [
        ("seed 7", 12, digest(sets["seed 7"], "x").sha256), ("seed 9", 4, digest(sets["seed 9"], "x").sha256)]
    assert by["awq-int8 (seed 9)"].calibration == r.calibrations[1].sha256
    (c,) = r.calibration_comparisons
    assert (c.format, c.first, c.second) == ("awq-int8", "seed 7", "seed 9")
    assert c.quality_first == by["awq-int8 (seed 7)"].quality and c.quality_second == by["awq-int8 (seed 9)"].quality
    assert c.delta == pytest.approx(c.quality_second - c.quality_first) and c.delta != 0     # different fits
    assert c.test.startswith("paired t on per-example NLL (12 examples)") and 0 < c.p_value <= 1
    with pytest.raises(InputError, match="calibration set 'empty' must be a non-empty list"):
        compare_quant({"model": tiny_llama(), "batches": batches(), "calibration": {"a": batches(), "empty": []}},
                      formats=["awq-int8"])


def test_the_example_names_two_calibration_sets():
    from pathlib import Path

    from campaign.compress import load_quant_setup

    s = load_quant_setup(str(Path(__file__).resolve().parents[2] / "examples" / "quant_setup.py") +
                         ":calibrated_setup")
    assert list(s.calibration_sets()) == ["set A", "set B"] and s.calibration_name == "set A"
    assert [len(b) for b in s.calibration_sets().values()] == [1, 1]
