"""Reading prediction files: JSONL and CSV, line-numbered errors for every kind of malformed input."""
from __future__ import annotations

import hashlib
import json

import pytest

from campaign.errors import InputError
from campaign.evaluate.predictions import NO_PREDICTION, read_predictions, read_rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_and_csv_give_the_same_predictions(tmp_path):
    rows = [{"id": "a", "gold": "x", "pred": "y", "lang": "en"}, {"id": "b", "gold": "y", "pred": "y", "lang": "fr"}]
    j = read_predictions(write_jsonl(tmp_path / "p.jsonl", rows))
    c_path = tmp_path / "p.csv"
    c_path.write_text("id,gold,pred,lang\na,x,y,en\nb,y,y,fr\n", encoding="utf-8")
    c = read_predictions(c_path)
    for s in (j, c):
        assert s.ids == ("a", "b")
        assert [(p.gold, p.pred, p.meta) for p in s.predictions] == [("x", "y", {"lang": "en"}),
                                                                     ("y", "y", {"lang": "fr"})]
    assert j.sha256 == hashlib.sha256((tmp_path / "p.jsonl").read_bytes()).hexdigest()


def test_custom_field_names_and_blank_lines(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"uid": 1, "label": "x", "output": "x"}\n\n{"uid": 2, "label": "y", "output": null}\n',
                 encoding="utf-8")
    s = read_predictions(p, id_field="uid", gold_field="label", pred_field="output")
    assert s.ids == ("1", "2") and [x.line for x in s.predictions] == [1, 3]
    assert s.predictions[1].pred is None


def test_malformed_json_names_file_and_line(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": 1, "gold": "a", "pred": "a"}\n{"id": 2, "gold": "a" "pred": "b"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.jsonl:2: not valid JSON \(.* at column \d+\); fix or remove that record"):
        read_rows(p)


def test_a_json_line_that_is_not_an_object(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": 1, "gold": "a", "pred": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.jsonl:2: is a JSON list, not an object"):
        read_rows(p)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_non_utf8_byte_is_located(tmp_path, suffix):
    p = tmp_path / f"p{suffix}"
    head = b'{"id": 1, "gold": "a", "pred": "a"}\n' if suffix == ".jsonl" else b"id,gold,pred\n1,a,a\n"
    bad = b'{"id": 2, "gold": "caf\xe9", "pred": "a"}\n' if suffix == ".jsonl" else b"2,caf\xe9,a\n"
    p.write_bytes(head + bad)
    line = 2 if suffix == ".jsonl" else 3      # the CSV header is line 1
    col = bad.index(b"\xe9") + 1
    with pytest.raises(InputError, match=rf"p{suffix}:{line}: not valid UTF-8 \(byte 0xe9 at column {col}\)"):
        read_rows(p)


def test_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "p.csv"
    p.write_bytes("\ufeffid,gold,pred\n1,é,é\n".encode("utf-8"))
    assert read_predictions(p).predictions[0].gold == "é"


def test_ragged_csv_row(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("id,gold,pred\n1,a,a\n2,a,b,extra\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.csv:3: has 4 fields, the header has 3 \(quote values that contain ','\)"):
        read_rows(p)


def test_csv_line_numbers_follow_quoted_newlines(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text('id,gold,pred\n1,"two\nlines",a\n2,b\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.csv:4: has 2 fields"):
        read_rows(p)


def test_missing_column_names_the_option(tmp_path):
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "label": "a", "pred": "a"}])
    with pytest.raises(InputError,
                       match=r"line 1 has no 'gold' field \(fields: 'id', 'label', 'pred'\); .*--gold-field"):
        read_predictions(p)


def test_duplicate_ids_and_empty_gold(tmp_path):
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "gold": "a", "pred": "a"}, {"id": 1, "gold": "b", "pred": "b"}])
    with pytest.raises(InputError, match="duplicate id '1' at .* lines 1 and 2"):
        read_predictions(p)
    q = write_jsonl(tmp_path / "q.jsonl", [{"id": 1, "gold": "", "pred": "a"}])
    with pytest.raises(InputError, match="line 1 .* has no gold value"):
        read_predictions(q)


