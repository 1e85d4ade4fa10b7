"""A loopback HTTP server that speaks the part of the hub protocol huggingface_hub calls.

Endpoints (as huggingface_hub 2.x calls them, see ``hf_api.HfApi.model_info`` and
``file_download.get_hf_file_metadata`` / ``http_get``):

- ``GET /api/models/{repo}/revision/{rev}[?blobs=true]``: ``sha`` (the commit), ``siblings``
  with ``rfilename``, ``size``, ``blobId`` and, for ``*.safetensors`` (LFS), ``lfs.sha256``;
- ``GET /api/models/{repo}/tree/{rev}?recursive=true`` (``snapshot_download``) and
  ``POST /api/models/{repo}/paths-info/{rev}`` (``get_paths_info``): entries with ``oid``,
  ``size``, ``lfs.oid``;
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``: a small file is served with ``X-Repo-Commit``,
  ``ETag`` (its git blob sha1), ``Accept-Ranges``; an LFS file (``*.safetensors``) answers 302
  to ``/lfs-cdn/{repo}/{commit}/{path}`` (the storage URL, no token needed) with
  ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``, as huggingface.co does. ``Range:
  bytes=a-b`` answers 206 with ``Content-Range``; faults apply where the bytes are served.

Repos are folders on disk (sparse files are fine: ranges are read with ``pread``). With
``hash_lfs=False`` (full-size sparse layouts) LFS ids are size/mtime digests instead of sha256.
Faults (``Fault``) apply to ranged and whole GETs of matching files: an HTTP status, a connection
reset after some body bytes (``drop``), a clean close after some bytes (``short``), a delay
before the answer (``slow``), new bytes from then on (``swap``). ``replace`` swaps a file's bytes under the same commit (its ETag
changes), as a misbehaving mirror would. ``bytes_sent`` counts body bytes.

Example::

    with HubServer({"org/tiny": HubRepo(folder)}) as hub:      # HF_ENDPOINT=hub.endpoint
        hub.faults.append(Fault("status", "model-00001", times=2, status=503))
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from .loopback import Loopback


@dataclass
class Fault:
    """``kind``: status / drop / short / slow; applies to GETs of files containing ``match``."""

    kind: str
    match: str = ""
    times: int = 1
    status: int = 500
    after: int = 0  # body bytes sent before a drop / short close
    delay: float = 0.0
    skip: int = 0  # matching requests let through before the fault applies
    swap_to: Path | None = None  # kind "swap": serve this file from now on (its ETag changes)


@dataclass
class HubRepo:
    folder: Path
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: dict[str, str] = field(default_factory=lambda: {"main": ""})
    hash_lfs: bool = True

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self.branches = {b: (c or self.commit) for b, c in self.branches.items()}
        self.overrides: dict[str, Path] = {}
        #: file -> sha256 the API lists instead of the real one (a corrupt mirror)
        self.lfs_lies: dict[str, str] = {}
        self._ids: dict[str, tuple[str, bool]] = {}

    def path(self, rel: str) -> Path:
        return self.overrides.get(rel) or self.folder / rel

    def names(self) -> list[str]:
        return sorted(
            p.relative_to(self.folder).as_posix() for p in self.folder.rglob("*") if p.is_file()
        )

    def content_id(self, rel: str) -> tuple[str, bool]:
        """``(etag, is_lfs)``: sha256 for LFS files, git blob sha1 otherwise."""
        path = self.path(rel)
        st = path.stat()
        key = f"{path}:{st.st_size}:{st.st_mtime_ns}"
        if key not in self._ids:
            lfs = rel.endswith(".safetensors")
            if lfs and not self.hash_lfs:
                etag = hashlib.sha256(key.encode()).hexdigest()
            elif lfs:
                h = hashlib.sha256()
                with open(path, "rb") as fh:
                    while block := fh.read(8 << 20):
                        h.update(block)
                etag = h.hexdigest()
            else:
                data = path.read_bytes()
                etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            self._ids[key] = (etag, lfs)
        return self._ids[key]


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up (a timeout, an abandoned prefetch) is not a server fault


class HubServer(Loopback):
    """A ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread (a context manager)."""

    def __init__(self, repos: dict[str, HubRepo]) -> None:
        self.repos = repos
        self.faults: list[Fault] = []
        self.bytes_sent = 0
        self.requests: list[str] = []
        self.auth: list[str | None] = []  # the Authorization header of each request
        self.token: str | None = None  # when set, requests without it get 401
        #: LFS files answer 302 to ``/lfs-cdn/...`` (the storage URL), as huggingface.co does
        self.redirect_lfs = True
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"hub": self})
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.serve(self.httpd)

    def replace(self, repo: str, rel: str, new_file: Path) -> None:
        self.repos[repo].overrides[rel] = Path(new_file)

    def take_fault(self, rel: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.times > 0 and f.match in rel:
                    if f.skip > 0:
                        f.skip -= 1
                        return None
                    f.times -= 1
                    return f
        return None

    def sent(self, n: int) -> None:
        with self._lock:
            self.bytes_sent += n


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_CDN = re.compile(r"^/lfs-cdn/(?P<repo>[^/]+/[^/]+)/(?P<rev>[0-9a-f]{40})/(?P<path>.+)$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>tree|paths-info)/(?P<rev>[^/]+)")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms stalls

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._route(body=True)

    def do_HEAD(self) -> None:
        self._route(body=False)

    def _route(self, body: bool) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        self.hub.requests.append(f"{self.command} {path}")
        self.hub.auth.append(self.headers.get("Authorization"))
        m = _CDN.match(path)
        if m:  # a "signed" storage URL: no token needed, as on the real CDN
            self._resolve(m["repo"], m["rev"], m["path"], body, cdn=True)
            return
        if self.hub.token is not None and self.headers.get("Authorization") != (
            f"Bearer {self.hub.token}"
        ):
            self._json(401, {"error": "Invalid credentials"}, {"X-Error-Code": "RepoNotFound"})
            return
        m = _TREE.match(path)
        if m:
            self._tree(m["repo"], unquote(m["rev"]), m["kind"], None)
            return
        m = _INFO.match(path)
        if m:
            self._info(m["repo"], unquote(m["rev"] or "main"), parse_qs(url.query))
            return
        m = _RESOLVE.match(path)
        if m:
            self._resolve(m["repo"], unquote(m["rev"]), m["path"], body)
            return
        self._json(404, {"error": "not found"}, {"X-Error-Code": "EntryNotFound"})

    def do_POST(self) -> None:  # paths-info: form or JSON body with "paths"
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n).decode()
        try:
            paths = json.loads(raw)["paths"]
        except (ValueError, KeyError, TypeError):
            paths = parse_qs(raw).get("paths", [])
        m = _TREE.match(unquote(urlparse(self.path).path))
        if not m:
            self._json(404, {"error": "not found"})
            return
        self._tree(m["repo"], unquote(m["rev"]), m["kind"], list(paths))

    def _entry(self, repo: HubRepo, rel: str) -> dict[str, object]:
        etag, lfs = repo.content_id(rel)
        size = repo.path(rel).stat().st_size
        doc: dict[str, object] = {"type": "file", "path": rel, "size": size}
        doc["oid"] = hashlib.sha1(etag.encode()).hexdigest() if lfs else etag
        if lfs:
            sha = repo.lfs_lies.get(rel, etag)
            doc["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
        return doc

    def _tree(self, repo_id: str, rev: str, kind: str, paths: list[str] | None) -> None:
        """``/tree/{rev}?recursive=true`` (snapshot_download) and ``/paths-info/{rev}``."""
        repo = self.hub.repos.get(repo_id)
        if repo is None or self._commit(repo, rev) is None:
            self._json(404, {"error": "not found"}, {"X-Error-Code": "RevisionNotFound"})
            return
        names = repo.names() if paths is None else [p for p in paths if repo.path(p).is_file()]
        dirs = sorted({n.rsplit("/", 1)[0] for n in names if "/" in n})
        entries = [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in dirs]
        self._json(200, entries + [self._entry(repo, n) for n in names])

    def _commit(self, repo: HubRepo, rev: str) -> str | None:
        if rev == repo.commit or rev in repo.branches.values():
            return rev
        return repo.branches.get(rev)

    def _json(self, status: int, doc: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _info(self, repo_id: str, rev: str, query: dict) -> None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return
        commit = self._commit(repo, rev)
        if commit is None:
            self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for rel in repo.names():
            sib: dict[str, object] = {"rfilename": rel}
            if blobs:
                e = self._entry(repo, rel)
                sib["size"], sib["blobId"] = e["size"], e["oid"]
                if "lfs" in e:
                    lfs = dict(e["lfs"])  # type: ignore[call-overload]
                    sib["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": 134}
            siblings.append(sib)
        self._json(
            200,
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "private": False,
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": siblings,
            },
        )

    def _resolve(self, repo_id: str, rev: str, rel: str, body: bool, cdn: bool = False) -> None:
        repo = self.hub.repos.get(repo_id)
        commit = self._commit(repo, rev) if repo is not None else None
        if repo is None or commit is None or not repo.path(rel).is_file():
            code = "RepoNotFound" if repo is None else "EntryNotFound"
            self._json(404, {"error": f"{rel} not found"}, {"X-Error-Code": code})
            return
        if not cdn and self.hub.redirect_lfs and rel.endswith(".safetensors"):
            self._redirect(repo, commit, repo_id, rel)
            return
        fault = self.hub.take_fault(rel) if body else None
        if fault is not None and fault.kind == "swap" and fault.swap_to is not None:
            repo.overrides[rel] = fault.swap_to
        path = repo.path(rel)
        size = path.stat().st_size
        etag, lfs = repo.content_id(rel)
        start, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng.strip())
            if not m or int(m[1]) >= size:
                self._json(416, {"error": "range"}, {"Content-Range": f"bytes */{size}"})
                return
            start, end, status = int(m[1]), min(size, int(m[2] or size - 1) + 1), 206
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if fault is not None and fault.kind == "status":
            self._json(fault.status, {"error": "injected"}, {"Retry-After": "0"})
            return
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/octet-stream")
        if lfs:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if not body:
            return
        limit = end - start
        if fault is not None and fault.kind in ("drop", "short"):
            limit = min(limit, fault.after)
        self._send_range(path, start, limit)
        if fault is not None and fault.kind == "drop":  # RST instead of FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if fault is not None and fault.kind in ("drop", "short"):
            self.close_connection = True
            self.connection.close()

    def _redirect(self, repo: HubRepo, commit: str, repo_id: str, rel: str) -> None:
        """An LFS file, as the hub answers it: 302 to the storage URL, with ``X-Linked-*``."""
        etag, _ = repo.content_id(rel)
        size = repo.path(rel).stat().st_size
        self.send_response(302)
        self.send_header("Location", f"{self.hub.endpoint}/lfs-cdn/{repo_id}/{commit}/{rel}")
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha1(etag.encode()).hexdigest()}"')  # the pointer
        self.send_header("X-Linked-Etag", f'"{etag}"')
        self.send_header("X-Linked-Size", str(size))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_range(self, path: Path, start: int, n: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while pos < n:
                block = os.pread(fd, min(4 << 20, n - pos), start + pos)
                if not block:
                    break
                try:
                    self.wfile.write(block)
                except OSError:  # the client gave up (a timeout): nothing more to send
                    self.close_connection = True
                    return
                self.hub.sent(len(block))
                pos += len(block)
        finally:
            os.close(fd)
