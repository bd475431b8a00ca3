"""Structured extraction: validity, schema subset, required fields, exact and normalized field matches."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.evaluate.analysis import analyze_errors
from campaign.evaluate.json_schema import load_schema, schema_errors
from campaign.evaluate.values import same_normalized

SCHEMA = {"type": "object", "required": ["name", "amount"], "additionalProperties": False,
          "properties": {"name": {"type": "string", "minLength": 1}, "amount": {"type": "number", "minimum": 0},
                         "currency": {"enum": ["EUR", "USD"]}, "tags": {"type": "array", "items": {"type": "string"}}}}

ROWS = [
    # a: valid JSON string; name differs in case, amount as "1,200", tags reordered, an extra field.
    {"id": "a", "gold": {"name": "Alice Smith", "amount": 1200, "tags": ["x", "y"]},
     "pred": '{"name": "alice  smith.", "amount": "1,200", "tags": ["y", "x"], "note": "hi"}'},
    # b: a Markdown fence: invalid JSON.
    {"id": "b", "gold": {"name": "Bob", "amount": 5}, "pred": '```json\n{"name": "Bob", "amount": 5}\n```'},
    # c: an object, exactly right.
    {"id": "c", "gold": {"name": "Carol", "amount": 7}, "pred": {"name": "Carol", "amount": 7}},
    # d: amount wrong and negative (schema), currency missing from the gold.
    {"id": "d", "gold": {"name": "Dan", "amount": 3}, "pred": {"name": "Dan", "amount": -3, "currency": "EUR"}},
    # e: name missing (required), amount 7.0 for 7 (exact differs: 7 vs 7.0).
    {"id": "e", "gold": {"name": "Eve", "amount": 7}, "pred": {"amount": 7.0}},
]


@pytest.fixture
def preds(tmp_path):
    p = tmp_path / "ext.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    s = tmp_path / "schema.json"
    s.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return p, s


def test_validity_required_and_fields_by_hand(preds):
    p, s = preds
    r = analyze_errors(p, task="extraction", schema=s)
    assert r.examples == 5 and r.parsed == 4 and r.valid_json == 0.8
    # schema-valid: c only (a has extra fields and a string amount; d negative; e misses name; b unparsed).
    assert r.schema_valid_count == 1 and r.schema_valid == 0.2
    req = {x.field: (x.present, x.rate) for x in r.required}     # defaults to the schema's required
    assert req == {"name": (3, 0.6), "amount": (4, 0.8)} and r.required_all == 0.6
    f = {x.field: x for x in r.fields}
    assert (f["name"].gold_examples, f["name"].produced, f["name"].exact, f["name"].normalized) == (5, 3, 2, 3)
    assert (f["amount"].gold_examples, f["amount"].produced, f["amount"].exact, f["amount"].normalized) == (5, 4, 1, 3)
    assert (f["tags"].gold_examples, f["tags"].exact, f["tags"].normalized) == (1, 0, 1)
    assert f["amount"].normalized_rate == 0.6 and f["name"].exact_rate == 0.4
    assert {x.field: (x.count, x.example_ids) for x in r.extra_fields} == {"note": (1, ("a",)), "currency": (1, ("d",))}
    assert r.correct == 2 and r.accuracy == 0.4 and r.invalid_ids == ("b",)    # a and c: every gold field matches
    assert any("Markdown code fence" in n for n in r.notes)
    m = r.metrics()
    assert m["valid_json"] == 0.8 and m["schema_valid"] == 0.2 and m["required[name]"] == 0.6
    assert m["exact[amount]"] == 0.2 and m["match[amount]"] == 0.6
    d = r.to_dict()
    assert "per_example" not in d and json.loads(json.dumps(d))["task"] == "extraction"
    from campaign import __version__

    assert d["campaign_version"] == __version__


def test_required_option_overrides_the_schema(preds):
    p, _ = preds
    r = analyze_errors(p, task="extraction", required=["tags"])
    assert [(x.field, x.present) for x in r.required] == [("tags", 1)] and r.schema_valid is None


@pytest.mark.parametrize("value,ok", [
    ({"name": "x", "amount": 1}, True),
    ({"name": "x", "amount": 1.0, "tags": []}, True),
    ({"name": "", "amount": 1}, False),                          # minLength
    ({"name": "x"}, False),                                      # required
    ({"name": "x", "amount": True}, False),                      # a boolean is not a number
    ({"name": "x", "amount": 1, "currency": "GBP"}, False),      # enum
    ({"name": "x", "amount": 1, "tags": ["a", 2]}, False),       # items
    ({"name": "x", "amount": 1, "other": 1}, False),             # additionalProperties
    ([1, 2], False),
])
def test_schema_subset(value, ok):
    assert (schema_errors(value, SCHEMA) == []) is ok


def test_schema_errors_name_the_path():
    errs = schema_errors({"name": "x", "amount": -1, "tags": ["a", 2]}, SCHEMA)
    assert sorted(errs) == ["$.amount: violates minimum 0", "$.tags[1]: expected string"]
    assert schema_errors(3, {"type": "integer"}) == [] and schema_errors(3.5, {"type": "integer"}) != []
    assert schema_errors("x", {"anyOf": [{"type": "number"}, {"type": "string"}]}) == []
    assert schema_errors(1, {"oneOf": [{"type": "number"}, {"type": "integer"}]}) == ["$: fails oneOf"]


def test_unsupported_schema_keywords_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"uses '\$ref' at \$\.a, which campaign does not check"):
        load_schema({"type": "object", "properties": {"a": {"$ref": "#/defs/x"}}})
    with pytest.raises(InputError, match="type 'text'"):
        load_schema({"type": "text"})
    bad = tmp_path / "s.json"
    bad.write_text("{oops", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        load_schema(bad)


@pytest.mark.parametrize("a,b,same", [
    ("Alice  Smith", "alice smith.", True),
    ("1,200", 1200, True),
    ("3.0", 3, True),
    (["x", "y"], ["y", "x"], True),
    (None, "", True),
    ("ＡＢＣ", "abc", True),                                       # NFKC full-width letters
    ("12,00", 1200, False),                                        # not a thousands separator
    ("Bob", "Rob", False),
    (True, 1, False),
])
def test_normalize(a, b, same):
    assert same_normalized(a, b) is same


def test_gold_must_be_an_object(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": 1, "gold": "refund", "pred": "{}"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="gold at .* line 1 is not a JSON object"):
        analyze_errors(p, task="extraction")


def test_extraction_review_sheet_cells(preds, tmp_path):
    import csv

    p, s = preds
    out = tmp_path / "rev.csv"
    r = analyze_errors(p, task="extraction", schema=s, review_sheet=out, per_cell=10)
    with open(out, newline="", encoding="utf-8") as f:
        cells = {row["id"]: row["cell"] for row in csv.DictReader(f)}
    # a is right on every field but breaks the schema; c is the only clean example, so it is not on the sheet.
    assert cells == {"a": "schema invalid", "d": "schema invalid", "e": "schema invalid", "b": "invalid JSON"}
    assert r.review_rows == 4


@pytest.mark.parametrize("keyword,value,fix", [
    ("properties", [{"name": {"type": "string"}}], "an object of field schemas"),
    ("required", "name", "a list of field names"),
    ("enum", 5, "a list of the allowed values"),
    ("minimum", "5", "a number"),
    ("maxLength", -1, "an integer >= 0"),
    ("items", [{"type": "string"}], "one schema object for every item"),
    ("anyOf", {"type": "string"}, "a non-empty list of schemas"),
])
def test_malformed_keyword_values_are_one_line_errors(tmp_path, keyword, value, fix):
    path = tmp_path / "bad_schema.json"
    sub = {"type": "string", keyword: value} if keyword not in ("properties", "required") else {}
    doc = {"type": "object", keyword: value} if keyword in ("properties", "required") else \
        {"type": "object", "properties": {"name": sub}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_schema(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and repr(keyword) in msg and fix in msg
    assert msg.endswith("fix the schema")
    assert ("$.name" in msg) == (keyword not in ("properties", "required"))


def test_a_model_output_no_parser_can_hold_is_an_invalid_object_not_a_crash():
    from campaign.evaluate.values import parse_object

    assert parse_object('{"a": ' + "9" * 5000 + "}") is None          # past Python's integer conversion limit
    assert parse_object("[" * 100_000 + "]" * 100_000) is None         # nesting past the stack
    assert parse_object('{"a": 1}') == {"a": 1}
