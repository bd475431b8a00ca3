"""Files: written atomically (one file, or a set of files all-or-nothing), read with one-line errors (a JSON file,
an input file that must exist), and hashed (stable content hashes).

Outputs are complete or absent; inputs are only ever opened for reading.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import InputError
from .strict_json import dumps_json, parse_json


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write text (UTF-8) to path through a temporary file in the same folder and an atomic rename."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _mkdtemp(**kw: Any) -> str:
    import tempfile

    return tempfile.mkdtemp(**kw)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write bytes to path through a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here, as hashlib: the everyday commands read and print, and start faster without them

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
        stage = Path(_mkdtemp(dir=parent, prefix=f".{out.name}{_STAGE}"))
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
        stage = Path(_mkdtemp(dir=parent, prefix=f".{out.name}{_STAGE}"))
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


def read_input(path: str | os.PathLike[str], what: str, error: type[Exception] = InputError) -> bytes:
    """The bytes of an input file, read once (a pipe such as bash's <(cat file) can be read only once); a missing,
    unreadable file or a directory is one `error` naming the path and `what` was expected there."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file; give {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory; give {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e}); give {what}") from None


def load_json(path: str | os.PathLike[str], what: str, error: type[Exception] = InputError) -> Any:
    """Read and parse a JSON file; a missing, unreadable or malformed file is one `error` naming the path and
    `what` was expected there."""
    return parse_json(read_input(path, what, error), str(path), error)


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
    import hashlib  # here: OpenSSL's module costs every command a few ms at start-up

    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
