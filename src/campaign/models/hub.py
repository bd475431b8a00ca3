"""Models read from the Hugging Face Hub without their weights: config.json, and each safetensors file's header by
two HTTP range requests (its first 8 bytes give the header's length, then the header itself), through
huggingface_hub (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_DOWNLOAD_TIMEOUT honoured). What was read is kept
in campaign's own cache folder beside the HF hub cache, $HF_HOME/campaign/hub (HF_HOME defaults to
~/.cache/huggingface), laid out as the hub cache is (models--ORG--NAME/refs/REVISION, snapshots/COMMIT/), so the
next call is offline. Nothing from the repo is ever run: a config that asks for remote code is refused (resolve.py).

huggingface_hub is the `hub` extra, imported only when a model is fetched."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import CampaignError, ConfigError, InputError
from ..io import atomic_write_bytes, atomic_write_json, load_json
from ..strict_json import parse_json
from ..validate import JsonObject, kind_of
from .safetensors_header import MAX_HEADER, TensorStats, shards_of_index, stats_of

# A Hub repo id: NAMESPACE/NAME of letters, digits, '-', '_', '.' (huggingface_hub's validate_repo_id, without '@').
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}", re.ASCII)
COMMIT = re.compile(r"[0-9a-f]{40}")
HEADERS = "safetensors-headers.json"  # {"files": {FILE: its header}} of the safetensors files of one commit
INDEX = "model.safetensors.index.json"


def split_revision(model: str) -> tuple[str, str | None]:
    """('ORG/NAME', 'REV') for 'ORG/NAME@REV' (a repo id never has '@'), else (model, None)."""
    repo, at, revision = model.partition("@")
    if at and REPO_ID.fullmatch(repo):
        if not revision.strip():
            raise InputError(f"{model!r}: nothing after '@'; give a revision (a branch, tag or commit) or leave "
                             "out the '@'")
        return repo, check_revision(revision)
    return model, None


def check_revision(revision: str) -> str:
    """A revision as git allows one (a branch, tag, commit or refs/pr/N): no blanks, control characters, '..'."""
    if not revision or revision.strip() != revision or any(c < " " or c == "\x7f" for c in revision) or any(
            part in ("", ".", "..") for part in revision.split("/")):
        raise InputError(f"revision {revision!r} is not a branch, tag or commit name; give one such as main, v1.0 "
                         "or a commit hash")
    return revision


def is_repo_id(text: str) -> bool:
    """Whether text has the shape of a Hub repo id (a config file's name, *.json, is not one)."""
    return REPO_ID.fullmatch(text) is not None and ".." not in text and not text.endswith(".json")


def cache_root() -> Path:
    """campaign's cache of Hub models: $HF_HOME/campaign/hub ($XDG_CACHE_HOME/huggingface or ~/.cache/huggingface
    when HF_HOME is unset, as huggingface_hub's own default)."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(home))) / "campaign" / "hub"


def _repo_dir(repo_id: str) -> Path:
    return cache_root() / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The snapshot folder of repo_id at revision (main when None) in campaign's cache, or None: no network."""
    base = _repo_dir(repo_id)
    revision = revision or "main"
    commit = revision if COMMIT.fullmatch(revision) else None
    ref = base / "refs" / quote(revision, safe="")
    if commit is None and ref.is_file():
        commit = ref.read_bytes().decode("utf-8", "replace").strip()
    if commit is None or not COMMIT.fullmatch(commit):
        return None
    snapshot = base / "snapshots" / commit
    return snapshot if (snapshot / "config.json").is_file() and (snapshot / HEADERS).is_file() else None


def snapshot_of_source(source: str) -> Path | None:
    """The cached snapshot a spec's source 'hub:ORG/NAME@COMMIT' names, or None when it is not one."""
    if not source.startswith("hub:"):
        return None
    repo_id, commit = split_revision(source[4:])
    return cached_snapshot(repo_id, commit) if commit and COMMIT.fullmatch(commit) else None


def source_of(repo_id: str, snapshot: Path) -> str:
    return f"hub:{repo_id}@{snapshot.name}"


def header_stats(snapshot: Path) -> TensorStats | None:
    """The TensorStats of the headers kept for a snapshot (as safetensors_header.tensor_stats counts a model dir's
    files); None when the repo has no safetensors weights."""
    path = snapshot / HEADERS
    doc = JsonObject(load_json(path, "campaign's cache of safetensors headers", ConfigError), str(path),
                     fix="delete the folder and run the command again online", error=ConfigError)
    files = doc.obj("files").data
    if not files:
        return None
    for file, header in files.items():
        if not isinstance(header, dict):
            raise ConfigError(f"{path}: the header of {file} is a JSON {kind_of(header)}; delete the folder and run "
                              "the command again online")
    return stats_of([(f"{snapshot.name}/{file}", header) for file, header in sorted(files.items())],
                    tuple(sorted(files)))


def fetch(repo_id: str, revision: str | None) -> Path:
    """Read repo_id at revision (main when None) from the Hub into campaign's cache: config.json and the safetensors
    headers, never the weights. Returns the snapshot folder.

    Raises:
        MissingDependencyError: huggingface_hub is not installed (the hub extra).
        InputError: offline, no network or a timeout, a missing repo or revision, a gated or private repo.
        ConfigError: the repo has no config.json, or a file read is not what the format says.
    """
    hub = _hub()
    what = repo_id + (f"@{revision}" if revision else "")
    if hub.constants.HF_HUB_OFFLINE:
        raise InputError(f"{what} is not in the local caches and HF_HUB_OFFLINE is set; run the command once online "
                         "(unset HF_HUB_OFFLINE), or give a local model dir")
    try:
        return _fetch(hub, repo_id, revision, what)
    except CampaignError:
        raise
    except Exception as e:
        raise _hub_error(hub, e, what) from None


def _fetch(hub: Any, repo_id: str, revision: str | None, what: str) -> Path:
    from huggingface_hub.utils import build_hf_headers

    timeout = hub.constants.HF_HUB_DOWNLOAD_TIMEOUT
    info = hub.HfApi().model_info(repo_id, revision=revision, timeout=timeout)
    commit = info.sha if isinstance(info.sha, str) and COMMIT.fullmatch(info.sha) else None
    if commit is None:
        raise ConfigError(f"{what}: {hub.constants.ENDPOINT} gave no commit for this revision; check HF_ENDPOINT")
    files = {s.rfilename for s in info.siblings or ()}
    if "config.json" not in files:
        raise ConfigError(f"{what}: the repo has no config.json, which campaign reads a model from (a diffusers, "
                          "GGUF or adapter-only repo has none); give a transformers model repo or a local config.json")
    headers = build_hf_headers()

    def url(file: str) -> str:
        return hub.hf_hub_url(repo_id, file, revision=commit)

    config = _get(url("config.json"), headers, timeout)
    where = f"{what}: config.json"
    cfg = parse_json(config, where, ConfigError)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: config must be a JSON object, got a JSON {kind_of(cfg)}")
    if INDEX in files:  # as safetensors_header.weight_files: the index's shards, else the top-level files
        index = parse_json(_get(url(INDEX), headers, timeout), f"{what}: {INDEX}", ConfigError)
        shards = shards_of_index(index, f"{what}: {INDEX}")
        missing = [s for s in shards if s not in files]
        if missing:
            raise ConfigError(f"{what}: {INDEX} lists {len(missing)} shard(s) the repo does not have, e.g. "
                              f"{missing[0]!r}; the repo is incomplete")
    else:
        shards = sorted(f for f in files if f.endswith(".safetensors") and "/" not in f)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:  # a few hundred shards: one round trip each, not in a row
        found = pool.map(lambda shard: _header(url(shard), headers, timeout, f"{what}: {shard}"), shards)
        weights = dict(zip(shards, found, strict=True))
    snapshot = _repo_dir(repo_id) / "snapshots" / commit
    atomic_write_json(snapshot / HEADERS, {"files": weights})
    atomic_write_bytes(snapshot / "config.json", config)  # last of the snapshot: cached_snapshot checks both
    atomic_write_bytes(_repo_dir(repo_id) / "refs" / quote(revision or "main", safe=""), commit.encode())
    return snapshot


def _header(url: str, headers: dict[str, str], timeout: float, where: str) -> dict[str, Any]:
    """One safetensors file's header: bytes 0-7 (its length n), then bytes 8..8+n-1; never the tensors."""
    import struct

    (n,) = struct.unpack("<Q", _get(url, headers, timeout, (0, 8), where))
    if not 2 <= n <= MAX_HEADER:
        raise ConfigError(f"{where}: header length {n} is not what the format allows; the file is corrupt")
    header = parse_json(_get(url, headers, timeout, (8, n), where), f"{where}: the safetensors header", ConfigError)
    if not isinstance(header, dict):
        raise ConfigError(f"{where}: the safetensors header is a JSON {kind_of(header)}, not an object; "
                          "the file is corrupt")
    return header


def _get(url: str, headers: dict[str, str], timeout: float, span: tuple[int, int] | None = None,
         where: str = "") -> bytes:
    """GET url (all of it, or `span` = (start, length) by a range request), redirects followed. A server that
    answers a range request with the whole file is refused before its body is read: the weights are never
    downloaded."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    session = get_session()
    if span is not None:
        headers = {**headers, "Range": f"bytes={span[0]}-{span[0] + span[1] - 1}"}
    if not callable(getattr(session, "stream", None)):  # before 1.0, a requests.Session (.stream is a flag)
        response = session.get(url, headers=headers, timeout=timeout, stream=True)  # type: ignore[call-arg]
        try:
            return _body(response, span, where, hf_raise_for_status, lambda: response.content)
        finally:
            response.close()
    with session.stream("GET", url, headers=headers, timeout=timeout) as response:
        return _body(response, span, where, hf_raise_for_status, response.read)


def _body(response: Any, span: tuple[int, int] | None, where: str, raise_for_status: Any, read: Any) -> bytes:
    if response.status_code >= 400:
        read()  # the error's message is in its (small) body
        raise_for_status(response)
    if span is not None and response.status_code != 206:
        raise InputError(f"{where}: the server answered a range request with status {response.status_code}, not "
                         "206 (a part); campaign reads only the header, never the weights: use an HF_ENDPOINT that "
                         "serves ranges")
    data: bytes = read()
    if span is not None and len(data) != span[1]:
        raise ConfigError(f"{where}: asked for {span[1]:,} bytes at offset {span[0]:,}, got {len(data):,}; the file "
                          "is shorter than its header says")
    return data


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.constants  # a submodule: the package's lazy attributes do not include it
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("huggingface_hub", "hub") from None
    return huggingface_hub


def _hub_error(hub: Any, e: Exception, what: str) -> CampaignError:
    """One line for what went wrong talking to the Hub."""
    from huggingface_hub import utils

    endpoint = hub.constants.ENDPOINT
    status = getattr(getattr(e, "response", None), "status_code", None)
    if isinstance(e, utils.GatedRepoError):
        return InputError(f"{what} is gated (HTTP {status}): accept its licence on its page ({endpoint}/"
                          f"{what.split('@')[0]}) and set HF_TOKEN to a token of that account")
    if isinstance(e, utils.RepositoryNotFoundError):
        return InputError(f"{what}: not a local path or a catalog model, and no model repo of that name on "
                          f"{endpoint} (HTTP {status}), or a private one; check the name, or set HF_TOKEN to a "
                          "token that can read it")
    if isinstance(e, utils.RevisionNotFoundError):
        return InputError(f"{what}: the repo has no such revision (HTTP {status}); give a branch, tag or commit "
                          "that exists")
    if isinstance(e, utils.OfflineModeIsEnabled):
        return InputError(f"{what} is not in the local caches and HF_HUB_OFFLINE is set; run once online")
    if isinstance(e, utils.HfHubHTTPError):
        return InputError(f"{what}: {endpoint} answered HTTP {status}; try again later, or check HF_ENDPOINT")
    if isinstance(e, (TimeoutError, OSError, *_transport_errors())):
        timed_out = "timeout" in type(e).__name__.lower() or isinstance(e, TimeoutError)
        why = (f"no answer within {hub.constants.HF_HUB_DOWNLOAD_TIMEOUT} s (HF_HUB_DOWNLOAD_TIMEOUT)" if timed_out
               else f"cannot connect ({type(e).__name__})")
        return InputError(f"{what}: {endpoint}: {why}; check the network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 "
                          "to use only the local caches")
    return InputError(f"{what}: reading it from {endpoint} failed ({type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120] if str(e) else ''}); try again, or give a local model dir")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP clients' network errors (httpx2, httpx or requests, whichever huggingface_hub uses), from the
    modules already imported: an error can only come from one of those."""
    found: list[type[BaseException]] = []
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests", "ConnectionError"), ("requests", "Timeout")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)
