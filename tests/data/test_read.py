"""Reading JSONL, CSV/TSV and Parquet: fields, bad records with file and line, skip-and-count, inputs untouched."""
from __future__ import annotations

import hashlib
import json

import pytest

from campaign.data.read import Fields, make_dataset, read_dataset
from campaign.errors import InputError

from .conftest import write_jsonl


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_jsonl_fields_labels_groups_dates(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [
        {"q": "What?", "ctx": "Because.", "y": 1, "user": "u1", "doc": 7, "t": "2024-01-01T00:00:00Z", "id": "a"},
        {"q": "Who?", "ctx": "Me.", "y": "neg", "user": None, "doc": 7, "t": "2024-01-02", "id": "b"},
    ])
    before = sha(p)
    ds = read_dataset(p, Fields(text=("q", "ctx"), label="y", group=("user", "doc"), id="id", date="t"))
    assert ds.texts == ("What?\nBecause.", "Who?\nMe.")
    assert ds.labels == ("1", "neg")  # JSON numbers become their JSON text
    assert ds.groups == (("u1", None), ("7", "7"))
    assert ds.ids == ("a", "b")
    assert ds.dates == (1704067200.0, 1704153600.0)  # 2024-01-01 and -02 00:00 UTC, by hand
    assert ds.lines == (1, 2) and ds.format == "jsonl"
    assert ds.sha256 == before == sha(p)  # the input is read, never modified


def test_malformed_json_line_stops_with_file_and_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "a"}\n\n{"text": "b"\n{"text": "c"}\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_dataset(p)
    msg = str(e.value)
    assert f"{p}:3:" in msg and "not valid JSON" in msg and "--skip-bad" in msg and "\n" not in msg


def test_non_utf8_line_is_reported_and_skipped_on_request(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n[1, 2]\n{"other": 1}\n{"text": 5}\n{"text": "fine"}\n')
    before = sha(p)
    with pytest.raises(InputError, match=r"d\.jsonl:2: not valid UTF-8"):
        read_dataset(p)
    ds = read_dataset(p, skip_bad=True)
    assert ds.texts == ("ok", "fine") and ds.lines == (1, 6)
    assert ds.n_bad == 4
    assert [(b.line, b.reason.split(" (")[0]) for b in ds.bad] == [
        (2, "not valid UTF-8"), (3, "is a JSON list, not an object"), (4, "no text field 'text'"),
        (5, "text field 'text' is int, not a string")]
    assert sha(p) == before


def test_csv_quoted_newlines_keep_physical_line_numbers(tmp_path):
    p = tmp_path / "d.csv"
    p.write_bytes(b'text,label,user\n"two\nlines",pos,u1\nplain,neg,u2\ntoo,many,fields,here\n'
                  b'bad \xff byte,pos,u3\n\xef\xbb\xbflast,neg,\n')
    with pytest.raises(InputError, match=r"d\.csv:5: has 4 fields, the header has 3"):
        read_dataset(p, Fields(label="label", group=("user",)))
    ds = read_dataset(p, Fields(label="label", group=("user",)), skip_bad=True)
    # record 1 spans lines 2-3; line 5 has 4 fields; line 6 is not UTF-8
    assert ds.lines == (2, 4, 7)
    assert ds.texts[0] == "two\nlines" and ds.labels == ("pos", "neg", "neg")
    assert ds.groups == (("u1", "u2", None),)  # an empty CSV cell is a missing group
    assert [b.line for b in ds.bad] == [5, 6] and "UTF-8" in ds.bad[1].reason


def test_csv_bom_tsv_and_missing_column(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_bytes("\ufefftext\tlabel\nhello world\tx\n".encode())
    ds = read_dataset(p, Fields(label="label"))
    assert ds.texts == ("hello world",) and ds.columns == ("text", "label")
    with pytest.raises(InputError, match=r"no column 'lbl'; the header has text, label"):
        read_dataset(p, Fields(label="lbl"))


def test_a_field_no_record_has_is_an_error(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": 1}, {"text": "b"}])
    assert read_dataset(p, Fields(label="label")).labels == ("1", None)  # missing in one record: allowed
    with pytest.raises(InputError, match=r"no record has the group field 'usr'; fields seen: label, text"):
        read_dataset(p, Fields(group=("usr",)))


def test_bad_dates_are_bad_records(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "t": "2024-13-01"}, {"text": "b", "t": 1700000000}])
    with pytest.raises(InputError, match=r"d\.jsonl:1: date '2024-13-01' is not ISO 8601"):
        read_dataset(p, Fields(date="t"))
    assert read_dataset(p, Fields(date="t"), skip_bad=True).dates == (1700000000.0,)


def test_parquet_rows_nulls_and_binary(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "d.parquet"
    table = pa.table({"text": ["alpha", "beta", None, "delta"], "label": [0, 1, 1, None],
                      "raw": pa.array([b"x", b"\xff", b"y", b"z"], type=pa.binary())})
    pq.write_table(table, p)
    before = sha(p)
    with pytest.raises(InputError, match=r"d\.parquet: row 3: text field 'text' is null"):
        read_dataset(p, Fields(label="label"))
    ds = read_dataset(p, Fields(label="label"), skip_bad=True)
    assert ds.texts == ("alpha", "beta", "delta") and ds.labels == ("0", "1", None) and ds.lines == (1, 2, 4)
    with pytest.raises(InputError, match=r"row 2: column 'raw' is not valid UTF-8"):
        read_dataset(p, Fields(text=("raw",)))
    assert sha(p) == before


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"unknown data format '\.txt'"):
        read_dataset(tmp_path / "d.txt")
    with pytest.raises(InputError, match=r"no such file"):
        read_dataset(tmp_path / "nope.jsonl")


def test_make_dataset_from_columns():
    ds = make_dataset(["a", "b"], labels=[1, 0], groups={"user": ["u", "u"], "doc": ["d1", None]})
    assert ds.fields.group == ("user", "doc") and ds.groups == (("u", "u"), ("d1", None))
    assert ds.labels == ("1", "0") and ds.ref(1) == "<memory>:2"
    with pytest.raises(InputError, match="labels has 1 values for 2 texts"):
        make_dataset(["a", "b"], labels=[1])
    assert json.dumps(ds.to_dict())  # serializable


def test_refs_name_file_line_and_id(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "id": "x1"}, {"text": "b"}])
    ds = read_dataset(p, Fields(id="id"))
    assert ds.ref(0) == f"{p}:1 (id x1)" and ds.ref(1) == f"{p}:2"


