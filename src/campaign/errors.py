"""The one exception hierarchy: every message is one line that quotes the bad value and ends with the fix."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class CampaignError(Exception):
    """Base of every error a user can cause; the CLI prints it as one line and exits 2."""

    exit_code = 2


class ConfigError(CampaignError):
    """A model config (config.json) is malformed, incomplete or inconsistent."""


class InputError(CampaignError):
    """A command-line value or input file is invalid (negative size, unknown dtype, ...)."""


class UnknownNameError(CampaignError):
    """A name (model, card, dtype) is not known; the message suggests close matches."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        known = list(known)
        close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=3, cutoff=0.6)
        lookup = {k.lower(): k for k in known}
        msg = f"unknown {kind} {name!r}"
        if close:
            msg += "; did you mean " + " or ".join(repr(lookup[c]) for c in close) + "?"
        if hint:
            msg += f" {hint}"
        super().__init__(msg)


class MissingDependencyError(CampaignError):
    """An optional extra (torch, data, report) is needed for this command."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"this needs {package!r}, which is not installed; install it with: "
                         f"pip install 'campaign[{extra}]'")


def user_frame(e: BaseException) -> str | None:
    """'FILE:FUNCTION (line N)' of the innermost traceback frame in the user's own code: not campaign's, not an
    installed package's (torch, transformers, ...: this environment's site-packages, the base interpreter's and the
    user's site), not the standard library's; None when every frame is one of those. The exceptions it was raised
    from (__cause__, __context__: an error a library caught and raised again) are searched too. So an error raised in
    a setup, a model or a loop names the user's code."""
    import site
    import sysconfig
    import traceback
    from pathlib import Path

    paths = sysconfig.get_paths()
    places = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    places += [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]
    roots = {Path(p).resolve() for p in places}
    roots.add(Path(__file__).resolve().parent)  # campaign itself
    seen: set[int] = set()
    error: BaseException | None = e
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        for frame in reversed(traceback.extract_tb(error.__traceback__)):
            if frame.filename.startswith("<"):
                continue
            if any(Path(frame.filename).resolve().is_relative_to(r) for r in roots):
                continue
            return f"{frame.filename}:{frame.name} (line {frame.lineno})"
        error = error.__cause__ or error.__context__
    return None
