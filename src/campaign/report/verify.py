"""`campaign verify BUNDLE`: what a receiver runs on a hand-over bundle (campaign export) before trusting it.

Every file bundle.json lists must be there with its sha256, and nothing else may be (a file added after the export is
named); bundle.json itself is checked against bundle.json.sha256, written beside it by the export in the format of
`sha256sum -c`, so that a flipped byte anywhere, the list of hashes included, is found. The shipped artifacts must
hash as the run's own manifest (run/manifest.json) recorded them, and an adapter must carry its binding to its base
(campaign_binding.json, train/adapters.py) with the adapter files it was saved with, naming the base the adapter's
config and the model card name. The base's weights are not in the bundle: `load_adapter` checks them on loading.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import Check, check, listed
from ..errors import InputError
from ..io import sha256_file
from ..results import Result
from ..strict_json import parse_json

SCHEMA = "campaign.bundle_verify/1"
MANIFEST = "bundle.json"
SELF = "bundle.json.sha256"     # bundle.json's own sha256, as `sha256sum bundle.json` prints it
BINDING = "campaign_binding.json"


def self_hash_line(digest: str) -> str:
    """The line of bundle.json.sha256 (`sha256sum -c bundle.json.sha256` reads it)."""
    return f"{digest}  {MANIFEST}\n"


@dataclass(frozen=True)
class BundleCheck(Result):
    """A bundle verified: the files listed, and those damaged, missing or not from the bundle."""

    path: str
    run: str | None
    files: int                      # listed in bundle.json
    damaged: tuple[str, ...]        # listed, present, another sha256
    missing: tuple[str, ...]        # listed, absent
    extra: tuple[str, ...]          # present, not listed
    checks: tuple[Check, ...]
    schema: str = SCHEMA

    @property
    def failing(self) -> tuple[str, ...]:
        """Every file a check found wrong, in the order the checks found them."""
        bad = [name for c in self.checks if c.id == "bundle.manifest" and c.status == "fail"
               for name in c.seen.split(":")[0].split(", ")]
        return (*bad, *self.damaged, *self.missing, *self.extra)


def check_bundle(folder: str | Path) -> BundleCheck:
    """Verify a hand-over bundle (see the module docstring).

    Raises:
        InputError: the folder does not exist or holds neither bundle.json nor bundle.json.sha256 (not a bundle).
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: no such folder; give the folder `campaign export` wrote")
    if not (root / MANIFEST).is_file() and not (root / SELF).is_file():
        raise InputError(f"{root}: not a hand-over bundle (no {MANIFEST}); give the folder `campaign export` wrote")
    manifest, listing, run = _manifest(root)
    if listing is None:
        skipped = [Check(i, "skipped", f"not checked: {MANIFEST} cannot be trusted", gates=True)
                   for i in ("bundle.files", "bundle.complete", "bundle.artifacts_recorded", "bundle.binding")]
        return BundleCheck(str(root), run, 0, (), (), (), (manifest, *skipped))
    damaged, missing = [], []
    for name, digest in listing.items():
        path = root / name
        if not path.is_file():
            missing.append(name)
        elif sha256_file(path) != digest:
            damaged.append(name)
    present = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())
    extra = [p for p in present if p not in listing and p not in (MANIFEST, SELF)]
    checks = [
        manifest,
        check("bundle.files", not damaged,
              f"{len(listing) - len(damaged) - len(missing):,} of {len(listing):,} listed files match their sha256"
              + (f"; changed: {listed(damaged, 8)}" if damaged else ""),
              "a changed file is not what was handed over (a damaged copy, or an edit after the export)",
              "copy the bundle again from its source; `campaign export` writes a new one"),
        check("bundle.complete", not missing and not extra,
              "every listed file present, no other file" if not missing and not extra else
              "; ".join(([f"missing: {listed(missing, 8)}"] if missing else [])
                        + ([f"not from the bundle: {listed(extra, 8)}"] if extra else [])),
              "a missing file leaves the hand-over incomplete; a file not listed was not handed over by the export",
              "copy the bundle again, whole; remove files added to it"),
        *_artifacts_recorded(root, listing),
        _binding(root, listing),
    ]
    return BundleCheck(str(root), run, len(listing), tuple(damaged), tuple(missing), tuple(extra), tuple(checks))


