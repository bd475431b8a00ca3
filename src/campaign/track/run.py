"""Starting, logging to, ending and deciding a run: the calls behind `campaign run ...` and `campaign.run(...)`.

    with campaign.run("lora-r16", hypothesis="r16 beats r8 on f1", guards=["f1[refund]>=-0.01"],
                      params={"lora": {"r": 16}}, baseline="lora-r8-...") as run:
        run.log(step=10, loss=1.23)
        run.artifact("preds.jsonl", kind="predictions")

The environment and the git state are captured at the start; an exception marks the run failed with its reason,
Ctrl-C or SIGTERM (a preempted instance) marks it stopped; a heartbeat thread keeps it shown as running.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..strict_json import check_text
from .manifest import (
    DECISIONS,
    ENDED,
    STATUSES,
    Amendment,
    Decision,
    Manifest,
    artifact_kind,
    file_artifact,
    new_id,
    now,
    param_sets_changed,
)
from .store import Store

FLUSH_RECORDS = 1000      # metric records buffered before one append
FLUSH_SECONDS = 1.0
HEARTBEAT_SECONDS = 30.0
TERMINATED = "terminated by signal"


def start_run(name: str, *, hypothesis: str = "", guards: Sequence[str] = (), params: Mapping[str, Any] | None = None,
              baseline: str | None = None, data: Sequence[str | Path] = (), seeds: Sequence[int] = (),
              tags: Sequence[str] = (), root: str | os.PathLike[str] | None = None, owner_pid: int | None = None,
              stale_after: float = 600.0, code_dir: str | Path = ".", status: str = "running",
              with_torch: bool = True, progress: Callable[[str], None] | None = None,
              run_id: str | None = None) -> Manifest:
    """Write a new run's manifest (status running, or planned) with its code, environment and data hashes
    (with_torch=False: the environment without importing torch, for records that ran no model). owner_pid: the
    process whose end means the run died (default this one; 0: none, the heartbeat alone tells, as for a run started
    from a shell command that exits at once). progress: called with each phase's name as it begins ('code',
    'data 1/3', 'environment', 'manifest'). run_id: the id to use instead of a new one (the job's id, which every
    rank of a launched job computes alike: track/distributed.py).

    Raises:
        InputError: a malformed guard, an unknown baseline, a data file that does not exist.
    """
    from .code import capture_code
    from .environment import capture_environment

    say = progress or (lambda _phase: None)
    for what, value in (("the run's name", name), ("--hypothesis", hypothesis), ("--guard", list(guards)),
                        ("--param", dict(params or {})), ("--baseline", baseline), ("--tag", list(tags)),
                        ("--data", [str(p) for p in data])):
        check_text(value, what)  # before anything is written: a manifest that cannot be UTF-8 would break the store
    if not name.strip():
        raise InputError("a run needs a name, e.g. lora-r16")
    if status not in ("running", "planned"):
        raise InputError(f"a run starts running or planned, not {status!r}")
    if guards:
        from ..evaluate.regress import parse_guard  # 0.1 s of imports: only when there is a guard to parse

        for g in guards:
            parse_guard(g)
    store = Store(root)
    params = dict(params or {})
    change: dict[str, Any] = {}
    if baseline is not None:
        base = store.read(baseline)
        change = param_sets_changed(params, base.params)
    say("code")
    code, diff = capture_code(code_dir)
    hashed = []
    for i, p in enumerate(data, 1):
        say(f"data {i:,}/{len(data):,}")
        hashed.append(file_artifact(p, "data"))
    say("environment")
    environment = capture_environment(with_torch=with_torch).to_dict()
    say("manifest")
    m = Manifest(id=run_id or new_id(name), name=name, created=now(), status=status, hypothesis=hypothesis,
                 guards=tuple(guards), baseline=baseline, change=change, params=params, data=tuple(hashed),
                 code=code.to_dict(), environment=environment, seeds=tuple(int(s) for s in seeds), tags=tuple(tags),
                 owner={"host": socket.gethostname(), "pid": os.getpid() if owner_pid is None else owner_pid or None},
                 stale_after=float(stale_after))
    return store.create(m, diff=diff)


def end_run(run_id: str, status: str, reason: str = "", *, root: str | os.PathLike[str] | None = None,
            metrics: Mapping[str, Any] | None = None, force: bool = False) -> Manifest:
    """Close a run: completed, stopped, failed or invalid (a reason is required for all but completed). A run that
    has ended keeps its status and reason unless force (then the earlier ones stay in the reason's history)."""
    if status not in ENDED:
        raise InputError(f"status {status!r}: a run ends {', '.join(ENDED)}")
    if status != "completed" and not reason.strip():
        raise InputError(f"a run that ends {status} needs --reason (what happened), so it is not lost")
    check_text(reason, "--reason")
    check_text(dict(metrics or {}), "the run's metrics")
    store = Store(root)
    m = store.read(run_id)
    if m.status in ENDED:
        if not force:
            raise InputError(f"run {run_id} already ended {m.status}" + (f" ({m.reason})" if m.reason else "")
                             + "; give --force to change it (the earlier status is kept in the reason)")
        reason = f"{reason} (was {m.status}" + (f": {m.reason})" if m.reason else ")")
    last = store.last_metrics(run_id)
    return store.update(run_id, status=status, reason=reason, ended=now(), metrics={**last, **(metrics or {})})


def log_run(run_id: str, records: Sequence[Mapping[str, Any]], *, root: str | Path | None = None) -> None:
    """Append records to a run that has not ended (logging to a closed run would rewrite what it reported)."""
    check_text([dict(r) for r in records], "the records logged")
    store = Store(root)
    m = store.read(run_id)
    if m.status in ENDED:
        raise InputError(f"run {run_id} already ended {m.status}; start a new run, or reopen nothing: its records "
                         "are final")
    store.log(run_id, [_finite(r) for r in records])


def decide_run(run_id: str, decision: str, why: str, *, root: str | Path | None = None) -> Manifest:
    """Record the decision on a run (accepted, rejected, needs-more-evidence) with its rationale."""
    if decision not in DECISIONS:
        raise InputError(f"decision {decision!r} is not one of {', '.join(DECISIONS)}")
    if not why.strip():
        raise InputError("a decision needs its rationale (--why)")
    check_text(why, "--why")
    return Store(root).update(run_id, decision=Decision(decision, why, now()))


def record_artifact(run_id: str, path: str | Path, kind: str, *, root: str | os.PathLike[str] | None = None,
                    amend: str = "") -> Manifest:
    """Record a file or folder of the run with its sha256; `kind` is one of ARTIFACT_KINDS (optionally 'KIND:label').

    An ended run's artifacts are what was reported: recording one of them again with other contents is refused,
    unless `amend` gives the reason, which the manifest keeps with both hashes and the time (runs show, the
    report and the export show the amendment). The same contents recorded again change nothing.

    Raises:
        InputError: an unknown kind; a changed artifact of an ended run without `amend`.
    """
    check_text([str(path), amend], "the artifact's path and reason")
    store = Store(root)
    art = file_artifact(path, artifact_kind(kind))
    m = store.read(run_id)
    before = next((a for a in m.artifacts if a.path == art.path), None)
    amendments = m.amendments
    if m.status in ENDED and before is not None and before.sha256 != art.sha256:
        if not amend.strip():
            raise InputError(f"{art.path}: changed since run {run_id} recorded it (sha256 {before.sha256[:12]}... "
                             f"-> {art.sha256[:12]}...), and the run ended {m.status}: its artifacts are what it "
                             "reported; restore the file, record it in a new run, or give --amend REASON")
        amendments += (Amendment(art.path, before.sha256, art.sha256, amend.strip(), now()),)
    elif before is not None and before.sha256 == art.sha256 and before.kind == art.kind:
        return m
    return store.update(run_id, artifacts=tuple(a for a in m.artifacts if a.path != art.path) + (art,),
                        amendments=amendments)


def parse_records(pairs: Sequence[str]) -> dict[str, Any]:
    """key=value metrics from the command line: numbers or booleans; a diverged loss=nan (or inf) stays the text
    'nan' (JSON has no NaN, and it must not be lost). Anything else is refused: a metric that is text (loss=loss, a
    shell variable left unexpanded) would be stored where numbers are read."""
    import json
    import math

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{pair!r} is not key=value (e.g. loss=1.25 step=100)")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        if isinstance(parsed, str):
            try:
                parsed = value if not math.isfinite(float(value)) else None
            except ValueError:
                parsed = None
            if parsed is None:
                raise InputError(f"{pair!r}: {value!r} is not a number; run log records numbers (nan and inf are "
                                 "kept); say what happened with `campaign run end ID --reason`, or record a file "
                                 "with `campaign run artifact`")
        elif isinstance(parsed, (dict, list)) or parsed is None:
            raise InputError(f"{pair!r}: {value!r} is not a number; run log records numbers (nan and inf are kept)")
        elif isinstance(parsed, float) and not math.isfinite(parsed):
            parsed = value
        out[key.strip()] = parsed
    return out


def _finite(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record whose non-finite floats (a diverged loss) are kept as their text, 'nan' or 'inf': JSON has no NaN,
    and writing null would make a diverged run look unmeasured."""
    import math

    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


class Run:
    """A live run (see the module docstring). Records are buffered and appended in batches."""

    def __init__(self, manifest: Manifest, store: Store, *, rank: int = 0, world_size: int = 1) -> None:
        self.manifest, self.store = manifest, store
        self.id = manifest.id
        self.rank, self.world_size = rank, world_size  # a launched job: rank 0 ends the run, the others log
        self._buffer: list[dict[str, Any]] = []
        self._flushed = time.monotonic()
        self._lock = threading.Lock()          # the buffer
        self._writing = threading.Lock()       # one append at a time, in order (the heartbeat thread flushes too)
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._previous_term: Any = None
        self._invalid = ""                     # why a run that completes is not to be trusted (invalidate)

    def invalidate(self, reason: str) -> None:
        """The run's own checks failed: if it goes on to complete, it ends 'invalid' with this reason (a crash or a
        stop still ends failed or stopped)."""
        self._invalid = reason

    def log(self, step: int | None = None, **metrics: Any) -> None:
        record = _finite(({"step": step} if step is not None else {}) | metrics
                         | ({"rank": self.rank} if self.world_size > 1 else {}))
        with self._lock:
            self._buffer.append(record)
            due = len(self._buffer) >= FLUSH_RECORDS or time.monotonic() - self._flushed >= FLUSH_SECONDS
        if due:
            self.flush()

    def flush(self) -> None:
        with self._writing:
            with self._lock:
                batch, self._buffer = self._buffer, []
                self._flushed = time.monotonic()
            self.store.log(self.id, batch)

    def artifact(self, path: str | Path, kind: str) -> None:
        self.manifest = record_artifact(self.id, path, kind, root=self.store.root)

    def decide(self, decision: str, why: str) -> None:
        self.manifest = decide_run(self.id, decision, why, root=self.store.root)

    def _heartbeat(self) -> None:
        """Every few seconds: flush what is buffered (a kill loses at most that interval) and beat at least every
        HEARTBEAT_SECONDS."""
        beat = time.monotonic()
        while not self._stop.wait(FLUSH_SECONDS):
            with self._lock:
                pending = bool(self._buffer)
            if pending:
                self.flush()                              # appending beats the heart too
                beat = time.monotonic()
            elif time.monotonic() - beat >= HEARTBEAT_SECONDS:
                self.store.heartbeat(self.id)
                beat = time.monotonic()

    def _rank_file(self) -> Path:
        return self.store.folder(self.id) / "ranks" / f"{self.rank}.json"

    def _mark_rank(self, **state: Any) -> None:
        """Another rank's process and how it ended, so that rank 0 can name a rank that died without raising."""
        from ..io import atomic_write_json

        path = self._rank_file()
        path.parent.mkdir(exist_ok=True)
        atomic_write_json(path, {"pid": os.getpid(), "host": socket.gethostname(), **state})

    def _died_silently(self, settle: float = 3.0) -> list[tuple[int, int]]:
        """(rank, pid) of the ranks on this host whose process is gone without ending its part of the run: killed by
        a signal (the OOM killer, SIGKILL, a segfault) or os._exit, so it never recorded an error. A killed process
        closes its sockets (what rank 0 saw) before it is gone: ranks still alive are looked at again for up to
        `settle` seconds."""
        import json

        from .store import _alive

        running: dict[int, int] = {}
        for path in sorted((self.store.folder(self.id) / "ranks").glob("*.json")):
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
                rank, pid = int(path.stem), int(state["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if not state.get("ended") and state.get("host") == socket.gethostname():
                running[rank] = pid
        deadline = time.monotonic() + settle
        while True:
            gone = [(rank, pid) for rank, pid in running.items() if not _alive(pid)]
            if gone or not running or time.monotonic() > deadline:
                return gone
            time.sleep(0.05)

    def __enter__(self) -> Run:
        if self.rank != 0:
            self._mark_rank()
        self._beat.start()
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGTERM)

            def terminated(signum: int, frame: Any) -> None:
                if callable(previous):                    # the user's handler (a checkpoint on preemption) runs first
                    previous(signum, frame)
                if previous is signal.SIG_IGN:
                    return
                raise SystemExit(f"{TERMINATED} {signal.Signals(signum).name}")
            self._previous_term = signal.signal(signal.SIGTERM, terminated)
        return self

    def __exit__(self, kind: Any, error: BaseException | None, _tb: Any) -> None:
        """End the run. A SIGTERM that arrives meanwhile (a launcher stopping the other ranks after one died) waits
        until the run is ended, then gets the handler that was there before."""
        held: list[int] = []
        if self._previous_term is not None:
            signal.signal(signal.SIGTERM, lambda signum, _frame: held.append(signum))
        try:
            self._end(error)
        finally:
            if self._previous_term is not None:
                signal.signal(signal.SIGTERM, self._previous_term)
                if held:
                    signal.raise_signal(signal.SIGTERM)

    def _end(self, error: BaseException | None) -> None:
        self._stop.set()
        if self._beat.is_alive() and self._beat is not threading.current_thread():
            self._beat.join(timeout=10)            # its last flush lands before the final one and the end
        if self.rank != 0:  # another rank of a launched job: its records stay, rank 0 ends the run
            if error is not None and not isinstance(error, SystemExit | KeyboardInterrupt):
                text = str(error).strip().splitlines()
                self.log(rank_failed=f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__)
            self.flush()
            self._mark_rank(ended=True)
            return
        self.flush()
        if error is None:
            status, reason = "completed", ""
        elif isinstance(error, KeyboardInterrupt):
            status, reason = "stopped", "interrupted (Ctrl-C)"
        elif isinstance(error, SystemExit):
            code = error.code
            if code in (None, 0):
                status, reason = "completed", ""
            elif isinstance(code, str) and code.startswith(TERMINATED):
                status, reason = "stopped", code
            else:
                status, reason = "failed", f"exited with {code}"
        else:
            text = str(error).strip().splitlines()
            status, reason = "failed", f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__
        if self.world_size > 1:  # a rank that failed is the root cause of what rank 0 saw (the launcher's SIGTERM)
            failed = [r for r in self.store.metrics(self.id) if r.get("rank_failed") and r.get("rank") != 0]
            died = self._died_silently()
            if failed:
                status, reason = "failed", f"rank {failed[0].get('rank')} failed: {failed[0]['rank_failed']}" + (
                    f" (rank 0: {reason})" if reason else "")
            elif died and status != "completed":
                rank, pid = died[0]
                status, reason = "failed", (f"rank {rank} (pid {pid}) died without an error of its own: killed by a "
                                            "signal (out of host memory? SIGKILL, a crash) or os._exit") + (
                    f" (rank 0: {reason})" if reason else "")
        if status == "completed" and self._invalid:
            status, reason = "invalid", self._invalid
        self.manifest = end_run(self.id, status, reason, root=self.store.root)


def run(name: str, *, root: str | Path | None = None, wait: float = 300.0, **options: Any) -> Run:
    """A run as a context manager: `with campaign.run("name", ...) as r: r.log(...)` (options: start_run's).

    Under a launcher (torchrun, accelerate launch) with 2 or more processes, the job has one run: rank 0 writes it,
    with the world size, local world size, job and backend in params['distributed']; every other rank waits up to
    `wait` seconds for it and logs its records with its rank (track/distributed.py).
    """
    from .distributed import backend, job_run_id, launched_job

    stale_after = options.pop("stale_after", 10 * HEARTBEAT_SECONDS)
    job = launched_job()
    if job is None:
        return Run(start_run(name, root=root, stale_after=stale_after, **options), Store(root))
    run_id = job_run_id(name, job)
    store = Store(root)
    if job.rank == 0:
        params = {**dict(options.pop("params", None) or {}),
                  "distributed": {**job.to_dict(), "backend": backend()}}
        manifest = start_run(name, root=root, stale_after=stale_after, params=params, run_id=run_id, **options)
        return Run(manifest, store, rank=0, world_size=job.world_size)
    deadline = time.monotonic() + wait
    while True:
        try:
            manifest = store.read(run_id)
            break
        except InputError:
            if time.monotonic() > deadline:
                raise InputError(f"rank {job.rank}: rank 0 did not start run {run_id} within {wait:.0f} s; does "
                                 "rank 0 call campaign.run with the same name?") from None
            time.sleep(0.2)
    return Run(manifest, store, rank=job.rank, world_size=job.world_size)


__all__ = ["Run", "STATUSES", "decide_run", "end_run", "log_run", "parse_records", "record_artifact", "run",
           "start_run"]
