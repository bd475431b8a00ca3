"""Test-set usage ledger: which split each evaluation used and for what (training, model selection, final test).

Every use is also a record of the run store (track/store.py): a use with a run id is added to that run's
artifacts (kind 'evaluation:<purpose>', the split file with its hash); a final-test use without one becomes a run of
its own (completed, tagged 'usage'), so `campaign runs list` shows every look at the test set.

Each look at the final test split that informs a choice weakens it as an unbiased estimate; the ledger counts
those looks and warns past a set number. One JSON-lines file per split manifest, next to it
(split_manifest.usage.jsonl); entries are appended under an exclusive lock with one write each, so concurrent
writers never interleave and a crash leaves at most one torn last line, which reading reports and skips.

Both kinds of split are read alike (data.split.read_split_set): the split files of `campaign split` or the folders
of shards of `campaign split --engine ray` (whose ledger is manifest.usage.jsonl beside its manifest.json). A use
binds to its split's content hash (the file's sha256, or one over the split's shards), so a re-split starts a fresh
count; a file or shard edited, added or removed since the split is refused before anything is read or written.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..checks import Check
from ..data.split_manifest import read_split_set, split_manifest_path
from ..errors import InputError
from ..results import Result
from ..strict_json import parse_json

SCHEMA = "campaign.usage/1"
ENTRY_SCHEMA = "campaign.usage_entry/1"
PURPOSES = ("training", "model_selection", "final_test")
DECISIONS = ("model_selection", "final_test")  # uses of the final split that count against it
CHECK_REUSE = "usage.final_test_reuse"
CHECK_TRAINING = "usage.final_test_training"


def parse_purpose(purpose: str) -> str:
    """'training', 'model-selection' / 'model_selection', 'final-test' / 'final_test'."""
    p = purpose.strip().lower().replace("-", "_").replace(" ", "_")
    if p not in PURPOSES:
        raise InputError(f"purpose {purpose!r} is unknown; use training, model-selection or final-test")
    return p


def ledger_path(manifest: str | os.PathLike[str]) -> Path:
    """The ledger next to a manifest: split_manifest.json -> split_manifest.usage.jsonl (an engine split's
    manifest.json -> manifest.usage.jsonl)."""
    p = split_manifest_path(manifest)
    return p.with_name(p.stem + ".usage.jsonl")


@dataclass(frozen=True)
class UsageEntry:
    """One evaluation: when, which split, for what, an optional note and run id, and the manifest it refers to."""

    time: str
    split: str
    purpose: str
    note: str = ""
    run: str | None = None
    manifest_sha256: str | None = None
    split_sha256: str | None = None     # the split's content when it was used (its file's sha256, or the one over
                                        # its shards): a use binds to that content
    schema: str = ENTRY_SCHEMA

    def to_dict(self) -> dict[str, Any]:  # by hand: one line of the ledger file, its schema first
        return {"schema": self.schema, "time": self.time, "split": self.split, "purpose": self.purpose,
                "note": self.note, "run": self.run, "manifest_sha256": self.manifest_sha256,
                "split_sha256": self.split_sha256}


@dataclass(frozen=True)
class UsageReport(Result):
    """The ledger of one split manifest: counts per split and purpose, decisions made on the final split, checks."""

    manifest: str
    ledger: str
    splits: tuple[str, ...]
    final_split: str
    max_final_uses: int
    entries: tuple[UsageEntry, ...]
    counts: dict[str, dict[str, int]]
    final_decisions: int
    checks: tuple[Check, ...]
    warnings: tuple[str, ...] = ()
    recorded: UsageEntry | None = None
    schema: str = SCHEMA

    def fields_dict(self) -> dict[str, Any]:
        # by hand: the entries (the longest part) come last
        out = super().fields_dict()
        return {k: v for k, v in out.items() if k != "entries"} | {"entries": out["entries"]}


def _append_line(path: Path, line: str) -> None:
    """Append one line with a single write under an exclusive lock; repair a torn last line first."""
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: O_APPEND alone
            pass
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data  # the previous writer died mid-line: close that line
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def record_usage(manifest: str | os.PathLike[str], *, split: str, purpose: str, note: str = "",
                 run: str | None = None, when: datetime | None = None,
                 runs_root: str | os.PathLike[str] | None = None) -> UsageEntry:
    """Append one use of `split` for `purpose` to the manifest's ledger, record it in the run store (see the module
    docstring) and return the entry.

    Raises:
        InputError: no such manifest, a split file or shard changed since the split, an unknown split name or
            purpose, an unknown run id.
    """
    from ..io import sha256_file

    for option, text in (("--note", note), ("--run", run or "")):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputError(f"{option} holds bytes that are not UTF-8 text (character {e.start + 1}); write it "
                             "in UTF-8") from None
    splits = read_split_set(manifest)
    mpath = splits.manifest
    part = splits.get(split)
    if part is None:
        raise InputError(f"split {split!r} is not in {mpath} (its splits: {', '.join(splits.names)}); name one of "
                         "them")
    purpose = parse_purpose(purpose)
    run = _run_record(run, split, purpose, " ".join(note.split()), part.path, runs_root)
    entry = UsageEntry(time=(when or datetime.now(timezone.utc)).isoformat(timespec="seconds"), split=split,
                       purpose=purpose, note=" ".join(note.split()), run=run,
                       manifest_sha256=sha256_file(mpath), split_sha256=part.sha256)
    _append_line(ledger_path(mpath), json.dumps(entry.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    return entry


def _run_record(run: str | None, split: str, purpose: str, note: str, path: Path,
                root: str | os.PathLike[str] | None) -> str | None:
    """The run this use belongs to: the given run gets the split (its file or folder of shards) as an artifact; a
    final-test use without a run becomes a completed run tagged 'usage'. Returns the run id (None for an unattached
    training or selection use)."""
    from .manifest import file_artifact
    from .run import end_run, record_artifact, start_run
    from .store import Store

    if run is not None:
        Store(root).read(run)                       # an unknown id is refused before anything is written
        if path.exists():
            record_artifact(run, path, f"evaluation:{purpose}", root=root)
        return run
    if purpose != "final_test":
        return None
    m = start_run(f"final-test-{split}", hypothesis=note, tags=("usage", purpose), root=root,
                  data=[path] if path.exists() else [], with_torch=False)
    if path.exists():
        Store(root).update(m.id, artifacts=(file_artifact(path, f"evaluation:{purpose}"),))
    end_run(m.id, "completed", root=root)
    return m.id


def read_ledger(manifest: str | os.PathLike[str]) -> tuple[list[UsageEntry], list[str]]:
    """Entries of the manifest's ledger (none when it does not exist yet), and warnings for unreadable lines."""
    path = ledger_path(manifest)
    entries: list[UsageEntry] = []
    warnings: list[str] = []
    if not path.exists():
        return entries, warnings
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                d = parse_json(raw, f"{path}:{no}")
                texts = {k: d[k] for k in ("time", "split", "purpose")} | {
                    k: d.get(k) for k in ("note", "run", "manifest_sha256", "split_sha256")}
                if not all(isinstance(v, str) for k, v in texts.items() if k in ("time", "split", "purpose")) or \
                        not all(v is None or isinstance(v, str) for v in texts.values()):
                    raise TypeError("a field that is not text")
                entries.append(UsageEntry(time=d["time"], split=d["split"], purpose=parse_purpose(d["purpose"]),
                                          note=d.get("note") or "", run=d.get("run"),
                                          manifest_sha256=d.get("manifest_sha256"),
                                          split_sha256=d.get("split_sha256")))
            except (ValueError, KeyError, TypeError, InputError, AttributeError):
                warnings.append(f"{path}:{no}: not a usage entry (a torn write, or edited by hand?); ignored")
    return entries, warnings


