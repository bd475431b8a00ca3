"""`campaign errors`, `regress`, `seeds` as a user meets them: exit codes, JSON, one-line errors, help, files.

The commands run through campaign.cli.main (the real error boundary) on an app holding them, whether or not
the main app registers them yet; the global app is swapped for the test only.
"""
from __future__ import annotations

import json

import pytest
import typer

import campaign.cli as cli_pkg
from campaign.cli import evaluate
from tests.conftest import Result

GOLD = "a a a a b b b c c c".split()
BASE = "a a b c b b a c c b".split()
CAND = "a b a c b a b c c c".split()
SLEEP = [1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4]


@pytest.fixture
def run(monkeypatch, capsys):
    app = typer.Typer(name="campaign", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    evaluate.register(app)
    monkeypatch.setattr(cli_pkg, "app", app)
    monkeypatch.setenv("COLUMNS", "200")

    def go(*args: str) -> Result:
        try:
            cli_pkg.main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return go


def preds(path, pred, gold=GOLD, ids=None):
    ids = ids or [str(i + 1) for i in range(len(pred))]
    path.write_text("".join(json.dumps({"id": i, "gold": g, "pred": p, "lang": "en" if n % 2 else "fr"}) + "\n"
                            for n, (i, g, p) in enumerate(zip(ids, gold, pred, strict=False))), encoding="utf-8")
    return str(path)


def seeds_file(path, base, cand):
    rows = "".join(f"base,{s},{a}\ncand,{s},{b}\n" for s, (a, b) in enumerate(zip(base, cand, strict=False)))
    path.write_text("variant,seed,metric\n" + rows, encoding="utf-8")
    return str(path)


def one_line_error(r, *fragments):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = [x for x in r.err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("campaign: error:") and "Traceback" not in r.err, r.err
    for f in fragments:
        assert f in lines[0]


@pytest.mark.parametrize("command", ["errors", "regress", "seeds"])
def test_help_ends_with_an_example(run, command):
    r = run(command, "--help")
    assert r.code == 0 and f"Example: campaign {command}" in r.out


def test_errors_human_output_json_and_files(run, tmp_path):
    p = preds(tmp_path / "p.jsonl", BASE)
    sheet, plot = tmp_path / "review.csv", tmp_path / "confusion.png"
    r = run("errors", p, "--slice", "lang", "--review-sheet", str(sheet), "--plot", str(plot))
    assert r.code == 0
    first = r.out.splitlines()[1]
    assert first.startswith("Accuracy 0.6000 (4 errors)") and "macro F1 0.6032" in first      # 38/63
    assert "Top confusions" in r.out and "By lang" in r.out and "Review sheet" in r.out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sheet.read_text(encoding="utf-8").startswith("id,gold,pred,cell")
    d = run("errors", p, "--json").json()
    assert d["matrix"] == [[2, 1, 1], [1, 2, 0], [0, 1, 2]] and d["accuracy"] == 0.6 and d["plot"] is None


def test_errors_svg_plot_and_extraction(run, tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"id": 1, "gold": {"a": 1}, "pred": "{\\"a\\": 1}"}\n{"id": 2, "gold": {"a": 2}, "pred": "oops"}\n',
                 encoding="utf-8")
    svg = tmp_path / "fields.svg"
    r = run("errors", str(p), "--task", "extraction", "--required", "a", "--plot", str(svg))
    assert r.code == 0 and "Valid JSON 50.0%" in r.out and "<svg" in svg.read_text(encoding="utf-8")
    d = run("errors", str(p), "--task", "extraction", "--json").json()
    assert d["valid_json"] == 0.5 and d["fields"][0]["normalized"] == 1


def test_regress_exit_codes_and_guard_names(run, tmp_path):
    b, c = preds(tmp_path / "b.jsonl", BASE), preds(tmp_path / "c.jsonl", CAND)
    ok = run("regress", b, c, "--guard", "f1[a]>=0")
    assert ok.code == 0 and ok.out.splitlines()[1].startswith("all 1 guard(s) hold")
    # 10 examples, 6 -> 7 right: the verdict comes first and cannot tell
    assert ok.out.startswith("NOT SHOWN: accuracy difference +0.1000")
    assert "right -> wrong: 2, 6" in ok.out and "wrong -> right: 3, 7, 10" in ok.out
    # a guard is a test: precision[c] +0.083 against >= 0.1 on 10 examples is broken on the point estimate only
    unsure = run("regress", b, c, "--guard", "f1[a]>=0", "--guard", "precision[c]>=0.1")
    assert unsure.code == 0
    assert unsure.out.splitlines()[1].startswith("1 guard(s) broken on the point estimate but not shown broken: "
                                                 "precision[c] rose by 0.0833")
    # accuracy +0.1 against >= 0.9: paired t = -3.43 on 9 df, one-sided p = 0.0038, Holm over 2: 0.0075
    bad = run("regress", b, c, "--guard", "f1[a]>=0", "--guard", "accuracy>=0.9")
    assert bad.code == 1 and bad.out.splitlines()[1].startswith("1 guard(s) failed: accuracy rose by 0.1000")
    d = run("regress", b, c, "--guard", "accuracy>=0.9", "--json")
    assert d.code == 1 and d.json()["status"] == "fail" and d.json()["mcnemar"]["b"] == 2


def test_regress_bad_input_is_one_line(run, tmp_path):
    b = preds(tmp_path / "b.jsonl", BASE)
    c = preds(tmp_path / "c.jsonl", CAND, ids=[str(i + 1) for i in range(9)] + ["zz"])
    one_line_error(run("regress", b, c), "2 ids differ (1 only in the baseline, 1 only in the candidate")
    one_line_error(run("regress", b, b, "--guard", "f1[a] => 0"), "not of the form METRIC OP NUMBER")
    one_line_error(run("regress", b, b, "--guard", "f1[zz]>=0"), "no metric 'f1[zz]'")


def test_seeds_verdict_first_and_json(run, tmp_path):
    f = seeds_file(tmp_path / "r.csv", [70.0] * 10, [70.0 + d for d in SLEEP])
    r = run("seeds", f, "--min-effect", "0.5", "--resamples", "2000")
    assert r.code == 0 and r.out.startswith("convincing — cand vs base on metric: mean difference +1.58")
    assert "Wilcoxon signed-rank" in r.out and "sign test" in r.out and "bootstrap (bca" in r.out
    d = run("seeds", f, "--min-effect", "3", "--json", "--resamples", "2000").json()
    assert d["verdict"] == "no useful effect" and d["ci_low"] == pytest.approx(0.7001142, abs=1e-6)
    assert {"mean_diff", "ci_high", "t_pvalue", "wilcoxon_pvalue", "seeds_needed"} <= set(d)


def test_seeds_small_sample_warning_and_plot(run, tmp_path):
    f = seeds_file(tmp_path / "r.csv", [10.0, 10.0, 10.0], [11.0, 12.0, 13.0])
    plot = tmp_path / "seeds.png"
    r = run("seeds", f, "--min-effect", "0.5", "--plot", str(plot), "--resamples", "500")
    assert r.code == 0 and r.out.startswith("inconclusive") and "only 3 seeds" in r.out
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_seeds_bad_input_is_one_line(run, tmp_path):
    u = tmp_path / "u.csv"
    u.write_text("variant,seed,metric\na,1,0.5\nb,2,0.6\n", encoding="utf-8")
    one_line_error(run("seeds", str(u)), "unpaired seeds")
    t = tmp_path / "t.csv"
    t.write_text("variant,seed,metric\na,1,0.5\nb,1,n/a\n", encoding="utf-8")
    one_line_error(run("seeds", str(t)), "'n/a'", "line 3 is not a number")
    m = tmp_path / "m.csv"
    m.write_text("variant,run,metric\na,1,0.5\n", encoding="utf-8")
    one_line_error(run("seeds", str(m)), "no 'seed' field")
    one_line_error(run("seeds", str(tmp_path / "none.csv")), "not found")
    f = seeds_file(tmp_path / "r.csv", [1.0, 2.0], [2.0, 3.0])
    one_line_error(run("seeds", f, "--alternative", "bigger"), "alternative 'bigger'")
    one_line_error(run("seeds", f, "--plot", str(tmp_path / "x.jpg")), "use .png, .svg or .pdf")


def test_errors_bad_input_is_one_line(run, tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": 1, "gold": "a", "pred": "a"}\n{"id": 2, "gold": "a", pred}\n', encoding="utf-8")
    one_line_error(run("errors", str(p)), "p.jsonl:2: not valid JSON")
    q = tmp_path / "q.csv"
    q.write_bytes(b"id,gold,pred\n1,a,\xff\n")
    one_line_error(run("errors", str(q)), "q.csv:2: not valid UTF-8 (byte 0xff at column 5)")
    ok = preds(tmp_path / "ok.jsonl", BASE)
    one_line_error(run("errors", ok, "--slice", "region"), "no field 'region'")
    one_line_error(run("errors", ok, "--schema", "s.json"), "add --task extraction")


def test_register_adds_exactly_the_three_commands():
    app = typer.Typer()
    evaluate.register(app)
    assert sorted(c.name for c in app.registered_commands) == ["errors", "regress", "seeds"]


def test_cli_module_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, campaign.cli.evaluate, campaign.evaluate; "
            "print(sorted(m for m in ('numpy', 'scipy', 'sklearn', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_seeds_column_options_named_in_the_errors_exist(run, tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("model,run,acc\n" + "".join(f"base,{s},{70 + s}\ncand,{s},{70 + s + d}\n"
                                            for s, d in enumerate(SLEEP)), encoding="utf-8")
    one_line_error(run("seeds", str(f)), "no 'variant' field", "pass --variant-field NAME")
    one_line_error(run("seeds", str(f), "--variant-field", "model"), "no 'seed' field", "pass --seed-field NAME")
    one_line_error(run("seeds", str(f), "--variant-field", "model", "--seed-field", "run"), "no 'metric' field",
                   "pass --metric-field NAME")
    r = run("seeds", str(f), "--variant-field", "model", "--seed-field", "run", "--metric-field", "acc",
            "--resamples", "500", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["metric"] == "acc" and d["n_seeds"] == 10 and d["mean_diff"] == pytest.approx(1.58)
    assert d["campaign_version"]
    # --metric still works
    assert run("seeds", str(f), "--variant-field", "model", "--seed-field", "run", "--metric", "acc",
               "--resamples", "200").code == 0


def test_regress_verdict_cluster_and_non_inferiority_from_the_command_line(run, tmp_path):
    # 200 examples in 20 movies; the candidate loses 12 answers, all inside 2 movies, wins none
    def write(path, wrong):
        path.write_text("".join(json.dumps({"id": i, "gold": "x", "pred": "y" if i in wrong else "x",
                                            "movie": f"m{i // 10}"}) + "\n" for i in range(200)), encoding="utf-8")
        return str(path)

    b = write(tmp_path / "b.jsonl", set(range(150, 200)))
    c = write(tmp_path / "c.jsonl", set(range(150, 200)) | set(range(12)))
    naive = run("regress", b, c, "--json")
    d = naive.json()["difference"]
    # by hand: d = -1 x 12, 0 x 188: mean -0.06, se = sqrt((12 - 200 x 0.0036) / 199 / 200) = 0.016835
    assert naive.code == 1 and d["metric"] == "accuracy" and d["clusters"] is None
    assert d["estimate"] == pytest.approx(-0.06) and d["se"] == pytest.approx(0.016835, rel=1e-4)
    assert set(d) >= {"metric", "estimate", "se", "ci95", "p_value", "clusters", "method"}
    clustered = run("regress", b, c, "--cluster", "movie", "--json")
    d = clustered.json()["difference"]
    # CR1 by hand: residual sums -10 + 0.6 = -9.4 (movie 0), -2 + 0.6 = -1.4 (movie 1), +0.6 in the 18 others;
    # V = 20/19 x (9.4^2 + 1.4^2 + 18 x 0.36) / 200^2 = 0.0025474, se 0.050471, t = -1.189 on 19 df: not shown
    assert clustered.code == 0 and d["clusters"] == 20 and d["verdict"] == "NOT SHOWN"
    assert d["se"] == pytest.approx(0.050471, rel=1e-4)
    assert run("regress", b, c, "--cluster", "lang").code == 2
    ni = run("regress", b, c, "--non-inferiority", "0.1")
    assert ni.code == 0 and ni.out.startswith("NON-INFERIOR")
    assert run("regress", b, c, "--non-inferiority", "-1").code == 2


def test_errors_prints_the_standard_error_and_interval(run, tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"id": i, "gold": "a", "pred": "a" if i < 8 else "b", "doc": f"d{i // 2}"}) + "\n"
                         for i in range(10)), encoding="utf-8")
    r = run("errors", str(p))
    # 8 of 10: se = sqrt(0.8 x 0.2 / 10) = 0.1265; Wilson 95%: [0.4902, 0.9433]
    assert r.code == 0 and "accuracy 0.8000 (se 0.1265, 95% interval [0.4902, 0.9433])" in r.out
    assert "Wilson" in r.out
    d = run("errors", str(p), "--cluster", "doc", "--json").json()
    assert d["estimates"][0]["clusters"] == 5 and d["cluster_field"] == "doc"
    assert any("only 5 clusters" in n for n in d["notes"])
    assert run("errors", str(p), "--cluster", "nope").code == 2
