"""The campaign's record folder: every command's result, saved when asked (`campaign --record ...` or
CAMPAIGN_RECORD=1), so the report finds memory estimates, traces, measurements, splits, leak checks, usage ledgers,
error analyses, regressions, seed comparisons and checks without the user listing files.

`<root>/records/<command>/<UTC time>-<hash>.json`, each written atomically: {'record': 'campaign.record/1',
'command', 'argv', 'created', 'result': the result's to_dict() (with its own schema)}. Reading tolerates what it
cannot use: a broken file is listed with its error, never a crash.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import atomic_write_json, load_json
from ..strict_json import dumps_json
from .store import default_root

SCHEMA = "campaign.record/1"
VARIABLE = "CAMPAIGN_RECORD"
PROGRESS_EVERY = 250          # records read between two progress calls


@dataclass(frozen=True)
class SavedRecord:
    path: str
    command: str
    created: str
    schema: str | None            # the result's own schema ('campaign.memory/1'), None when unreadable
    result: dict[str, Any] | None
    error: str | None = None
    argv: tuple[str, ...] = ()    # the command line after `campaign` (as `--record` saved it)


def save_record(result: Any, *, command: str, argv: list[str] | tuple[str, ...] = (),
                root: str | Path | None = None) -> Path:
    """Write one result (an object with to_dict(), or a dict) into the record folder; returns its path."""
    data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    now = dt.datetime.now(dt.timezone.utc)
    text = dumps_json(data, indent=None)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    name = command.strip().replace(" ", "-") or "result"
    folder = Path(root) if root is not None else default_root()
    path = folder / "records" / name / f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{digest}.json"
    atomic_write_json(path, {"record": SCHEMA, "command": command, "argv": list(argv),
                             "created": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                             "result": data})
    return path


def load_records(root: str | Path | None = None, *,
                 progress: Callable[[str], None] | None = None) -> list[SavedRecord]:
    """Every saved record, oldest first; unreadable ones carry their error. progress: called with
    'records 3,000/10,000' every PROGRESS_EVERY records and at the end."""
    folder = (Path(root) if root is not None else default_root()) / "records"
    out = []
    paths = sorted(folder.glob("*/*.json"), key=lambda p: p.name)
    for i, path in enumerate(paths, 1):
        if progress is not None and (i % PROGRESS_EVERY == 0 or i == len(paths)):
            progress(f"records {i:,}/{len(paths):,}")
        try:
            doc = load_json(path, "campaign record")
            if not isinstance(doc, dict) or doc.get("record") != SCHEMA or not isinstance(doc.get("result"), dict):
                raise ValueError("not a campaign record")
            result = doc["result"]
            argv = doc.get("argv")
            out.append(SavedRecord(str(path), str(doc.get("command", "")), str(doc.get("created", "")),
                                   result.get("schema") if isinstance(result.get("schema"), str) else None, result,
                                   argv=tuple(str(a) for a in argv) if isinstance(argv, list) else ()))
        except Exception as e:  # noqa: BLE001 - a report lists what it could not read
            out.append(SavedRecord(str(path), path.parent.name, "", None, None, f"{type(e).__name__}: {e}"))
    return out


__all__ = ["SCHEMA", "SavedRecord", "VARIABLE", "load_records", "save_record"]
