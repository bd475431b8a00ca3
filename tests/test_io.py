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
