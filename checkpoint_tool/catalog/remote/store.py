"""The remote side of the one reader interface: a listing pinned at open, ranged reads.

A ``Store`` is a checkpoint folder on a server (a hub repo at one commit, an S3 key prefix):
``files`` maps each relative name to its size and content id (ETag; the LFS sha256 where the
hub gives one), fixed when the store is opened. ``read_into`` fills a buffer with a byte range
of one file: ranges above ``CKPT_REMOTE_PART_BYTES`` (default 8 MiB) are split into parts read
in parallel (``CKPT_REMOTE_PARALLEL``, default 8), each part retried with backoff
(``retry.with_retries``). Every response must carry the content id seen first for that file:
a file replaced on the server between two reads is an ``InputError``, never mixed bytes.
Subclasses implement one attempt of one range (``_fetch``) and a fresh look at one file
(``_stat_now``). ``bytes_transferred`` counts every body byte received, retries included.

Example::

    store = HubStore.open("org/model", "main")      # or S3Store.open("bucket", "models/r1")
    store.files["model-00001-of-00002.safetensors"]
    # RemoteFile(name='model-00001-of-00002.safetensors', size=4235662712,
    #            etag='9f2c...', sha256='9f2c...')
    buf = bytearray(1 << 20)
    store.read_into("model-00001-of-00002.safetensors", 4096, memoryview(buf))
    store.bytes_transferred  # 1048576
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from checkpoint_tool.catalog.paths import listed
from checkpoint_tool.catalog.remote.retry import with_retries
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES
from checkpoint_tool.errors import InputError


@dataclass(frozen=True)
class RemoteFile:
    """One file of a store: ``etag`` pins its content; ``sha256`` when the server knows it."""

    name: str
    size: int
    etag: str | None = None
    sha256: str | None = None


def part_bytes() -> int:
    return max(1 << 16, int(os.environ.get("CKPT_REMOTE_PART_BYTES", 8 << 20)))


def parallel() -> int:
    return max(1, int(os.environ.get("CKPT_REMOTE_PARALLEL", 8)))


class Store:
    """A pinned listing plus ranged reads; ``label`` names it in messages (no token, ever)."""

    #: ``hf://org/name`` or ``s3://bucket/prefix``: what the manifest calls the source
    source: str = ""
    #: the resolved commit (hub) or a digest of the ETags (S3): what the manifest pins
    revision: str = ""

    def __init__(self, files: dict[str, RemoteFile]) -> None:
        self.files = files
        self.bytes_transferred = 0
        self.requests = 0
        self.retried = 0
        self._pinned: dict[str, str] = {}
        #: sha256 of each shard's length prefix + header, as read for the catalog
        self.header_sha256: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._abort = threading.Event()
        self._failure: str | None = None

    @property
    def label(self) -> str:
        return f"{self.source}@{self.revision}" if self.revision else self.source

    def where(self, rel: str) -> str:
        return f"{self.label}/{rel}"

    # -- what subclasses provide ----------------------------------------------------------
    def _fetch(self, rel: str, offset: int, view: memoryview) -> None:
        """One attempt to fill ``view`` from ``offset``; ``Transient`` or ``InputError``."""
        raise NotImplementedError

    def _stat_now(self, rel: str) -> RemoteFile:
        """The file as the server describes it now (one request)."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------
    def file(self, rel: str) -> RemoteFile:
        return listed(
            self.files,
            rel,
            lambda: f"{self.where(rel)}: no such file on the server; check the index or the prefix",
        )

    def side_files(self, skip: set[str]) -> list[str]:
        """Non-weight files to copy along (pickles and hidden files are never fetched)."""
        return sorted(
            rel
            for rel in self.files
            if rel not in skip
            and not rel.endswith(".safetensors")
            and not rel.endswith(PICKLE_SUFFIXES)
            and not rel.startswith(".")
            and "/." not in rel
        )

    def count(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_transferred += nbytes

    def pin(self, rel: str, etag: str | None) -> None:
        """Check a response's content id against the first one seen for ``rel``."""
        if not etag:
            return
        etag = etag.removeprefix("W/").strip('"')
        with self._lock:
            seen = self._pinned.setdefault(rel, etag)
        if seen != etag:
            raise self.changed(rel, seen, etag)

    def changed(self, rel: str, old: str | None, new: str | None) -> InputError:
        return InputError(
            f"{self.where(rel)}: changed on the server while ckpt read it (ETag {old} -> {new}); "
            "nothing is written under a final name: rerun once the source is stable"
        )

    def read(self, rel: str, offset: int, nbytes: int) -> bytes:
        buf = bytearray(nbytes)
        self.read_into(rel, offset, memoryview(buf))
        return bytes(buf)

    def read_into(self, rel: str, offset: int, view: memoryview) -> None:
        """Fill ``view`` with bytes ``[offset, offset + len(view))`` of ``rel``."""
        size = self.file(rel).size
        n = len(view)
        if offset < 0 or offset + n > size:
            raise InputError(
                f"{self.where(rel)}: bytes {offset}-{offset + n} requested, the file has {size}; "
                "the header and the file disagree, the shard is truncated"
            )
        if n == 0:
            return
        step = part_bytes()
        parts = [(offset + a, view[a : a + step]) for a in range(0, n, step)]
        if len(parts) == 1 or parallel() == 1:
            for off, v in parts:
                self._part(rel, off, v)
            return
        pool = self._executor()
        for fut in [pool.submit(self._part, rel, off, v) for off, v in parts]:
            fut.result()

    def _part(self, rel: str, offset: int, view: memoryview) -> None:
        what = f"{self.where(rel)}: bytes {offset}-{offset + len(view) - 1}"

        def attempt() -> None:
            if self._abort.is_set():  # another read failed for good: stop, with its message
                raise InputError(self._failure or f"{what}: not read, another read failed")
            with self._lock:
                self.requests += 1
            self._fetch(rel, offset, view)

        try:
            with_retries(attempt, what, on_retry=self._note_retry)
        except InputError as exc:
            with self._lock:
                self._failure = self._failure or str(exc)
            self._abort.set()  # queued prefetches end at their next attempt
            raise

    def submit_part(self, rel: str, offset: int, view: memoryview) -> Future[None]:
        """Read one range (one request, retried) into ``view`` on the store's pool."""
        return self._executor().submit(self._part, rel, offset, view)

    def record_header_sha256(self, rel: str, digest: str) -> None:
        """The sha256 of ``rel``'s length prefix and header, as read for the catalog."""
        with self._lock:
            self.header_sha256[rel] = digest

    def _note_retry(self) -> None:
        with self._lock:
            self.retried += 1

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(parallel(), thread_name_prefix="ckpt-remote")
            return self._pool

    def check_unchanged(self, rel: str) -> None:
        """Raise ``InputError`` if ``rel`` on the server is no longer what was listed."""
        listed = self.file(rel)
        now = with_retries(lambda: self._stat_now(rel), self.where(rel))
        with self._lock:
            seen = self._pinned.get(rel, listed.etag)  # what the reads carried, else the listing
        if (now.size, now.etag) != (listed.size, seen):
            raise self.changed(rel, seen, now.etag)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
