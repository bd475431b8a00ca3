"""Bad input through every reader and every numeric option: a refusal is exit 2 with one line naming what and
where, never an internal error (exit 3), a traceback, or a silent exit 0 on input that cannot be right."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ..conftest import tiny_llama

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Ways a JSON file can be broken, whatever it is meant to hold.
BROKEN_JSON = {
    "giant integer": b'{"a": ' + b"9" * 5000 + b"}",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "not UTF-8": b'{"a": "caf\xe9"}',
    "truncated": b'{"a": ',
    "empty": b"",
    "a list": b"[1, 2]",
    "a string": b'"text"',
    "a number": b"5",
    "null": b"null",
}


def refused(r, *fragments: str) -> None:
    """Exit 2, one line on stderr naming the problem, nothing half-printed on stdout."""
    assert r.code == 2, (r.code, r.out[-300:], r.err)
    assert r.err.count("\n") == 1 and "Traceback" not in r.err and "internal error" not in r.err, r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


def never_internal(r) -> None:
    assert r.code in (0, 1, 2), (r.code, r.err)
    assert "internal error" not in r.err and "Traceback" not in r.err, r.err
    assert r.err.count("\n") <= 1 or r.code != 2, r.err


# ------------------------------------------------------------------------------------------ JSON readers

@pytest.fixture
def measurement():
    """A minimal valid measurement record, written by hand from the documented schema."""
    return {"schema": "campaign.measurement/1", "label": "x", "status": "ok",
            "phases": [{"name": "forward", "allocated_bytes": 10, "peak_allocated_bytes": 20, "reserved_bytes": 20,
                        "peak_reserved_bytes": 20, "device_used_bytes": None, "seconds": 0.1}],
            "environment": {"device": "cpu", "device_name": "x", "total_memory_bytes": None, "torch": "2",
                            "cuda": None, "hip": None, "driver": None, "python": "3", "platform": "x"}}


def test_the_measurement_schema_name_is_the_one_measure_writes(measurement):
    from campaign.memory.measurement import SCHEMA

    assert measurement["schema"] == SCHEMA


def _reader_cases(tmp_path, measurement):
    """(reader, write(payload) -> argv) for every JSON file a command reads."""
    def config(payload):
        d = tmp_path / "cfg"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_bytes(payload)
        return ["memory", str(d)]

    def index(payload):
        d = tmp_path / "idx"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps(tiny_llama()), encoding="utf-8")
        (d / "model.safetensors.index.json").write_bytes(payload)
        return ["memory", str(d)]

    def header(payload):
        d = tmp_path / "st"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps(tiny_llama()), encoding="utf-8")
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(payload)) + payload)
        return ["memory", str(d)]

    def measured(payload):
        (tmp_path / "m.json").write_bytes(payload)
        return ["explain", "gpt2", "--measured", str(tmp_path / "m.json")]

    def estimate(payload):
        (tmp_path / "e.json").write_bytes(payload)
        (tmp_path / "good_m.json").write_text(json.dumps(measurement), encoding="utf-8")
        return ["explain", str(tmp_path / "e.json"), str(tmp_path / "good_m.json")]

    def manifest(payload):
        (tmp_path / "split_manifest.json").write_bytes(payload)
        return ["usage", str(tmp_path / "split_manifest.json")]

    def schema(payload):
        preds = tmp_path / "p.jsonl"
        preds.write_text('{"id": 1, "gold": {"a": 1}, "pred": {"a": 1}}\n', encoding="utf-8")
        (tmp_path / "schema.json").write_bytes(payload)
        return ["errors", str(preds), "--task", "extraction", "--schema", str(tmp_path / "schema.json")]

    def data_line(payload):
        (tmp_path / "d.jsonl").write_bytes(b'{"text": "a fine first row"}\n' + payload.replace(b"\n", b" ") + b"\n")
        return ["split", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "o"), "--ratios", "50/50"]

    def predictions_line(payload):
        (tmp_path / "pr.jsonl").write_bytes(b'{"id": 1, "gold": "a", "pred": "a"}\n' + payload.replace(b"\n", b" ")
                                            + b"\n")
        return ["errors", str(tmp_path / "pr.jsonl")]

    def seeds_line(payload):
        (tmp_path / "s.jsonl").write_bytes(b'{"variant": "baseline", "seed": 0, "metric": 1}\n'
                                           + payload.replace(b"\n", b" ") + b"\n")
        return ["seeds", str(tmp_path / "s.jsonl")]

    def plan(payload):
        (tmp_path / "plan.yaml").write_bytes(payload)
        return ["budget", str(tmp_path / "plan.yaml")]

    def prices(payload):
        (tmp_path / "good_plan.yaml").write_text('{"card": "h100", "phases": [{"name": "a", "hours": 2}]}',
                                                 encoding="utf-8")
        (tmp_path / "prices.yaml").write_bytes(payload)
        return ["budget", str(tmp_path / "good_plan.yaml"), "--prices", str(tmp_path / "prices.yaml")]

    def factors(payload):
        (tmp_path / "factors.yaml").write_bytes(payload)
        return ["ablate", "plan", str(tmp_path / "factors.yaml")]

    def cost(payload):
        (tmp_path / "cost.yaml").write_bytes(payload)
        return ["bench", str(tmp_path / "cost.yaml")]

    def ds_config(payload):
        (tmp_path / "ds_config.json").write_bytes(payload)
        return ["memory", "llama-3.1-8b", "--shard", "zero3", "--gpus", "8", "--deepspeed",
                str(tmp_path / "ds_config.json")]

    def training_config(payload):
        (tmp_path / "args.json").write_bytes(payload)
        return ["memory", "llama-3.1-8b", "--config", str(tmp_path / "args.json")]

    def harness_line(payload):
        # an lm_eval --log_samples file: one good sample, then the broken line; errors reads one run, regress two
        good = json.dumps({"doc_id": 0, "doc": {"q": "a"}, "target": "1", "filtered_resps": ["1"],
                           "filter": "none", "metrics": ["acc"], "doc_hash": "h0", "acc": 1.0})
        for name in ("samples_task_2026-01-01T00-00-00.jsonl", "samples_task_2026-01-02T00-00-00.jsonl"):
            (tmp_path / name).write_bytes(good.encode() + b"\n" + payload.replace(b"\n", b" ") + b"\n")
        return ["errors", str(tmp_path / "samples_task_2026-01-01T00-00-00.jsonl")]

    def harness_pair(payload):
        harness_line(payload)
        return ["regress", str(tmp_path / "samples_task_2026-01-01T00-00-00.jsonl"),
                str(tmp_path / "samples_task_2026-01-02T00-00-00.jsonl")]

    return {"DeepSpeed config": ds_config, "training config": training_config, "lm-eval samples": harness_line,
            "lm-eval samples pair": harness_pair,
            "config.json": config, "safetensors index": index, "safetensors header": header,
            "measurement": measured, "estimate": estimate, "split manifest": manifest, "JSON schema": schema,
            "data record": data_line, "prediction record": predictions_line, "seeds record": seeds_line,
            "plan file": plan, "price file": prices, "factors file": factors, "cost file": cost}


@pytest.mark.parametrize("broken", sorted(BROKEN_JSON))
def test_every_json_reader_refuses_every_broken_file_in_one_line(cli, tmp_path, measurement, broken):
    for reader, write in _reader_cases(tmp_path, measurement).items():
        payload = BROKEN_JSON[broken]
        if (reader.endswith("record") or reader.startswith("lm-eval")) and broken in ("empty",):
            continue                     # a blank line in JSONL is skipped, by design
        r = cli(*write(payload))
        if reader == "JSON schema" and broken in ("null",):
            continue                     # no schema given is allowed
        refused(r)
        assert r.code == 2, (reader, broken)


# Wrong types and impossible values inside otherwise well-formed files.
def _tensor(**over):
    entry = {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}
    entry.update(over)
    return {"w": entry}


WRONG_FIELDS = [
    ("safetensors header", _tensor(dtype=["F32"]), "field 'dtype' must be a string"),
    ("safetensors header", _tensor(data_offsets=["0", "32"]), "data_offsets"),
    ("safetensors header", _tensor(shape=[-320]), "shape [-320] must list whole numbers >= 0"),
    ("safetensors header", _tensor(shape=[1e300]), "must list whole numbers"),
    ("safetensors header", _tensor(shape=[2**40, 2**40]), "more than any real tensor"),
    ("safetensors header", _tensor(shape=[2, 5]), "needs 40 bytes, data_offsets span 32"),
    ("safetensors header", _tensor(data_offsets=[32, 0]), "begin <= end"),
    ("safetensors index", {"weight_map": ["model.safetensors"]}, "field 'weight_map' must be an object"),
    ("safetensors index", {"weight_map": {"w": 1}}, "not a shard file name"),
    ("safetensors index", {"weight_map": {"w": "../../etc/passwd"}}, "not a shard file name"),
    ("measurement", {"phases": [{"name": "forward", "peak_allocated_bytes": "12"}]}, "must be a whole number"),
    ("measurement", {"phases": [{"name": "forward", "peak_allocated_bytes": None}]}, "missing field"),
    ("measurement", {"phases": [{"name": "forward", "peak_allocated_bytes": 1e308}]}, "must be a whole number"),
    ("measurement", {"phases": [{"name": "forward", "peak_allocated_bytes": -5}]}, "between 0 and"),
    ("measurement", {"phases": "forward"}, "field 'phases' must be an array"),
    ("measurement", {"environment": []}, "field 'environment' must be an object"),
    ("estimate", {"phases": [{"name": "forward", "bytes": -1}]}, "between 0 and"),
    ("estimate", {"peak_allocated_bytes": float("nan")}, "must be a whole number"),
    ("DeepSpeed config", {"zero_optimization": {"stage": 3, "reduce_bucket_size": "big"}},
     "ds_config.json: zero_optimization.reduce_bucket_size: 'big' is not a whole number"),
    ("DeepSpeed config", {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": -1}},
     "ds_config.json: zero_optimization.stage3_max_live_parameters: -1 is not a whole number"),
    ("DeepSpeed config", {"zero_optimization": {"stage": 3, "overlap_comm": "yes"}}, "'yes' is not true or false"),
    ("DeepSpeed config", {"zero_optimization": {"stage": 3, "reduce_buket_size": 5e8}}, "reduce_buket_size"),
    ("training config", {"output_dir": "o", "per_device_train_batch_size": [4]},
     "args.json: per_device_train_batch_size: [4] is not a positive whole number"),
    ("lm-eval samples", {"doc_id": 1, "doc": {"q": "b"}, "filter": "none", "metrics": ["acc"], "acc": "high"},
     "samples_task_2026-01-01T00-00-00.jsonl:2"),
]


@pytest.mark.parametrize("reader, change, fragment", WRONG_FIELDS,
                         ids=[f"{r}:{f}" for r, _, f in WRONG_FIELDS])
def test_wrong_types_and_impossible_values_are_refused_naming_the_field(cli, tmp_path, measurement, reader, change,
                                                                        fragment):
    write = _reader_cases(tmp_path, measurement)[reader]
    if reader == "measurement":
        doc = json.loads(json.dumps(measurement))
        for key, value in change.items():
            if key == "phases" and isinstance(value, list):
                doc["phases"] = [{**doc["phases"][0], **{k: v for k, v in value[0].items() if v is not None}}]
                doc["phases"][0].update({k: None for k, v in value[0].items() if v is None})
            else:
                doc[key] = value
        payload = json.dumps(doc).encode()
    elif reader == "estimate":
        from campaign.memory import estimate_memory, make_workload
        from campaign.models import load_spec

        doc = estimate_memory(load_spec("gpt2"), make_workload(mode="train", batch=1, seq_len=128)).to_dict()
        for key, value in change.items():
            doc[key] = [{**doc[key][0], **value[0]}] if key == "phases" else value
        payload = json.dumps(doc).encode()
    else:
        payload = json.dumps(change).encode()
    if reader == "safetensors index":
        (tmp_path / "idx").mkdir(exist_ok=True)
        (tmp_path / "idx" / "model.safetensors").write_bytes(b"")
    r = cli(*write(payload))
    refused(r, fragment)


def test_an_unreadable_hf_cache_ref_falls_back_to_the_newest_snapshot(cli, tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--org--tiny"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(tiny_llama()), encoding="utf-8")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_bytes(b"\xff\xfe\x00bad")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    r = cli("memory", "org/tiny", "--json")
    assert r.code in (0, 1) and r.json()["model"] == "org/tiny"


def test_a_data_file_that_is_a_symlink_loop_or_a_directory_is_named_as_such(cli, tmp_path):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    for argv in (["split", str(loop), "--out", str(tmp_path / "o")], ["leaks", str(loop), str(loop)],
                 ["errors", str(loop)], ["seeds", str(loop)]):
        refused(cli(*argv), "symbolic link that loops")
    (tmp_path / "dir.jsonl").mkdir()
    refused(cli("errors", str(tmp_path / "dir.jsonl")), "is a directory")


def test_impossible_model_configs_are_refused(cli, write_config):
    moe = tiny_llama(model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=4,
                     num_experts_per_tok=5)
    refused(cli("memory", str(write_config(moe, "moe"))), "5 experts per token of 4 experts")


def test_an_empty_or_header_only_file_is_not_called_leak_free(cli, tmp_path):
    good = tmp_path / "eval.jsonl"
    good.write_text('{"text": "a row to check"}\n', encoding="utf-8")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "header.csv").write_text("text,label\n", encoding="utf-8")
    refused(cli("leaks", str(tmp_path / "empty.jsonl"), str(good)), "no records to check")
    refused(cli("leaks", str(tmp_path / "header.csv"), str(good)), "no records to check")
    refused(cli("leaks", str(good), str(tmp_path / "empty.jsonl")), "no records to check")


def test_json_output_is_strict_json_even_when_a_statistic_is_infinite(cli, tmp_path):
    """Equal differences make the t statistic infinite: --json prints null there (with the note), never
    Infinity or NaN, which are not JSON."""
    rows = [f"{v},{s},{m}" for s, (b, c) in enumerate([(1, 2), (1, 2), (3, 4)]) for v, m in (("baseline", b),
                                                                                             ("candidate", c))]
    (tmp_path / "s.csv").write_text("variant,seed,metric\n" + "\n".join(rows) + "\n", encoding="utf-8")
    r = cli("seeds", str(tmp_path / "s.csv"), "--json")
    assert r.code == 0
    json.loads(r.out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert "Infinity" not in r.out and "NaN" not in r.out
    assert any("t statistic is infinite" in n for n in r.json()["notes"])


# ------------------------------------------------------------------------------------------ numeric options

def _commands():
    import typer

    from campaign.cli import app

    return typer.main.get_command(app).commands


def _numeric_options() -> list[tuple[str, str, str]]:
    out = []
    for name, command in _commands().items():
        for p in command.params:
            kind = type(p.type).__name__
            if kind in ("IntParamType", "FloatParamType") and p.opts and p.opts[0].startswith("--") and not p.hidden:
                out.append((name, p.opts[0], "int" if kind == "IntParamType" else "float"))
    return out


NUMERIC = _numeric_options()
# Options whose values are counts or sizes: zero or a negative number cannot be right.
POSITIVE = {"--group-size", "--batch", "--seq-len", "--context", "--sequences", "--lora-rank", "--gpus",
            "--prefill-chunk", "--new-tokens", "--max-context", "--max-sequences", "--block-size", "--tp", "--ngram",
            "--max-bucket", "--examples", "--per-cell", "--top", "--resamples", "--accumulation", "--processes",
            "--overfit-steps", "--overfit-lr", "--seeds", "--fraction", "--budget-gpu-hours", "--workers",
            "--equivalence-margin", "--non-inferiority", "--grad-accumulation", "--updates", "--timeout",
            "--checkpoint-every", "--completion-tokens"}
# Counts where zero means none: a negative number cannot be right.
NON_NEGATIVE = {"--rollouts"}
# Fractions or rates: outside [0, 1] they mean nothing.
FRACTIONS = {"--tolerance", "--near-threshold", "--threshold", "--confidence", "--overfit-drop", "--mfu",
             "--recovery-margin", "--vllm-share", "--lora-dropout"}


def test_every_numeric_option_is_covered():
    assert len(NUMERIC) >= 40
    assert {o for _, o, _ in NUMERIC} <= POSITIVE | FRACTIONS | NON_NEGATIVE | {"--seed", "--max-final-uses",
                                                                               "--min-effect"}


@pytest.fixture
def bases(tmp_path):
    """A valid invocation of each command, cheap to run (torch commands on a tiny model)."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"row number {i} of the set", "label": "ab"[i % 2]}) + "\n"
                            for i in range(12)), encoding="utf-8")
    other = tmp_path / "e.jsonl"
    other.write_text('{"text": "something else entirely"}\n', encoding="utf-8")
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": i, "gold": "ab"[i % 2], "pred": "ab"[i % 3 % 2]}) + "\n"
                             for i in range(12)), encoding="utf-8")
    seeds = tmp_path / "s.csv"
    seeds.write_text("variant,seed,metric\n" + "".join(f"baseline,{s},{70 + s % 3}\ncandidate,{s},{71 + s % 2}\n"
                                                       for s in range(4)), encoding="utf-8")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(tiny_llama()), encoding="utf-8")
    from campaign.data import split_file

    manifest = split_file(data, tmp_path / "splits", ratios="50/50").manifest
    plan = tmp_path / "plan.yaml"
    plan.write_text('{"card": "h100", "phases": [{"name": "a", "hours": 2}]}', encoding="utf-8")
    return {"memory": ["memory", "gpt2"], "kv": ["kv", "gpt2", "--static"], "trace": ["trace", str(model)],
            "measure": ["measure", str(model), "--weights", "random"],
            "explain": ["explain", "gpt2", "--measured", str(tmp_path / "absent.json")],
            "split": ["split", str(data), "--out", str(tmp_path / "o"), "--force"],
            "leaks": ["leaks", str(data), str(other)], "usage": ["usage", manifest],
            "errors": ["errors", str(preds)], "regress": ["regress", str(preds), str(preds)],
            "seeds": ["seeds", str(seeds)],
            "batch": ["batch", str(EXAMPLES / "train_setup.py") + ":make_setup"],
            "check": ["check", str(EXAMPLES / "check_setup.py") + ":make_setup", "--no-resume"],
            "inspect": ["inspect", str(EXAMPLES / "inspect_setup.py") + ":make_fixed_setup"],
            "quant": ["quant", str(EXAMPLES / "quant_setup.py") + ":make_setup", "--formats", "int8"],
            "budget": ["budget", str(plan)]}


