"""Classification error analysis on a 10-example set whose every figure is worked out by hand below."""
from __future__ import annotations

import csv
import json

import pytest

from campaign.errors import InputError
from campaign.evaluate.analysis import analyze_errors

# ids 1..10; gold a a a a b b b c c c; four errors: 3 a->b, 4 a->c, 7 b->a, 10 c->b.
GOLD = "a a a a b b b c c c".split()
PRED = "a a b c b b a c c b".split()
LANG = "en en en fr en fr fr en fr fr".split()


@pytest.fixture
def preds(tmp_path):
    p = tmp_path / "preds.jsonl"
    p.write_text("".join(json.dumps({"id": str(i + 1), "gold": g, "pred": q, "lang": lang}) + "\n"
                         for i, (g, q, lang) in enumerate(zip(GOLD, PRED, LANG, strict=True))), encoding="utf-8")
    return p


def test_confusion_matrix_counts_and_row_shares(preds):
    r = analyze_errors(preds)
    assert r.labels == ("a", "b", "c") and r.examples == 10 and r.errors == 4 and r.accuracy == 0.6
    assert r.matrix == ((2, 1, 1), (1, 2, 0), (0, 1, 2))
    expected = ((0.5, 0.25, 0.25), (1 / 3, 2 / 3, 0.0), (0.0, 1 / 3, 2 / 3))
    for row, exp in zip(r.matrix_normalized, expected, strict=True):
        assert row == pytest.approx(exp)


def test_per_class_and_averages_by_hand(preds):
    r = analyze_errors(preds)
    by = {c.label: c for c in r.per_class}
    # a: predicted 3 times (ids 1, 2, 7), 2 right; 4 gold. b: predicted 4 times, 2 right; 3 gold. c: 3 and 2; 3.
    assert (by["a"].precision, by["a"].recall, by["a"].f1) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    assert (by["b"].precision, by["b"].recall, by["b"].f1) == pytest.approx((1 / 2, 2 / 3, 4 / 7))
    assert (by["c"].precision, by["c"].recall, by["c"].f1) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert [(c.support, c.predicted) for c in r.per_class] == [(4, 3), (3, 4), (3, 3)]
    assert r.averages["macro"] == pytest.approx({"precision": 11 / 18, "recall": 11 / 18, "f1": 38 / 63})
    assert r.averages["weighted"]["f1"] == pytest.approx((4 * 4 / 7 + 3 * 4 / 7 + 3 * 2 / 3) / 10)
    assert r.averages["micro"] == pytest.approx({"precision": 0.6, "recall": 0.6, "f1": 0.6})
    m = r.metrics()
    assert m["f1[a]"] == pytest.approx(4 / 7) and m["macro_f1"] == pytest.approx(38 / 63) and m["accuracy"] == 0.6


def test_top_confusions_carry_example_ids(preds):
    r = analyze_errors(preds, top=3)
    assert [(c.gold, c.pred, c.count, c.example_ids) for c in r.top_confusions] == [
        ("a", "b", 1, ("3",)), ("a", "c", 1, ("4",)), ("b", "a", 1, ("7",))]
    assert all(c.share_of_errors == 0.25 for c in r.top_confusions)


def test_slices_by_metadata_field(preds):
    r = analyze_errors(preds, slice_by="lang")
    by = {s.value: s for s in r.slices}
    # en: ids 1 2 3 5 8, one error (3). fr: ids 4 6 7 9 10, three errors.
    assert (by["en"].examples, by["en"].errors, by["en"].accuracy) == (5, 1, pytest.approx(0.8))
    assert (by["fr"].examples, by["fr"].errors, by["fr"].accuracy) == (5, 3, pytest.approx(0.4))
    # en F1: a 4/5 (P 1, R 2/3), b 2/3 (P 1/2, R 1), c 1 -> 37/45. fr: a 0, b 1/2, c 1/2 -> 1/3.
    assert by["en"].macro_f1 == pytest.approx(37 / 45) and by["fr"].macro_f1 == pytest.approx(1 / 3)
    assert r.slices[0].value == "fr"                                   # worst first
    with pytest.raises(InputError, match=r"no field 'region' .*metadata fields: 'lang'"):
        analyze_errors(preds, slice_by="region")


