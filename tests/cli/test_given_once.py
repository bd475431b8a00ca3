"""An option that takes one value, given twice, is refused (click would keep the last silently: `memory --card H100
--card A100` would check one card while the user reads two); options that collect values and flags are not."""
from __future__ import annotations


def test_a_single_value_option_given_twice_is_refused_naming_both(cli):
    r = cli("memory", "llama-3.1-8b", "--card=H100", "--card", "A100-40GB")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1
    assert "--card is given 2 times (H100, A100-40GB)" in r.err
    r = cli("kv", "llama-3.1-8b", "--context", "1024", "--context", "2048")
    assert r.code == 2 and "--context is given 2 times (1024, 2048)" in r.err


def test_options_that_collect_values_and_repeated_flags_still_work(cli):
    once = cli("memory", "llama-3.1-8b", "--infer", "--card", "H100", "--json")
    assert once.code == 0, once.err
    twice = cli("memory", "llama-3.1-8b", "--infer", "--infer", "--card", "H100", "--json", "--json")  # flags
    assert twice.code == 0 and twice.out == once.out
    # budget compares every card given (a list option)
    r = cli("budget", "examples/plan/plan.yaml", "--card", "H100", "--card", "A100-SXM-80GB", "--json")
    assert r.code in (0, 1), r.err
    assert {p["card"] for p in r.json()["packages"]} == {"H100-SXM-80GB", "A100-SXM-80GB"}
