"""A run's manifest: one JSON file tying the hypothesis, the baseline and the one change against it, the data, the
code, the parameters, the environment, the seeds, the status with its reason, the metrics, the artifacts and the
decision. Stopped, failed and invalid runs keep their manifest and their reason.
"""
from __future__ import annotations

import datetime as dt
import re
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..validate import JsonObject

SCHEMA = "campaign.run/1"
STATUSES = ("planned", "running", "completed", "stopped", "failed", "invalid")
ENDED = ("completed", "stopped", "failed", "invalid")
DECISIONS = ("accepted", "rejected", "needs-more-evidence")


def now() -> str:
    """UTC, ISO 8601 to the millisecond: sortable as text."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def new_id(name: str) -> str:
    """'<name>-<UTC time>-<4 hex>': readable, sorts by creation, unique across concurrent starts."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "run"
    return f"{slug}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Artifact:
    path: str
    sha256: str
    bytes: int
    kind: str = ""            # one of ARTIFACT_KINDS, with an optional ':label' (predictions:test)


@dataclass(frozen=True)
class Amendment:
    """An artifact of an ended run recorded again with other contents: what changed, why and when (an ended run's
    artifacts are otherwise immutable: the bundle, the report and `runs show` say it was amended)."""

    path: str
    was_sha256: str
    sha256: str
    reason: str
    at: str


@dataclass(frozen=True)
class Decision:
    decision: str             # accepted | rejected | needs-more-evidence
    why: str
    at: str


@dataclass(frozen=True)
class Manifest:
    """One run. `change`: the parameters that differ from the baseline's, by top-level key (a 'set');
    `owner`: host and pid of the process that keeps the run alive, to tell a killed run from a live one."""

    id: str
    name: str
    created: str
    status: str = "running"
    reason: str = ""
    hypothesis: str = ""
    guards: tuple[str, ...] = ()
    baseline: str | None = None
    change: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    data: tuple[Artifact, ...] = ()
    code: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    decision: Decision | None = None
    owner: dict[str, Any] = field(default_factory=dict)
    stale_after: float = 600.0
    ended: str | None = None
    amendments: tuple[Amendment, ...] = ()
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_(self, **changes: Any) -> Manifest:
        return replace(self, **changes)


def _artifacts(d: JsonObject, key: str) -> tuple[Artifact, ...]:
    return tuple(Artifact(a.str("path"), a.str("sha256"), a.count("bytes", maximum=2**62), a.str("kind", ""))
                 for a in (d.items(key) if key in d else []))


def manifest_from(data: Any, where: str) -> Manifest:
    """A Manifest from parsed JSON, every field checked (one line naming the file and the field)."""
    d = JsonObject(data, where, fix="the manifest was edited by hand or cut short; restore it or mark the run "
                                    "invalid with `campaign run end ID --status invalid`")
    if d.str("schema") != SCHEMA:
        d.fail(f"schema {d.str('schema')!r} is not {SCHEMA!r}")
    status = d.str("status")
    if status not in STATUSES:
        d.fail(f"status {status!r} is not one of {', '.join(STATUSES)}")
    decision = d.obj("decision", None)
    if decision is not None and decision.str("decision") not in DECISIONS:
        decision.fail(f"decision {decision.str('decision')!r} is not one of {', '.join(DECISIONS)}")
    for key in ("created", "ended"):
        value = d.str(key, None)
        if value is not None:
            try:
                parse_time(value)
            except ValueError:
                d.fail(f"{key} {value!r} is not an ISO 8601 time")
    seeds = d.list("seeds", [])
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        d.fail("seeds must be whole numbers")
    strings = {k: d.list(k, []) for k in ("guards", "tags")}
    for k, v in strings.items():
        if not all(isinstance(s, str) for s in v):
            d.fail(f"{k} must be a list of strings")
    return Manifest(
        id=d.str("id"), name=d.str("name"), created=d.str("created"), status=status, reason=d.str("reason", ""),
        hypothesis=d.str("hypothesis", ""), guards=tuple(strings["guards"]), baseline=d.str("baseline", None),
        change=d.obj("change", None).data if "change" in d else {},
        params=d.obj("params", None).data if "params" in d else {}, data=_artifacts(d, "data"),
        code=d.obj("code", None).data if "code" in d else {},
        environment=d.obj("environment", None).data if "environment" in d else {}, seeds=tuple(seeds),
        tags=tuple(strings["tags"]), metrics=d.obj("metrics", None).data if "metrics" in d else {},
        artifacts=_artifacts(d, "artifacts"),
        decision=Decision(decision.str("decision"), decision.str("why", ""), decision.str("at", ""))
        if decision is not None else None,
        owner=d.obj("owner", None).data if "owner" in d else {}, stale_after=d.number("stale_after", 600.0),
        ended=d.str("ended", None),
        amendments=tuple(Amendment(a.str("path"), a.str("was_sha256"), a.str("sha256"), a.str("reason"), a.str("at"))
                         for a in (d.items("amendments") if "amendments" in d else [])))