def test_review_sheet_is_stratified_by_cell(tmp_path):
    # 12 a->b errors, 3 b->a errors, 20 correct: with per_cell 5 the sheet holds 5 + 3 errors, no correct row.
    rows = [{"id": f"ab{i}", "gold": "a", "pred": "b", "src": "web"} for i in range(12)]
    rows += [{"id": f"ba{i}", "gold": "b", "pred": "a", "src": "app"} for i in range(3)]
    rows += [{"id": f"ok{i}", "gold": "a", "pred": "a", "src": "web"} for i in range(20)]
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    before = p.read_bytes()
    sheet = tmp_path / "out" / "review.csv"
    r = analyze_errors(p, review_sheet=sheet, per_cell=5, seed=3)
    with open(sheet, newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == ["id", "gold", "pred", "cell", "tag", "note", "src"]
    cells = [g["cell"] for g in got]
    assert cells.count("a -> b") == 5 and cells.count("b -> a") == 3 and len(got) == r.review_rows == 8
    assert all(g["id"].startswith("ab") for g in got if g["cell"] == "a -> b") and len({g["id"] for g in got}) == 8
    again = tmp_path / "again.csv"
    analyze_errors(p, review_sheet=again, per_cell=5, seed=3)
    assert again.read_text(encoding="utf-8") == sheet.read_text(encoding="utf-8")     # same seed, same sample
    other = tmp_path / "other.csv"
    analyze_errors(p, review_sheet=other, per_cell=5, seed=4)
    assert other.read_text(encoding="utf-8") != sheet.read_text(encoding="utf-8")
    with_ok = analyze_errors(p, review_sheet=tmp_path / "ok.csv", per_cell=5, correct_per_cell=2)
    assert with_ok.review_rows == 10
    assert p.read_bytes() == before
    assert [x.name for x in (tmp_path / "out").iterdir()] == ["review.csv"]              # no temporary left
    with pytest.raises(InputError, match="is an input file"):
        analyze_errors(p, review_sheet=p)


def test_taxonomy_counts_errors_per_tag(preds, tmp_path):
    tags = tmp_path / "tags.csv"
    # Errors are 3, 4, 7, 10. Tag three of them (4 has two tags), and one correct example (1).
    tags.write_text("id,tag,note\n3,ambiguous,\n4,ambiguous;typo,\n7,label noise,\n10,,\n1,typo,\n", encoding="utf-8")
    r = analyze_errors(preds, taxonomy=tags)
    t = r.taxonomy
    assert (t.errors, t.tagged_errors, t.untagged_errors, t.examples) == (4, 3, 1, 10)
    by = {c.tag: c for c in t.tags}
    amb = by["ambiguous"]
    assert (amb.errors, amb.share_of_tagged, amb.rate) == (2, pytest.approx(2 / 3), 0.2)
    assert (by["typo"].errors, by["typo"].correct) == (1, 1)
    assert (by["label noise"].errors, by["label noise"].rate) == (1, 0.1)
    assert [c.tag for c in t.tags][0] == "ambiguous"
    assert any("3 of 4 errors are tagged" in n for n in t.notes)
    bad = tmp_path / "bad.csv"
    bad.write_text("id,tag\n99,typo\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"1 id\(s\) that are not in the predictions \(e.g. '99'\)"):
        analyze_errors(preds, taxonomy=bad)


def test_predicted_labels_outside_the_gold_and_empty_predictions(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("id,gold,pred\n1,a,a\n2,a,zz\n3,b,\n4,b,b\n", encoding="utf-8")
    r = analyze_errors(p)
    assert r.labels == ("a", "b", "(none)", "zz") and r.no_prediction == 1
    assert r.matrix == ((1, 0, 0, 1), (0, 1, 1, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    assert r.matrix_normalized[2] == (0.0, 0.0, 0.0, 0.0)                # no gold of that class: zeros, not NaN
    assert any("never in the gold" in n for n in r.notes)


def test_options_that_do_not_fit_the_task(preds):
    with pytest.raises(InputError, match="add --task extraction"):
        analyze_errors(preds, required=["a"])
    with pytest.raises(InputError, match="task 'ner' is not known"):
        analyze_errors(preds, task="ner")


def test_object_gold_is_refused_for_classification(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": 1, "gold": {"a": 1}, "pred": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="not a single label; .*--task extraction"):
        analyze_errors(p)


def test_json_round_trip(preds):
    d = json.loads(json.dumps(analyze_errors(preds, slice_by="lang").to_dict()))
    assert d["schema"] == "campaign.errors/1" and d["task"] == "classification" and d["matrix"][0] == [2, 1, 1]
    from campaign import __version__

    assert d["campaign_version"] == __version__


def test_missing_extras_name_the_install_command(preds, monkeypatch, tmp_path):
    import sys

    from campaign.errors import MissingDependencyError
    from campaign.plots import confusion, write

    report = analyze_errors(preds)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'campaign\[report\]'"):
        write(confusion(report.to_dict()), tmp_path / "c.png")
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(MissingDependencyError, match=r"'scikit-learn'.*pip install 'campaign\[data\]'"):
        analyze_errors(preds)
    assert not (tmp_path / "c.png").exists()
