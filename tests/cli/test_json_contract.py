"""One contract for every verdict (results.py): each command's --json starts with schema, campaign_version, status
and checks, in that order; status is one of pass | warn | fail | not verified; each check has a stable dotted id;
the status is the one rule (checks.status_of) applied to the command's own top-level checks, so that every check
the verdict depends on is there; and the exit code is the status's (0 pass or warn, 1 fail or not verified).
Small inputs: the examples folder, tiny configs and files written here; the torch commands on the tiny setups the
other tests use."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from campaign.checks import STATUSES, VERDICTS, Check, status_of
from campaign.version import __version__
from tests.conftest import tiny_llama

EX = Path(__file__).resolve().parents[2] / "examples"
HEADER = ["schema", "campaign_version", "status", "checks"]
ID = re.compile(r"^[a-z0-9_]+(\.[^\s.][^\s]*)+$")


def _contract(r, command: str) -> dict:
    assert r.code in (0, 1), f"{command}: exit {r.code}: {r.err}"
    d = json.loads(r.out)
    assert list(d)[:4] == HEADER, f"{command}: {list(d)[:6]}"
    assert re.match(r"^campaign\.[a-z_]+/\d+$", d["schema"]) and d["campaign_version"] == __version__
    assert d["status"] in VERDICTS, d["status"]
    for c in d["checks"]:
        assert ID.match(c["id"]) and c["status"] in STATUSES and isinstance(c["seen"], str), c
        assert ("gates" in c) == (c["status"] == "skipped"), c      # a skipped check says whether the go waits on it
    recomputed = status_of(Check(c["id"], c["status"], c["seen"], gates=c.get("gates", True)) for c in d["checks"])
    assert d["status"] == recomputed, f"{command}: status {d['status']}, its own checks say {recomputed}"
    assert r.code == (0 if d["status"] in ("pass", "warn") else 1), f"{command}: exit {r.code}, status {d['status']}"
    return d


def test_the_recomputed_status_follows_the_one_rule_worked_by_hand():
    """The rule the contract recomputes with, on checks whose verdict is known by reading them."""
    def of(*pairs, gates=True):
        return status_of(Check(f"x.c{i}", s, "", gates=gates) for i, s in enumerate(pairs))

    assert of() == "pass" and of("pass", "warn") == "warn" and of("warn", "fail") == "fail"
    assert of("pass", "skipped") == "not verified" and of("warn", "skipped", gates=False) == "warn"
    assert of("skipped", "fail") == "fail"


@pytest.fixture
def tiny(write_config):
    return str(write_config(tiny_llama(), "tiny"))


# each: the argv after `campaign`, and the status expected (None: any)
PLAIN = [
    (["guide"], "pass"),
    (["cards", "--vendor", "amd"], "pass"),
    (["models"], "pass"),
    (["models", "gpt2"], "pass"),
    (["memory", "gpt2", "--no-solve"], "pass"),
    (["memory", "gpt2", "--card", "h100"], "pass"),
    (["memory", "llama-3.1-8b", "--card", "t4", "--no-solve"], "fail"),
    (["kv", "qwen2.5-7b", "--context", "4096"], "pass"),
    (["kv", "qwen2.5-7b", "--context", "32768", "--sequences", "8", "--kv-dtype", "fp8", "--card", "l40s"], None),
    (["kv", "llama-3.1-70b", "--context", "131072", "--sequences", "64", "--card", "t4"], "fail"),
    (["errors", str(EX / "data" / "candidate.jsonl")], "pass"),
    (["regress", str(EX / "data" / "baseline.jsonl"), str(EX / "data" / "candidate.jsonl"),
      "--guard", "f1[refund]>=-0.01"], None),
    (["regress", str(EX / "data" / "baseline.jsonl"), str(EX / "data" / "candidate.jsonl"),
      "--guard", "accuracy>=0.5"], "fail"),
    (["seeds", str(EX / "data" / "seeds.csv"), "--min-effect", "0.5"], None),
    (["ablate", "plan", str(EX / "plan" / "factors.yaml")], None),
    (["ablate", "analyze", str(EX / "plan" / "ablation_results.csv"), "--factors", str(EX / "plan" / "factors.yaml"),
      "--min-effect", "1"], "pass"),
    (["budget", str(EX / "plan" / "plan.yaml")], None),
    (["runs", "list"], "pass"),
]


@pytest.mark.parametrize("argv, expected", PLAIN, ids=[" ".join(a[:2]) for a, _ in PLAIN])
def test_every_command_writes_the_header_and_exits_by_its_status(cli, argv, expected):
    d = _contract(cli(*argv, "--json"), " ".join(argv))
    if expected is not None:
        assert d["status"] == expected, d["checks"]


def test_a_fit_on_a_card_is_its_check(cli):
    d = _contract(cli("memory", "llama-3.1-8b", "--card", "t4", "--no-solve", "--json"), "memory")
    assert [(c["id"], c["status"]) for c in d["checks"]] == [("memory.fits", "fail")]
    assert _contract(cli("memory", "gpt2", "--no-solve", "--json"), "memory")["checks"] == []
    kv = _contract(cli("kv", "llama-3.1-70b", "--context", "131072", "--sequences", "64", "--card", "t4", "--json"),
                   "kv")
    assert [(c["id"], c["status"]) for c in kv["checks"]] == [("kv.fits", "fail")]
    r = _contract(cli("regress", str(EX / "data" / "baseline.jsonl"), str(EX / "data" / "candidate.jsonl"),
                      "--guard", "accuracy>=0.5", "--json"), "regress")
    # the comparison's own verdict (+6 points on 300 examples, p = 0.047: IMPROVED) comes first, then the guard
    assert [(c["id"], c["status"]) for c in r["checks"]] == [("difference.verdict", "pass"),
                                                             ("guard.accuracy>=0.5", "fail")]


def test_bench_and_the_run_commands(cli, tmp_path):
    _contract(cli("bench", str(EX / "plan" / "cost.yaml"), "--out", str(tmp_path / "bench"), "--json"), "bench")
    ids = []
    for name in ("a", "b"):
        started = cli("run", "start", name, "--param", f"lr={len(ids) + 1}", "--seed", "0", "--json")
        assert started.code == 0, started.err
        ids.append(started.json()["id"])
    _contract(cli("runs", "diff", *ids, "--json"), "runs diff")
    report = cli("report", "--out", str(tmp_path / "report.html"), "--json")
    _contract(report, "report")


def test_usage_after_a_split(cli, tmp_path):
    out = tmp_path / "splits"
    split = cli("split", str(EX / "data" / "tickets.jsonl"), "--out", str(out), "--text", "text", "--label", "label",
                "--group", "user")
    assert split.code == 0, split.err
    _contract(cli("usage", str(out), "--json"), "usage")
    _contract(cli("usage", str(out), "--use", "test", "--purpose", "final-test", "--json"), "usage --use")


def test_split_and_leaks(cli, tmp_path):
    d = _contract(cli("split", str(EX / "data" / "tickets.jsonl"), "--out", str(tmp_path / "s"), "--text", "text",
                      "--label", "label", "--group", "user", "--json"), "split")
    # the leak check of the written files decides the split's verdict too: its checks are at the top level
    assert [c["id"] for c in d["checks"]] == ["split.ratio", "split.label_ratio", "split.label_conflict",
                                              "leak.exact_duplicate", "leak.near_duplicate", "leak.group_overlap",
                                              "leak.label_conflict"]
    assert {c["id"]: c["status"] for c in d["leaks"]["checks"]} == {
        c["id"]: c["status"] for c in d["checks"] if c["id"].startswith("leak.")}
    _contract(cli("leaks", str(EX / "data" / "tickets.jsonl"), str(EX / "data" / "heldout.jsonl"), "--text", "text",
                  "--label", "label", "--group", "user", "--json"), "leaks")


def test_a_split_whose_leak_check_was_partial_shows_the_skipped_check_at_the_top(cli, tmp_path):
    """Five copies of one text and 40 variants of it (6 of 40 words changed: below the 0.8 near-duplicate
    threshold, so free to land in any split, yet sharing LSH buckets with the copies): with --max-bucket 2 the
    leak check of the written files can only partly search those buckets. The verdict is "not verified", and the
    check that says so is among the split's own top-level checks; with the default cap the same data passes."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(400)]
    crowd = [rng.choice(words) for _ in range(40)]
    rows = [" ".join(crowd)] * 5
    for _ in range(40):
        variant = list(crowd)
        for k in rng.sample(range(40), 6):
            variant[k] = rng.choice(words)
        rows.append(" ".join(variant))
    rows += [" ".join(rng.choice(words) for _ in range(20)) for _ in range(200)]
    data = tmp_path / "crowd.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    partial = _contract(cli("split", str(data), "--out", str(tmp_path / "p"), "--max-bucket", "2", "--tolerance",
                            "0.2", "--json"), "split --max-bucket 2")
    top = {c["id"]: c for c in partial["checks"]}
    assert partial["status"] == "not verified"
    assert top["leak.near_duplicate"]["status"] == "skipped" and top["leak.near_duplicate"]["gates"] is True
    full = _contract(cli("split", str(data), "--out", str(tmp_path / "f"), "--tolerance", "0.2", "--json"), "split")
    assert full["status"] == "pass" and {c["id"]: c["status"] for c in full["checks"]}["leak.near_duplicate"] == "pass"