def param_sets_changed(params: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The top-level parameter sets that differ from the baseline's: {key: {'baseline': old, 'run': new}}."""
    return {k: {"baseline": baseline.get(k), "run": params.get(k)} for k in sorted(set(params) | set(baseline))
            if params.get(k) != baseline.get(k)}


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested parameters as dotted keys: {'lora': {'r': 16}} -> {'lora.r': 16} (an empty set stays as {})."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


# What a run's artifact is. SHIPPED_KINDS go into the hand-over bundle (campaign export); the others are recorded
# with the run only. A kind may carry a label after a colon (predictions:test, checkpoint:step-500).
SHIPPED_KINDS = ("adapter", "checkpoint", "config", "model", "predictions")
ARTIFACT_KINDS = (*SHIPPED_KINDS, "data", "evaluation", "log", "memory", "other")


def artifact_kind(kind: str) -> str:
    """`kind` when its part before any ':' is one of ARTIFACT_KINDS.

    Raises:
        UnknownNameError: another kind, with the nearest known ones (a misspelt 'chekpoint' would leave the model
            out of the bundle).
    """
    from ..errors import UnknownNameError

    base = kind.partition(":")[0]
    if base not in ARTIFACT_KINDS:
        raise UnknownNameError("artifact kind", kind, ARTIFACT_KINDS,
                               f"(--kind {' | '.join(ARTIFACT_KINDS)}, optionally KIND:label; "
                               f"{', '.join(SHIPPED_KINDS)} ship in `campaign export`)")
    return kind


def file_artifact(path: str | Path, kind: str = "") -> Artifact:
    """An artifact record for a file (its sha256 and size) or a folder (a sha256 over its files' names and hashes)."""
    from ..io import sha256_bytes, sha256_file

    try:
        p = Path(path).resolve()                  # absolute: the record holds wherever it is read from
    except (RuntimeError, OSError) as e:          # a symlink loop
        raise InputError(f"{path}: cannot be followed ({e}); record the file or folder it should point to") from None
    if p.is_file():
        return Artifact(str(p), sha256_file(p), p.stat().st_size, kind)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
        listing = "".join(f"{f.relative_to(p)}\0{sha256_file(f)}\n" for f in files)
        return Artifact(str(p), sha256_bytes(listing.encode()), sum(f.stat().st_size for f in files), kind)
    raise InputError(f"{p}: no such file or folder to record")


__all__ = ["ARTIFACT_KINDS", "Amendment", "Artifact", "DECISIONS", "SHIPPED_KINDS", "artifact_kind", "Decision",
           "ENDED", "Manifest", "SCHEMA", "STATUSES", "file_artifact", "flatten", "manifest_from", "new_id", "now",
           "param_sets_changed", "parse_time"]
