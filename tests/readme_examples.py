"""The documents' terminal examples: each `$ campaign ...` line in a ```text block of README.md and of every
docs/*.md guide, and the output shown under it.

The test (tests/test_readme.py) runs every example and compares what the command prints with what the document
shows; `python -m tests.readme_examples --update` rewrites the shown outputs of every document from the real commands
(or of the files named after it).

Rules:
  - the lines under a `$ campaign ...` line, up to the next `$ ` line or the end of the block, are its output;
    a command with no line under it is only run (its exit code must be 0 or 1);
  - a shown output ending in a line `...` shows the first lines of the output only;
  - commands run in a scratch folder where `examples/` is the repository's and `OUT/` is empty, at a fixed
    terminal width (what a pipe gets, render.PIPE_WIDTH), so paths and wrapping are the same on every machine;
  - only trailing spaces and blank lines at the ends of an output are normalized; the rest must match exactly;
  - a line ending in `# on the rented card` needs a GPU: it is neither run nor compared.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GPU_ONLY = "# on the rented card"
ELLIPSIS = "..."
_BLOCK = re.compile(r"^```text\n(.*?)^```", flags=re.M | re.S)


def documents() -> list[Path]:
    """README.md, then every guide under docs/, in name order: the files whose examples are executed."""
    return [README, *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class Example:
    """One `$ campaign ...` line; `shown` is None when the document shows no output for it."""

    command: str            # the arguments after `campaign`, comment removed
    line: int               # 1-based line of the `$` line in its document
    shown: tuple[str, ...] | None
    head_only: bool         # the shown output ends in `...`: compare its first lines
    gpu: bool
    span: tuple[int, int]   # character offsets of the shown output in the document (empty when none)


def examples(text: str) -> list[Example]:
    """Every `$ campaign` line of the ```text blocks of `text`, in order, with the output shown under it."""
    out = []
    for block in _BLOCK.finditer(text):
        start = block.start(1)
        lines = block.group(1).splitlines(keepends=True)
        offsets = [start]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        i = 0
        while i < len(lines):
            line = lines[i].rstrip("\n")
            if not line.startswith("$ campaign "):
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            shown = [x.rstrip("\n") for x in lines[i + 1:j]]
            head_only = bool(shown) and shown[-1].strip() == ELLIPSIS
            if head_only:
                shown = shown[:-1]
            out.append(Example(command=line[len("$ campaign "):].split(" #")[0].strip(),
                               line=text.count("\n", 0, offsets[i]) + 1,
                               shown=tuple(shown) if (shown or head_only) else None, head_only=head_only,
                               gpu=GPU_ONLY in line, span=(offsets[i + 1], offsets[j])))
            i = j
    return out


def normalize(output: str) -> list[str]:
    """Lines without trailing spaces, without blank lines at either end."""
    lines = [line.rstrip() for line in output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


@contextlib.contextmanager
def scratch() -> object:
    """A scratch working folder with `examples/` linked from the repository; the process's cwd meanwhile."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        os.symlink(ROOT / "examples", Path(tmp) / "examples")
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(before)


def run(command: str) -> tuple[int, list[str], str]:
    """Run `campaign COMMAND` in this process at the width a pipe gets; (exit code, normalized stdout, stderr).

    Call inside scratch() so relative paths resolve as the README shows them.
    """
    from campaign.cli import main
    from campaign.cli.render import PIPE_WIDTH, console

    out, err = io.StringIO(), io.StringIO()
    width = console.width
    console.width = PIPE_WIDTH
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(shlex.split(command))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        console.width = width
    return code, normalize(out.getvalue()), err.getvalue()


def expected(example: Example, printed: list[str]) -> list[str]:
    """What the document should show for `example` given what the command printed."""
    return printed[:len(example.shown or ())] if example.head_only else printed


def update(path: Path = README) -> list[str]:
    """Rewrite the shown outputs of `path` from the real commands; returns the commands whose output changed."""
    text = path.read_text(encoding="utf-8")
    changed = []
    pieces, last = [], 0
    with scratch():
        for ex in examples(text):
            if ex.shown is None or ex.gpu:
                continue
            code, printed, err = run(ex.command)
            if code not in (0, 1):
                raise SystemExit(f"{path.name} line {ex.line}: campaign {ex.command} exited {code}: {err.strip()}")
            new = expected(ex, printed)
            if list(ex.shown) != new:
                changed.append(ex.command)
            body = "".join(line + "\n" for line in new) + (ELLIPSIS + "\n" if ex.head_only else "")
            pieces += [text[last:ex.span[0]], body]
            last = ex.span[1]
    pieces.append(text[last:])
    new_text = "".join(pieces)
    if new_text != text:
        path.write_text(new_text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the shown outputs from the commands")
    parser.add_argument("paths", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    parser.add_argument("--readme", type=Path, help=argparse.SUPPRESS)   # the former single-file option
    args = parser.parse_args(argv)
    paths = args.paths or ([args.readme] if args.readme else documents())
    if args.update:
        for path in paths:
            for command in update(path):
                print(f"updated: {path.name}: campaign {command}")
        return 0
    stale = 0
    with scratch():
        for path in paths:
            for ex in examples(path.read_text(encoding="utf-8")):
                if ex.shown is None or ex.gpu:
                    continue
                _, printed, _ = run(ex.command)
                if list(ex.shown) != expected(ex, printed):
                    stale += 1
                    print(f"stale: {path.name} line {ex.line}: campaign {ex.command}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
