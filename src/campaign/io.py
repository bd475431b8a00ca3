"""Atomic writes, stable content hashes, and one reader of JSONL, CSV/TSV and Parquet records.

Outputs are complete or absent; inputs are only ever opened for reading.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import decimal
import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write text (UTF-8) to path through a temporary file in the same folder and an atomic rename."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write bytes to path through a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the permissions open() would
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


_STAGE = ".campaign-new-"
_RETIRED = ".campaign-old-"


@contextlib.contextmanager
def file_set(out_dir: str | os.PathLike[str], replaces: Sequence[str] = ()) -> Iterator[Path]:
    """Write a set of files all-or-nothing: yield an empty sibling directory to write them in; when the block ends
    without an error, it becomes out_dir in one step, so a reader (or a kill -9 at any instant) sees either the
    previous set or the complete new one, never a mix.

    Files already in out_dir that are not named in `replaces` are carried into the new set as hard links (the
    same files, not copies: the input, a user's notes, an append-only ledger). An existing out_dir is swapped
    with the new one atomically (Linux renameat2 RENAME_EXCHANGE; elsewhere two renames, with the old set put
    back by the next run if a crash falls between them). Temporaries left by a killed run are removed by the
    next one; runs on the same folder are serialized by a lock on its parent.

    Raises:
        InputError: out_dir exists and is not a directory, or holds a sub-directory (a set is a folder of files).
    """
    out = Path(out_dir)
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent):
        _recover(out)
        if out.exists() or out.is_symlink():
            if not out.is_dir() or out.is_symlink():
                raise InputError(f"{out}: exists and is not a directory; choose another output folder")
            sub = next((e for e in os.scandir(out) if e.is_dir(follow_symlinks=False)), None)
            if sub is not None:
                raise InputError(f"{out}: holds the folder {sub.name!r}; a file set is replaced as one folder of "
                                 "files, so give it a folder of its own (e.g. a new --out)")
        stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}{_STAGE}"))
        try:
            yield stage
            if out.is_dir():
                os.chmod(stage, os.stat(out).st_mode & 0o7777)
                for entry in os.scandir(out):
                    if entry.name not in replaces and not (stage / entry.name).exists():
                        os.link(entry.path, stage / entry.name, follow_symlinks=False)
                _fsync_dir(stage)
                _exchange(stage, out)   # stage now holds the previous set
            else:
                os.chmod(stage, 0o777 & ~_umask())
                _fsync_dir(stage)
                os.rename(stage, out)
            _fsync_dir(parent)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def export_folder(out_dir: str | os.PathLike[str], *, force: bool, is_export: Callable[[Path], bool],
                  protect: Sequence[str | os.PathLike[str]] = (), what: str = "export") -> Iterator[Path]:
    """Write a folder all-or-nothing where an export goes: yield an empty sibling folder (permissions from the
    umask) to write in; when the block ends without an error it becomes out_dir in one step. An existing out_dir
    is replaced only with `force` and only when `is_export` recognises it as an earlier export (by the manifest
    that export wrote): it is swapped out in one step, then removed. A kill at any instant leaves the previous
    folder or the complete new one; the hidden folders a killed run leaves beside out_dir are removed by the next.

    Raises:
        InputError: out_dir is the current folder or holds it; is, holds or lies inside a `protect` path (the run
            store, a recorded artifact); exists and is not a folder; exists without `force`; exists and is not an
            earlier export.
    """
    out = Path(out_dir)
    target = out.resolve()
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        raise InputError(f"{out}: {'is' if target == cwd else 'holds'} the current folder; an {what} is written "
                         "into a folder of its own (e.g. a new folder name)")
    for p in protect:
        kept = Path(p).resolve()
        if target == kept or target in kept.parents or kept in target.parents:
            how = "is" if target == kept else "holds" if target in kept.parents else "lies inside"
            raise InputError(f"{out}: {how} {kept}, which campaign keeps (the run store or a recorded artifact); "
                             f"give the {what} a folder of its own")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError(f"{out}: exists and is not a folder; give the {what} a new folder")
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent):
        _recover(out)
        if out.exists():
            if not force:
                raise InputError(f"{out}: exists; give a new folder, or --force to replace an earlier {what}")
            if not is_export(out):
                raise InputError(f"{out}: exists and is not an earlier campaign {what} (its manifest is missing); "
                                 "--force replaces only those: remove it yourself or give a new folder")
        stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}{_STAGE}"))
        try:
            os.chmod(stage, 0o777 & ~_umask())
            yield stage
            _fsync_dir(stage)
            if out.exists():
                _exchange(stage, out)  # stage now holds the previous export, removed below
            else:
                os.rename(stage, out)
            _fsync_dir(parent)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (renameat2 RENAME_EXCHANGE), or by two renames where the system has no
    such call (the window between them is repaired by _recover on the next run)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        rename2 = libc.renameat2
        rename2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        at_fdcwd, exchange = -100, 2
        if rename2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), exchange) == 0:
            return
    except (OSError, AttributeError):  # no libc symbol (macOS, musl without it): two renames
        pass
    retired = a.with_name(a.name.replace(_STAGE, _RETIRED))
    os.rename(b, retired)
    os.rename(a, b)
    os.rename(retired, a)


def _recover(out: Path) -> None:
    """Remove the temporaries a killed run left beside out; if out itself is missing (a crash between the two
    renames of the fallback swap), put the previous set back first."""
    prefix = f".{out.name}"
    leftovers = [p for p in out.parent.glob(f"{glob.escape(prefix)}.campaign-*") if p.is_dir()]
    retired = [p for p in leftovers if _RETIRED in p.name]
    if not out.exists() and retired:
        os.rename(max(retired, key=lambda p: p.stat().st_mtime), out)
    for p in leftovers:
        if p.exists():
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on a directory for the block (flock on its descriptor; no lock file is left behind)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows
            pass
        yield
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write JSON (2-space indent, trailing newline) atomically."""
    return atomic_write_text(path, dumps_json(data))


def dumps_json(data: Any, indent: int | None = 2) -> str:
    """Strict JSON text with a trailing newline: a non-finite float (NaN, infinity) becomes null, since JSON has no
    spelling for it (Python's NaN/Infinity are not JSON and other parsers refuse them)."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def check_text(value: Any, where: str, error: type[Exception] = InputError) -> Any:
    """`value` when every text in it (in lists and dicts, keys included) is valid Unicode; a lone surrogate (what
    Python makes of bytes that are not UTF-8 on a command line, or a JSON \\udcff escape) is one `error` naming
    `where`: such text cannot be written as UTF-8, nor stored in the run index."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise error(f"{where}: {v[:e.start]!r}... is not valid UTF-8 text (character {e.start + 1}); "
                                "give it as UTF-8") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return value


