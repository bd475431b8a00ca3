"""The run store: manifests are files (`.campaign/runs/<id>/manifest.json`, the source of truth, each rewritten
atomically under the run's lock), metrics are appended to `metrics.jsonl` beside it (one write per batch of
records, under the same lock: several processes lose nothing), and an SQLite index in WAL mode answers listings. The
index is derived: `rebuild()` makes it again from the files, and a corrupted manifest never hides the others.

A run marked running whose owner process is gone (same host) or whose heartbeat is older than its `stale_after`
shows as stopped, with the reason: a killed run is never stuck as running.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import atomic_write_json, load_json
from ..results import Information, Record
from ..strict_json import dumps_json
from .manifest import ENDED, STATUSES, Manifest, manifest_from, now, parse_time

ROOT = Path(".campaign")
INDEX = "index.sqlite"
ROOT_VARIABLE = "CAMPAIGN_ROOT"     # where every record goes when no root is given (default: .campaign here)


def default_root() -> Path:
    return Path(os.environ.get(ROOT_VARIABLE) or ROOT)
_COLUMNS = ("id", "name", "status", "reason", "created", "updated", "baseline", "tags", "hypothesis", "decision",
            "metrics", "error")


@dataclass(frozen=True)
class RunRow(Record):
    """One run as listed: its effective status (a dead run shows as stopped), or the error that makes it
    unreadable (status 'invalid')."""

    id: str
    name: str
    status: str
    reason: str
    created: str
    baseline: str | None
    tags: tuple[str, ...]
    hypothesis: str
    decision: str | None
    metrics: dict[str, Any]


class Store:
    """The runs under `root` (default: $CAMPAIGN_ROOT, else .campaign in the current folder)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.given = root is not None  # a --root named by the user: a missing one is a typo, not an empty store
        self.root = Path(root) if root is not None else default_root()
        self.runs = self.root / "runs"

    # -- files ------------------------------------------------------------------------------------------------
    def folder(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise InputError(f"run id {run_id!r} is not a run id (see `campaign runs list`)")
        return self.runs / run_id

    @contextlib.contextmanager
    def locked(self, run_id: str) -> Iterator[Path]:
        folder = self.folder(run_id)
        if not folder.is_dir():
            raise InputError(f"no run {run_id!r} in {self.runs} (see `campaign runs list`)")
        with open(folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield folder
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _make_root(self) -> None:
        """The store's folder, ignored by git (as .pytest_cache is): runs must not show as untracked code."""
        self.root.mkdir(parents=True, exist_ok=True)
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# written by campaign: the run store is not code\n*\n", encoding="utf-8")

    def create(self, manifest: Manifest, *, diff: bytes = b"") -> Manifest:
        self._make_root()
        folder = self.folder(manifest.id)
        try:
            folder.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise InputError(f"{folder}: a run with this id exists already; start it again (ids carry 32 random "
                             "bits)") from None
        if diff:
            from ..io import atomic_write_bytes

            atomic_write_bytes(folder / "code.diff", diff)
        with self.locked(manifest.id):
            atomic_write_json(folder / "manifest.json", manifest.to_dict())
            self.heartbeat(manifest.id)
            written = self.read(manifest.id)          # what is on disk, JSON's types (lists, not tuples)
        self._cache([written])
        return written

    def read(self, run_id: str) -> Manifest:
        """The manifest as written (InputError naming the file when it is missing or broken)."""
        path = self.folder(run_id) / "manifest.json"
        if not path.is_file():
            raise InputError(f"no run {run_id!r} in {self.runs} (see `campaign runs list`)")
        m = manifest_from(load_json(path, "run manifest"), str(path))
        if m.id != run_id:
            raise InputError(f"{path}: holds run {m.id!r}, not the folder's {run_id!r} (a copied run folder?); "
                             "rename the folder or start a new run")
        return m

    def update(self, run_id: str, **changes: Any) -> Manifest:
        """Read, change and rewrite the manifest under the run's lock."""
        with self.locked(run_id) as folder:
            atomic_write_json(folder / "manifest.json", self.read(run_id).with_(**changes).to_dict())
            m = self.read(run_id)
        self._cache([m])
        return m

    def _cache(self, manifests: list[Manifest]) -> None:
        """Index what was just written; a damaged index is moved aside (list() rebuilds it from the manifests) and
        a store whose index cannot be written is listed without it: the write itself stands either way."""
        try:
            self._index(manifests)
        except (sqlite3.Error, OSError):
            self._set_aside_index()

    def log(self, run_id: str, records: Sequence[Mapping[str, Any]]) -> None:
        """Append metric records (dicts of JSON values, e.g. {'step': 10, 'loss': 1.2}) in one write. A last line
        cut short by a crash mid-append is ended first, so that the new records start on a line of their own."""
        if not records:
            return
        stamp = now()
        text = "".join(dumps_json({"t": stamp, **r}, indent=None) for r in records)
        with self.locked(run_id) as folder:
            fd = os.open(folder / "metrics.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                data = (b"\n" if torn else b"") + text.encode()
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        self.heartbeat(run_id)

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        """Every record logged, in order (a line cut short by a kill is skipped: torn_lines counts them)."""
        return self._metrics(run_id)[0]

    def torn_lines(self, run_id: str) -> int:
        """Lines of metrics.jsonl that are not a record: cut short by a kill or a crash mid-append."""
        return self._metrics(run_id)[1]

    def _metrics(self, run_id: str) -> tuple[list[dict[str, Any]], int]:
        path = self.folder(run_id) / "metrics.jsonl"
        out, torn = [], 0
        if path.is_file():
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        torn += bool(line.strip())
                        continue
                    if isinstance(rec, dict):
                        out.append(rec)
                    else:
                        torn += 1
        return out, torn

    def last_metrics(self, run_id: str) -> dict[str, Any]:
        """The last value logged of each metric."""
        last: dict[str, Any] = {}
        for rec in self.metrics(run_id):
            last.update({k: v for k, v in rec.items() if k != "t"})
        return last

    def heartbeat(self, run_id: str) -> None:
        path = self.folder(run_id) / "heartbeat"
        path.touch()

    # -- status -----------------------------------------------------------------------------------------------
    def effective(self, m: Manifest) -> tuple[str, str]:
        """(status, reason): a running run whose owner is gone or whose heartbeat is stale shows as stopped."""
        if m.status != "running":
            return m.status, m.reason
        beat = self.folder(m.id) / "heartbeat"
        try:
            last = dt.datetime.fromtimestamp(beat.stat().st_mtime, dt.timezone.utc)
        except OSError:
            last = parse_time(m.created)
        shown = last.isoformat(timespec="seconds").replace("+00:00", "Z")
        pid, host = m.owner.get("pid"), m.owner.get("host")
        if isinstance(pid, int) and host == socket.gethostname() and not _alive(pid):
            return "stopped", f"its process {pid} ended without closing the run (killed?); last sign of life {shown}"
        age = (dt.datetime.now(dt.timezone.utc) - last).total_seconds()
        if age > m.stale_after:
            return "stopped", f"no heartbeat since {shown} ({age / 60:.0f} min, more than {m.stale_after / 60:.0f})"
        return "running", m.reason

    # -- index ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self._make_root()
        con = sqlite3.connect(self.root / INDEX, timeout=60)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, name TEXT, status TEXT, reason TEXT, "
                        "created TEXT, updated TEXT, baseline TEXT, tags TEXT, hypothesis TEXT, decision TEXT, "
                        "metrics TEXT, error TEXT)")
            with con:
                yield con
        finally:
            con.close()

    def _index(self, manifests: Iterable[Manifest]) -> None:
        rows = [(m.id, m.name, m.status, m.reason, m.created, now(), m.baseline, json.dumps(list(m.tags)),
                 m.hypothesis, m.decision.decision if m.decision else None, json.dumps(m.metrics), None)
                for m in manifests]
        with self._db() as con:
            con.executemany(f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(_COLUMNS))})", rows)

    def _read_all(self) -> tuple[list[Manifest], list[tuple[str, str]]]:
        """Every manifest on disk, and (id, error) of those that cannot be read."""
        ids = sorted(p.name for p in self.runs.iterdir() if p.is_dir()) if self.runs.is_dir() else []
        good, bad = [], []
        for run_id in ids:
            try:
                good.append(self.read(run_id))
            except InputError as e:
                bad.append((run_id, str(e)))
        return good, bad

    def rebuild(self) -> int:
        """The index made again from the manifest files; returns the runs indexed (unreadable ones included, as
        invalid with their error). A damaged index file is moved aside first (the index is a cache of the
        manifests); a store that cannot be written keeps its index as it is."""
        self._missing_root()
        good, bad = self._read_all()
        try:
            self._write_index(good, bad)
        except (sqlite3.Error, OSError):
            if not self._set_aside_index():
                raise InputError(f"{self.root}: its index cannot be written ({self.root / INDEX}); `campaign runs "
                                 "list` reads the manifests without it, or make the folder writable") from None
            self._write_index(good, bad)
        return len(good) + len(bad)

    def _write_index(self, good: list[Manifest], bad: list[tuple[str, str]]) -> None:
        with self._db() as con:
            con.execute("DELETE FROM runs")
        self._index(good)
        with self._db() as con:
            con.executemany("INSERT OR REPLACE INTO runs (id, name, status, reason, created, updated, tags, metrics, "
                            "error) VALUES (?, ?, 'invalid', ?, '', ?, '[]', '{}', ?)",
                            [(i, i, e, now(), e) for i, e in bad])

    def _set_aside_index(self) -> bool:
        """Move a damaged index (garbage, truncated, a folder) aside as index.sqlite.damaged-TIME, with its WAL
        files; False when there is none to move or the store cannot be written."""
        path = self.root / INDEX
        if not (path.exists() or path.is_symlink()):
            return False
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        try:
            for suffix in ("", "-wal", "-shm"):
                p = path.with_name(INDEX + suffix)
                if p.exists() or p.is_symlink():
                    os.rename(p, p.with_name(f"{INDEX}{suffix}.damaged-{stamp}"))
        except OSError:
            return False
        return True

    def _missing_root(self) -> None:
        if self.given and not self.root.is_dir():
            raise InputError(f"{self.root}: no run store there (a typo in --root?); `campaign run start` makes one")

    def _index_rows(self, on_disk: set[str]) -> list[tuple]:
        with self._db() as con:
            indexed = {r[0] for r in con.execute("SELECT id FROM runs")}
        if on_disk - indexed:                       # written by a process that died before indexing, or copied in
            self.rebuild()
        with self._db() as con:
            return con.execute(f"SELECT {', '.join(_COLUMNS)} FROM runs ORDER BY created DESC, id DESC").fetchall()

    def _file_rows(self) -> list[tuple]:
        """The index's rows made from the manifests, for a store whose index cannot be used."""
        good, bad = self._read_all()
        rows = [(m.id, m.name, m.status, m.reason, m.created, "", m.baseline, "", m.hypothesis, None, "", None)
                for m in good] + [(i, i, "invalid", e, "", "", None, "", "", None, "", e) for i, e in bad]
        return sorted(rows, key=lambda r: (r[4], r[0]), reverse=True)

    def list(self, *, status: str | None = None, tag: str | None = None) -> list[RunRow]:
        """Every run, newest first, with its effective status; filtered by status and tag. Without a usable
        index (damaged: moved aside and rebuilt; or a store that cannot be written) the manifests are read."""
        self._missing_root()
        if not self.root.is_dir():
            return []                               # nothing recorded here yet: nothing is created by listing
        on_disk = {p.name for p in self.runs.iterdir() if p.is_dir()} if self.runs.is_dir() else set()
        try:
            rows = self._index_rows(on_disk)
        except (sqlite3.Error, OSError, InputError):
            try:
                if not self._set_aside_index():
                    raise sqlite3.OperationalError("index not writable")
                rows = self._index_rows(on_disk)
            except (sqlite3.Error, OSError, InputError):
                rows = self._file_rows()
        out = []
        for r in rows:
            rec = dict(zip(_COLUMNS, r, strict=True))
            if rec["id"] not in on_disk:
                continue
            if rec["error"]:
                row = RunRow(rec["id"], rec["name"], "invalid", rec["error"], rec["created"], None, (), "", None, {})
            else:
                try:
                    m = self.read(rec["id"])
                except InputError as e:
                    row = RunRow(rec["id"], rec["id"], "invalid", str(e), rec["created"], None, (), "", None, {})
                else:
                    st, reason = self.effective(m)
                    row = RunRow(m.id, m.name, st, reason, m.created, m.baseline, m.tags, m.hypothesis,
                                 m.decision.decision if m.decision else None, m.metrics)
            if (status is None or row.status == status) and (tag is None or tag in row.tags):
                out.append(row)
        return out


