"""What a run depends on in each source shard, recorded so a later run can tell it changed.

A resumed run (``--resume``), every part of an array job (``--part I/N``) and ``--finalize``
continue work that an earlier process did from the bytes it read then. Each records, per
shard, a ``SourceIdentity`` (in the journal, in the part record) and the next one compares it
with the shard as it is now: any difference is one line naming the shard and what to run,
before anything is written. Never a mixed output.

The identity of a local shard is its size, ``mtime_ns``, the sha256 of its header and a content
id: the sha256 of the whole shard when it is at most ``FULL_HASH_MAX`` bytes, otherwise the
sha256 of ``SAMPLES`` blocks of ``SAMPLE_BYTES`` spread evenly over the data (first and last
block included): a shard replaced by another of the same size whose mtime was preserved
(``cp -p``, ``rsync -t``, a restored backup) differs there. The sampled reads cost about 1 MiB
a shard, a few milliseconds; a full sha256 of every byte is ``--hash-source``. A remote
shard's identity is its size, header sha256 and the server's content id (ETag; on the hub the
LFS sha256), pinned at the revision the catalog resolved.

Example::

    SourceIdentity(size=4235662712, mtime_ns=1733140000000000000,
                   header_sha256="5be1...", content="sample:9f2c...")
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from pydantic import BaseModel

from checkpoint_tool.errors import InputError

#: shards up to this size are hashed whole for their content id
FULL_HASH_MAX = 32 << 20
#: otherwise this many blocks of this many bytes
SAMPLES = 16
SAMPLE_BYTES = 64 << 10


class SourceIdentity(BaseModel):
    """One shard as a run saw it (``mtime_ns`` 0 for a remote shard)."""

    size: int
    mtime_ns: int = 0
    header_sha256: str
    content: str = ""

    def difference(self, now: SourceIdentity) -> str | None:
        """What differs from ``now`` in words ("mtime"), or None if nothing does."""
        for what, a, b in (
            ("size", self.size, now.size),
            ("header", self.header_sha256, now.header_sha256),
            ("content", self.content, now.content),
            ("mtime", self.mtime_ns, now.mtime_ns),
        ):
            if a != b and (what != "content" or (a and b)):
                return what
        return None


def content_id(fd: int, size: int) -> str:
    """``sha256:<hex>`` of a small file, ``sample:<hex>`` of ``SAMPLES`` blocks of a large one."""
    h = hashlib.sha256()
    if size <= FULL_HASH_MAX:
        pos = 0
        while pos < size:
            block = os.pread(fd, min(8 << 20, size - pos), pos)
            if not block:
                break
            h.update(block)
            pos += len(block)
        return f"sha256:{h.hexdigest()}"
    step = (size - SAMPLE_BYTES) / (SAMPLES - 1)
    for k in range(SAMPLES):
        offset = int(k * step)
        h.update(offset.to_bytes(8, "little") + os.pread(fd, SAMPLE_BYTES, offset))
    return f"sample:{h.hexdigest()}"


def check_same(
    recorded: Mapping[str, SourceIdentity],
    now: Mapping[str, SourceIdentity],
    where: object,
    since: str,
    fix: str,
) -> None:
    """``InputError`` naming the first shard in both mappings whose identity differs.

    ``where``: the source folder or label (joined with the shard's name in the message);
    ``since``: "the interrupted run started"; ``fix``: what to run."""
    for rel in sorted(recorded.keys() & now.keys()):
        what = recorded[rel].difference(now[rel])
        if what is not None:
            raise InputError(
                f"{where}/{rel}: source shard changed since {since} ({what} differs); the files "
                f"written so far hold its old bytes: {fix}"
            )
