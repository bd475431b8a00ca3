"""Test-set usage ledger: which split each evaluation used and for what (training, model selection, final test).

Every use is also a record of the run store (track/store.py): a use with a run id is added to that run's
artifacts (kind 'evaluation:<purpose>', the split file with its hash); a final-test use without one becomes a run of
its own (completed, tagged 'usage'), so `campaign runs list` shows every look at the test set.

Each look at the final test split that informs a choice weakens it as an unbiased estimate; the ledger counts
those looks: a model selection on it is already a warning, more decisions than allowed a failure. One JSON-lines
file per split manifest, next to it (split_manifest.usage.jsonl); entries are appended under an exclusive lock with
one write each, so concurrent writers never interleave.

The ledger is tamper-evident (campaign.usage_entry/2): each entry carries the sha256 of the line before it (`prev`),
and the run store keeps the ledger's length and last hash (`<store>/usage/<key>.json`, the anchor), so an entry
deleted, edited or moved, a line that is not an entry, or the ledger itself deleted fails the check
usage.ledger_intact, naming the line. A writer that died mid-line leaves a torn line: the next entry acknowledges it
by its hash (`torn`), and a torn last line is a warning. Entries of campaign.usage_entry/1 (before the chain) are
still read, with a warning that they cannot show an edit.

A use binds to the rows it saw: the sha256 of each row's text, kept once per split content in
split_manifest.usage.rows.<split sha256>.txt (the entry holds that file's sha256). A decision counts against the
final split when its rows overlap the final split's rows, whatever the split was called then, so a re-split keeps
counting rows already used (and training rows that land in the final split fail usage.final_test_training). The
input data's sha256 is checked at each use against the one the manifest recorded (usage.input_unchanged).

Both kinds of split are read alike (data.split.read_split_set): the split files of `campaign split` or the folders
of shards of `campaign split --engine ray` (whose ledger is manifest.usage.jsonl beside its manifest.json); a file
or shard edited, added or removed since the split is refused before anything is read or written.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..checks import Check
from ..data.split_manifest import SplitContent, read_split_set, split_manifest_path
from ..errors import InputError
from ..results import Result
from ..strict_json import parse_json

SCHEMA = "campaign.usage/1"
ENTRY_SCHEMA = "campaign.usage_entry/2"
UNCHAINED_SCHEMA = "campaign.usage_entry/1"     # before the hash chain: still read, with a warning
PURPOSES = ("training", "model_selection", "final_test")
DECISIONS = ("model_selection", "final_test")  # uses of the final split that count against it
CHECK_REUSE = "usage.final_test_reuse"
CHECK_TRAINING = "usage.final_test_training"
CHECK_LEDGER = "usage.ledger_intact"
CHECK_INPUT = "usage.input_unchanged"
ROW_HASH_HEX = 16                               # 64 bits of each row text's sha256


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


def rows_file(ledger: Path, split_sha256: str) -> Path:
    """Where the row hashes of one used split content are kept, beside the ledger (a file: a split's folder holds
    files only): split_manifest.usage.rows.<its sha256, 24 digits>.txt."""
    return ledger.with_name(f"{ledger.name.removesuffix('.jsonl')}.rows.{split_sha256[:24]}.txt")


def anchor_path(ledger: Path, runs_root: str | os.PathLike[str] | None = None) -> Path:
    """The run store's record of a ledger's length and last hash (keyed by the ledger's absolute path)."""
    from ..io import sha256_bytes
    from .store import Store

    return Store(runs_root).root / "usage" / f"{sha256_bytes(str(ledger.resolve()).encode())[:24]}.json"


@dataclass(frozen=True)
class UsageEntry:
    """One evaluation: when, which split, for what, an optional note and run id, the manifest it refers to, and
    (campaign.usage_entry/2) the rows it saw, the input data's hash then and the hash of the entry before it."""

    time: str
    split: str
    purpose: str
    note: str = ""
    run: str | None = None
    manifest_sha256: str | None = None
    split_sha256: str | None = None     # the split's content when it was used (its file's sha256, or the one over
                                        # its shards): a use binds to that content
    rows: int | None = None             # rows of that content, and the sha256 of the file of their hashes
    rows_sha256: str | None = None
    input_sha256: str | None = None     # the input data's sha256 at the use (None: not found)
    prev: str | None = None             # sha256 of the ledger line before this one (None: the first)
    torn: str | None = None             # sha256 of a torn line just before this one, which this entry acknowledges
    schema: str = ENTRY_SCHEMA
    line: int = field(default=0, compare=False)     # where it was read (1-based; 0: not read from a file)

    def to_dict(self) -> dict[str, Any]:  # by hand: one line of the ledger file, its schema first
        out: dict[str, Any] = {"schema": self.schema, "time": self.time, "split": self.split, "purpose": self.purpose,
               "note": self.note, "run": self.run, "manifest_sha256": self.manifest_sha256,
               "split_sha256": self.split_sha256}
        if self.schema != UNCHAINED_SCHEMA:
            out |= {"rows": self.rows, "rows_sha256": self.rows_sha256, "input_sha256": self.input_sha256,
                    "prev": self.prev, "torn": self.torn}
        return out


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


@dataclass
class LedgerAudit:
    """What reading a ledger found: its entries, the lines that broke the chain (problems: a failing check),
    warnings (a torn last line, unchained entries), and the hash of its last entry."""

    entries: list[UsageEntry]
    problems: list[str]
    warnings: list[str]
    head: str | None
    unchained: int = 0


def _entry(raw: bytes, where: str, no: int) -> UsageEntry:
    """One ledger line as an entry. Raises ValueError (or KeyError, TypeError...) when it is not one."""
    d = parse_json(raw, where)
    if not isinstance(d, dict):
        raise TypeError("not an object")
    texts = ("time", "split", "purpose")
    optional = ("note", "run", "manifest_sha256", "split_sha256", "rows_sha256", "input_sha256", "prev", "torn")
    if not all(isinstance(d[k], str) for k in texts) or not all(d.get(k) is None or isinstance(d.get(k), str)
                                                                for k in optional):
        raise TypeError("a field that is not text")
    rows = d.get("rows")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
        raise TypeError("rows is not a count")
    schema = d.get("schema") or UNCHAINED_SCHEMA
    if schema not in (ENTRY_SCHEMA, UNCHAINED_SCHEMA):
        raise ValueError(f"schema {schema!r}")
    return UsageEntry(time=d["time"], split=d["split"], purpose=parse_purpose(d["purpose"]),
                      note=d.get("note") or "", run=d.get("run"), manifest_sha256=d.get("manifest_sha256"),
                      split_sha256=d.get("split_sha256"), rows=rows, rows_sha256=d.get("rows_sha256"),
                      input_sha256=d.get("input_sha256"), prev=d.get("prev"), torn=d.get("torn"), schema=schema,
                      line=no)


def audit_ledger(path: Path, anchor: Path | None = None) -> LedgerAudit:
    """Read a ledger and check its chain: each chained entry's `prev` is the sha256 of the entry line before it
    (None for the first); a line that is not an entry is a problem unless the next entry acknowledges it as torn
    (or it is the unfinished last line). With an anchor (the run store's record of the ledger's length and last
    hash): a ledger deleted, or entries removed from its end or its last one edited, is a problem too."""
    from ..io import load_json, sha256_bytes

    audit = LedgerAudit([], [], [], None)
    data = path.read_bytes() if path.exists() else None
    if data is not None:
        lines = data.split(b"\n")
        unfinished = lines[-1] != b""        # no newline after the last line: a writer died there
        bad: list[tuple[int, str]] = []      # lines not (yet) accounted for: (line number, sha256)
        for no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                e = _entry(raw, f"{path}:{no}", no)
            except (ValueError, KeyError, TypeError, InputError, AttributeError, RecursionError):
                bad.append((no, sha256_bytes(raw)))
                continue
            if e.schema == UNCHAINED_SCHEMA:
                audit.unchained += 1
                if audit.entries and audit.entries[-1].schema == ENTRY_SCHEMA:
                    audit.problems.append(f"{path}:{no}: an unchained entry ({UNCHAINED_SCHEMA}) after chained ones "
                                          "(written by hand, not by `campaign usage`)")
            else:
                if e.torn and bad and bad[-1][1] == e.torn:
                    audit.warnings.append(f"{path}:{bad[-1][0]}: a torn line (a writer died mid-line); the next "
                                          "entry acknowledges it")
                    bad.pop()
                if e.prev != audit.head:
                    audit.problems.append(
                        f"{path}:{no}: this entry does not follow the one before it (its prev hash differs): an "
                        "entry before it was deleted, edited or moved")
            audit.problems.extend(f"{path}:{b}: not a usage entry (edited by hand?)" for b, _ in bad)
            bad = []
            audit.entries.append(e)
            audit.head = sha256_bytes(raw)
        for b, _ in bad:
            if unfinished and b == len(lines):
                audit.warnings.append(f"{path}:{b}: a torn last line (a writer died mid-line); ignored")
            else:
                audit.problems.append(f"{path}:{b}: not a usage entry (edited by hand?)")
        if audit.unchained:
            audit.warnings.append(f"{audit.unchained} entr{'y' if audit.unchained == 1 else 'ies'} of {path.name} "
                                  f"predate the hash chain ({UNCHAINED_SCHEMA}): a deletion or an edit among them "
                                  "cannot be seen")
    if anchor is not None and anchor.is_file():
        try:
            a = load_json(anchor, "a usage anchor")
            count, head = int(a["entries"]), a["head"]
        except (InputError, KeyError, TypeError, ValueError):
            audit.problems.append(f"{anchor}: the run store's record of this ledger is not readable")
            return audit
        if data is None:
            audit.problems.append(f"{path}: the ledger was deleted; the run store ({anchor}) records {count} "
                                  "entr(ies) in it")
        elif count > len(audit.entries) or sha256_bytes(_line_of(data, audit.entries[count - 1].line)) != head:
            audit.problems.append(
                f"{path}: the run store ({anchor}) records {count} entr(ies) ending in {str(head)[:12]}...; the "
                f"ledger holds {len(audit.entries)}"
                + (f" and its entry {count} (line {audit.entries[count - 1].line}) differs"
                   if count <= len(audit.entries) else "")
                + ": entries were removed from its end, or the last one edited")
    return audit


def _line_of(data: bytes, no: int) -> bytes:
    return data.split(b"\n")[no - 1]


def read_ledger(manifest: str | os.PathLike[str]) -> tuple[list[UsageEntry], list[str]]:
    """Entries of the manifest's ledger (none when it does not exist yet), and warnings and problems found reading
    it (audit_ledger, without the run store's anchor)."""
    audit = audit_ledger(ledger_path(manifest))
    return audit.entries, [*audit.problems, *audit.warnings]


def row_hashes(content: SplitContent, text_fields: tuple[str, ...]) -> list[str]:
    """The distinct row texts of a split's content (its file, Hugging Face folder, or folder of shards), each as the
    first 16 hex digits of its sha256, sorted."""
    from ..data.read import Fields, read_dataset
    from ..io import sha256_bytes
    from ..rows import hf_kind

    path = content.path
    files = [path] if not path.is_dir() or hf_kind(path) else sorted(f for f in path.rglob("*") if f.is_file())
    out: set[str] = set()
    for f in files:
        ds = read_dataset(f, Fields(text=text_fields), skip_bad=True)
        out.update(sha256_bytes(t.encode("utf-8", "surrogatepass"))[:ROW_HASH_HEX] for t in ds.texts)
    return sorted(out)


def _manifest_doc(mpath: Path) -> dict[str, Any]:
    """The manifest's JSON (either kind; read_split_set has checked it)."""
    from ..io import load_json

    doc = load_json(mpath, "a split manifest")
    return doc if isinstance(doc, dict) else {}


def _text_fields(mpath: Path) -> tuple[str, ...]:
    """The text field(s) the split read: a row is known by its text."""
    params = _manifest_doc(mpath).get("parameters")
    fields = params.get("fields") if isinstance(params, dict) else None
    text = fields.get("text") if isinstance(fields, dict) else None
    return tuple(text) if isinstance(text, list) and text and all(isinstance(t, str) for t in text) else ("text",)


def split_rows(ledger: Path, content: SplitContent, text_fields: tuple[str, ...]) -> tuple[set[str], str]:
    """The row hashes of a split's content, and the sha256 of the file that keeps them (written once per content,
    atomically, beside the ledger)."""
    from ..io import atomic_write_text, sha256_bytes

    f = rows_file(ledger, content.sha256)
    if f.is_file():
        data = f.read_bytes()
    else:
        data = "".join(h + "\n" for h in row_hashes(content, text_fields)).encode()
        atomic_write_text(f, data.decode())
    return set(data.decode().split()), sha256_bytes(data)


def _input_hash(mpath: Path) -> tuple[str | None, str | None, str]:
    """(recorded sha256, current sha256, path) of the input data the manifest was split from; None where unknown
    (a split in shards records no hash) or not found."""
    from ..io import sha256_file

    inp = _manifest_doc(mpath).get("input")
    if not isinstance(inp, dict):
        return None, None, str(inp or "")
    path, recorded = str(inp.get("path") or ""), inp.get("sha256")
    for p in (Path(path), mpath.parent / path):
        if path and p.is_file():
            return recorded, sha256_file(p), path
    return recorded, None, path


def _append_entry(path: Path, entry: UsageEntry, anchor: Path) -> UsageEntry:
    """Append the entry, chained to the last one, with a single write under an exclusive lock (a torn last line is
    closed and acknowledged first), then record the ledger's new length and last hash in the run store."""
    from dataclasses import replace

    from ..io import atomic_write_json, sha256_bytes

    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: O_APPEND alone
            pass
        audit = audit_ledger(path)
        data = path.read_bytes()
        torn = None
        prefix = b""
        if data and not data.endswith(b"\n"):
            torn = sha256_bytes(data.rsplit(b"\n", 1)[-1])
            prefix = b"\n"                   # the previous writer died mid-line: close that line
        entry = replace(entry, prev=audit.head, torn=torn)
        line = json.dumps(entry.to_dict(), ensure_ascii=False, sort_keys=True).encode("utf-8")
        view = memoryview(prefix + line + b"\n")
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        anchor.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(anchor, {"schema": "campaign.usage_anchor/1", "ledger": str(path.resolve()),
                                   "entries": len(audit.entries) + 1, "head": sha256_bytes(line)})
    finally:
        os.close(fd)  # closing releases the lock
    return replace(entry, line=0)


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
    ledger = ledger_path(mpath)
    rows, rows_sha = split_rows(ledger, part, _text_fields(mpath))
    run = _run_record(run, split, purpose, " ".join(note.split()), part.path, runs_root)
    entry = UsageEntry(time=(when or datetime.now(timezone.utc)).isoformat(timespec="seconds"), split=split,
                       purpose=purpose, note=" ".join(note.split()), run=run,
                       manifest_sha256=sha256_file(mpath), split_sha256=part.sha256, rows=len(rows),
                       rows_sha256=rows_sha, input_sha256=_input_hash(mpath)[1])
    return _append_entry(ledger, entry, anchor_path(ledger, runs_root))


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


def usage_report(manifest: str | os.PathLike[str], *, max_final_uses: int = 1, final_split: str | None = None,
                 recorded: UsageEntry | None = None,
                 runs_root: str | os.PathLike[str] | None = None) -> UsageReport:
    """Counts of the ledger per split and purpose, and the checks on the final split and on the ledger itself.

    Args:
        max_final_uses: decisions (model selection or final test) the final split may inform before it fails.
        final_split: the held-out split (default: the manifest's last split, e.g. 'test').
        runs_root: the run store holding the ledger's anchor (default: $CAMPAIGN_ROOT, else .campaign here).
    Returns:
        UsageReport with checks usage.final_test_reuse (fails past max_final_uses decisions, warns on a model
        selection within them), usage.final_test_training (fails when rows of the final split were trained on),
        usage.ledger_intact (fails on a deleted, edited, moved or foreign line, or a deleted ledger; warns on
        entries from before the chain) and usage.input_unchanged (warns when the input data changed since the
        split).
    """
    if isinstance(max_final_uses, bool) or not isinstance(max_final_uses, int) or max_final_uses < 0:
        raise InputError(f"max final uses must be an integer >= 0, got {max_final_uses!r}")
    splits = read_split_set(manifest)
    mpath = splits.manifest
    hashes = {s.name: s.sha256 for s in splits.splits}
    names = splits.names
    final = final_split or names[-1]
    if final not in names:
        raise InputError(f"final split {final!r} is not in {mpath} (its splits: {', '.join(names)}); name one of them")
    ledger = ledger_path(mpath)
    audit = audit_ledger(ledger, anchor_path(ledger, runs_root))
    entries, warnings, problems = audit.entries, list(audit.warnings), list(audit.problems)
    counts = {n: {p: 0 for p in PURPOSES} for n in names}
    final_rows: set[str] | None = None
    if any(e.rows_sha256 for e in entries):
        final_rows, _ = split_rows(ledger, splits.get(final), _text_fields(mpath))  # type: ignore[arg-type]
    decisions = trained = selections = 0
    earlier: dict[str, int] = {}
    overlap_earlier: list[tuple[UsageEntry, int]] = []
    current = _sha(mpath)
    for e in entries:
        # made on the split's current content (entries that lack its hash: on the manifest they were recorded with)
        same = e.split in hashes and (e.split_sha256 == hashes[e.split] if e.split_sha256
                                      else e.manifest_sha256 in (None, current))
        if same:
            counts[e.split][e.purpose] += 1
        if e.rows_sha256 and final_rows is not None:
            used = _rows_of(ledger, e, problems)
            shared = len(used & final_rows) if used is not None else 0
            touches = shared > 0 or (same and e.split == final)
            if touches and not same:
                overlap_earlier.append((e, shared))
        else:                                  # an entry from before row binding: by its split's name and content
            touches = same and e.split == final
            if not same:
                if e.split in hashes:
                    earlier[e.split] = earlier.get(e.split, 0) + 1
                else:
                    warnings.append(f"an entry names split {e.split!r}, which this manifest does not have")
        if touches:
            decisions += e.purpose in DECISIONS
            selections += e.purpose == "model_selection"
            trained += e.purpose == "training"
    for name, k in earlier.items():
        warnings.append(f"{k} use(s) of {name!r} were recorded on an earlier version of its file(s) (the data was "
                        f"re-split), before uses were bound to rows; they do not count against the current {name!r}")
    if overlap_earlier and final_rows is not None:
        shared_any = max(k for _, k in overlap_earlier)
        warnings.append(f"{len(overlap_earlier)} use(s) recorded on an earlier split share rows with the current "
                        f"{final!r} (up to {shared_any:,} of its {len(final_rows):,} rows); they count against it")
    checks = [_reuse_check(final, decisions, selections, max_final_uses),
              Check(CHECK_TRAINING, "fail" if trained else "pass",
                    f"rows of the final split {final!r} were used for training {trained} time(s)",
                    "a model trained on the test split's rows is scored on data it has seen",
                    "train on the training split only; if the data was re-split after training, the new test split "
                    "holds trained-on rows: collect a fresh test set"),
              _ledger_check(ledger, problems, audit.unchained),
              _input_check(mpath)]
    return UsageReport(manifest=str(mpath), ledger=str(ledger), splits=names, final_split=final,
                       max_final_uses=max_final_uses, entries=tuple(entries), counts=counts,
                       final_decisions=decisions, checks=tuple(checks), warnings=tuple(warnings),
                       recorded=recorded)


def _sha(path: Path) -> str:
    from ..io import sha256_file

    return sha256_file(path)


def _rows_of(ledger: Path, e: UsageEntry, problems: list[str]) -> set[str] | None:
    """The row hashes an entry saw (its rows file, checked against the entry's hash); None and a problem when that
    file is missing or was changed."""
    from ..io import sha256_bytes

    f = rows_file(ledger, e.split_sha256 or "")
    data = f.read_bytes() if f.is_file() else None
    if data is None or sha256_bytes(data) != e.rows_sha256:
        problems.append(f"{ledger}:{e.line}: the rows this use saw ({f}) are "
                        f"{'missing' if data is None else 'changed'}")
        return None
    return set(data.decode().split())


def _reuse_check(final: str, decisions: int, selections: int, limit: int) -> Check:
    seen = f"the final split {final!r} informed {decisions} decision(s); the limit is {limit}"
    why = ("each look at the test score that changes a setting fits the settings to the test set; its score "
           "becomes optimistic")
    fix = ("choose settings on the validation split; keep the test split for one final report, or re-split and "
           "collect a fresh test set")
    if decisions > limit:
        return Check(CHECK_REUSE, "fail", seen, why, fix)
    if selections:
        return Check(CHECK_REUSE, "warn", f"{seen}; {selections} of them a model selection on it", why, fix)
    return Check(CHECK_REUSE, "pass", seen)


def _ledger_check(ledger: Path, problems: list[str], unchained: int) -> Check:
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return Check(CHECK_LEDGER, "fail", "; ".join(problems[:3]) + more,
                     "an entry deleted, edited or moved can hide a look at the test set: the counts above may be "
                     "too low",
                     f"restore {ledger.name} (and its .rows files) from a backup, or treat the test split as used "
                     "and collect a fresh one; `campaign usage` writes the ledger, never edit it by hand")
    if unchained:
        return Check(CHECK_LEDGER, "warn", f"{unchained} entr(ies) predate the hash chain ({UNCHAINED_SCHEMA})",
                     "an edit or a deletion among them cannot be seen",
                     "nothing to do for new uses: each is chained; re-split for a ledger chained from its start")
    return Check(CHECK_LEDGER, "pass", "every entry follows the one before it, and the ledger's end matches the run "
                 "store's record")


def _input_check(mpath: Path) -> Check:
    recorded, now_sha, path = _input_hash(mpath)
    if recorded is None:
        return Check(CHECK_INPUT, "skipped", "the manifest records no hash of the input data", gates=False)
    if now_sha is None:
        return Check(CHECK_INPUT, "skipped", f"the input data {path!r} is not found (moved?); not checked",
                     gates=False)
    if now_sha != recorded:
        return Check(CHECK_INPUT, "warn",
                     f"the input data {path!r} changed since the split (sha256 {now_sha[:12]}... now, "
                     f"{recorded[:12]}... at the split)",
                     "the splits hold the data as it was: new or edited rows are in no split, and a re-split would "
                     "mix rows already used into the test split",
                     "evaluate on the splits as written; to use the new data, re-split (campaign split --force) and "
                     "read the counts this ledger then gives for the rows already used")
    return Check(CHECK_INPUT, "pass", f"the input data {path!r} is unchanged since the split")


def use_split(manifest: str | os.PathLike[str], *, split: str | None = None, purpose: str | None = None,
              note: str = "", run: str | None = None, max_final_uses: int = 1,
              final_split: str | None = None) -> UsageReport:
    """Record one use (when split and purpose are given), then report the ledger: the CLI's one library call."""
    if (split is None) != (purpose is None):
        raise InputError("recording a use needs both the split and the purpose; "
                         "e.g. --use test --purpose final-test")
    if isinstance(max_final_uses, bool) or not isinstance(max_final_uses, int) or max_final_uses < 0:
        raise InputError(f"max final uses must be an integer >= 0, got {max_final_uses!r}")
    # (split and purpose are given together: checked above)
    entry = (record_usage(manifest, split=split, purpose=purpose, note=note, run=run)
             if split and purpose is not None else None)
    return usage_report(manifest, max_final_uses=max_final_uses, final_split=final_split, recorded=entry)
