"""campaign quant (compress/inputs.py) checks every input of its own before the setup (the user's code, the
models) is loaded: a typo in a guard, a format or a path answers at once, in one line, exit 2. The setup file here
writes a marker when it is run, so each test proves the error came without it (no timing involved)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

from campaign.compress.quant import compare_quant  # noqa: E402
from campaign.errors import CampaignError  # noqa: E402

SETUP = textwrap.dedent('''
    from pathlib import Path

    HERE = Path(__file__).parent
    (HERE / "setup-imported").write_text("the setup file ran")


    def make_model():
        (HERE / "model-built").write_text("the reference model was built")
        raise RuntimeError("no model is built in these tests")


    def make_setup():
        import torch

        ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
        return {"model": make_model, "batches": [{"input_ids": ids}], "metric": "perplexity"}
''')


@pytest.fixture()
def setup_file(tmp_path):
    path = tmp_path / "setup.py"
    path.write_text(SETUP)
    return path


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    tmp.mkdir()
    a_file = tmp / "a-file"
    a_file.write_text("not a folder")
    bad_prices = tmp / "prices.yaml"
    bad_prices.write_text("- a list, not a price file\n")
    cases = [
        (["--guard", "perplexity=>1"], "is not of the form"),
        (["--guard", "acuracy>=-0.01"], "no metric is called 'acuracy'"),
        (["--guard", "perplexity<=1", "--guard", "f1>=0"], "no metric is called 'f1'"),
        (["--kv-dtype", "fp9"], "unknown kv dtype 'fp9'"),
        (["--kv-dtype", "bf16,int4"], "kv dtype 'int4' is a weight format"),
        (["--kv-dtype", "fp3"], "unknown kv dtype 'fp3'; did you mean 'fp32' or 'fp8'? KV caches use fp32, bf16, "
                                "fp16, fp8, int8."),
        (["--kv-dtype", "nf3"], "unknown kv dtype 'nf3' KV caches use"),    # no KV precision near: no weight format
        (["--kv-dtype", ","], "--kv-dtype names no precision"),
        (["--equivalence-margin", "0"], "margin 0.0: give the largest difference that does not matter"),
        (["--equivalence-margin", "nan"], "is not a finite number"),
        (["--formats", "int8,int3"], "unknown format 'int3'"),
        (["--reference", "int8"], "is a quantized format"),
        (["--reference", "fp64"], "unknown format 'fp64'"),
        (["--prices", str(tmp / "missing.yaml")], "no such file"),
        (["--prices", str(bad_prices)], "not an object"),
        (["--csv", str(a_file / "q.csv")], "is a file, not a folder"),
        (["--csv", str(tmp)], "is a folder"),
        (["--plot", "q.txt"], "use .png, .svg or .pdf"),
        (["--plot", str(a_file / "q.png")], "is a file, not a folder"),
        (["--group-size", "0"], "group size must be a positive integer"),
        (["--context", "0"], "context must be a positive integer"),
        (["--sequences", "0"], "sequences must be a positive integer"),
        (["--confidence", "1.5"], "confidence 1.5 must be between 0 and 1"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--formats", "int8,fp8"], "needs a CUDA GPU"))
    return cases


def test_every_bad_input_is_one_line_before_the_setup_is_loaded(cli, setup_file, tmp_path):
    cases = _bad_inputs(tmp_path / "paths")
    for argv, fragment in cases:
        r = cli("quant", f"{setup_file}:make_setup", *argv)
        assert r.code == 2, (argv, r.err)
        assert fragment in r.err and len(r.err.strip().splitlines()) == 1, (argv, r.err)
        assert not (tmp_path / "setup-imported").exists(), argv       # the setup file never ran
    assert len(cases) >= 18


def test_the_library_checks_its_inputs_before_calling_the_factory():
    calls = []

    def factory():
        calls.append("built")
        return {}

    for kwargs, fragment in [({"kv_dtypes": ["nf4"]}, "weight format"), ({"guards": ["accuracy=0"]}, "not of the form"),
                             ({"formats": ["int3"]}, "unknown format"), ({"reference": "int4"}, "quantized format"),
                             ({"guards": "perplexity<=x"}, "not of the form")]:
        with pytest.raises(CampaignError, match=fragment):
            compare_quant(factory, **kwargs)
    assert calls == []


def test_a_guard_on_another_metric_is_refused_once_the_setup_is_known_before_any_model(cli, setup_file, tmp_path):
    r = cli("quant", f"{setup_file}:make_setup", "--guard", "accuracy>=-0.01")
    assert r.code == 2 and "perplexity has no metric 'accuracy'" in r.err and "perplexity, nll" in r.err, r.err
    assert (tmp_path / "setup-imported").exists()                # the setup said its metric is perplexity...
    assert not (tmp_path / "model-built").exists()               # ...and no model was built for it


def test_progress_names_each_variant_with_counts():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 64), torch.nn.Linear(64, 32))

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": self.net(input_ids)})()

    ids = torch.randint(0, 32, (4, 12), generator=torch.Generator().manual_seed(1))
    phases = []
    r = compare_quant({"model": LM(), "batches": [{"input_ids": ids}]}, formats=["int8", "int4"], group_size=16,
                      progress=phases.append)
    assert [v.name for v in r.variants] == ["fp32", "int8", "int4"]
    variants = [p for p in phases if p.startswith("variant ")]
    assert [p.split(",")[0] for p in variants] == ["variant 1/3: fp32 (reference)", "variant 2/3: int8",
                                                   "variant 3/3: int4"]
    assert phases.index(variants[0]) > phases.index("the reference model") > 0
    assert phases[0] == "building the setup"


def test_a_calibrated_format_without_calibration_is_refused_before_any_model(cli, setup_file, tmp_path):
    r = cli("quant", f"{setup_file}:make_setup", "--formats", "int8,awq-int8")
    assert r.code == 2 and "calibrates on data" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert (tmp_path / "setup-imported").exists() and not (tmp_path / "model-built").exists()


def test_the_guard_names_known_in_advance_are_those_the_reports_compute():
    """GUARD_METRICS against the metrics() of a real classification and extraction report (with a schema and a
    required field, so every name shows), and perplexity's own."""
    from campaign.compress.inputs import GUARD_METRICS
    from campaign.compress.quality import quality_of
    from campaign.compress.setup import QuantSetup
    from campaign.evaluate.analysis import analyze_classification
    from campaign.evaluate.extraction import analyze_extraction
    from campaign.evaluate.predictions import Prediction, PredictionSet

    def families(names):
        return {n.split("[", 1)[0] + "[" if "[" in n else n for n in names}

    labels = PredictionSet("<x>", "", tuple(Prediction(str(i), g, p, i + 1) for i, (g, p) in
                                            enumerate([("a", "a"), ("b", "a"), ("b", "b")])))
    fields = PredictionSet("<y>", "", tuple(Prediction(str(i), g, p, i + 1) for i, (g, p) in
                                            enumerate([('{"city": "Oslo"}', '{"city": "Oslo"}'),
                                                       ('{"city": "Rome"}', 'not json')])))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    got = {"classification": families(analyze_classification(labels).metrics()),
           "extraction": families(analyze_extraction(fields, schema=schema).metrics()),
           "perplexity": families(quality_of(QuantSetup(model=None, batches=[]), [(2.0, 4)])[1])}
    assert got == {m: set(names) for m, names in GUARD_METRICS.items()}