def parse_json(text: str | bytes, where: str, error: type[Exception] = InputError) -> Any:
    """json.loads with every way a text can fail as one `error` naming `where`: malformed JSON, not UTF-8, an
    integer of more than 4,300 digits (Python's conversion limit), nesting deep enough to exhaust the stack."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text)
        if "\\ud" in text or "\\uD" in text:  # an escaped surrogate: a pair is one character, a lone one no text
            check_text(value, where, error)
        return value
    except UnicodeDecodeError as e:
        raise error(f"{where}: not valid UTF-8 (byte {e.start + 1}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply to read; this is not a file campaign writes") from None
    except ValueError as e:  # int conversion limit
        raise error(f"{where}: not readable JSON ({str(e).split(';')[0]})") from None


def load_json(path: str | os.PathLike[str], what: str, error: type[Exception] = InputError) -> Any:
    """Read and parse a JSON file; a missing, unreadable or malformed file is one `error` naming the path and
    `what` was expected there."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file; give {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory; give {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e}); give {what}") from None
    return parse_json(raw, str(path), error)


def input_file(path: str | os.PathLike[str], what: str = "input") -> Path:
    """The path of an existing regular file to read, or one InputError saying why not: missing, a directory, a
    symbolic link that loops or points nowhere, or not readable."""
    import errno

    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{p}: a symbolic link that loops back on itself; point at the {what} file itself") \
                from None
        if e.errno == errno.ENOENT:
            dangling = " (a symbolic link to a missing file)" if os.path.islink(p) else ""
            raise InputError(f"{p}: no such file{dangling}: the {what} file was not found; check the path") from None
        raise InputError(f"{p}: cannot read ({e.strerror or e}); check the path and its permissions") from None
    import stat

    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a directory; give the {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{p}: not a regular file; give the {what} file")
    if not os.access(p, os.R_OK):
        raise InputError(f"{p}: not readable (permission denied); check its permissions")
    return p


def sha256_bytes(data: bytes) -> str:
    """A stable content hash, the same on every run and machine (never Python's hash())."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ reading records

RECORD_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
                  ".parquet": "parquet", ".pq": "parquet"}
DELIMITERS = {"csv": ",", "tsv": "\t"}


@dataclass(frozen=True)
class BadRecord:
    """A record that could not be read: where (1-based line, or row for Parquet) and why."""

    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


def record_format(path: str | os.PathLike[str], what: str = "data") -> str:
    """'jsonl', 'csv', 'tsv' or 'parquet' from the file extension (.json is read as JSONL)."""
    ext = Path(path).suffix.lower()
    if ext not in RECORD_FORMATS:
        raise InputError(f"{path}: unknown {what} format {ext or '(no extension)'!r}; use .jsonl (one JSON object "
                         "per line), .csv or .tsv (a header row), or .parquet")
    return RECORD_FORMATS[ext]


class RecordScan:
    """One pass over a JSONL, CSV/TSV or Parquet file, in file order.

    Iterating yields (line, raw, record): line is where the record starts (1-based; Parquet: the row number);
    raw is the line's bytes (JSONL), the row's values (CSV/TSV) or the row index (Parquet), so a record can be
    written out unchanged; record is a dict of the row's fields (CSV values are strings, JSONL values JSON
    values, Parquet values Python ones) or a BadRecord saying why it could not be read (not UTF-8, not JSON,
    not an object, ragged or malformed CSV). Blank lines are skipped (a CSV row of empty values is a record).
    Parquet dates and times come as ISO 8601 text and decimals as numbers, as they would in JSONL.
    After the pass, `sha256` is the hash of the file's bytes and `columns` every field name, first seen first.

    Args:
        columns: the fields needed: a CSV header or Parquet schema without one of them is an InputError, and
            Parquet reads only those columns. None: every field.
    Raises:
        InputError: what no record can recover from: an empty CSV, a bad CSV header, an unreadable Parquet file.
    """

    def __init__(self, path: str | os.PathLike[str], fmt: str | None = None, *,
                 columns: Sequence[str] | None = None) -> None:
        self.path = str(path)
        self.fmt = fmt or record_format(path)
        self.wanted = list(columns) if columns is not None else None
        self.columns: dict[str, None] = {}
        self.sha256: str | None = None

    def __iter__(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        if self.fmt == "jsonl":
            return self._jsonl()
        if self.fmt in DELIMITERS:
            return self._csv()
        return self._parquet()

    def _missing(self, names: Sequence[str], where: str) -> None:
        missing = [n for n in self.wanted or () if n not in names]
        if missing:
            raise InputError(f"{self.path}: no column {missing[0]!r}; {where} {', '.join(names)}; "
                             "name an existing column")

    def _jsonl(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        h = hashlib.sha256()
        with open(self.path, "rb") as f:
            for no, raw in enumerate(f, 1):      # binary lines split at b"\n" only, never at U+2028 and kin
                h.update(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield no, raw, BadRecord(no, _not_utf8(raw, e))
                    continue
                if no == 1:
                    text = text.removeprefix("\ufeff")
                if not text.strip():
                    continue
                array = ("; the file looks like one JSON array: write one object per line (JSONL)"
                         if not self.columns and text.lstrip().startswith("[") else "")
                try:
                    obj = json.loads(text.rstrip("\r\n"))    # columns of a cut-off line point at its end
                except json.JSONDecodeError as e:
                    yield no, raw, BadRecord(no, f"not valid JSON ({e.msg} at column {e.colno}){array}")
                    continue
                except RecursionError:
                    yield no, raw, BadRecord(no, "JSON nested too deeply to read")
                    continue
                except ValueError as e:                    # an integer past Python's 4,300-digit conversion limit
                    yield no, raw, BadRecord(no, f"not readable JSON ({str(e).split(';')[0]})")
                    continue
                if not isinstance(obj, dict):
                    yield no, raw, BadRecord(no, f"is a JSON {type(obj).__name__}, not an object{array}")
                    continue
                self.columns.update(dict.fromkeys(obj))
                yield no, raw, obj
        self.sha256 = h.hexdigest()

    def _csv(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        h = hashlib.sha256()
        bad_lines: dict[int, str] = {}
        delimiter = DELIMITERS[self.fmt]

        def lines(f: Any) -> Iterator[str]:
            for no, raw in enumerate(f, 1):
                h.update(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    bad_lines[no] = _not_utf8(raw, e)
                    text = raw.decode("utf-8", "replace")
                yield text.removeprefix("\ufeff") if no == 1 else text

        with open(self.path, "rb") as f, _field_limit():
            reader = csv.reader(lines(f), delimiter=delimiter)
            header: list[str] = []
            while not any(v.strip() for v in header):     # blank lines before the header are skipped
                try:
                    header = next(reader)
                except StopIteration:
                    raise InputError(f"{self.path}: no header line; a CSV needs a header naming its columns") from None
                except csv.Error as e:
                    raise InputError(f"{self.path}:{reader.line_num}: the header is not valid CSV ({e}); fix the "
                                     "header line (a file with old-Mac CR-only line ends: save it with LF)") from None
                if reader.line_num in bad_lines:
                    raise InputError(f"{self.path}:{reader.line_num}: the header is {bad_lines[reader.line_num]}; "
                                     "save the file as UTF-8")
            _check_header(self.path, header, reader.line_num)
            self.columns.update(dict.fromkeys(header))
            self._missing(header, "the header has")
            end = reader.line_num
            while True:
                start = end + 1
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error as e:
                    end = reader.line_num
                    yield start, None, BadRecord(start, f"not valid CSV ({e})")
                    continue
                end = reader.line_num
                if not row:                                  # an empty line; a row of empty values is a record
                    continue
                bad = next((bad_lines[n] for n in range(start, end + 1) if n in bad_lines), None)
                if bad:
                    yield start, row, BadRecord(start, bad)
                elif len(row) != len(header):
                    yield start, row, BadRecord(start, f"has {len(row)} fields, the header has {len(header)} "
                                                       f"(quote values that contain {delimiter!r})")
                else:
                    yield start, row, dict(zip(header, row))
        self.sha256 = h.hexdigest()

    def _parquet(self) -> Iterator[tuple[int, Any, dict[str, Any] | BadRecord]]:
        try:
            pf = parquet().ParquetFile(self.path)
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise InputError(f"{self.path}: not a readable Parquet file ({str(e).splitlines()[0]}); "
                             "check the file or rewrite it with pyarrow") from None
        names = pf.schema_arrow.names
        self.columns.update(dict.fromkeys(names))
        self._missing(names, "the columns are")
        wanted = self.wanted if self.wanted is not None else names
        table = pf.read(columns=wanted)
        data = {n: table.column(n).to_pylist() for n in wanted}
        for r in range(table.num_rows):
            row: dict[str, Any] = {}
            for n in wanted:
                v = data[n][r]
                if isinstance(v, bytes):
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError as e:
                        yield r + 1, r, BadRecord(r + 1, f"column {n!r} is not valid UTF-8 (byte {e.start + 1})")
                        break
                row[n] = _json_like(v)
            else:
                yield r + 1, r, row
        self.sha256 = sha256_file(self.path)


def parquet() -> Any:
    """pyarrow.parquet (the `data` extra), or a one-line error naming the extra."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        from .errors import MissingDependencyError

        raise MissingDependencyError("pyarrow", "data") from e
    return pq


def _json_like(value: Any) -> Any:
    """A Parquet value as JSONL would hold it: dates and times as ISO 8601 text, decimals as numbers, durations
    in seconds; lists and structs element by element."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, list):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_like(v) for k, v in value.items()}
    return value


def _not_utf8(raw: bytes, e: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"


def _check_header(path: str, header: Sequence[str], line: int = 1) -> None:
    """Every column needs a unique, non-empty name: rows are rewritten whole under the header, so a repeated or
    empty name would shift or lose a column in the written splits."""
    seen: dict[str, int] = {}
    for i, name in enumerate(header, 1):
        if not name.strip():
            raise InputError(f"{path}:{line}: column {i} of the header has no name; name every column (or delete "
                             "the empty column)")
        if name in seen:
            raise InputError(f"{path}:{line}: the header names the column {name!r} twice (columns {seen[name]} and "
                             f"{i}); rename one so every column name is unique")
        seen[name] = i


@contextlib.contextmanager
def _field_limit() -> Iterator[None]:
    """Allow long CSV fields (documents) while reading; restore the global limit afterwards."""
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(old)
