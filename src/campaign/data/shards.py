"""A split as many shards (a file, a directory, a glob, or an s3:// gs:// ... path read through pyarrow's
filesystems), and output written as shards: each shard atomically (temporary file + rename), then a manifest with
the rows and sha256 of every shard, written last, so an interrupted run never leaves a set that looks complete.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependencyError
from ..io import atomic_write_json, input_file, load_json, sha256_file
from ..rows import RECORD_FORMATS, hf_kind, record_format
from ..version import __version__

MANIFEST = "manifest.json"


def is_uri(path: str) -> bool:
    """An object-store or other pyarrow filesystem path (s3://bucket/key, gs://..., hdfs://...)."""
    return "://" in path


def list_shards(spec: str) -> list[str]:
    """The shards of one split, sorted by path (that order numbers the split's rows): the file itself, the data
    files directly in a directory (hidden files skipped), or the files a glob matches.

    Raises:
        InputError: nothing there, or a shard of an unknown format.
    """
    spec = str(spec)
    if not is_uri(spec) and (hf_kind(spec) is not None or Path(spec).suffix.lower() == ".arrow"):
        raise InputError(f"{spec}: a Hugging Face dataset; the ray engine reads shards of JSONL, CSV or Parquet: use "
                         "the local engine, or write the dataset as Parquet shards (Dataset.to_parquet)")
    if is_uri(spec):
        files = _list_uri(spec)
    elif os.path.isdir(spec):
        files = sorted(os.path.join(spec, e.name) for e in os.scandir(spec)
                       if e.is_file() and not e.name.startswith(".") and Path(e.name).suffix.lower() in RECORD_FORMATS)
        if not files:
            raise InputError(f"{spec}: no .jsonl, .csv, .tsv or .parquet shard in this directory; give the folder "
                             "that holds the split's shards")
    elif glob.has_magic(spec) and not os.path.exists(spec):
        files = sorted(f for f in glob.glob(spec, recursive=True) if os.path.isfile(f))
        if not files:
            raise InputError(f"{spec}: no file matches this pattern; check the path (quote the pattern so the shell "
                             "passes it as it is)")
    else:
        input_file(spec, "data")
        files = [spec]
    for f in files:
        if record_format(f) == "hf":
            raise InputError(f"{f}: an .arrow file; the ray engine reads shards of JSONL, CSV or Parquet: use the "
                             "local engine, or write the dataset as Parquet shards (Dataset.to_parquet)")
    return files


def split_name(spec: str) -> str:
    """A split's default name: its file or folder name; for a glob, the folder the pattern is in."""
    path = Path(spec.split("://", 1)[-1].rstrip("/"))
    while glob.has_magic(path.name) and path.parent != path:
        path = path.parent
    return path.name or spec


def _filesystem(uri: str) -> tuple[Any, str]:
    try:
        from pyarrow import fs
    except ImportError as e:  # pragma: no cover - pyarrow comes with the data extra and with ray[data]
        raise MissingDependencyError("pyarrow", "data") from e
    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as e:  # pyarrow raises ArrowInvalid / ArrowNotImplementedError / OSError
        raise InputError(f"{uri}: cannot open this path ({str(e).splitlines()[0]}); use a local path or an "
                         "s3://, gs:// or hdfs:// path that pyarrow can read") from None


def _list_uri(uri: str) -> list[str]:
    from pyarrow import fs

    filesystem, path = _filesystem(uri)
    scheme = uri.split("://", 1)[0]
    info = filesystem.get_file_info(path)
    if info.type == fs.FileType.NotFound:
        raise InputError(f"{uri}: no such file or directory; check the path")
    if info.type == fs.FileType.Directory:
        found = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
        files = sorted(i.path for i in found if i.type == fs.FileType.File and not i.base_name.startswith(".")
                       and Path(i.base_name).suffix.lower() in RECORD_FORMATS)
        if not files:
            raise InputError(f"{uri}: no .jsonl, .csv, .tsv or .parquet shard in this directory")
        return [f"{scheme}://{f}" for f in files]
    return [uri]


class local_copy:
    """A context giving a local path for a shard: the path itself, or a temporary copy of an object-store file
    (removed on exit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._tmp: str | None = None

    def __enter__(self) -> str:
        if not is_uri(self.path):
            return self.path
        filesystem, inner = _filesystem(self.path)
        fd, self._tmp = tempfile.mkstemp(suffix=Path(inner).suffix)
        try:
            with os.fdopen(fd, "wb") as out, filesystem.open_input_stream(inner) as src:
                shutil.copyfileobj(src, out, 1 << 20)
        except FileNotFoundError:
            raise InputError(f"{self.path}: no such file (removed since it was listed?); check the path") from None
        return self._tmp

    def __exit__(self, *exc: object) -> None:
        if self._tmp:
            os.unlink(self._tmp)


def start_shard_set(out: Path, *, force: bool, what: str, inputs: Sequence[str] = ()) -> None:
    """Prepare `out` for a shard set: refuse an earlier complete set without force (and a folder holding an
    input); with force, remove the earlier manifest first, so the set never looks complete while shards change."""
    manifest = out / MANIFEST
    resolved = {os.path.realpath(p) for p in inputs if not is_uri(p)}
    if os.path.realpath(out) in {os.path.dirname(p) for p in resolved}:
        raise InputError(f"{out}: holds input shards; choose another {what} folder")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory; choose another {what} folder")
    if manifest.exists():
        if not force:
            raise InputError(f"{manifest} already exists; pass --force to replace it, or choose another folder")
        manifest.unlink()
    out.mkdir(parents=True, exist_ok=True)


def finish_shard_set(out: Path, schema: str, shards: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Write the manifest last: schema, version, (a verdict's status and checks, when given: results.py's header),
    time, the shards (relative path, rows, sha256) and `extra`."""
    head: dict[str, Any] = {k: extra.pop(k) for k in ("status", "checks") if k in extra}
    manifest: dict[str, Any] = {"schema": schema, "campaign_version": __version__, **head,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "rows": sum(s["rows"] for s in shards), "shards": shards, **extra}
    atomic_write_json(out / MANIFEST, manifest)
    return manifest


def verify_shard_set(out: str | os.PathLike[str]) -> dict[str, Any]:
    """A shard set's manifest, after checking that every shard it names is there with its sha256.

    Raises:
        InputError: no manifest (the set is incomplete), or a shard missing or changed.
    """
    out = Path(out)
    doc = load_json(out / MANIFEST, "the manifest.json of a complete shard set")
    for s in doc.get("shards", []):
        p = out / s["path"]
        if not p.is_file() or sha256_file(p) != s["sha256"]:
            raise InputError(f"{p}: missing or changed since {out / MANIFEST} was written; write the set again")
    return doc


__all__ = ["MANIFEST", "finish_shard_set", "is_uri", "list_shards", "local_copy", "split_name", "start_shard_set",
           "verify_shard_set"]
