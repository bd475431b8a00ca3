"""One vocabulary (issue 46; CONTRIBUTING.md, "Option names"): `campaign --help` grouped by the guide's five
questions, each command's options grouped in panels, and every renamed spelling still working for one release with a
one-line notice on stderr while the new spelling runs silently."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTICE = re.compile(r"^campaign: (.+) is now (.+); the old spelling still works in this release$")


def panels(text: str) -> list[tuple[str, list[str]]]:
    """The help page's panels, in order: (title, the first word of each row that starts one)."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        title = re.match(r"^╭─ (.+?) ─", line)
        if title:
            out.append((title.group(1), []))
        elif out and re.match(r"^│ (\* +| {3})?\S", line):   # * marks a required option
            out[-1][1].append(line[1:].replace("*", " ", 1).split()[0])
    return out


def test_top_level_help_is_grouped_by_the_five_questions_in_order(cli):
    from campaign.guide import QUESTIONS

    r = cli("--help")
    assert r.code == 0 and r.err == ""
    found = panels(r.out)
    titles = [t for t, _ in found]
    assert titles == ["Options", "Start here", "1. GPU memory: will it fit?", "2. The score goes up: can I trust it?",
                      "3. Before training: what to check first?", "4. Fine-tune or compress: which variant?",
                      "5. A limited budget: what to run first?", "Records and hand-over"]
    commands = dict(found)
    # each numbered panel holds commands the guide lists under that question (campaign/guide.py, written apart)
    for q in QUESTIONS:
        title = next(t for t in titles if t.startswith(f"{q.number}. "))
        assert commands[title] and set(commands[title]) <= {s.command for s in q.steps}, title
    assert commands["Records and hand-over"] == ["report", "export", "verify", "run", "runs"]
    # every command is in one panel: none left in a plain "Commands" panel, none twice
    import campaign.cli as campaign_cli

    app = campaign_cli.app
    every = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    listed = [c for t, names in found if t != "Options" for c in names]
    assert sorted(listed) == sorted(every) and len(every) >= 25


def test_memory_help_groups_its_options_in_panels(cli):
    r = cli("memory", "--help")
    assert r.code == 0
    found = dict(panels(r.out))
    for title, some in [("Workload", ["--batch", "--seq-len", "--method"]), ("Workload: formats", ["--kv-dtype"]),
                        ("Workload: parallelism", ["--gpus", "--shard"]),
                        ("Workload: DeepSpeed", ["--zero-reduce-bucket"]), ("Card", ["--card", "--reserve"]),
                        ("Overheads", ["--fragmentation"]), ("Output", ["--json"])]:
        assert set(some) <= set(found[title]), title


GROUPED = ["memory", "kv", "trace", "measure", "explain", "split", "leaks", "usage", "errors", "regress", "seeds",
           "quant", "budget", "bench", "ablate plan", "ablate analyze", "report", "export", "run start",
           "runs to-mlflow", "check", "batch", "inspect"]


@pytest.mark.parametrize("command", GROUPED)
def test_each_command_groups_its_options_in_panels(cli, command):
    # every option but --help sits in a named panel, --json in Output
    r = cli(*command.split(), "--help")
    assert r.code == 0
    found = dict(panels(r.out))
    assert found["Options"] == ["--help"], found["Options"]
    assert "--json" in found["Output"] or command == "runs to-mlflow"   # it writes a store, prints no result
    assert len([t for t in found if t not in ("Arguments", "Options")]) >= 2