def _manifest(root: Path) -> tuple[Check, dict[str, str] | None, str | None]:
    """bundle.json checked against bundle.json.sha256, and its list of hashes (None when it cannot be trusted)."""
    why = "bundle.json holds the sha256 of every other file: if it changed, none of them can be checked against it"
    if not (root / MANIFEST).is_file():
        return check("bundle.manifest", False, f"{MANIFEST}: missing", why, "copy the bundle again, whole"), None, None
    digest = sha256_file(root / MANIFEST)
    written = None
    if (root / SELF).is_file():
        m = re.fullmatch(r"([0-9a-f]{64})  bundle\.json\n?", (root / SELF).read_bytes().decode("latin-1"))
        written = m.group(1) if m else ""
    try:
        doc = parse_json((root / MANIFEST).read_bytes(), MANIFEST, ValueError)    # bounded: hostile JSON is damage
        broken = ""
    except ValueError as e:
        doc, broken = None, str(e)
    run = doc.get("run") if isinstance(doc, dict) and isinstance(doc.get("run"), str) else None
    hashes = doc.get("sha256") if isinstance(doc, dict) else None
    valid = isinstance(hashes, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()) \
        and str(doc.get("schema", "")).startswith("campaign.bundle/")
    names = list(hashes) if valid and isinstance(hashes, dict) else []
    outside = [k for k in names if Path(k).is_absolute() or ".." in Path(k).parts]
    if written == "":
        return check("bundle.manifest", False, f"{SELF}: not one line '<sha256>  bundle.json' (damaged)", why,
                     "copy the bundle again, whole"), None, run
    if written is not None and written != digest:
        return check("bundle.manifest", False, f"{MANIFEST}, {SELF}: {MANIFEST} has sha256 {digest[:12]}..., {SELF} "
                     f"says {written[:12]}... (one of the two changed)", why, "copy the bundle again, whole"), None, run
    if not valid:
        return check("bundle.manifest", False, broken or f"{MANIFEST}: not a bundle manifest (no sha256 list)",
                     why, "copy the bundle again, whole"), None, run
    if outside:
        return check("bundle.manifest", False, f"{MANIFEST}: lists paths outside the bundle ({listed(outside)})", why,
                     "a bundle lists its own files only: get it again from its source"), None, run
    listing = {str(k): str(v) for k, v in hashes.items()} if isinstance(hashes, dict) else {}
    if written is None:
        return Check("bundle.manifest", "skipped", f"{MANIFEST} read, but its own sha256 cannot be checked: no {SELF} "
                     "(a bundle written before campaign verify existed)", why,
                     "export the bundle again with this campaign, then verify it"), listing, run
    return check("bundle.manifest", True, f"{MANIFEST} matches {SELF} (sha256 {digest[:12]}...)", why), listing, run


def _artifacts_recorded(root: Path, listing: dict[str, str]) -> list[Check]:
    """The shipped artifacts hash as the run's manifest recorded them when the run made them."""
    from ..track.manifest import SHIPPED_KINDS, file_artifact, manifest_from
    from .names import shipped_names

    why = "the artifacts must be the ones the run produced and was accepted on, not files put in their place"
    out = []
    for tag, folder in (("run", "artifacts"), ("baseline", "baseline/artifacts")):
        path = root / tag / "manifest.json"
        if f"{tag}/manifest.json" not in listing or not path.is_file():
            continue
        try:
            m = manifest_from(parse_json(path.read_bytes(), str(path), ValueError), str(path))
        except (InputError, ValueError, UnicodeDecodeError):
            out.append(check(f"bundle.artifacts_recorded.{tag}", False, f"{tag}/manifest.json: unreadable", why,
                             "copy the bundle again, whole"))
            continue
        kinds = ("predictions",) if tag == "baseline" else SHIPPED_KINDS
        shipped = [a for a in m.artifacts if a.kind.split(":")[0] in kinds]
        names = shipped_names([a.path for a in shipped])
        wrong = []
        for a in shipped:
            here = root / folder / names[a.path]
            if not here.exists() or file_artifact(here, a.kind).sha256 != a.sha256:
                wrong.append(f"{folder}/{names[a.path]}")
        out.append(check(f"bundle.artifacts_recorded.{tag}", not wrong,
                         f"{len(shipped) - len(wrong)} of {len(shipped)} artifacts hash as {tag}/manifest.json "
                         "recorded them" + (f"; not: {listed(wrong, 8)}" if wrong else ""), why,
                         "export the bundle again from the run store"))
    if not out:
        out.append(check("bundle.artifacts_recorded", False, "no run/manifest.json in the bundle", why,
                         "export the bundle again with campaign export"))
    return out