def test_unknown_format_missing_and_empty_files(tmp_path):
    x = tmp_path / "p.txt"
    x.write_text("id gold pred\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"unknown input format '\.txt'; use \.jsonl"):
        read_rows(x)
    with pytest.raises(InputError, match="not found"):
        read_rows(tmp_path / "nope.jsonl")
    e = tmp_path / "e.csv"
    e.write_text("id,gold,pred\n", encoding="utf-8")
    with pytest.raises(InputError, match="has no records"):
        read_rows(e)


def test_missing_prediction_is_a_label_of_its_own(tmp_path):
    from campaign.evaluate.analysis import labels_of

    p = tmp_path / "p.csv"
    p.write_text("id,gold,pred\n1,a,\n2,b,b\n", encoding="utf-8")
    gold, pred = labels_of(read_predictions(p))
    assert gold == ["a", "b"] and pred == [NO_PREDICTION, "b"]


def test_unicode_line_separators_inside_strings_do_not_split_records(tmp_path):
    # json.dumps(ensure_ascii=False) writes U+2028, U+2029 and U+0085 raw inside strings: still one record per line.
    rows = [{"id": "a", "gold": "x\u2028y", "pred": "p\u2029q"}, {"id": "b", "gold": "n\x85m", "pred": "z"},
            {"id": "c", "gold": "w", "pred": "w"}]
    p = tmp_path / "p.jsonl"
    body = json.dumps(rows[0], ensure_ascii=False) + "\n" + json.dumps(rows[1], ensure_ascii=False) + "\r\n" \
        + json.dumps(rows[2], ensure_ascii=False) + "\r\n"
    p.write_bytes(body.encode("utf-8"))
    assert "\u2028".encode() in p.read_bytes()
    got, _ = read_rows(p)
    assert [(r.line, r.fields) for r in got] == [(1, rows[0]), (2, rows[1]), (3, rows[2])]
    s = read_predictions(p)
    assert s.ids == ("a", "b", "c") and s.predictions[0].gold == "x\u2028y"


def test_csv_header_names_are_stripped_and_parquet_is_read(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("id, gold, pred\n1,a,a\n2,b,a\n", encoding="utf-8")
    s = read_predictions(p)
    assert [(x.id, x.gold, x.pred) for x in s.predictions] == [("1", "a", "a"), ("2", "b", "a")]
    q = tmp_path / "q.csv"
    q.write_text("id,gold, gold,pred\n1,a,a,a\n", encoding="utf-8")
    with pytest.raises(InputError, match="names the column 'gold' twice"):
        read_rows(q)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1, 2], "gold": ["a", "b"], "pred": ["a", None]}), tmp_path / "p.parquet")
    s = read_predictions(tmp_path / "p.parquet")
    assert [(x.id, x.gold, x.pred, x.line) for x in s.predictions] == [("1", "a", "a", 1), ("2", "b", None, 2)]


def test_blank_csv_rows_are_not_predictions_and_parquet_timestamps_slice(tmp_path):
    import datetime

    p = tmp_path / "p.csv"
    p.write_text("\nid,gold,pred\n1,a,a\n,,\n2,b,a\n", encoding="utf-8")
    assert [(x.id, x.line) for x in read_predictions(p).predictions] == [("1", 3), ("2", 5)]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from campaign.evaluate import analyze_errors

    day = datetime.datetime(2024, 5, 1)
    pq.write_table(pa.table({"id": [1, 2, 3], "gold": ["a", "b", "a"], "pred": ["a", "a", "a"],
                             "when": pa.array([day, day, day + datetime.timedelta(days=1)], pa.timestamp("s"))}),
                   tmp_path / "p.parquet")
    rep = analyze_errors(tmp_path / "p.parquet", slice_by="when")
    slices = {s["value"]: (s["examples"], s["errors"]) for s in rep.to_dict()["slices"]}
    assert slices == {"2024-05-01T00:00:00": (2, 1), "2024-05-02T00:00:00": (1, 0)}