def notice(err: str) -> tuple[str, str]:
    """The (old, new) spellings of the one line stderr holds."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    m = NOTICE.match(lines[0])
    assert m, lines[0]
    return m.group(1), m.group(2)


def test_budget_margin_is_now_recovery_margin(cli):
    plan = str(EXAMPLES / "plan" / "plan.yaml")
    new = cli("budget", plan, "--recovery-margin", "0.3", "--json")
    old = cli("budget", plan, "--margin", "0.3", "--json")
    default = cli("budget", plan, "--json")
    assert new.err == "" and notice(old.err) == ("budget --margin", "budget --recovery-margin")
    assert new.code == old.code and new.json() == old.json()
    # the value reaches the plan: 30% instead of the file's 15% lengthens the runs, so the result differs
    assert new.json() != default.json()
    assert "30%" in cli("budget", plan, "--recovery-margin", "0.3").out


def test_regress_margin_is_now_equivalence_margin(cli):
    base, cand = str(EXAMPLES / "data" / "baseline.jsonl"), str(EXAMPLES / "data" / "candidate.jsonl")
    new = cli("regress", base, cand, "--equivalence-margin", "0.12", "--json")
    old = cli("regress", base, cand, "--margin", "0.12", "--json")
    assert new.err == "" and notice(old.err) == ("regress --margin", "regress --equivalence-margin")
    assert new.code == old.code == 0 and new.json() == old.json()
    # 50 wrong -> right, 32 right -> wrong over 300 examples: +18/300, tested for equivalence within +/-0.12
    assert old.json()["equivalence"]["difference"] == pytest.approx(18 / 300)
    assert "equivalence" not in cli("regress", base, cand, "--json").json() or \
        cli("regress", base, cand, "--json").json()["equivalence"] is None
    assert "--margin" not in cli("regress", "--help").out   # hidden: only the new name is shown


def test_quant_margin_is_now_equivalence_margin(cli, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    setup = tmp_path / "setup.py"
    setup.write_text("raise RuntimeError('the setup is never imported: the margin is refused first')\n")
    new = cli("quant", f"{setup}:make_setup", "--equivalence-margin", "0")
    old = cli("quant", f"{setup}:make_setup", "--margin", "0")
    assert new.code == old.code == 2
    lines = old.err.strip().splitlines()
    assert len(lines) == 2 and notice(lines[0]) == ("quant --margin", "quant --equivalence-margin")
    assert lines[1] == new.err.strip() and "margin 0.0" in new.err     # the same value reached the same check
    assert "--margin" not in cli("quant", "--help").out


def test_runs_export_is_now_runs_to_mlflow(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x.txt").write_text("keep\n")
    new = cli("runs", "to-mlflow", "--mlflow", "mine", "--force")
    old = cli("runs", "export", "--mlflow", "mine", "--force")
    assert new.code == old.code == 2   # not an earlier export: refused under both names
    lines = old.err.strip().splitlines()
    assert len(lines) == 2 and notice(lines[0]) == ("runs export", "runs to-mlflow")
    assert lines[1] == new.err.strip() and "runs export is now" not in new.err
    assert (tmp_path / "mine" / "x.txt").read_text() == "keep\n"
    listing = cli("runs", "--help").out
    assert "to-mlflow" in listing and " export " not in listing


def test_split_id_and_usage_record_old_spellings_still_print_the_notice(cli, tmp_path):
    rows = "".join(f'{{"key": "k{i}", "text": "example number {i} of a set", "label": {i % 2}}}\n' for i in range(40))
    (tmp_path / "d.jsonl").write_text(rows)
    new = cli("split", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "a"), "--id-field", "key", "--json")
    old = cli("split", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "b"), "--id", "key", "--json")
    assert new.code == old.code and new.err == "" and notice(old.err) == ("--id", "--id-field")
    assert [s["rows"] for s in new.json()["splits"]] == [s["rows"] for s in old.json()["splits"]]


def test_seeds_examples_is_now_example_scores(cli, tmp_path):
    # 2 variants x 2 seeds x 3 examples; the run-level metric is each run's mean score
    rows = ["variant,seed,metric"]
    scores = ["variant,seed,id,score"]
    for v, base in (("a", 0.5), ("b", 0.6)):
        for s in (1, 2):
            per = [base + 0.01 * s + 0.1 * i for i in range(3)]
            rows.append(f"{v},{s},{sum(per) / 3}")
            scores += [f"{v},{s},{i},{x}" for i, x in enumerate(per)]
    (tmp_path / "r.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "s.csv").write_text("\n".join(scores) + "\n")
    args = [str(tmp_path / "r.csv"), "--resamples", "200", "--json"]
    new = cli("seeds", *args, "--example-scores", str(tmp_path / "s.csv"))
    old = cli("seeds", *args, "--examples", str(tmp_path / "s.csv"))
    assert new.code == old.code == 0 and new.err == ""
    assert notice(old.err) == ("seeds --examples", "seeds --example-scores")
    assert new.json() == old.json() != cli("seeds", *args).json()   # the scores were read under both names