def _binding(root: Path, listing: dict[str, str]) -> Check:
    """Each adapter under artifacts/ carries its binding, the adapter files it was saved with, and names the same base
    as its config and the model card."""
    adapters = sorted({Path(f).parent for f in listing if f.startswith("artifacts/")
                       and Path(f).name == "adapter_config.json"})
    why = "an adapter means nothing on another base: the binding names the base it was trained on and its revision"
    if not adapters:
        return Check("bundle.binding", "skipped", "no adapter in the bundle: nothing to bind", gates=False)
    card_base = _card_base(root / "README.md")
    unbound, wrong, seen = [], [], []
    for folder in adapters:
        binding = _json(root / folder / BINDING)
        if binding is None:
            unbound.append(str(folder))
            continue
        files = binding.get("files")
        if not isinstance(files, dict) or not files:
            wrong.append(f"{folder}: its binding lists no adapter files")
        else:
            changed = [n for n, h in files.items() if not (root / folder / n).is_file()
                       or sha256_file(root / folder / n) != h]
            if changed:
                wrong.append(f"{folder}: {listed(changed)} not the file(s) bound to the base")
        base, revision = binding.get("base") or "", binding.get("revision") or ""
        config = _json(root / folder / "adapter_config.json") or {}
        named = str(config.get("base_model_name_or_path") or "")
        if base and named and not _same_base(named, str(base), str(revision)):
            wrong.append(f"{folder}: adapter_config.json names {named}, the binding {base}")
        if base and card_base is not None and card_base != base:
            wrong.append(f"{folder}: the model card names {card_base}, the binding {base}")
        seen.append(f"{folder} on {base or 'an unnamed base'}" + (f" @ {str(revision)[:12]}" if revision else ""))
    if wrong:
        return check("bundle.binding", False, "; ".join(wrong[:4]), why, "export the bundle again from the run store")
    if unbound:
        return Check("bundle.binding", "skipped", f"{listed(unbound)}: no {BINDING}, so the base it was trained on "
                     "cannot be checked", why, "save the adapter with campaign.save_adapter(model, folder), record it "
                     "and export again")
    return check("bundle.binding", True, "; ".join(seen) + ": bound with the adapter files shipped", why)


def _same_base(named: str, base: str, revision: str) -> bool:
    """adapter_config.json's base names the bound one: the same id or folder, or the HF cache snapshot of it."""
    if named.rstrip("/") == base.rstrip("/"):
        return True
    snapshot = f"models--{base.replace('/', '--')}/snapshots/"
    return snapshot in named.replace("\\", "/") and (not revision or revision in named)


def _card_base(readme: Path) -> str | None:
    """The model card's base_model (its YAML front matter), None when the card names none."""
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = re.search(r"^base_model: *(.+)$", text.split("\n---\n", 1)[0], re.M)
    return m.group(1).strip().strip("'\"") if m else None


def _json(path: Path) -> dict[str, Any] | None:
    try:
        doc = parse_json(path.read_bytes(), str(path), ValueError)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


__all__ = ["BundleCheck", "SCHEMA", "SELF", "check_bundle", "self_hash_line"]
