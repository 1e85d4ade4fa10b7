"""The executor's large reusable buffers, as anonymous mappings: their pages come from the
kernel and go back to it as soon as the buffer is dropped.

A ``bytearray`` of a few MiB comes from malloc, and glibc's mmap threshold moves: once a
large block has been freed (the planner's JSON text, 1-32 MiB: ``plan_sha256``), blocks up to
that size are carved from the heap, and heap pages freed below its top stay resident. The
staging and read buffers then stayed resident after the files they served, by an amount that
grew with the plan. A mapping is unmapped when its last view goes, whatever malloc did before.

Example::

    buf = page_buffer(4 << 20)        # zero-filled, no page resident until written
    memoryview(buf)[:8] = bytes(8)
"""

from __future__ import annotations

import mmap


def page_buffer(nbytes: int) -> mmap.mmap:
    """A writable, zero-filled buffer of ``nbytes`` (at least 1) bytes of its own pages."""
    return mmap.mmap(-1, max(1, nbytes))
