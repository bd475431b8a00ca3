"""A Ray session for the data pipelines: connected (a running session, a cluster, or a local Ray), quiet (no progress
bars or banners), and what goes wrong on the workers turned into one line (a CampaignError as itself, a lost
worker as EngineError). ray is imported inside the functions: importing this module stays light.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import CampaignError, ConfigError, InputError, MissingDependencyError
from ..payload import loads as load_payload
from ..shards import is_uri


class EngineError(CampaignError):
    """The cluster failed under the run (a worker or node lost): nothing was written as complete."""


def ray_module() -> Any:
    """ray, or the one-line error saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError("ray", "ray") from e
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """Ray, connected: the running session; else the cluster at `address` (or RAY_ADDRESS); else a local Ray on
    `workers` CPUs (default: all), shut down on exit."""
    import logging

    ray = ray_module()
    started = not ray.is_initialized()
    if started:
        address = address or os.environ.get("RAY_ADDRESS")
        options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address:
            reachable(address)
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # not a warning a second while it retries
            # the driver's campaign package travels to the cluster's workers (no install there; the same code)
            options.update(address=address, runtime_env={"py_modules": [str(Path(__file__).resolve().parents[2])],
                                                         "excludes": ["__pycache__"]})
        else:  # "local": a new Ray on this machine, even where `ray start` left a cluster's address behind
            options.update(address="local", num_cpus=workers, include_dashboard=False)
        try:
            ray.init(**options)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise InputError(f"cannot connect to the Ray cluster {address!r} ({str(e).splitlines()[0]}); check "
                             "--address (host:6379) or RAY_ADDRESS, and for a cluster with token authentication "
                             "set RAY_AUTH_MODE=token with its token in ~/.ray/auth_token or RAY_AUTH_TOKEN") from None
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.shuffle_strategy, ctx.enable_progress_bars, ctx.print_on_execution_start)
    try:
        quiet(ray)
        # groupby as a sort-based pull shuffle of tasks: 3-7x faster here than the hash shuffle's aggregator
        # actors on few large payload rows per part (benchmarks/dedup_scale.py's stages)
        from ray.data.context import ShuffleStrategy

        ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
        yield ray
    finally:
        ctx.shuffle_strategy, ctx.enable_progress_bars, ctx.print_on_execution_start = saved
        if started:
            ray.shutdown()


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """A one-line InputError when host:port (or ray://host:port) does not answer within timeout_s: ray.init
    itself retries for minutes. 'auto' and 'local' are Ray's own words and are passed as they are."""
    import socket

    target = address.split("://", 1)[-1].rstrip("/")
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as e:
        raise InputError(f"cannot reach the Ray cluster at {address!r} ({e}); check --address (host:6379 or "
                         "ray://host:10001) or RAY_ADDRESS, and that the cluster is up (`ray status` on its head)") \
            from None


def quiet(ray: Any) -> None:
    """No progress bars or execution banners; Ray Data's console log kept off stderr (errors come as one line)."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    import logging

    for h in logging.getLogger("ray.data").handlers:    # Ray Data's console handler: our errors are one line
        if not isinstance(h, logging.FileHandler) and "File" not in type(h).__name__:
            h.setLevel(logging.CRITICAL + 1)


def kind(k: int) -> Any:
    from ray.data.expressions import col

    return col("kind") == k


def run(thunk: Any) -> Any:
    """thunk(), with what went wrong on the workers turned into one line: a CampaignError raised there (a missing
    shard, a shard without the text field) as itself, a lost worker or node as EngineError."""
    import ray.exceptions as rex

    try:
        return thunk()
    except Exception as e:
        # Ray hands back a worker's exception as text: the last line of its traceback names our error
        found = re.findall(r"^campaign\.errors\.(InputError|ConfigError|CampaignError): (.+)$", str(e), re.M)
        if found:
            kind, message = found[-1]
            raise {"InputError": InputError, "ConfigError": ConfigError}.get(kind, CampaignError)(message) from None
        missing = re.search(r"No module named '([\w.]+)'", str(e))
        if missing:
            raise InputError(f"the Ray cluster's workers cannot import {missing.group(1)!r}; install it in the "
                             "cluster's image (pip install 'campaign[ray]' brings numpy and pyarrow)") from None
        lost = tuple(getattr(rex, n) for n in ("WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                                               "OwnerDiedError", "ActorDiedError", "RayActorError",
                                               "LocalRayletDiedError", "OutOfMemoryError") if hasattr(rex, n))
        seen: set[int] = set()
        x: BaseException | None = e
        while x is not None and id(x) not in seen:
            seen.add(id(x))
            if isinstance(x, lost) or "worker died" in str(x).lower():
                raise EngineError(f"the Ray cluster lost a worker mid-run ({type(x).__name__}: "
                                  f"{str(x).splitlines()[0][:200]}); no output was marked complete; run again, "
                                  "with more memory per worker or smaller shards") from None
            x = x.__cause__ or getattr(x, "cause", None)
        raise


def source(path: str) -> str:
    """Where a worker reads a shard: its absolute path (a cluster's workers run in other folders), or its URI."""
    return path if is_uri(path) else os.path.abspath(path)


def collect(ds: Any) -> list[Any]:
    """The payloads of a stage's output rows, loaded (what went wrong on the workers as one line, as run())."""
    return [load_payload(p) for p in run(lambda: [r["payload"] for r in ds.take_all()])]

@contextlib.contextmanager
def spinner(label: str, phase: str, enabled: bool | None) -> Iterator[None]:
    """A spinner naming the phase on stderr while a Ray stage runs: when enabled, or (None) when stderr is a
    terminal; a no-op otherwise (as sketch.progress_bar)."""
    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        yield
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        bar.add_task(f"{label}: {escape(phase)}")
        yield


__all__ = ["EngineError", "collect", "kind", "ray_module", "ray_session", "run", "source", "spinner"]
