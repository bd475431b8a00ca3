"""Where an exception raised while running the user's model came from: the innermost frame of its traceback that is
the user's own code (not campaign's, not an installed package's, not the standard library's), so that an error in a
model, a model factory or predict is one line naming that code (exit 2) instead of an internal error (exit 3)."""
from __future__ import annotations

import traceback

from ..errors import InputError, user_frame
from ..train.setup import first_line


def innermost_frame(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "no traceback"
    f = frames[-1]
    return f"{f.filename}:{f.name} (line {f.lineno})"


def user_code_error(e: BaseException, what: str, fix: str) -> InputError:
    """One line for an exception (or SystemExit) raised while `what` ran: what raised it, in which frame of the
    user's code, its message and the fix. With no frame outside the installed packages (a model loaded from a folder
    runs only the libraries' code) the innermost frame is named as a library's, and the line says so: the cause is
    then what the library was given (the batches, the format) or the library itself."""
    mine = user_frame(e)
    where = mine or f"{innermost_frame(e)}, inside a library (no frame outside the installed packages)"
    if mine is None:
        fix = f"{fix}; or check what the library was given (the batches, the format) and its version"
    if isinstance(e, SystemExit):
        return InputError(f"{what} exited ({e.code}) in {where}; {fix}")
    return InputError(f"{what} raised {type(e).__name__} in {where}: {first_line(e)}; {fix}")


__all__ = ["innermost_frame", "user_code_error"]
