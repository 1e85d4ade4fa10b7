"""The source side of a conversion: the shards a plan reads, behind one interface.

``SourceFiles`` is what the executor reads through: the start-of-run snapshot of every shard
(``stats``), byte-range reads, a re-check before each output file is committed (a source edited
or replaced mid-run is one line, never a silently mixed output) and whole-file hashes. There
are two kinds, chosen once when the run opens its sources (``execute.open_source``):

- ``LocalSourceFiles`` (``execute.local_source``): open descriptors, ``os.preadv``, and
  ``local`` True, so the writer may copy with ``copy_file_range`` and the kernel may read ahead;
- ``RemoteSourceFiles`` (``execute.remote_source``): ranged requests of a hub or S3 store
  (parallel parts, retries, ETag pinned), prefetched in plan order.

``RangeReader`` reads byte ranges into one reusable buffer per worker (pages of its own,
``execute.pages``). The shards are never mapped: mapped pages would count as our memory, and a
whole shard is never read.

Example::

    src = open_sources(catalog, files=["model-00001-of-00002.safetensors"])
    reader = RangeReader(src, capacity=64 << 20)
    view = reader.read("model-00001-of-00002.safetensors", 4096, 1 << 20)   # memoryview
    src.check_unchanged(["model-00001-of-00002.safetensors"])
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.pages import page_buffer
from checkpoint_tool.execute.source_identity import SourceIdentity

if TYPE_CHECKING:
    from types import TracebackType

    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.execute.ops import Node

HASH_BLOCK = 16 << 20


@dataclass(frozen=True)
class SourceStat:
    """A shard at the start of the run: ``SourceStat(size=4235662712, mtime_ns=0,
    header_sha256='5be1...', content='etag:9f2c...')`` (``mtime_ns`` 0 for a remote shard;
    ``content`` as ``execute.source_identity`` makes it)."""

    size: int
    mtime_ns: int
    header_sha256: str
    content: str = ""

    def identity(self) -> SourceIdentity:
        """What a later run compares (``execute.source_identity``)."""
        return SourceIdentity(
            size=self.size, mtime_ns=self.mtime_ns, header_sha256=self.header_sha256,
            content=self.content,
        )  # fmt: skip


class Prefetched(Protocol):
    """Bytes fetched ahead for one output file; ``read_into`` is False where they do not
    cover the range asked for (the caller then reads it directly)."""

    def read_into(self, rel: str, offset: int, view: memoryview) -> bool: ...

    def close(self) -> None: ...


class SourceFiles(Protocol):
    """The shards one run reads, local or remote (see the module docstring)."""

    catalog: Catalog
    stats: dict[str, SourceStat]

    @property
    def local(self) -> bool:
        """True when the shards are local files (descriptors: ``fd``, copy_file_range)."""
        ...

    def fd(self, rel: str) -> int:
        """The open descriptor of a local shard (``local`` only)."""
        ...

    def read_into(self, rel: str, offset: int, view: memoryview) -> None:
        """Fill ``view`` with the bytes of shard ``rel`` from ``offset`` (``InputError`` if
        short)."""
        ...

    def prefetch(self, nodes: list[Node]) -> Prefetched | None:
        """Start fetching what ``nodes`` (one output file, in order) read, where that pays."""
        ...

    def check_unchanged(self, files: Iterable[str]) -> None:
        """``InputError`` when a shard changed since the run started."""
        ...

    def check_content(self, files: Iterable[str]) -> None:
        """``InputError`` when a shard's content id changed since the run started (the last
        check before the manifest: it catches an edit whose mtime was put back)."""
        ...

    def full_sha256(self, rel: str) -> str:
        """sha256 of a whole shard (``--hash-source``: reads every byte)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> SourceFiles: ...

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def pread_into(fd: int, view: memoryview, offset: int, path: object) -> int:
    """One ``os.preadv`` into ``view``; the bytes read (0 at the end of the file)."""
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
        self._buf: bytearray | mmap.mmap = bytearray(0)

    def view(self, nbytes: int) -> memoryview:
        if nbytes > self.capacity:
            raise ValueError(f"{nbytes} bytes requested from a buffer of {self.capacity}")
        if nbytes > len(self._buf):
            self._buf = page_buffer(min(self.capacity, max(nbytes, 2 * len(self._buf))))
        return memoryview(self._buf)[:nbytes]


class RangeReader:
    """Reads byte ranges into one reusable buffer (a view stays valid until the next read)."""

    def __init__(self, sources: SourceFiles, capacity: int) -> None:
        self.sources = sources
        self._buf = GrowingBuffer(capacity)
        self.bytes_read = 0
        self._prefetch: Prefetched | None = None

    def expect(self, nodes: list[Node]) -> None:
        """The nodes the next output file streams, in order: the sources may fetch their byte
        ranges ahead (a remote source does, ``execute.remote_prefetch``)."""
        if self._prefetch is not None:
            self._prefetch.close()
        self._prefetch = self.sources.prefetch(nodes)

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
        pf = self._prefetch
        if pf is None or not pf.read_into(rel, offset, view):
            self.sources.read_into(rel, offset, view)
        self.bytes_read += len(view)
