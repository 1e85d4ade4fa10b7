"""Local shards as ``SourceFiles``: open descriptors, ``os.preadv``, size/mtime snapshot.

Each shard the plan reads is opened once when the run starts; its size, mtime, the sha256
of its header bytes and its content id (``execute.source_identity``) are the snapshot, and its header must still say what the catalog (and so
the plan) saw. ``check_unchanged`` compares size and mtime again before a file is committed.

Example::

    with LocalSourceFiles.open(catalog, ["model-00001-of-00002.safetensors"]) as src:
        src.stats["model-00001-of-00002.safetensors"]
        # SourceStat(size=4235662712, mtime_ns=1733140000000000000, header_sha256='5be1...')
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.safetensors_format import read_header
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.source import HASH_BLOCK, Prefetched, SourceStat, pread_into
from checkpoint_tool.execute.source_identity import content_id

if TYPE_CHECKING:
    from types import TracebackType

    from checkpoint_tool.execute.ops import Node


class LocalSourceFiles:
    """Open file descriptors and the start-of-run snapshot of the local shards a plan reads."""

    local = True

    def __init__(self, catalog: Catalog, stats: dict[str, SourceStat], fds: dict[str, int]):
        self.catalog = catalog
        self.stats = stats
        self._fds = fds
        self._lock = threading.Lock()

    @classmethod
    def open(cls, catalog: Catalog, files: Iterable[str]) -> LocalSourceFiles:
        """Open ``files`` (relative to the catalog root) and check them against the catalog."""
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
                stats[rel] = SourceStat(
                    st.st_size, st.st_mtime_ns, _header_sha256(path, fd), content_id(fd, st.st_size)
                )
                _check_matches_catalog(catalog, rel, st.st_size)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return cls(catalog, stats, fds)

    def fd(self, rel: str) -> int:
        return self._fds[rel]

    def read_into(self, rel: str, offset: int, view: memoryview) -> None:
        fd, got, nbytes = self._fds[rel], 0, len(view)
        while got < nbytes:
            n = pread_into(fd, view[got:], offset + got, self.catalog.path_of(rel))
            if n == 0:
                raise InputError(
                    f"{self.catalog.path_of(rel)}: file ends at byte {offset + got}, "
                    f"expected data up to {offset + nbytes}; the shard is truncated, re-download it"
                )
            got += n

    def prefetch(self, nodes: list[Node]) -> Prefetched | None:
        """None: the kernel reads local shards ahead (``execute.readahead``)."""
        return None

    def check_unchanged(self, files: Iterable[str]) -> None:
        """Raise ``InputError`` if a shard's size or mtime changed since the run started."""
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

    def check_content(self, files: Iterable[str]) -> None:
        """Raise ``InputError`` if a shard's content id differs from the run's start."""
        for rel in files:
            snap = self.stats[rel]
            if content_id(self._fds[rel], snap.size) != snap.content:
                raise InputError(
                    f"{self.catalog.path_of(rel)}: source shard changed during conversion "
                    "(content); the output would mix two versions: rerun with --overwrite once "
                    "the source is stable"
                )

    def full_sha256(self, rel: str) -> str:
        fd, h, pos = self._fds[rel], hashlib.sha256(), 0
        buf = bytearray(HASH_BLOCK)
        view = memoryview(buf)
        while True:
            n = pread_into(fd, view, pos, self.catalog.path_of(rel))
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

    def __enter__(self) -> LocalSourceFiles:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
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
        changed = now.columns_digest() != seen.columns_digest()
    if changed:
        raise InputError(
            f"{path}: source shard changed since it was planned (size or header differ); "
            "plan again (rerun the command) against the current files"
        )
