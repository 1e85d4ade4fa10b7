"""Hugging Face hub repos as a ``Store``: the protocol huggingface_hub itself speaks.

- ``GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`` (``HfApi.model_info`` with
  ``files_metadata``): resolves ``rev`` (branch, tag or commit) to the commit sha and lists
  every file with its size and, for LFS files, the sha256;
- ``GET {endpoint}/{repo}/resolve/{commit}/{file}`` with ``Range: bytes=a-b``: tensor bytes and
  headers, read at the *commit*, so a branch moving mid-run changes nothing. An LFS file
  redirects to a storage URL; later ranges of that file go there directly (without the
  token), and back through ``resolve`` if the URL stops answering (signed URLs expire);
- small files (config, index, tokenizer) go through ``hf_hub_download`` at the commit, into the
  usual cache (``HF_HUB_CACHE`` / ``HF_HOME``), so a later ``HF_HUB_OFFLINE=1`` run finds them.

``HF_ENDPOINT`` is read when a store opens (a mirror, or the loopback server of the tests).
The token comes from where huggingface_hub looks (``HF_TOKEN``, the saved login) through
``build_hf_headers``; it is sent, never printed: messages name the repo, file and range only.

Example::

    store = HubStore.open("deepseek-ai/DeepSeek-R1", "main")
    store.revision   # '56d4cbbb4d29f4355bab4b9a39ccb717a14ad5ad' (the commit `main` pointed at)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from checkpoint_tool.catalog.remote.retry import Transient, timeout_s, with_retries
from checkpoint_tool.catalog.remote.store import RemoteFile, Store
from checkpoint_tool.errors import InputError


def endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE")
    if flag is None:
        return bool(constants.HF_HUB_OFFLINE)
    return flag.strip().upper() in {"1", "ON", "YES", "TRUE"}


def cache_dir() -> Path:
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path(constants.HF_HUB_CACHE)


def _httpx() -> Any:
    from huggingface_hub.utils import _http

    return _http.httpx2 if hasattr(_http, "httpx2") else _http.httpx  # hub 2.x / 1.x


def status_fault(status: int, where: str) -> Exception | None:
    """``Transient`` for 429 / 5xx, an ``InputError`` for other failures, None for success."""
    if status in (200, 206):
        return None
    if status == 429 or status >= 500:
        return Transient(f"HTTP {status}")
    if status in (401, 403):
        return InputError(
            f"{where}: HTTP {status}: not allowed; log in (`hf auth login`) or set HF_TOKEN "
            "to a token that can read this repo"
        )
    if status == 404:
        return InputError(f"{where}: HTTP 404: not found; check the repo id, revision and file")
    return InputError(f"{where}: HTTP {status} from the server; check HF_ENDPOINT and the repo")


class HubStore(Store):
    """One hub repo at one commit."""

    def __init__(self, repo_id: str, commit: str, files: dict[str, RemoteFile]) -> None:
        super().__init__(files)
        self.repo_id = repo_id
        self.source = f"hf://{repo_id}"
        self.revision = commit
        self.endpoint = endpoint()
        from huggingface_hub.utils import build_hf_headers, get_session

        self._session = get_session()
        self._headers = {**build_hf_headers(), "Accept-Encoding": "identity"}
        #: file -> the storage URL its resolve URL redirected to (LFS files on the hub)
        self._located: dict[str, str] = {}

    @classmethod
    def open(cls, repo_id: str, revision: str | None) -> HubStore:
        """Resolve ``revision`` to a commit and list the repo there (one API request)."""
        info = with_retries(
            lambda: _model_info(repo_id, revision), f"hf://{repo_id}@{revision or 'main'}"
        )
        files = {}
        for s in info.siblings or []:
            lfs = getattr(s, "lfs", None)
            sha = getattr(lfs, "sha256", None) if lfs is not None else None
            size = s.size if s.size is not None else getattr(lfs, "size", None)
            if size is None:
                raise InputError(
                    f"hf://{repo_id}: the server lists {s.rfilename} without a size; "
                    "HF_ENDPOINT must answer /api/models/.../revision/...?blobs=true"
                )
            files[s.rfilename] = RemoteFile(s.rfilename, int(size), sha or s.blob_id, sha)
        return cls(repo_id, str(info.sha), files)

    def url(self, rel: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, rel, revision=self.revision, endpoint=self.endpoint)

    def _fetch(self, rel: str, offset: int, view: memoryview) -> None:
        n, httpx = len(view), _httpx()
        where = self.where(rel)
        with self._lock:
            located = self._located.get(rel)
        if located is not None:  # the storage URL an earlier read was redirected to
            url = located
            headers = {k: v for k, v in self._headers.items() if k.lower() != "authorization"}
        else:
            url, headers = self.url(rel), dict(self._headers)
        headers["Range"] = f"bytes={offset}-{offset + n - 1}"
        try:
            with self._session.stream(
                "GET", url, headers=headers, timeout=timeout_s(), follow_redirects=True
            ) as r:
                if located is not None and r.status_code in (401, 403, 404, 410):
                    with self._lock:  # a signed URL that expired: resolve again
                        self._located.pop(rel, None)
                    raise Transient(f"HTTP {r.status_code} from the storage URL (expired?)")
                fault = status_fault(r.status_code, where)
                if fault is not None:
                    raise fault
                if located is None and r.history:
                    with self._lock:  # one redirect per file, not one per range
                        self._located[rel] = str(r.url)
                if r.status_code == 200 and not (offset == 0 and n == self.files[rel].size):
                    raise InputError(
                        f"{where}: the server ignored the Range header (HTTP 200); ckpt needs "
                        "ranged reads (HTTP 206) to read headers without the whole file"
                    )
                self.pin(rel, r.headers.get("x-linked-etag") or r.headers.get("etag"))
                got = 0
                for chunk in r.iter_raw():
                    k = len(chunk)
                    if got + k > n:
                        raise InputError(f"{where}: the server sent more than the {n} bytes asked")
                    view[got : got + k] = chunk
                    got += k
                    self.count(k)
        except httpx.TransportError as exc:
            raise Transient(f"{type(exc).__name__} ({_first_line(exc)})") from None
        if got < n:
            raise Transient(f"short body ({got} of {n} bytes)")

    def _stat_now(self, rel: str) -> RemoteFile:
        """``HEAD`` of the resolve URL (not followed): ``X-Linked-Etag`` / ``X-Linked-Size``
        for LFS files, ``ETag`` / ``Content-Length`` otherwise, as ``get_hf_file_metadata``."""
        where = self.where(rel)
        try:
            r = self._session.head(
                self.url(rel), headers=self._headers, timeout=timeout_s(), follow_redirects=False
            )
        except _httpx().TransportError as exc:
            raise Transient(f"{type(exc).__name__} ({_first_line(exc)})") from None
        if not r.is_redirect:
            fault = status_fault(r.status_code, where)
            if fault is not None:
                raise fault
        h = r.headers
        etag = (h.get("x-linked-etag") or h.get("etag") or "").removeprefix("W/").strip('"')
        size = h.get("x-linked-size") or h.get("content-length") or "-1"
        listed = self.files[rel]
        return RemoteFile(rel, int(size), etag or listed.etag, listed.sha256)

    def download(self, rel: str) -> tuple[Path, int]:
        """A small file into the hub cache at the commit: ``(path, bytes transferred)``."""
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(
            self.repo_id, rel, cache_dir=cache_dir(), revision=self.revision
        )
        if isinstance(cached, str):
            return Path(cached), 0

        def attempt() -> str:
            try:
                return hf_hub_download(
                    self.repo_id,
                    rel,
                    revision=self.revision,
                    cache_dir=cache_dir(),
                    endpoint=self.endpoint,
                )
            except _httpx().TransportError as exc:
                raise Transient(f"{type(exc).__name__} ({_first_line(exc)})") from None
            except Exception as exc:
                raise _hub_error(exc, self.where(rel)) from None

        path = with_retries(attempt, self.where(rel))
        return Path(path), self.files[rel].size


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _hub_error(exc: Exception, where: str) -> Exception:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        fault = status_fault(status, where)
        if fault is not None:
            return fault
    return InputError(f"{where}: cannot resolve ({type(exc).__name__}: {_first_line(exc)})")


def _model_info(repo_id: str, revision: str | None) -> Any:
    from huggingface_hub import HfApi

    where = f"hf://{repo_id}@{revision or 'main'}"
    try:
        return HfApi(endpoint=endpoint()).model_info(
            repo_id, revision=revision, files_metadata=True, timeout=timeout_s()
        )
    except _httpx().TransportError as exc:
        raise Transient(f"{type(exc).__name__} ({_first_line(exc)})") from None
    except Exception as exc:  # huggingface_hub's HTTP errors carry the response
        raise _hub_error(exc, where) from None
