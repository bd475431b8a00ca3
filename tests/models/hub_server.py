"""A Hub-shaped HTTP server on the loopback address, for the real huggingface_hub client (HF_ENDPOINT=URL): the model
info API, file resolution with HEAD, range requests and a redirect to a CDN path for the weight files, gated and
missing repos answered as the Hub answers them (status and X-Error-Code), and a repo whose API never answers in
time. It logs every request and the body bytes it sent, so a test can count what a client downloaded."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

GOOD_TOKEN = "hf_granted"  # the token whose account accepted the gated repos' licence


@dataclass
class Served:
    method: str
    path: str
    range: str | None
    status: int
    sent: int  # body bytes


@dataclass
class Repo:
    commits: dict[str, tuple[str, dict[str, bytes]]] = field(default_factory=dict)  # revision -> (sha, files)
    gated: bool = False
    slow: bool = False
    whole_files: bool = False  # answers a range request with the whole file (200), as some mirrors do


class HubServer:
    """Start with `with HubServer() as hub:`; hub.url is the HF_ENDPOINT, hub.log the requests served."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[Served] = []
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server.answer(self, body=True)

            def do_HEAD(self) -> None:
                server.answer(self, body=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add(self, repo_id: str, files: dict[str, bytes], *, revision: str = "main", gated: bool = False,
            slow: bool = False, whole_files: bool = False) -> str:
        """Serve `files` as repo_id at `revision`; returns the commit sha."""
        sha = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        repo = self.repos.setdefault(repo_id, Repo())
        repo.commits[revision] = (sha, files)
        repo.gated, repo.slow = repo.gated or gated, repo.slow or slow
        repo.whole_files = repo.whole_files or whole_files
        return sha

    def __enter__(self) -> HubServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- answers

    def _commit(self, repo: Repo, revision: str) -> tuple[str, dict[str, bytes]] | None:
        revision = unquote(revision)
        if revision in repo.commits:
            return repo.commits[revision]
        return next((c for c in repo.commits.values() if c[0] == revision), None)

    def answer(self, h: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = urlsplit(h.path).path
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        cdn = re.fullmatch(r"/cdn/([0-9a-f]{40})/(.+)", path)
        if api:
            repo = self.repos.get(api.group(1))
            if repo is None:
                return self.error(h, 401, "RepoNotFound", "Repository not found", body)
            if repo.slow:
                self.stop.wait(30)  # longer than any client timeout the tests set
            commit = self._commit(repo, api.group(2) or "main")
            if commit is None:
                return self.error(h, 404, "RevisionNotFound", "Invalid rev id", body)
            sha, files = commit
            info = {"id": api.group(1), "modelId": api.group(1), "sha": sha, "private": False,
                    "gated": "manual" if repo.gated else False, "siblings": [{"rfilename": f} for f in files]}
            return self.send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        if resolve:
            repo = self.repos.get(resolve.group(1))
            if repo is None:
                return self.error(h, 401, "RepoNotFound", "Repository not found", body)
            if repo.gated:
                token = h.headers.get("Authorization", "")
                if not token:
                    return self.error(h, 401, "GatedRepo", "Access to model is restricted. You must have access to "
                                      "it and be authenticated to access it. Please log in.", body)
                if token != f"Bearer {GOOD_TOKEN}":
                    return self.error(h, 403, "GatedRepo", "Access to model is restricted and you are not in the "
                                      "authorized list.", body)
            commit = self._commit(repo, resolve.group(2))
            if commit is None:
                return self.error(h, 404, "RevisionNotFound", "Invalid rev id", body)
            sha, files = commit
            name = unquote(resolve.group(3))
            if name not in files:
                return self.error(h, 404, "EntryNotFound", "Entry not found", body)
            etag = hashlib.sha256(files[name]).hexdigest()
            meta = {"X-Repo-Commit": sha, "ETag": f'"{etag}"'}
            if name.endswith(".safetensors"):  # an LFS file: the Hub redirects to its CDN
                meta.update({"Location": f"{self.url}/cdn/{sha}/{name}", "X-Linked-Size": str(len(files[name])),
                             "X-Linked-Etag": f'"{etag}"'})
                return self.send(h, 302, b"", meta, body)
            return self.ranged(h, files[name], meta, body)
        if cdn:
            for repo in self.repos.values():
                for sha, files in repo.commits.values():
                    if sha == cdn.group(1) and unquote(cdn.group(2)) in files:
                        data = files[unquote(cdn.group(2))]
                        if repo.whole_files:
                            return self.send(h, 200, data, {}, body)
                        return self.ranged(h, data, {}, body)
        return self.error(h, 404, None, "Not found", body)

    def ranged(self, h: BaseHTTPRequestHandler, data: bytes, meta: dict[str, str], body: bool) -> None:
        """The file, or the part a `Range: bytes=A-B` header asks for (206)."""
        wanted = h.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted or "")
        if match is None:
            return self.send(h, 200, data, {**meta, "Accept-Ranges": "bytes"}, body)
        start = int(match.group(1))
        end = min(int(match.group(2)) if match.group(2) else len(data) - 1, len(data) - 1)
        if start > end:
            return self.send(h, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, body)
        return self.send(h, 206, data[start:end + 1], {**meta, "Content-Range": f"bytes {start}-{end}/{len(data)}",
                                                       "Accept-Ranges": "bytes"}, body)

    def error(self, h: BaseHTTPRequestHandler, status: int, code: str | None, message: str, body: bool) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self.send(h, status, json.dumps({"error": message}).encode(), headers, body)

    def send(self, h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        sent = 0
        if body and data:
            try:
                h.wfile.write(data)
                sent = len(data)
            except OSError:  # the client went away (a timeout)
                pass
        self.log.append(Served(h.command, urlsplit(h.path).path, h.headers.get("Range"), status, sent))
