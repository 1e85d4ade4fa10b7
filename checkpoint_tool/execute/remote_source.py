"""The remote half of ``SourceFiles``: the start-of-run snapshot and whole-file hashes.

The snapshot of a remote shard is the store's listing (size, ETag) and the sha256 of the
header bytes read for the catalog (the same value ``SourceFiles`` records for a local shard,
so manifests of a local and a remote conversion name the same headers). ``--hash-source``
streams every byte of each shard through sha256 and, where the hub lists an LFS sha256, stops
with one line when they differ.

Example::

    remote_stats(cat, ["model-00001-of-00002.safetensors"])
    # {'model-00001-of-00002.safetensors': SourceStat(size=4235662712, mtime_ns=0,
    #                                                 header_sha256='5be1...')}
"""

from __future__ import annotations

import hashlib
import struct

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.remote.store import Store
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.source import SourceStat


def remote_stats(catalog: Catalog, files: list[str]) -> dict[str, SourceStat]:
    store: Store = catalog.store
    out = {}
    for rel in files:
        listed = store.file(rel)
        seen = catalog.headers.get(rel)
        if seen is not None and seen.file_size != listed.size:
            raise InputError(
                f"{store.where(rel)}: size differs from the planned catalog; plan again"
            )
        sha = store.header_sha256.get(rel) or _header_sha256(store, rel)
        out[rel] = SourceStat(listed.size, 0, sha)
    return out


def _header_sha256(store: Store, rel: str) -> str:
    head = store.read(rel, 0, 8)
    (n,) = struct.unpack("<Q", head)
    return hashlib.sha256(head + store.read(rel, 8, n)).hexdigest()


def remote_sha256(store: Store, rel: str, block: int) -> str:
    """sha256 of every byte of ``rel``, checked against the hub's LFS sha256 when listed."""
    listed = store.file(rel)
    h, buf = hashlib.sha256(), bytearray(block)
    for pos in range(0, listed.size, block):
        view = memoryview(buf)[: min(block, listed.size - pos)]
        store.read_into(rel, pos, view)
        h.update(view)
    digest = h.hexdigest()
    if listed.sha256 is not None and digest != listed.sha256:
        raise InputError(
            f"{store.where(rel)}: sha256 of the bytes read is {digest}, the server lists "
            f"{listed.sha256} (LFS); the transfer or the server is corrupt: rerun"
        )
    return digest