def test_trace_measure_and_explain_on_a_tiny_model(cli, tiny, tmp_path):
    pytest.importorskip("torch")
    traced = _contract(cli("trace", tiny, "--batch", "1", "--seq-len", "16", "--card", "h100", "--json"), "trace")
    assert [c["id"] for c in traced["checks"]] == ["memory.fits"]
    measured = tmp_path / "m.json"
    m = _contract(cli("measure", tiny, "--batch", "1", "--seq-len", "16", "--device", "cpu", "--out", str(measured),
                      "--json"), "measure")
    assert [c["id"] for c in m["checks"]] == ["measure.completed"] and m["outcome"] == "ok"
    e = _contract(cli("explain", tiny, "--measured", str(measured), "--batch", "1", "--seq-len", "16", "--card", "h100",
                      "--json"), "explain")
    assert [c["id"] for c in e["checks"]] == ["explain.margin", "explain.fits"]


def test_a_run_out_of_memory_is_a_measured_failure_in_measure_and_explain(cli, tiny, tmp_path):
    """A real out-of-memory error (a 1 PiB tensor on the CPU): measure exits 1 with the measurement failed, not 2
    (bad input), and explain on that measurement exits 1 as well."""
    pytest.importorskip("torch")
    script = tmp_path / "oom.py"
    script.write_text("import torch\nimport campaign\nwith campaign.current_meter().phase('forward'):\n"
                      "    x = torch.empty(1 << 50, dtype=torch.uint8)\n")
    measured = tmp_path / "m.json"
    r = cli("measure", "--script", str(script), "--device", "cpu", "--out", str(measured), "--json")
    m = _contract(r, "measure (out of memory)")
    assert r.code == 1 and m["status"] == "fail" and m["outcome"] == "failed" and m["failed_phase"] == "forward"
    assert [(c["id"], c["status"]) for c in m["checks"]] == [("measure.completed", "fail")]
    assert "failed in phase 'forward'" in r.err and "allocate" in r.err and len(r.err.strip().splitlines()) == 1
    assert json.loads(measured.read_text())["outcome"] == "failed"        # saved, as a complete run would be
    e = _contract(cli("explain", tiny, "--measured", str(measured), "--batch", "1", "--seq-len", "16", "--card",
                      "h100", "--json"), "explain (out of memory)")
    assert e["status"] == "fail" and dict((c["id"], c["status"]) for c in e["checks"])["explain.margin"] == "fail"


def test_the_train_commands_on_the_example_setups(cli):
    pytest.importorskip("torch")
    _contract(cli("batch", f"{EX / 'train_setup.py'}:make_setup", "--normalization", "token", "--json"), "batch")
    _contract(cli("inspect", f"{EX / 'inspect_setup.py'}:make_fixed_setup", "--json"), "inspect")
    d = _contract(cli("check", f"{EX / 'check_setup.py'}:make_setup", "--no-resume", "--overfit-steps", "1",
                      "--overfit-drop", "0.01", "--json"), "check")
    resume = next(c for c in d["checks"] if c["id"] == "resume.next_step_equal")
    assert resume["status"] == "skipped" and resume["gates"] is False     # --no-resume: the user's choice


def test_quant_guards_are_checks(cli):
    pytest.importorskip("torch")
    d = _contract(cli("quant", f"{EX / 'quant_setup.py'}:classifier_setup", "--guard", "accuracy>=0", "--json"),
                  "quant")
    assert [c["id"] for c in d["checks"]] == ["quant.finite", "guard.accuracy>=0"]