@dataclass(frozen=True)
class RunList(Information):
    """Runs as `campaign runs list` shows them, newest first, with the filters applied (run_status: the status
    asked for). A list only informs: no checks, status pass."""

    runs: tuple[RunRow, ...]
    run_status: str | None = None   # the filter (was written as "status" before results carried a status)
    tag: str | None = None
    schema: str = "campaign.runs/1"


def list_runs(*, status: str | None = None, tag: str | None = None, root: str | Path | None = None) -> RunList:
    """Every run (failed, stopped and invalid ones included), filtered by effective status and tag."""
    if status is not None and status not in STATUSES:
        raise InputError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    return RunList(tuple(Store(root).list(status=status, tag=tag)), status, tag)


def show_run(run_id: str, *, root: str | Path | None = None) -> Manifest:
    """A run's manifest with its effective status and, while it has none recorded, its last metrics."""
    store = Store(root)
    m = store.read(run_id)
    status, reason = store.effective(m)
    return m.with_(status=status, reason=reason, metrics=m.metrics or store.last_metrics(run_id))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                            # a zombie (killed, not yet reaped) or a dying one is not alive
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return True


__all__ = ["ENDED", "ROOT", "ROOT_VARIABLE", "RunList", "RunRow", "Store", "default_root", "list_runs", "show_run"]
