"""CONTRIBUTING.md's table of option names lists every option of every command with the commands that take it
(tests/option_table.py reads them from the commands; `python -m tests.option_table --update` rewrites the table)."""
from __future__ import annotations

from tests.option_table import CONTRIBUTING, options, shown


def test_the_option_table_names_every_option_with_its_commands():
    found = {name: ", ".join(dict.fromkeys(c for c, _ in uses)) for name, uses in options().items()}
    table = shown(CONTRIBUTING.read_text(encoding="utf-8"))
    missing = sorted(set(found) - set(table))
    stale = sorted(set(table) - set(found))
    changed = sorted(n for n in set(found) & set(table) if found[n] != table[n])
    assert not (missing or stale or changed), (
        f"CONTRIBUTING.md's option table is out of date (python -m tests.option_table --update): missing {missing}, "
        f"gone {stale}, other commands {changed}")


def test_one_name_one_spelling_for_the_renamed_options():
    found = options()
    assert "--id-field" in found and "--id" not in found                       # --id: a hidden alias now
    assert [c for c, _ in found["--use"]] == ["usage"] and "--record" not in found
    assert {c for c, _ in found["--id-field"]} >= {"split", "leaks", "errors", "regress"}
