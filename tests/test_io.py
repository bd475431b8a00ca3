"""Atomic writes: complete or absent, with the permissions a plain open() would give."""
from __future__ import annotations

import os
import stat

import pytest

from campaign.io import atomic_write_json, atomic_write_text, sha256_bytes, sha256_file


def test_atomic_write_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "a.txt", "hello")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == "hello"


def test_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "out.json"
    atomic_write_json(path, {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert path.read_text() == '{\n  "ok": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_hashes_are_sha256(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2 test vector
    assert sha256_bytes(b"abc") == sha256_file(tmp_path / "f") == expected


def test_record_scan_lines_raw_rows_and_bad_records(tmp_path):
    from campaign.rows import BadRecord, RecordScan

    data = ('id,text\n1,"two\nlines"\n,\n2,caf\xe9\n3,a,extra\n').encode()
    p = tmp_path / "d.csv"
    p.write_bytes(data)
    scan = RecordScan(p)
    items = list(scan)
    # line 1 header; record 1 spans lines 2-3; the row of empty values on line 4 is a record (data is never lost)
    assert [(line, raw) for line, raw, _ in items] == [(2, ["1", "two\nlines"]), (4, ["", ""]), (5, ["2", "café"]),
                                                        (6, ["3", "a", "extra"])]
    assert items[0][2] == {"id": "1", "text": "two\nlines"} and items[2][2] == {"id": "2", "text": "café"}
    assert items[3][2] == BadRecord(6, "has 3 fields, the header has 2 (quote values that contain ',')")
    assert scan.sha256 == sha256_bytes(data) and list(scan.columns) == ["id", "text"]


def test_record_scan_jsonl_keeps_line_bytes_and_reads_json_suffix(tmp_path):
    from campaign.rows import BadRecord, RecordScan

    lines = [b'{"a": 1}\n', b"\n", b'{"a": "x\xe2\x80\xa8y"}\n', b"[1]\n", b'{"a": 2, "b": "\xff"}\n']
    p = tmp_path / "d.json"                                          # .json is read as JSONL
    p.write_bytes(b"".join(lines))
    items = list(RecordScan(p))
    assert [line for line, _, _ in items] == [1, 3, 4, 5]
    assert items[1][1] == lines[2] and items[1][2] == {"a": "x\u2028y"}  # U+2028 inside a string: one record
    assert items[2][2] == BadRecord(4, "is a JSON list, not an object")
    column = lines[4].index(b"\xff") + 1                              # 16
    assert items[3][2] == BadRecord(5, f"not valid UTF-8 (byte 0xff at column {column})")


def test_record_scan_skips_blank_lines_before_the_csv_header(tmp_path):
    from campaign.rows import RecordScan

    p = tmp_path / "d.csv"
    p.write_text("\n\nid,text\n1,a\n", encoding="utf-8")
    assert [(line, rec) for line, _, rec in RecordScan(p)] == [(4, {"id": "1", "text": "a"})]


def test_record_scan_json_errors_point_at_the_column_and_name_arrays(tmp_path):
    from campaign.rows import RecordScan

    cut = '{"id": 2, "gold": "a", "pred": "b"'
    p = tmp_path / "d.jsonl"
    p.write_text('{"id": 1}\n' + cut + "\n", encoding="utf-8")
    bad = list(RecordScan(p))[1][2]
    assert bad.line == 2 and bad.reason.endswith(f"at column {len(cut) + 1})")    # the end of the cut-off line
    q = tmp_path / "array.json"
    q.write_text('[{"id": 1},\n {"id": 2}]\n', encoding="utf-8")
    first = list(RecordScan(q))[0][2]
    assert "one JSON array: write one object per line (JSONL)" in first.reason


def test_record_scan_parquet_values_come_as_jsonl_would_hold_them(tmp_path):
    import datetime
    import decimal

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from campaign.rows import RecordScan

    when = datetime.datetime(2024, 5, 1, 12, 30)
    table = pa.table({"day": [datetime.date(2024, 5, 1)], "when": pa.array([when], pa.timestamp("us")),
                      "price": pa.array([decimal.Decimal("2.50")], pa.decimal128(5, 2)),
                      "count": pa.array([decimal.Decimal("3")], pa.decimal128(5, 0)),
                      "wait": pa.array([datetime.timedelta(seconds=90)], pa.duration("s"))})
    pq.write_table(table, tmp_path / "d.parquet")
    [(line, _, rec)] = list(RecordScan(tmp_path / "d.parquet"))
    assert line == 1 and rec == {"day": "2024-05-01", "when": "2024-05-01T12:30:00", "price": 2.5, "count": 3,
                                 "wait": 90.0}
