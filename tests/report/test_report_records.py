"""campaign report shows every record (grouped by kind, newest first, each with its command line and inputs) and
what each holds (issue 28, items 11-13), and lists a record whose fields have the wrong types instead of aborting
(issue 29, item 9). The records are made by the real commands (--record) in each test."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DATA = EXAMPLES / "data"


def _text(page: str) -> str:
    """The page's text as a reader sees it: no pictures, no tags, entities decoded."""
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def _record(cli, tmp_path, *, training: bool = False) -> dict:
    """Records of every kind the guide's cheap commands make, three memory estimates of one model, two error
    analyses, a split with its ledger, and two runs (the second with its hypothesis, parameters and a loss)."""
    out = {"split": tmp_path / "splits"}
    argvs = [["memory", "gpt2", "--card", "rtx-4090"], ["memory", "gpt2", "--batch", "4", "--card", "rtx-4090"],
             ["memory", "gpt2", "--batch", "8"],
             ["split", str(DATA / "tickets.jsonl"), "--out", str(out["split"]), "--text", "text", "--label", "label",
              "--group", "user"],
             ["errors", str(DATA / "baseline.jsonl")], ["errors", str(DATA / "candidate.jsonl")],
             ["regress", str(DATA / "baseline.jsonl"), str(DATA / "candidate.jsonl")],
             ["seeds", str(DATA / "seeds.csv"), "--min-effect", "0.5"],
             ["budget", str(EXAMPLES / "plan" / "plan.yaml")],
             ["leaks", str(DATA / "tickets.jsonl"), str(DATA / "heldout.jsonl")], ["cards"]]
    if training:
        argvs += [["check", str(EXAMPLES / "check_setup.py") + ":make_setup"],
                  ["quant", str(EXAMPLES / "quant_setup.py") + ":make_setup"]]
    for argv in argvs:
        assert cli("--record", *argv).code in (0, 1), argv
    base = cli("run", "start", "baseline", "--param", "lr=0.001").out.strip()
    assert cli("run", "end", base, "--status", "completed").code == 0
    run = cli("run", "start", "higher-lr", "--param", "lr=0.01", "--param", "lora.r=16", "--hypothesis",
              "a 10x learning rate converges in half the steps", "--baseline", base).out.strip()
    for step, loss in ((1, 2.5), (2, 1.75), (3, 1.25)):
        assert cli("run", "log", run, f"step={step}", f"loss={loss}").code == 0
    assert cli("run", "end", run, "--status", "completed").code == 0
    assert cli("--record", "usage", str(out["split"]), "--record", "test", "--purpose", "final-test", "--note",
               "picked the learning rate", "--run", run).code in (0, 1)
    out["runs"] = (base, run)
    return out


