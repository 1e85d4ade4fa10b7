"""The source side of a conversion: open shards once, read byte ranges, detect changes.

``SourceFiles`` snapshots every shard the plan reads (size, mtime) when execution starts, checks
that each header still says what the catalog (and so the plan) saw, and can re-check the
snapshot before each output file is committed: a source edited or replaced mid-run is reported
in one line instead of producing a silently mixed output. ``RangeReader`` reads byte ranges with
``os.preadv`` into one reusable buffer per worker (no mmap: mapped pages would count as our
memory, and a whole shard is never read).

A remote catalog (``catalog.store`` set: hub, S3) goes through the same two classes: there are
no descriptors (``local`` is False, so the writer's copy_file_range path is skipped), reads are
ranged requests of the store (parallel parts, retries, ETag pinned), the snapshot is the
store's listing and ``check_unchanged`` asks the server again.

Example::

    src = SourceFiles.open(catalog, files=["model-00001-of-00002.safetensors"])
    reader = RangeReader(src, capacity=64 << 20)
    view = reader.read("model-00001-of-00002.safetensors", 4096, 1 << 20)   # memoryview
    src.check_unchanged(["model-00001-of-00002.safetensors"])
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.safetensors_format import read_header
from checkpoint_tool.errors import InputError

HASH_BLOCK = 16 << 20


@dataclass(frozen=True)
class SourceStat:
    size: int
    mtime_ns: int
    header_sha256: str


class SourceFiles:
    """Open file descriptors and the start-of-run snapshot of the shards a plan reads."""

    def __init__(self, catalog: Catalog, stats: dict[str, SourceStat], fds: dict[str, int]):
        self.catalog = catalog
        self.stats = stats
        self._fds = fds
        self._lock = threading.Lock()
        self.store = catalog.store  # None for local shards

    @property
    def local(self) -> bool:
        """True when the shards are local files (descriptors, pread, copy_file_range)."""
        return self.store is None

    @classmethod
    def open(cls, catalog: Catalog, files: Iterable[str]) -> SourceFiles:
        """Open ``files`` (relative to the catalog root) and check them against the catalog."""
        if catalog.store is not None:
            from checkpoint_tool.execute.remote_source import remote_stats

            return cls(catalog, remote_stats(catalog, sorted(set(files))), {})
        stats: dict[str, SourceStat] = {}
        fds: dict[str, int] = {}
        try:
            for rel in sorted(set(files)):
                path = catalog.path_of(rel)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    raise InputError(
                        f"{path}: cannot open ({exc.strerror}); check the path and permissions"
                    ) from exc
                fds[rel] = fd
                st = os.fstat(fd)
                stats[rel] = SourceStat(st.st_size, st.st_mtime_ns, _header_sha256(path, fd))
                _check_matches_catalog(catalog, rel, st.st_size)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return cls(catalog, stats, fds)

    def fd(self, rel: str) -> int:
        return self._fds[rel]

    def check_unchanged(self, files: Iterable[str]) -> None:
        """Raise ``InputError`` if a shard's size or mtime changed since the run started."""
        if self.store is not None:
            for rel in files:
                self.store.check_unchanged(rel)
            return
        for rel in files:
            path = self.catalog.path_of(rel)
            try:
                st = os.stat(path)
            except OSError as exc:
                raise InputError(
                    f"{path}: source shard disappeared during conversion ({exc.strerror}); "
                    "restore it and rerun with --resume"
                ) from exc
            snap = self.stats[rel]
            if (st.st_size, st.st_mtime_ns) != (snap.size, snap.mtime_ns):
                raise InputError(
                    f"{path}: source shard changed during conversion (size/mtime); the output "
                    "would mix two versions: rerun with --overwrite once the source is stable"
                )

    def full_sha256(self, rel: str) -> str:
        """sha256 of a whole shard (``--hash-source``: reads every byte)."""
        if self.store is not None:
            from checkpoint_tool.execute.remote_source import remote_sha256

            return remote_sha256(self.store, rel, HASH_BLOCK)
        fd, h, pos = self._fds[rel], hashlib.sha256(), 0
        buf = bytearray(HASH_BLOCK)
        view = memoryview(buf)
        while True:
            n = _pread_into(fd, view, pos, self.catalog.path_of(rel))
            if n == 0:
                break
            h.update(view[:n])
            pos += n
        return h.hexdigest()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}

    def __enter__(self) -> SourceFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _header_sha256(path: os.PathLike[str], fd: int) -> str:
    head = os.pread(fd, 8, 0)
    if len(head) < 8:
        raise InputError(f"{path}: too short for a safetensors header; re-download the shard")
    length = int.from_bytes(head, "little")
    raw = os.pread(fd, min(length, 100 << 20), 8)
    return hashlib.sha256(head + raw).hexdigest()


