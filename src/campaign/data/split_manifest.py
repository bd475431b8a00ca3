"""Reading a split back: the manifest of either kind (split_manifest.json: one file per split; manifest.json of a
split in shards: a folder of shards per split), checked against the files on disk so that a reader never works on
a set that changed after it was written.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import load_json, sha256_bytes, sha256_file
from ..rows import RECORD_FORMATS, hf_sha256
from ..validate import JsonObject

MANIFEST_NAME = "split_manifest.json"
SHARDS_MANIFEST_NAME = "manifest.json"      # what split_file writes on the ray engine (a split in shards)
SHARDS_SCHEMA = "campaign.split_shards/1"
SHARDS_SCHEMA_PREFIX = "campaign.split_shards/"


def load_manifest(path: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Any]:
    """A split manifest as written by split_file, checked: its schema, one unique name, a path and a sha256 per
    split, and (verify) that every split file it names is there with those bytes, so a reader never works on a
    set that changed after it was written.

    Raises:
        InputError: not a manifest, a malformed one, or (verify) a split file that is missing or changed.
    """
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_NAME
    fix = "give the split_manifest.json written by `campaign split`"
    doc = JsonObject(load_json(p, "the split_manifest.json written by `campaign split`"), str(p), fix=fix)
    schema = doc.raw("schema", None)
    if not str(schema or "").startswith("campaign.split/"):
        doc.fail(f"not a campaign split manifest (schema {schema!r})")
    splits = doc.items("splits")
    if not splits:
        doc.fail("'splits' is empty")
    names: set[str] = set()
    for s in splits:
        name = s.str("name")
        s.str("path")
        if not name or name in names:
            s.fail(f"split name {name!r} is empty or repeated")
        names.add(name)
    for s in splits if verify else ():
        _verify_part(p, s)
    return doc.data


_EITHER = "the split_manifest.json written by `campaign split` or the manifest.json of `campaign split --engine ray`"


@dataclass(frozen=True)
class SplitContent:
    """One split as its manifest describes it: its name, where it is (its file, or its folder of shards) and the
    sha256 its content is known by: the file's, or for shards a sha256 over their file names and sha256s (as a run
    record hashes a folder), so any edited, added or removed shard gives another hash."""

    name: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class SplitSet:
    """What a split manifest (either kind) describes, checked against the files on disk."""

    manifest: Path
    splits: tuple[SplitContent, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.splits)

    def get(self, name: str) -> SplitContent | None:
        return next((s for s in self.splits if s.name == name), None)


def split_manifest_path(path: str | os.PathLike[str]) -> Path:
    """The manifest a path names: the file itself, or in a folder its split_manifest.json (`campaign split`) or
    its manifest.json (`campaign split --engine ray`).

    Raises:
        InputError: a folder that holds both (which one is meant is unclear).
    """
    p = Path(path)
    if not p.is_dir():
        return p
    local, shards = p / MANIFEST_NAME, p / SHARDS_MANIFEST_NAME
    if local.is_file() and shards.is_file():
        raise InputError(f"{p}: holds both {MANIFEST_NAME} and {SHARDS_MANIFEST_NAME}; give the manifest file to use")
    return shards if shards.is_file() else local


def read_split_set(path: str | os.PathLike[str]) -> SplitSet:
    """The splits a manifest of either kind describes (a split_manifest.json of `campaign split`: one file per
    split; a manifest.json of `campaign split --engine ray`: a folder of shards per split), after checking that the
    files are the ones it lists: each there with its sha256, and (shards) no other shard in a split's folder.

    Raises:
        InputError (one line): not a split manifest, a malformed one, or a file missing, changed or added since.
    """
    p = split_manifest_path(path)
    doc = JsonObject(load_json(p, _EITHER), str(p), fix=f"give {_EITHER}")
    schema = str(doc.raw("schema", None) or "")
    if schema.startswith(SHARDS_SCHEMA_PREFIX):
        return SplitSet(p, _shard_splits(p, doc))
    if not schema.startswith("campaign.split/"):
        doc.fail(f"not a campaign split manifest (schema {schema or None!r})")
    data = load_manifest(p)                     # checked: every file there with the sha256 it lists
    return SplitSet(p, tuple(SplitContent(s["name"], split_file_path(p, s["path"]), s["sha256"])
                             for s in data["splits"]))


def _shard_splits(manifest: Path, doc: JsonObject) -> tuple[SplitContent, ...]:
    again = "re-split with `campaign split --engine ray --force`"
    splits = doc.items("splits")
    if not splits:
        doc.fail("'splits' is empty")
    listed: dict[str, dict[str, str]] = {}
    for s in splits:
        name = s.str("name")
        if name in listed or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
            s.fail(f"split name {name!r} is empty, repeated or not a folder name")
        listed[name] = {}
    for s in doc.items("shards"):
        name, rel, sha = s.str("split"), s.str("path"), s.str("sha256")
        if name not in listed:
            s.fail(f"split {name!r} is not one of the manifest's splits ({', '.join(listed)})")
        folder, _, file = rel.partition("/")
        if folder != name or not file or "/" in file or file in (".", ".."):
            s.fail(f"path {rel!r} is not {name}/FILE")
        if file in listed[name]:
            s.fail(f"shard {rel!r} is listed twice")
        listed[name][file] = sha
    where = manifest.name
    out = []
    for name, shards in listed.items():
        folder = manifest.parent / name
        for file, expected in shards.items():
            f = folder / file
            if not f.is_file():
                raise InputError(f"{f}: missing (removed since the split; {where} lists it); restore it or {again}")
            actual = sha256_file(f)
            if actual != expected:
                raise InputError(f"{f}: changed since the split (sha256 {actual[:12]}... on disk, {expected[:12]}... "
                                 f"in {where}); restore the file, or {again} so the manifest and its checks describe "
                                 "what is there")
        extra = sorted(e.name for e in os.scandir(folder) if e.is_file() and not e.name.startswith(".")
                       and e.name not in shards and Path(e.name).suffix.lower() in RECORD_FORMATS) \
            if folder.is_dir() else []
        if extra:
            raise InputError(f"{folder / extra[0]}: added since the split (not in {where}"
                             f"{f', nor {len(extra) - 1} more' if len(extra) > 1 else ''}); a reader of the folder "
                             f"would take it as part of split {name!r}; remove it, or {again}")
        listing = "".join(f"{file}\0{shards[file]}\n" for file in sorted(shards))
        out.append(SplitContent(name, folder, sha256_bytes(listing.encode())))
    return tuple(out)


def split_file_path(manifest: Path, recorded: str) -> Path:
    """Where a split file the manifest lists is now: beside the manifest, under its recorded file name (the set
    moves as a folder, so the folder it was written in may have been renamed)."""
    return manifest.parent / Path(recorded).name


def _verify_part(manifest: Path, s: JsonObject) -> None:
    f = split_file_path(manifest, s.str("path"))
    expected = s.str("sha256")
    if not f.is_file() and not f.is_dir():
        s.fail(f"its file {f} is missing; restore it or re-split with `campaign split --force`")
    actual = hf_sha256(f) if f.is_dir() else sha256_file(f)   # a folder: a Hugging Face dataset's
    if actual != expected:
        raise InputError(f"{f}: changed since the split (sha256 {actual[:12]}... on disk, {expected[:12]}... in "
                         f"{manifest.name}); restore the file, or re-split with `campaign split --force` so the "
                         "manifest and its checks describe what is there")


__all__ = ["MANIFEST_NAME", "SHARDS_MANIFEST_NAME", "SHARDS_SCHEMA", "SplitContent", "SplitSet", "load_manifest",
           "read_split_set", "split_file_path", "split_manifest_path"]