@pytest.fixture
def recorded(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    made = _record(cli, tmp_path)
    out = tmp_path / "report.html"
    r = cli("report", "--out", str(out), "--json")
    assert r.code == 0, r.err
    return {**made, "summary": r.json(), "page": out.read_text(encoding="utf-8"), "root": tmp_path / "root"}


def test_every_record_is_shown_grouped_newest_first_with_its_command_line(recorded):
    page, root = recorded["page"], recorded["root"]
    files = sorted((root / "records").glob("*/*.json"))
    assert recorded["summary"]["records"] == len(files) == 12
    for f in files:                                          # each record, by its file, with its command line
        doc = json.loads(f.read_text())
        assert f.name in page
        assert "campaign " + " ".join(doc["argv"]) in _text(page).replace("'", ""), doc["argv"]
    # the three estimates of gpt2 are three entries (not the latest one), the newest (batch 8) first
    text = _text(page)
    at = [text.index(f"campaign memory gpt2 {rest}") for rest in ("--batch 8", "--batch 4 --card", "--card rtx")]
    assert at == sorted(at)
    assert text.count("memory of openai-community/gpt2") == 3
    # a kind no question of the guide asks about is shown all the same
    assert "campaign cards" in text.split("Other records")[1]
    # inputs: the prediction files with their sha256, as hashed here
    import hashlib

    sha = hashlib.sha256((DATA / "candidate.jsonl").read_bytes()).hexdigest()[:12]
    assert f"source {DATA / 'candidate.jsonl'} (sha256 {sha}, 300 rows)" in text


def test_regress_shows_mcnemar_and_the_per_class_deltas(recorded):
    from scipy.stats import chi2
    from sklearn.metrics import f1_score

    base = [json.loads(line) for line in (DATA / "baseline.jsonl").read_text().splitlines()]
    cand = {r["id"]: r for r in (json.loads(line) for line in (DATA / "candidate.jsonl").read_text().splitlines())}
    b = sum(r["pred"] == r["gold"] and cand[r["id"]]["pred"] != r["gold"] for r in base)   # right to wrong
    c = sum(r["pred"] != r["gold"] and cand[r["id"]]["pred"] == r["gold"] for r in base)   # wrong to right
    p = chi2.sf((abs(b - c) - 1) ** 2 / (b + c), 1)                                       # continuity corrected
    text = _text(recorded["page"])
    assert f"McNemar's test: p = {p:.4f} (right to wrong b = {b}, wrong to right c = {c}" in text
    gold = [r["gold"] for r in base]
    for label in sorted(set(gold)):
        before = f1_score(gold, [r["pred"] for r in base], labels=[label], average="macro")
        after = f1_score(gold, [cand[r["id"]]["pred"] for r in base], labels=[label], average="macro")
        assert re.search(rf"{label}\s+\d+\s+{before:.4f}\s+{after:.4f}\s+{after - before:.4f}", text), label


def test_split_usage_runs_and_budget_show_what_their_records_hold(recorded):
    text = _text(recorded["page"])
    rows = len((DATA / "tickets.jsonl").read_text().splitlines())
    assert f"input: {DATA / 'tickets.jsonl'} (jsonl, {rows} rows" in text
    for name in ("train", "val", "test"):                    # rows per split, counted in the files written
        n = len((recorded["split"] / f"{name}.jsonl").read_text().splitlines())
        assert re.search(rf"\b{name}\s+{n}\s+0\.\d+", text), name
    # the ledger: the use recorded, with what it decided and its run; the final split's count
    base, run = recorded["runs"]
    assert re.search(rf"test\s+final_test\s+picked the learning rate\s+{run}", text)
    assert re.search(r"test \(final\)\s+0\s+0\s+1", text)
    # each run: hypothesis, parameters (and the baseline's where it differs), last metrics, its loss curve
    assert "hypothesis: a 10x learning rate converges in half the steps" in text
    assert re.search(r"lr\s+0\.01\s+0\.001", text) and re.search(r"lora\.r\s+16", text)
    assert re.search(r"loss\s+1\.2500", text)
    assert "logged by campaign run log, 3 records" in text
    assert f"run baseline ({base})" in text and "hypothesis: none recorded" in text
    # the budget's caveats: the example prices, the hours from FLOPs, the margin of plan.yaml (15%)
    assert "prices are the bundled example data" in text
    assert re.search(r"hours of [\w, -]+ estimated from FLOPs", text)
    assert "recovery margin 15% on every run" in text
    # its Gantt draws where the recommended rental's package ends: five 3-day packages in a row, 5 x 72 = 360 h
    assert "5 x 3-day in a row ends at 360 h" in recorded["page"]


def test_two_confusion_matrices_are_told_apart(recorded):
    captions = re.findall(r"<figcaption>(confusion of [^<]*)</figcaption>", recorded["page"])
    assert len(captions) == 2 and len(set(captions)) == 2
    assert any("baseline.jsonl" in c for c in captions) and any("candidate.jsonl" in c for c in captions)


def test_print_keeps_headings_with_what_follows_and_no_title_page(recorded):
    css = re.search(r"<style>(.*?)</style>", recorded["page"], flags=re.S).group(1).replace("\n", "")
    assert re.search(r"h2,h3,\.meta\{[^}]*break-after:avoid", css)          # a heading stays with its table
    assert re.search(r"figure,tr,\.record>p\{[^}]*break-inside:avoid", css)
    # a new printed page before each question but the first: the first follows the title on page one
    assert re.search(r"section\+section\{[^}]*break-before:page", css)
    assert not re.search(r"(^|[},])h2\{[^}]*break-before", css)


def test_a_check_and_a_quant_record_name_their_verdict_setup_and_model(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "root"))
    setup = str(EXAMPLES / "check_setup.py") + ":make_setup"
    quant = str(EXAMPLES / "quant_setup.py") + ":make_setup"
    assert cli("--record", "check", setup).code == 0
    assert cli("--record", "quant", quant).code in (0, 1)
    out = tmp_path / "r.html"
    assert cli("report", "--out", str(out)).code == 0
    text = _text(out.read_text(encoding="utf-8"))
    assert f"verdict: pass — setup {setup}" in text
    # the model the setup names (examples/quant_setup.py returns name="tiny-llama (examples)")
    assert f"model: tiny-llama (examples) — setup {quant}" in text


# -- issue 29, item 9: wrong-typed fields are listed, never fatal -------------------------------------------------
WRONG = (5, [1], {"a": 1}, "x", None)          # an int where a list is due, a list where a dict, a string, null