@pytest.mark.parametrize("header,fragment", [
    ("text,label,text", "names the column 'text' twice (columns 1 and 3)"),
    ("text,,label", "column 2 of the header has no name"),
    ("text,label,note,note", "names the column 'note' twice (columns 3 and 4)"),
])
def test_csv_header_with_a_repeated_or_empty_name_is_refused(tmp_path, header, fragment):
    # the split rewrites whole rows under the header: a lost column name would shift every value after it
    p = tmp_path / "d.csv"
    width = header.count(",") + 1
    p.write_text(header + "\n" + "".join(",".join(f"v{r}{c}" for c in range(width)) + "\n" for r in range(4)),
                 encoding="utf-8")
    before = sha(p)
    with pytest.raises(InputError) as e:
        read_dataset(p, Fields(label="label"))
    msg = str(e.value)
    assert msg.startswith(f"{p}:1: ") and fragment in msg and "\n" not in msg
    assert "unique" in msg or "name every column" in msg
    from campaign.data.split import split_file

    with pytest.raises(InputError, match="header"):
        split_file(p, tmp_path / "out", Fields(label="label"), ratios="50/50")
    assert not (tmp_path / "out").exists() and sha(p) == before


def _slow(monkeypatch, path, fields):
    import importlib

    read = importlib.import_module("campaign.data.read")
    with monkeypatch.context() as m:
        m.setattr(read, "_jsonl_fast", lambda *a: None)   # the record-by-record path
        return read_dataset(path, fields)


def test_jsonl_whole_file_path_reads_what_the_record_path_reads(tmp_path, monkeypatch):
    # values of every JSON kind, keys in varying order, blank and whitespace lines, CRLF, a BOM, a trailing space
    lines = ['\ufeff{"text": "a", "label": 1, "user": "u1", "id": 7}',
             '', '   ',
             '{"user": null, "text": "b\\u2028c", "label": true, "extra": [1, 2]}\r',
             '{"text": "", "label": "", "user": "", "id": "x"} ',
             '{"label": 2.0, "text": "d", "id": {"k": 1}}',
             '{"text": "e", "label": 2.5}']
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    fields = Fields(label="label", group=("user",), id="id")
    fast, slow = read_dataset(path, fields), _slow(monkeypatch, path, fields)
    assert fast == slow
    # by hand: lines 1, 4, 5, 6, 7; numbers as JSON text, 2.0 as "2", '' and null missing; BOM dropped
    assert fast.lines == (1, 4, 5, 6, 7)
    assert fast.labels == ("1", "true", None, "2", "2.5")
    assert fast.groups == (("u1", None, None, None, None),)
    assert fast.ids == ("7", None, "x", '{"k": 1}', None)
    assert fast.texts[1] == "b\u2028c" and fast.columns == ("text", "label", "user", "id", "extra")
    assert fast.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("line", ['{"text": 5}', '["text"]', '{"text": "a"} {"text": "b"}', '{"text": "a",',
                                  ' {"text": "a"}', '{"txt": "a"}'])
def test_a_line_the_whole_file_path_cannot_take_gets_the_record_paths_message(tmp_path, monkeypatch, line):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n' + line + "\n", encoding="utf-8")
    if line.startswith(" "):          # leading spaces are valid JSON: the record path reads it
        assert read_dataset(path).texts == ("ok", "a") == _slow(monkeypatch, path, Fields()).texts
        return
    with pytest.raises(InputError) as fast:
        read_dataset(path)
    with pytest.raises(InputError) as slow:
        _slow(monkeypatch, path, Fields())
    assert str(fast.value) == str(slow.value) and f"{path}:2:" in str(fast.value)
