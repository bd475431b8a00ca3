"""The CLI as a user meets it: help with examples, JSON headlines, exit codes, one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import tiny_llama

COMMANDS = ["guide", "memory", "kv", "cards", "models", "trace", "measure", "explain", "errors", "regress", "seeds",
            "split", "leaks", "usage"]


def test_help_lists_commands(cli):
    r = cli("--help")
    assert r.code == 0
    for c in COMMANDS:
        assert c in r.out


def test_the_top_level_help_reads_no_command_s_parameters_and_prints_the_same(cli, monkeypatch):
    # `campaign --help` builds each command from its name and docstring only (cli._listing): the page is the one the
    # whole tree prints, and typer reads the parameters of none of the commands' own functions
    import typer.main

    import campaign.cli as campaign_cli

    read: list = []
    original = typer.main.get_params_from_function

    def counting(func):
        read.append(func)
        return original(func)

    monkeypatch.setattr(typer.main, "get_params_from_function", counting)
    commands = {c.callback for c in campaign_cli.app.registered_commands}
    assert len(commands) > 20
    listed = cli("--help")
    assert listed.code == 0 and read and not commands & set(read)
    monkeypatch.setattr(campaign_cli, "_listing", lambda app: app)   # the whole tree, every command's parameters
    whole = cli("--help")
    assert commands <= set(read)
    assert listed.out == whole.out and listed.err == whole.err == ""
    missing = cli("memroy")
    assert missing.code == 2 and "Did you mean 'memory'?" in missing.err
    bare = cli()
    assert bare.code == 2 and bare.err == "" and "Usage: campaign" in bare.out   # the help page, no empty error
    assert cli("--", "cards").code == 0   # click reads the command past a leading --: it is built, not listed


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help_ending_with_an_example(cli, command):
    r = cli(command, "--help")
    assert r.code == 0 and "Example: campaign " + command in r.out


def test_memory_json_headlines(cli):
    r = cli("memory", "llama-3.1-8b", "--method", "qlora", "--batch", "2", "--json", "--no-solve")
    assert r.code == 0
    d = r.json()
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes", "required_bytes", "params", "items",
                "phases", "fits"):
        assert key in d
    assert d["workload"]["dtype"] == "nf4"
    # LoRA rank 16 on every Linear of 32 layers, r x (in + out): q, o 4096+4096; k, v 4096+1024; gate, up, down
    # 4096+14336 (Llama-3.1-8B's config)
    assert d["trainable_params"] == 32 * 16 * (2 * 8192 + 2 * 5120 + 3 * 18432) == 41_943_040


def test_memory_card_exit_codes(cli):
    fits = cli("memory", "gpt2", "--card", "h100")
    assert fits.code == 0 and "fits" in fits.out
    no = cli("memory", "llama-3.1-8b", "--card", "t4", "--no-solve")
    assert no.code == 1 and "does not fit" in no.out


def test_memory_inference_reads_context_and_sequences(cli):
    d = cli("memory", "llama-3.1-8b", "--infer", "--context", "8192", "--sequences", "4", "--json", "--no-solve").json()
    assert d["workload"]["mode"] == "infer" and d["workload"]["seq_len"] == 8192 and d["workload"]["batch"] == 4
    kv = next(i for p in d["phases"] if p["name"] == "decode" for i in p["items"] if i["name"] == "KV cache")
    assert kv["bytes"] == 131_072 * 8192 * 4


def test_inference_keeps_the_checkpoints_quantized_format(cli):
    infer = cli("memory", "deepseek-v3", "--infer", "--context", "1024", "--json", "--no-solve").json()
    assert infer["workload"]["dtype"] == "fp8" and infer["workload"]["group_size"] == 128
    train = cli("memory", "deepseek-v3", "--json", "--no-solve").json()
    assert train["workload"]["dtype"] == "bf16"  # training dequantizes: full fine-tuning cannot update fp8
    forced = cli("memory", "deepseek-v3", "--infer", "--dtype", "bf16", "--json", "--no-solve").json()
    assert forced["workload"]["dtype"] == "bf16"


def test_qlora_with_a_16bit_dtype_is_refused_not_rewritten(cli):
    one_line_error(cli("memory", "llama-3.1-8b", "--method", "qlora", "--dtype", "bf16"), "--dtype bf16 contradicts")
    d = cli("memory", "llama-3.1-8b", "--method", "qlora", "--json", "--no-solve").json()
    assert d["workload"]["dtype"] == "nf4"


def test_kv_card_keeps_the_checkpoints_format_as_memory_infer_does(cli):
    # DeepSeek-V3 ships fp8 weights: 671B parameters, about 625 GiB at 1 byte, 1,250 GiB at 2 bytes
    native = cli("kv", "deepseek-v3", "--context", "1024", "--card", "h200", "--json").json()["card"]
    bf16 = cli("kv", "deepseek-v3", "--context", "1024", "--card", "h200", "--dtype", "bf16", "--json").json()["card"]
    assert native["weights_dtype"] == "fp8" and bf16["weights_dtype"] == "bf16"
    assert 625 * 2**30 < native["required_bytes"] < 800 * 2**30
    assert bf16["required_bytes"] > 1250 * 2**30
    text = cli("kv", "deepseek-v3", "--context", "1024", "--card", "h200").out
    assert "required with fp8 weights" in text


def test_overhead_overrides_reach_every_figure(cli):
    base = ("llama-3.1-8b", "--infer", "--context", "4096", "--card", "h100", "--json")
    default = cli("memory", *base).json()
    d = cli("memory", *base, "--fragmentation", "30%", "--cuda-context", "1GiB").json()
    context = next(i for i in d["items"] if i["name"] == "CUDA context and libraries")
    overhead = next(i for i in d["items"] if i["name"].startswith("allocator overhead"))
    assert context["bytes"] == 2**30 == d["device_bytes"] - d["peak_reserved_bytes"]
    assert overhead["formula"].startswith("30% of transient")
    assert d["fits"][0]["max_batch"] < default["fits"][0]["max_batch"]
    kv = cli("kv", "llama-3.1-8b", "--context", "4096", "--card", "h100", "--json").json()["card"]
    kv30 = cli("kv", "llama-3.1-8b", "--context", "4096", "--card", "h100", "--json", "--fragmentation", "0.3",
               "--cuda-context", "1GiB").json()["card"]
    assert kv30["required_bytes"] == d["required_bytes"] and kv30["max_sequences"] < kv["max_sequences"]
    one_line_error(cli("memory", "gpt2", "--fragmentation", "150%"), "between 0 and 1")


def test_kv_json_and_card(cli):
    d = cli("kv", "llama-3.1-8b", "--context", "8192", "--sequences", "2", "--json").json()
    assert d["bytes"] == 131_072 * 8192 * 2 and d["bytes_per_token"] == 131_072
    # the longest context and the most sequences it reports fit the card, one more does not (memory --infer)
    card = cli("kv", "qwen2.5-7b", "--context", "32768", "--card", "l4", "--json").json()["card"]
    longest, most = card["max_context"], card["max_sequences"]
    assert longest > 0 and most > 0
    fit = ("memory", "qwen2.5-7b", "--infer", "--card", "l4", "--no-solve")
    assert cli(*fit, "--context", str(longest)).code == 0 and cli(*fit, "--context", str(longest + 1)).code == 1
    at = ("--context", "32768", "--sequences")
    assert cli(*fit, *at, str(most)).code == 0 and cli(*fit, *at, str(most + 1)).code == 1


def test_kv_most_sequences_agree_with_the_closed_form_kv_budget(cli):
    """Two solvers: kv's binary search over whole estimates, and fit.kv_budget's closed form (the KV bytes left once
    weights, temporaries, allocator overhead, context and reserve are taken): budget // bytes per sequence."""
    from campaign.hardware.cards import find_card
    from campaign.memory import make_workload
    from campaign.memory.fit import kv_budget
    from campaign.models import load_spec

    kv = cli("kv", "llama-3.1-8b", "--context", "4096", "--card", "h100", "--json").json()
    budget = kv_budget(load_spec("llama-3.1-8b"), make_workload(mode="infer", seq_len=4096, batch=1),
                       find_card("h100").memory_bytes)
    per_sequence = 131_072 * 4096  # 32 layers x K and V x 8 KV heads x 128 x 2 B per token
    # the closed form keeps one sequence's decode temporaries and logits; the search grows them with the batch
    assert kv["card"]["max_sequences"] in range(budget // per_sequence - 1, budget // per_sequence + 1)


def test_cards_are_the_bytes_cuda_gives_torch(cli):
    d = cli("cards", "--json").json()
    assert len(d["cards"]) >= 20
    h100 = next(c for c in d["cards"] if c["name"] == "H100-SXM-80GB")
    # what CUDA gives torch (a published deviceQuery: 85,045,477,376 bytes) below nvidia-smi's 81,559 MiB
    assert h100["memory_bytes"] == 85_045_477_376 < h100["smi_bytes"] == 81559 * 2**20
    assert h100["memory_bytes"] < 80 * 2**30
    assert {c["vendor"] for c in d["cards"]} == {"nvidia", "amd"}


def test_models_list_and_one(cli):
    listed = {m["name"] for m in cli("models", "--json").json()["models"]}
    assert {"meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3", "openai-community/gpt2"} <= listed
    d = cli("models", "qwen3-30b-a3b", "--json").json()
    assert d["params"] == 30_532_122_624 and d["active_params"] == 3_353_032_704


def test_guide_marks_what_is_built(cli):
    d = cli("guide", "--json").json()
    steps = {s["command"]: s["built"] for q in d["questions"] for s in q["steps"]}
    assert steps["campaign memory"] and steps["campaign kv"] and steps["campaign seeds"]
    assert steps["campaign run"] and steps["campaign runs"]          # command groups count as built
    assert len(d["questions"]) == 5
    from campaign.guide import guide_map

    planned = {s["command"]: s["built"] for q in guide_map({"memory"}).to_dict()["questions"] for s in q["steps"]}
    assert planned["campaign memory"] and not planned["campaign budget"]   # a command the CLI lacks: planned


def one_line_error(r, *fragments):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("campaign: error:"), r.err
    assert "Traceback" not in r.err
    for f in fragments:
        assert f in lines[0]


def test_bad_input_gets_one_line_and_exit_2(cli, tmp_path, write_config):
    one_line_error(cli("memory", "llama-3.1-8c"), "did you mean")
    one_line_error(cli("memory", "gpt2", "--dtype", "int3"), "unknown dtype 'int3'")
    one_line_error(cli("memory", "gpt2", "--batch", "-2"), "batch must be a positive integer")
    one_line_error(cli("memory", "gpt2", "--card", "h1000"), "unknown card 'h1000'")
    one_line_error(cli("kv", "gpt2", "--context", "0"), "context must be a positive integer")
    one_line_error(cli("memory", "gpt2", "--reserve", "-3GB"), "negative")
    one_line_error(cli("memory", "gpt2", "--batch", "0"), "batch must be a positive integer, got 0")
    one_line_error(cli("memory", "gpt2", "--seq-len", "0"), "seq-len must be a positive integer, got 0")
    one_line_error(cli("memory", "gpt2", "--infer", "--context", "0"), "seq-len must be a positive integer")
    one_line_error(cli("kv", "llama-3.1-8b", "--tp", "3"), "do not split over 3 cards")
    one_line_error(cli("memory", "llama-3.1-8b", "--infer", "--gpus", "3"), "do not split over 3 cards")
    one_line_error(cli("memory", "llama-3.1-8b", "--method", "lora", "--lora-rank", "5000"), "lower --lora-rank")
    one_line_error(cli("memory", "gpt2", "--card", "0GB"), "must be more than 0")
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json", encoding="utf-8")
    one_line_error(cli("memory", str(bad)),
                   "not valid JSON (Expecting property name enclosed in double quotes at line 1")
    d = write_config(tiny_llama(num_key_value_heads=3), "badheads")
    one_line_error(cli("memory", str(d)), "not a multiple of num_key_value_heads")
    d2 = write_config({"model_type": "llama", "hidden_size": 64}, "incomplete")
    one_line_error(cli("memory", str(d2)), "missing field")


@pytest.mark.parametrize("args", [("memory", "gpt2", "--nope"), ("memory",), ("memory", "gpt2", "--batch", "abc"),
                                  ("seeds", "x.csv", "--unknown-flag")])
def test_usage_errors_exit_2_without_traceback(cli, args):
    r = cli(*args)
    assert r.code == 2 and "Traceback" not in r.err and "internal error" not in r.err


def test_unwritable_output_is_one_line(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "sub" / "sheet.csv"  # a folder cannot be made under a regular file
    data = Path(__file__).resolve().parents[2] / "examples" / "data" / "candidate.jsonl"
    r = cli("errors", str(data), "--review-sheet", str(target))
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
    assert blocker.read_text() == "x"


def test_debug_shows_the_traceback(cli):
    with pytest.raises(Exception, match="unknown model"):
        cli("memory", "nope-model", "--debug")


def test_optional_libraries_chatter_is_quieted_when_torch_comes_and_logging_not_loaded_before():
    # main() sets torchao's and torch's pytree loggers to errors as torch is first imported (their import-time
    # warnings are not a command's output); a command that never imports torch does not load logging for it; the
    # finder that does it leaves every other finder its turn (one placed after it is still asked for torch)
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = ("import contextlib, io, sys\nimport campaign.cli\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    try:\n        campaign.cli.main(['cards'])\n    except SystemExit:\n        pass\n"
              "print('logging' in sys.modules)\nasked = []\n"
              "class Spy:\n    @staticmethod\n    def find_spec(name, path=None, target=None):\n"
              "        asked.append(name)\n"
              "sys.meta_path.insert(1, Spy)\nimport torch, logging\n"
              "print(logging.getLogger('torchao').level, logging.getLogger('torch.utils._pytree').level)\n"
              "print('torch' in asked, campaign.cli._QuietOptionalLibraries.done)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split("\n")
    assert out[:3] == ["False", "40 40", "True True"]  # logging.ERROR is 40
