"""Regressions between two prediction files: flips with ids, McNemar, per-class deltas, guards."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.evaluate.regress import parse_guard, regress

GOLD = "a a a a b b b c c c".split()
BASE = "a a b c b b a c c b".split()     # wrong: 3 4 7 10
CAND = "a b a c b a b c c c".split()     # wrong: 2 4 6; so right->wrong 2 6, wrong->right 3 7 10


def write(path, preds, gold=GOLD, ids=None):
    ids = ids or [str(i + 1) for i in range(len(preds))]
    path.write_text("".join(json.dumps({"id": i, "gold": g, "pred": p}) + "\n"
                            for i, g, p in zip(ids, gold, preds, strict=True)), encoding="utf-8")
    return path


@pytest.fixture
def pair(tmp_path):
    return write(tmp_path / "base.jsonl", BASE), write(tmp_path / "cand.jsonl", CAND)


def test_flips_and_counts_by_hand(pair):
    r = regress(*pair)
    assert r.right_to_wrong == ("2", "6") and r.wrong_to_right == ("3", "7", "10")
    assert (r.both_right, r.both_wrong, r.examples) == (4, 1, 10)
    assert (r.accuracy_baseline, r.accuracy_candidate) == (0.6, 0.7)
    # McNemar exact on b = 2, c = 3: two-sided binomial 2 x P(X <= 2 | 5) = 2 x 16/32 > 1 -> 1.
    assert r.mcnemar.method == "exact binomial" and r.mcnemar.p_value == 1.0 and (r.mcnemar.b, r.mcnemar.c) == (2, 3)
    from campaign import __version__

    d = json.loads(json.dumps(r.to_dict()))
    assert d["schema"].startswith("campaign.regress/") and d["campaign_version"] == __version__


def test_mcnemar_agrees_with_statsmodels_on_larger_files(tmp_path):
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    n = 200
    gold = ["x" if i % 2 else "y" for i in range(n)]
    base = [g if i % 5 else ("y" if g == "x" else "x") for i, g in enumerate(gold)]          # 40 wrong
    cand = [g if i % 7 else ("y" if g == "x" else "x") for i, g in enumerate(gold)]          # 29 wrong
    r = regress(write(tmp_path / "b.jsonl", base, gold), write(tmp_path / "c.jsonl", cand, gold))
    b = sum(1 for i in range(n) if base[i] == gold[i] and cand[i] != gold[i])
    c = sum(1 for i in range(n) if base[i] != gold[i] and cand[i] == gold[i])
    both = sum(1 for i in range(n) if base[i] == gold[i] and cand[i] == gold[i])
    ref = sm_mcnemar([[both, b], [c, n - both - b - c]], exact=b + c < 25, correction=True)
    assert (len(r.right_to_wrong), len(r.wrong_to_right)) == (b, c) and b + c >= 25
    assert r.mcnemar.p_value == pytest.approx(ref.pvalue, rel=1e-10)


def test_per_class_deltas(pair):
    r = regress(*pair)
    by = {c.label: c for c in r.per_class}
    # baseline F1 a 4/7, b 4/7, c 2/3 (see test_errors). Candidate: a predicted at 1 3 6 (right 1 3), gold 4 -> P 2/3,
    # R 1/2, F1 4/7; b predicted at 2 5 7 (right 5 7) -> P 2/3, R 2/3; c predicted at 4 8 9 10 (right 8 9 10) -> P 3/4,
    # R 1.
    assert by["a"].f1 == pytest.approx((4 / 7, 4 / 7)) and by["a"].delta_f1 == pytest.approx(0)
    assert by["b"].f1 == pytest.approx((4 / 7, 2 / 3)) and by["b"].delta_f1 == pytest.approx(2 / 3 - 4 / 7)
    assert by["c"].recall == pytest.approx((2 / 3, 1.0)) and by["c"].f1[1] == pytest.approx(6 / 7)
    deltas = {d.name: d.delta for d in r.deltas}
    assert deltas["accuracy"] == pytest.approx(0.1)


def test_guards_pass_and_fail_with_the_reason(pair):
    ok = regress(*pair, guards=["f1[a]>=0", "accuracy>=0.05", "f1[c]>0"])
    assert ok.passed and all(g.passed for g in ok.guards)
    # broken on the point estimates, but 10 examples cannot show it: a guard is a test, so these warn
    noisy = regress(*pair, guards=["f1[a]>=0", "recall[a]>=-0.01", "precision[c]>=0.1", "accuracy<0"])
    assert noisy.status == "warn" and noisy.failed_guards == ()
    assert [g.status for g in noisy.guards] == ["pass", "pass", "warn", "warn"]
    g = noisy.guards[2]
    assert g.delta == pytest.approx(3 / 4 - 2 / 3) and "rose by 0.0833" in g.describe()
    # accuracy 0.6 -> 0.7 can be shown to fall short of +0.9: per-item differences -1 x2, +1 x3, 0 x5 have
    # sd 0.7379, se 0.2333, t = (0.1 - 0.9) / 0.2333 = -3.43 on 9 df, one-sided p = 0.0038
    bad = regress(*pair, guards=["accuracy>=0.9"])
    assert not bad.passed and [x.expression for x in bad.failed_guards] == ["accuracy>=0.9"]
    assert bad.guards[0].p_value == pytest.approx(0.0038, abs=2e-4)


def test_guard_on_equal_values_passes_despite_float_noise(pair):
    r = regress(*pair, guards=["f1[a]>=0", "f1[a]<=0"])
    assert r.passed                                    # 4/7 - 4/7 computed from different counts is ~1e-17


def test_guard_syntax_and_unknown_metric(pair):
    assert parse_guard("f1[refund] >= -0.01") == ("f1[refund]", ">=", -0.01)
    assert parse_guard("valid_json>=0") == ("valid_json", ">=", 0.0)
    with pytest.raises(InputError, match="not of the form METRIC OP NUMBER"):
        regress(*pair, guards=["f1[a] => 0"])
    with pytest.raises(InputError, match=r"no metric 'f1\[A\]'; known metrics include f1\[a\], f1\[b\]"):
        regress(*pair, guards=["f1[A]>=0"])


def test_different_ids_are_bad_input(tmp_path):
    base = write(tmp_path / "b.jsonl", BASE)
    ids = [str(i + 1) for i in range(8)] + ["x", "y"]
    cand = write(tmp_path / "c.jsonl", CAND, ids=ids)
    with pytest.raises(InputError, match=r"^4 ids differ \(2 only in the baseline, 2 only in the candidate"):
        regress(base, cand)


def test_different_gold_is_bad_input(tmp_path):
    base = write(tmp_path / "b.jsonl", BASE)
    gold = list(GOLD)
    gold[4] = "c"
    cand = write(tmp_path / "c.jsonl", CAND, gold=gold)
    with pytest.raises(InputError, match="gold of id '5' differs"):
        regress(base, cand)


def test_models_that_never_disagree(tmp_path):
    r = regress(write(tmp_path / "b.jsonl", BASE), write(tmp_path / "c.jsonl", BASE), guards=["macro_f1>=0"])
    assert r.right_to_wrong == () and r.wrong_to_right == () and r.mcnemar.p_value == 1.0 and r.passed
    assert all(d.delta == 0 for d in r.deltas)


def test_extraction_guards_on_validity_and_required_fields(tmp_path):
    gold = [{"name": "A", "amount": 1}, {"name": "B", "amount": 2}, {"name": "C", "amount": 3},
            {"name": "D", "amount": 4}]
    base = [{"name": "A", "amount": 1}, '{"name": "B"}', {"name": "C", "amount": 3}, {"name": "x", "amount": 4}]
    cand = [{"name": "A", "amount": 1}, {"name": "B", "amount": 2}, "not json", {"name": "D", "amount": 4}]

    def w(name, preds):
        p = tmp_path / name
        p.write_text("".join(json.dumps({"id": i, "gold": g, "pred": q}) + "\n"
                             for i, (g, q) in enumerate(zip(gold, preds, strict=True))), encoding="utf-8")
        return p

    r = regress(w("b.jsonl", base), w("c.jsonl", cand), task="extraction", required=["amount"],
                guards=["valid_json>=0", "required[amount]>=0", "match[name]>=0"])
    # baseline right: 0, 2; candidate right: 0, 1, 3. valid JSON 4/4 -> 3/4; amount present 3/4 -> 3/4.
    assert r.right_to_wrong == ("2",) and r.wrong_to_right == ("1", "3")
    assert [g.passed for g in r.guards] == [False, True, True]
    # valid_json 1 -> 0.75 on 4 examples is tested (per-item differences 0, 0, -1, 0: se 0.25, t = -1 on 3 df,
    # one-sided p = 0.196, Holm over 1 tested guard): not shown, a warning; required/match are point checks
    assert [g.status for g in r.guards] == ["warn", "pass", "pass"] and r.guards[0].delta == pytest.approx(-0.25)
    assert r.guards[0].p_value == pytest.approx(0.1955, abs=1e-3) and not r.guards[1].tested
    fields = {f.field: f for f in r.per_field}
    # name: baseline misses 3 ("x"), candidate misses 2 (invalid); amount: baseline misses 1, candidate 2.
    assert fields["name"].match == (0.75, 0.75) and fields["amount"].match == (0.75, 0.75)
    assert {d.name: d.delta for d in r.deltas}["accuracy"] == pytest.approx(0.25)
