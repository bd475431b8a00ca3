"""The code a run used: the git commit, whether the tree was dirty, the uncommitted diff (saved beside the manifest
with its hash, so the exact code can be rebuilt) and the untracked files. W&B does not keep the diff by default;
without it a dirty run cannot be reproduced.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..io import sha256_bytes
from ..results import Record


@dataclass(frozen=True)
class CodeState(Record):
    """repo: the work tree's root (None outside git); diff_sha256 of the uncommitted diff against HEAD (staged and
    not), None when clean."""

    repo: str | None
    commit: str | None
    branch: str | None
    dirty: bool
    diff_sha256: str | None
    untracked: tuple[str, ...]


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)


def capture_code(cwd: str | Path = ".") -> tuple[CodeState, bytes]:
    """The code state of the git work tree holding `cwd`, and the uncommitted diff (b'' when clean or outside git).
    Never raises for a missing git or a folder outside a repository: the state says so (repo None)."""
    where = Path(cwd)
    try:
        top = _git(where, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired):
        return CodeState(None, None, None, False, None, ()), b""
    if top.returncode != 0:
        return CodeState(None, None, None, False, None, ()), b""
    root = Path(top.stdout.decode().strip())
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    commit = head.stdout.decode().strip() if head.returncode == 0 else None
    branch_out = _git(root, "symbolic-ref", "--short", "-q", "HEAD")
    branch = branch_out.stdout.decode().strip() or None if branch_out.returncode == 0 else None
    # staged and unstaged changes against HEAD, binary-safe (before the first commit: everything staged)
    diff = _git(root, "diff", "--binary", "HEAD" if commit else "--cached").stdout
    listed = _git(root, "ls-files", "--others", "--exclude-standard", "-z").stdout
    untracked = tuple(sorted(p for p in listed.decode(errors="replace").split("\0") if p))
    dirty = bool(diff) or bool(untracked)
    return CodeState(str(root), commit, branch, dirty, sha256_bytes(diff) if diff else None, untracked), diff


__all__ = ["CodeState", "capture_code"]
