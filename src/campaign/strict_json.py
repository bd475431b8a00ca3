"""Strict JSON text: what campaign writes (a non-finite float as null, never NaN or Infinity, which are not JSON)
and what it reads (every way a text can fail as one error naming where: malformed, not UTF-8, a lone surrogate,
an integer past Python's limit, nesting past the stack); and YAML read as strictly (`parse_yaml`: the recipes users
write, axolotl, torchtune, accelerate)."""
from __future__ import annotations

import json
from functools import cache
from typing import Any

from .errors import InputError


def dumps_json(data: Any, indent: int | None = 2) -> str:
    """Strict JSON text with a trailing newline: a non-finite float (NaN, infinity) becomes null, since JSON has no
    spelling for it (Python's NaN/Infinity are not JSON and other parsers refuse them)."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def check_text(value: Any, where: str, error: type[Exception] = InputError) -> Any:
    """`value` when every text in it (in lists and dicts, keys included) is valid Unicode; a lone surrogate (what
    Python makes of bytes that are not UTF-8 on a command line, or a JSON \\udcff escape) is one `error` naming
    `where`: such text cannot be written as UTF-8, nor stored in the run index."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise error(f"{where}: {v[:e.start]!r}... is not valid UTF-8 text (character {e.start + 1}); "
                                "give it as UTF-8") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return value


def parse_json(text: str | bytes, where: str, error: type[Exception] = InputError) -> Any:
    """json.loads with every way a text can fail as one `error` naming `where`: malformed JSON, not UTF-8, an
    integer of more than 4,300 digits (Python's conversion limit), nesting deep enough to exhaust the stack."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text)
        if "\\ud" in text or "\\uD" in text:  # an escaped surrogate: a pair is one character, a lone one no text
            check_text(value, where, error)
        return value
    except UnicodeDecodeError as e:
        raise error(f"{where}: not valid UTF-8 (byte {e.start + 1}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply to read; this is not a file campaign writes") from None
    except ValueError as e:  # int conversion limit
        raise error(f"{where}: not readable JSON ({str(e).split(';')[0]})") from None


MAX_YAML_DEPTH = 100      # levels of nesting; a training recipe has a handful
MAX_INT_DIGITS = 4300     # Python's limit on converting decimal text to int (sys.get_int_max_str_digits)


class _YamlRefused(Exception):
    """A YAML text refused while it is composed: the message says what and where (line, key)."""


def parse_yaml(raw: bytes, where: str, error: type[Exception] = InputError) -> Any:
    """YAML bytes parsed with PyYAML's safe loader, every way they can fail as one `error` naming `where` (and the
    line and key): not UTF-8 (UTF-16 and Latin-1 included), malformed, an alias (*name; refused, so that no alias
    can expand into a "billion laughs" or a cycle), nesting past MAX_YAML_DEPTH, an integer past Python's
    4,300-digit limit."""
    import yaml

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not valid UTF-8 (byte {e.start + 1}); save it as UTF-8") from None
    loader = None
    try:
        loader = _strict_loader()(text)
        return loader.get_single_data()
    except _YamlRefused as e:
        raise error(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{where}: not valid YAML ({problem}{at}); fix the file") from None
    except (RecursionError, ValueError) as e:  # the guards in compose_node come first; these are a backstop
        raise error(f"{where}: not readable YAML ({type(e).__name__}: {str(e).split(';')[0][:200]})") from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_toml(raw: bytes, where: str, error: type[Exception] = InputError) -> Any:
    """TOML bytes parsed (tomllib, Python 3.11; tomli before), every way they can fail as one `error` naming
    `where`: not UTF-8, malformed (with its line and column)."""
    try:
        import tomllib as toml  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as toml  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ModuleNotFoundError:
            raise error(f"{where}: reading TOML needs Python 3.11, or the tomli package (pip install tomli)") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not valid UTF-8 (byte {e.start + 1}); save it as UTF-8") from None
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as e:
        raise error(f"{where}: not valid TOML ({str(e).splitlines()[0]}); fix the file") from None
    except RecursionError:
        raise error(f"{where}: not readable TOML (nested too deep)") from None


@cache
def _strict_loader() -> type:
    """PyYAML's pure-Python SafeLoader (whose composer can be checked node by node) with the guards of parse_yaml,
    made on first use: yaml is imported by the commands that read YAML only."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.path: list[Any] = []  # the index (key node or item number) of each node being composed

        def compose_node(self, parent: Any, index: Any) -> Any:
            path = self.path
            event = self.peek_event()
            path.append(index)
            try:
                if isinstance(event, yaml.AliasEvent):
                    raise _YamlRefused(f"a YAML alias (*{event.anchor}) {_place(event.start_mark, path)}; campaign "
                                       "reads configs without aliases (one can expand past any memory): write the "
                                       "value out")
                if len(path) > MAX_YAML_DEPTH:
                    raise _YamlRefused(f"nested more than {MAX_YAML_DEPTH} levels deep "
                                       f"{_place(event.start_mark, path[:3])}...; this is not a config")
                node = super().compose_node(parent, index)
                if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int":
                    digits = sum(c.isdigit() for c in node.value)
                    if digits > MAX_INT_DIGITS:
                        raise _YamlRefused(f"an integer of {digits:,} digits {_place(event.start_mark, path)}; give "
                                           "a number a config can hold")
                return node
            finally:
                path.pop()

    return StrictLoader


def _place(mark: Any, path: list[Any]) -> str:
    """'at line 3, key trainer.fsdp[0]' for a node: its line and the keys (item numbers) down to it."""
    key = ""
    for index in path:
        if isinstance(index, int):
            key += f"[{index}]"
        elif isinstance(getattr(index, "value", None), str):
            key += ("." if key else "") + index.value[:80]
    return f"at line {mark.line + 1}" + (f", key {key}" if key else "")