@pytest.mark.parametrize("command, option, kind", NUMERIC, ids=[f"{c}{o}" for c, o, _ in NUMERIC])
def test_every_numeric_option_refuses_what_cannot_be_right(cli, bases, command, option, kind):
    base = bases[command]
    heavy = command in ("trace", "measure", "batch", "check", "quant")
    values = ["nan", "inf", "-inf", "1e309", "abc"] if kind == "float" else ["abc", "9" * 5000, "1.5"]
    for v in values:                                    # never a quantity: refused while parsing
        refused(cli(*base, option, v), option)
    if option in POSITIVE:
        for v in ("0", "-1"):
            refused(cli(*base, option, v))
    if option in NON_NEGATIVE:
        refused(cli(*base, option, "-1"))
    if option in FRACTIONS:
        for v in ("-0.5", "1.5"):
            refused(cli(*base, option, v))
    if not heavy:                                       # huge values: an answer or a refusal, never a crash
        never_internal(cli(*base, option, "1" + "0" * 30))
        never_internal(cli(*base, option, "-7"))


@pytest.mark.parametrize("argv, fragment", [
    (["memory", "gpt2", "--reserve", "-10%"], "reserve"),
    (["memory", "gpt2", "--reserve", "nan%"], "reserve"),
    (["memory", "gpt2", "--reserve", "1e309GiB"], "reserve"),
    (["memory", "gpt2", "--card", "inf GiB"], "inf GiB"),
    (["memory", "gpt2", "--card", "-24GiB"], "-24GiB"),
    (["memory", "gpt2", "--card", "1e400GB"], "is not a size"),
])
def test_size_and_share_strings_are_refused(cli, argv, fragment):
    refused(cli(*argv), fragment)