def usage_report(manifest: str | os.PathLike[str], *, max_final_uses: int = 1, final_split: str | None = None,
                 recorded: UsageEntry | None = None) -> UsageReport:
    """Counts of the ledger per split and purpose, and the checks on the final split.

    Args:
        max_final_uses: decisions (model selection or final test) the final split may inform before it fails.
        final_split: the held-out split (default: the manifest's last split, e.g. 'test').
    Returns:
        UsageReport with checks usage.final_test_reuse (fails past max_final_uses decisions) and
        usage.final_test_training (fails when the final split was used to train).
    """
    from ..io import sha256_file

    if isinstance(max_final_uses, bool) or not isinstance(max_final_uses, int) or max_final_uses < 0:
        raise InputError(f"max final uses must be an integer >= 0, got {max_final_uses!r}")
    splits = read_split_set(manifest)
    mpath = splits.manifest
    hashes = {s.name: s.sha256 for s in splits.splits}
    names = splits.names
    final = final_split or names[-1]
    if final not in names:
        raise InputError(f"final split {final!r} is not in {mpath} (its splits: {', '.join(names)}); name one of them")
    entries, warnings = read_ledger(mpath)
    counts = {n: {p: 0 for p in PURPOSES} for n in names}
    current = sha256_file(mpath)
    earlier: dict[str, int] = {}
    for e in entries:
        if e.split not in counts:
            warnings.append(f"an entry names split {e.split!r}, which this manifest does not have")
            continue
        # a use counts against the split's current content only: the content it was made on (older entries, which
        # lack that hash, by the manifest they were recorded against)
        same = e.split_sha256 == hashes[e.split] if e.split_sha256 else e.manifest_sha256 in (None, current)
        if same:
            counts[e.split][e.purpose] += 1
        else:
            earlier[e.split] = earlier.get(e.split, 0) + 1
    for name, k in earlier.items():
        warnings.append(f"{k} use(s) of {name!r} were recorded on an earlier version of its file(s) (the data was "
                        f"re-split); they do not count against the current {name!r}")
    decisions = sum(counts[final][p] for p in DECISIONS)
    trained = counts[final]["training"]
    reuse = Check(
        CHECK_REUSE, "fail" if decisions > max_final_uses else "pass",
        f"the final split {final!r} informed {decisions} decision(s); the limit is {max_final_uses}",
        "each look at the test score that changes a setting fits the settings to the test set; its score "
        "becomes optimistic",
        "choose settings on the validation split; keep the test split for one final report, or re-split and "
        "collect a fresh test set")
    training = Check(
        CHECK_TRAINING, "fail" if trained else "pass",
        f"the final split {final!r} was used for training {trained} time(s)",
        "a model trained on the test split is scored on data it has seen",
        "train on the training split only")
    return UsageReport(manifest=str(mpath), ledger=str(ledger_path(mpath)), splits=names, final_split=final,
                       max_final_uses=max_final_uses, entries=tuple(entries), counts=counts,
                       final_decisions=decisions, checks=(reuse, training), warnings=tuple(warnings),
                       recorded=recorded)


def use_split(manifest: str | os.PathLike[str], *, split: str | None = None, purpose: str | None = None,
              note: str = "", run: str | None = None, max_final_uses: int = 1,
              final_split: str | None = None) -> UsageReport:
    """Record one use (when split and purpose are given), then report the ledger: the CLI's one library call."""
    if (split is None) != (purpose is None):
        raise InputError("recording a use needs both the split and the purpose; "
                         "e.g. --record test --purpose final-test")
    if isinstance(max_final_uses, bool) or not isinstance(max_final_uses, int) or max_final_uses < 0:
        raise InputError(f"max final uses must be an integer >= 0, got {max_final_uses!r}")
    # (split and purpose are given together: checked above)
    entry = (record_usage(manifest, split=split, purpose=purpose, note=note, run=run)
             if split and purpose is not None else None)
    return usage_report(manifest, max_final_uses=max_final_uses, final_split=final_split, recorded=entry)