def _check_matches_catalog(catalog: Catalog, rel: str, size: int) -> None:
    path = catalog.path_of(rel)
    seen = catalog.headers.get(rel)
    changed = seen is not None and seen.file_size != size
    if not changed and seen is not None:
        now = read_header(path)
        changed = now.tensors != seen.tensors
    if changed:
        raise InputError(
            f"{path}: source shard changed since it was planned (size or header differ); "
            "plan again (rerun the command) against the current files"
        )


def _pread_into(fd: int, view: memoryview, offset: int, path: object) -> int:
    try:
        return os.preadv(fd, [view], offset)
    except OSError as exc:
        raise InputError(
            f"{path}: read error at byte {offset} ({exc.strerror}); check the disk or "
            "re-download the shard"
        ) from exc


class GrowingBuffer:
    """A reusable byte buffer that grows on demand up to ``capacity`` (small models stay small).

    ``view(n)`` returns the first ``n`` bytes; a view is valid until the next ``view`` call.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._buf = bytearray(0)

    def view(self, nbytes: int) -> memoryview:
        if nbytes > self.capacity:
            raise ValueError(f"{nbytes} bytes requested from a buffer of {self.capacity}")
        if nbytes > len(self._buf):
            self._buf = bytearray(min(self.capacity, max(nbytes, 2 * len(self._buf))))
        return memoryview(self._buf)[:nbytes]


class RangeReader:
    """Reads byte ranges into one reusable buffer (a view stays valid until the next read)."""

    def __init__(self, sources: SourceFiles, capacity: int) -> None:
        self.sources = sources
        self._buf = GrowingBuffer(capacity)
        self.bytes_read = 0
        self._prefetch: Any = None

    def expect(self, nodes: list[Any]) -> None:
        """The nodes the next output file streams, in order: a remote source prefetches
        their byte ranges (``execute.remote_prefetch``); a local one ignores the hint."""
        if self.sources.store is None:
            return
        from checkpoint_tool.execute.remote_prefetch import Prefetch, footprints

        if self._prefetch is not None:
            self._prefetch.close()
        self._prefetch = Prefetch(self.sources.store, footprints(nodes))

    @property
    def capacity(self) -> int:
        return self._buf.capacity

    def read(self, rel: str, offset: int, nbytes: int) -> memoryview:
        """Bytes ``[offset, offset + nbytes)`` of shard ``rel``; ``nbytes <= capacity``."""
        view = self._buf.view(nbytes)
        self.read_into(rel, offset, view)
        return view

    def read_into(self, rel: str, offset: int, view: memoryview) -> None:
        """Fill ``view`` with the bytes of shard ``rel`` starting at ``offset``."""
        if self.sources.store is not None:
            pf = self._prefetch
            if pf is None or not pf.read_into(rel, offset, view):
                self.sources.store.read_into(rel, offset, view)
            self.bytes_read += len(view)
            return
        fd, got, nbytes = self.sources.fd(rel), 0, len(view)
        while got < nbytes:
            n = _pread_into(fd, view[got:], offset + got, self.sources.catalog.path_of(rel))
            if n == 0:
                raise InputError(
                    f"{self.sources.catalog.path_of(rel)}: file ends at byte {offset + got}, "
                    f"expected data up to {offset + nbytes}; the shard is truncated, re-download it"
                )
            got += n
        self.bytes_read += nbytes