def test_a_split_name_cannot_take_the_manifest_file(cli, tmp_path):
    data = tmp_path / "d.json"
    data.write_text("".join(json.dumps({"text": f"row {i} here"}) + "\n" for i in range(20)), encoding="utf-8")
    r = cli("split", str(data), "--out", str(tmp_path / "o"), "--names", "split_manifest,val,test")
    refused(r, "split_manifest.json, the manifest's own file")
    assert not (tmp_path / "o").exists()


def test_help_examples_render_what_the_source_says(cli):
    """Rich reads '[refund]' as markup and drops it unless escaped: the rendered example must keep every bracket
    of the source (regress --help showed 'f1>=-0.01', which fails)."""
    import re

    for name, command in _commands().items():
        source = (command.epilog or "").replace("\\[", "[")
        if "[" not in source:
            continue
        shown = " ".join(cli(name, "--help").out.split())
        for token in re.findall(r"\w+\[[^\]]+\]", source):
            assert token in shown, (name, token)


@pytest.mark.parametrize("broken", sorted(BROKEN_JSON))
@pytest.mark.parametrize("hashed", [False, True], ids=["no own hash", "its own hash beside it"])
def test_a_hostile_bundle_json_is_a_failed_verification_never_a_traceback(cli, tmp_path, broken, hashed):
    # campaign verify reads bundle.json: whatever it holds, the verdict is FAILED (exit 1) naming bundle.json, as for a
    # flipped byte in it (tests/report/test_verify.py), with nothing on stderr; its own sha256 beside it (so that
    # the hash check passes and the content is what is judged) changes nothing
    import hashlib

    from campaign.report.verify import self_hash_line

    folder = tmp_path / "bundle"
    folder.mkdir()
    payload = BROKEN_JSON[broken]
    (folder / "bundle.json").write_bytes(payload)
    if hashed:
        (folder / "bundle.json.sha256").write_text(self_hash_line(hashlib.sha256(payload).hexdigest()))
    r = cli("verify", str(folder), "--json")
    assert r.code == 1 and r.err == "", (r.code, r.err[-500:])
    doc = r.json()
    manifest = next(c for c in doc["checks"] if c["id"] == "bundle.manifest")
    assert doc["status"] == "fail" and manifest["status"] == "fail" and manifest["seen"].startswith("bundle.json")
    text = cli("verify", str(folder))
    assert text.code == 1 and text.out.startswith("FAILED") and "Traceback" not in text.out + text.err


def named(r, key: str, *fragments: str) -> None:
    """A recipe read whole: the run goes on (exit 0 or 1), the setting is named as not modelled with why, and the
    estimate is "not verified"."""
    assert r.code in (0, 1), (r.code, r.err)
    if r.out.lstrip().startswith("{"):  # --json: the key among config_keys, the status
        doc = r.json()
        why = next(k["why"] for k in doc["config_keys"] if k["key"] == key and k["use"] == "not modelled")
        assert doc["status"] == "not verified", doc["status"]
        text = f"{key}: {why}"
    else:
        text = " ".join(r.out.split())
        assert f"not modelled: {key} =" in text and "not verified" in text, text[-800:]
    for f in fragments:
        assert f in text, (f, text[-800:])
