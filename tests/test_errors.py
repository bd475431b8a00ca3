"""errors.user_frame: the frame of the user's own code an exception came from, installed packages, the standard
library and campaign aside, searched through the exceptions it was raised from."""
from __future__ import annotations

import sysconfig
from pathlib import Path

from campaign.errors import user_frame

# a library that wraps what it calls in an error of its own (`raise ... from e`), and a caller that keeps the error:
# code compiled under this environment's site-packages, as an installed package's frames are
LIBRARY = '''
def call(f):
    try:
        f()
    except Exception as e:
        raise RuntimeError("the library failed") from e

def catch(g, f):
    try:
        g(f)
    except BaseException as e:
        return e
'''


def _library() -> dict:
    where = Path(sysconfig.get_paths()["purelib"]) / "a_wrapping_library" / "wrap.py"
    namespace: dict = {}
    exec(compile(LIBRARY, str(where), "exec"), namespace)
    return namespace


def users_model():
    raise ValueError("planted in the user's code")


def test_a_wrapped_error_names_the_user_frame_it_came_from():
    lib = _library()
    error = lib["catch"](lib["call"], users_model)
    assert isinstance(error, RuntimeError) and isinstance(error.__cause__, ValueError)
    found = user_frame(error)
    line = users_model.__code__.co_firstlineno + 1      # the raise, the line under the def
    assert found is not None and found.endswith(f"test_errors.py:users_model (line {line})")


def test_an_error_raised_only_in_libraries_has_no_user_frame():
    lib = _library()
    error = lib["catch"](lib["call"], int)   # int() raises nothing: the library's own call of a builtin
    assert error is None
    error = lib["catch"](lib["call"], lambda: {}["missing"])
    assert user_frame(error) is not None     # the lambda is this file's: the user's
    error = lib["catch"](lib["call"], dict().popitem)   # a builtin raising KeyError, called by the library
    assert isinstance(error.__cause__, KeyError) and user_frame(error) is None