def _mutants(root: Path) -> list[tuple[str, dict, str, object]]:
    """(kind, record document, field, wrong value) for every field of every record kind under root."""
    out = []
    seen: set[str] = set()
    for f in sorted((root / "records").glob("*/*.json")):
        doc = json.loads(f.read_text())
        kind = doc["result"]["schema"]
        if kind in seen:
            continue
        seen.add(kind)
        subjects = [doc]
        if isinstance(doc["result"].get("memory"), dict):       # a check's measurement: a record kind of its own
            subjects.append({**doc, "command": "measure", "result": doc["result"]["memory"]})
        for subject in subjects:
            for field in subject["result"]:
                if field != "schema":
                    out += [(subject["result"]["schema"], subject, field, v) for v in WRONG]
    return out


def _write(root: Path, i: int, doc: dict, field: str, value: object) -> str:
    bad = {**doc, "result": {**doc["result"], field: value}}
    name = f"20990101T{i:06d}000000Z-{i:08x}.json"
    folder = root / "records" / str(doc["command"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(bad))
    return name


def test_wrong_typed_fields_in_every_record_kind_are_listed_not_fatal(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    from campaign.report.build import ONE_EACH

    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / "real"))
    _record(cli, tmp_path, training=True)
    mutants = _mutants(tmp_path / "real")
    kinds = {kind for kind, *_ in mutants}
    assert {"campaign.memory/1", "campaign.split/1", "campaign.usage/1", "campaign.errors/1", "campaign.regress/1",
            "campaign.seeds/1", "campaign.budget/1", "campaign.leaks/1", "campaign.check/1", "campaign.quant/1",
            "campaign.measurement/1"} <= kinds
    # 1. every field of every kind with every wrong type, in one store: many records of a kind, one table each
    many = tmp_path / "many"
    names = [_write(many, i, doc, field, value) for i, (_, doc, field, value) in enumerate(mutants)]
    out = tmp_path / "many.html"
    r = cli("report", "--root", str(many), "--out", str(out), "--json")
    assert r.code == 0, r.err
    assert r.json()["records"] == len(names) and r.json()["unreadable"] == 0
    page = out.read_text(encoding="utf-8")
    assert all(n in page for n in names)
    # 2. each field with one wrong type (the types in turn), a few records of a kind per store: each drawn alone
    by_kind: dict[str, list] = {}
    for i, (kind, doc, field, _value) in enumerate(mutants[::len(WRONG)]):
        by_kind.setdefault(kind, []).append((doc, field, WRONG[i % len(WRONG)]))
    stores = max(len(v) for v in by_kind.values()) // ONE_EACH + 1
    for s in range(stores):
        root = tmp_path / f"few-{s}"
        written = [(_write(root, i, doc, field, value), field, value) for i, (doc, field, value) in enumerate(
            m for v in by_kind.values() for m in v[s * ONE_EACH:(s + 1) * ONE_EACH])]
        out = tmp_path / f"few-{s}.html"
        r = cli("report", "--root", str(root), "--out", str(out))
        assert r.code == 0, (s, r.err)
        page = out.read_text(encoding="utf-8")
        assert all(name in page for name, _, _ in written)
    # the issue's own example: a budget whose phases is a number is listed with what could not be drawn
    budget = next(doc for kind, doc, _, _ in mutants if kind == "campaign.budget/1")
    one = tmp_path / "one"
    name = _write(one, 0, budget, "phases", 5)
    _write(one, 1, budget, "packages", {"a": 1})
    assert cli("report", "--root", str(one), "--out", str(tmp_path / "one.html")).code == 0
    page = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert name in page and "could not be drawn" in page


def test_headless_chromium_shows_every_record_with_its_command_line(recorded, tmp_path):
    """One page in headless Chromium: the screenshot is drawn (ink on a white page, not blank, not solid), and the
    DOM Chromium laid out holds every record's file and command line, and each record's figures."""
    import subprocess

    from tests.report.test_report import chromium

    browser = chromium()
    plt = pytest.importorskip("matplotlib.pyplot")
    page = tmp_path / "page.html"
    page.write_text(recorded["page"], encoding="utf-8")
    shot = tmp_path / "shot.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
              "--host-resolver-rules=MAP * ~NOTFOUND"]
    done = subprocess.run([*common, "--window-size=1200,3000", f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file(), done.stderr[-2000:]
    pixels = plt.imread(str(shot))[..., :3].mean(axis=2)
    assert pixels.shape == (3000, 1200)
    # the top of the page: the title, then the first question's three memory estimates (text and figures)
    for band in range(0, 3000, 1000):
        ink = (pixels[band:band + 1000] < 0.9).mean()
        assert 0.01 < ink < 0.6, (band, ink)
    dom = subprocess.run([*common, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    for f in sorted((recorded["root"] / "records").glob("*/*.json")):
        doc = json.loads(f.read_text())
        assert f.name in dom
        assert html.escape("campaign " + " ".join(doc["argv"]), quote=True) in dom.replace("'", "") or \
            ("campaign " + " ".join(doc["argv"])) in _text(dom).replace("'", "")
    assert dom.count("<article class=\"record\">") + dom.count("<article class='record'>") >= 12
