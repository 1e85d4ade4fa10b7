"""Remote shards (hub, S3) as ``SourceFiles``: ranged reads of the catalog's store.

There are no descriptors (``local`` is False, so the writer's copy_file_range path is skipped).
The snapshot of a shard is the store's listing (size, ETag or LFS sha256: its content id for
``execute.source_identity``) and the sha256 of the header bytes
read for the catalog (the same value a local shard records, so manifests of a local and a
remote conversion name the same headers); ``check_unchanged`` asks the server again.
``--hash-source`` streams every byte of each shard through sha256 and, where the hub lists an
LFS sha256, stops with one line when they differ. Each output file's ranges are fetched ahead
in plan order (``execute.remote_prefetch``).

Example::

    src = RemoteSourceFiles.open(cat, ["model-00001-of-00002.safetensors"])
    src.stats
    # {'model-00001-of-00002.safetensors': SourceStat(size=4235662712, mtime_ns=0,
    #                                                 header_sha256='5be1...')}
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.remote.store import Store
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.remote_prefetch import Prefetch, footprints
from checkpoint_tool.execute.source import HASH_BLOCK, Prefetched, SourceStat

if TYPE_CHECKING:
    from types import TracebackType

    from checkpoint_tool.execute.ops import Node


class RemoteSourceFiles:
    """The start-of-run snapshot of the remote shards a plan reads, and reads through the store."""

    local = False

    def __init__(self, catalog: Catalog, store: Store, stats: dict[str, SourceStat]) -> None:
        self.catalog = catalog
        self.store = store
        self.stats = stats

    @classmethod
    def open(cls, catalog: Catalog, files: Iterable[str]) -> RemoteSourceFiles:
        store = catalog.store
        if store is None:
            raise ValueError(f"{catalog.root}: a local catalog; open it with LocalSourceFiles")
        return cls(catalog, store, _stats(catalog, store, sorted(set(files))))

    def fd(self, rel: str) -> int:
        raise ValueError(f"{self.store.where(rel)}: a remote shard has no file descriptor")

    def read_into(self, rel: str, offset: int, view: memoryview) -> None:
        self.store.read_into(rel, offset, view)

    def prefetch(self, nodes: list[Node]) -> Prefetched | None:
        return Prefetch(self.store, footprints(nodes))

    def check_unchanged(self, files: Iterable[str]) -> None:
        for rel in files:
            self.store.check_unchanged(rel)

    def check_content(self, files: Iterable[str]) -> None:
        """Nothing more to do: ``check_unchanged`` compared the server's content id (ETag)."""

    def full_sha256(self, rel: str) -> str:
        """sha256 of every byte of ``rel``, checked against the hub's LFS sha256 when listed."""
        store, listed = self.store, self.store.file(rel)
        h, buf = hashlib.sha256(), bytearray(HASH_BLOCK)
        for pos in range(0, listed.size, HASH_BLOCK):
            view = memoryview(buf)[: min(HASH_BLOCK, listed.size - pos)]
            store.read_into(rel, pos, view)
            h.update(view)
        digest = h.hexdigest()
        if listed.sha256 is not None and digest != listed.sha256:
            raise InputError(
                f"{store.where(rel)}: sha256 of the bytes read is {digest}, the server lists "
                f"{listed.sha256} (LFS); the transfer or the server is corrupt: rerun"
            )
        return digest

    def close(self) -> None:
        """Nothing to close: the store outlives the run (it belongs to the catalog)."""

    def __enter__(self) -> RemoteSourceFiles:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _stats(catalog: Catalog, store: Store, files: list[str]) -> dict[str, SourceStat]:
    out = {}
    for rel in files:
        listed = store.file(rel)
        seen = catalog.headers.get(rel)
        if seen is not None and seen.file_size != listed.size:
            raise InputError(
                f"{store.where(rel)}: size differs from the planned catalog; plan again"
            )
        sha = store.header_sha256.get(rel) or _header_sha256(store, rel)
        # the server's content id: the hub's LFS sha256, else the ETag (S3, hub)
        content = (
            f"sha256:{listed.sha256}" if listed.sha256
            else f"etag:{listed.etag}" if listed.etag else ""
        )  # fmt: skip
        out[rel] = SourceStat(listed.size, 0, sha, content)
    return out


def _header_sha256(store: Store, rel: str) -> str:
    head = store.read(rel, 0, 8)
    (n,) = struct.unpack("<Q", head)
    return hashlib.sha256(head + store.read(rel, 8, n)).hexdigest()
