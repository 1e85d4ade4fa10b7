"""Memory the executor hands back to the kernel: its large reusable buffers are anonymous
mappings, whose pages go back as soon as the buffer is dropped, and the heap that planning
freed is returned before a run starts.

A ``bytearray`` of a few MiB comes from malloc, and glibc's mmap threshold moves: once a
large block has been freed (the planner's JSON text, 1-32 MiB: ``plan_sha256``), blocks up to
that size are carved from the heap, and heap pages freed below its top stay resident. The
staging and read buffers then stayed resident after the files they served, by an amount that
grew with the plan. A mapping is unmapped when its last view goes, whatever malloc did before.

Planning (catalog, policy, plan) frees many small and medium blocks; malloc keeps the heap
pages they leave free for reuse, and a conversion that then runs for minutes would carry them
as resident memory. ``release_free_heap`` asks glibc to give them back (``malloc_trim``:
pages wholly free, anywhere in the heap); elsewhere it does nothing.

Example::

    buf = page_buffer(4 << 20)        # zero-filled, no page resident until written
    memoryview(buf)[:8] = bytes(8)
    release_free_heap()               # True where glibc gave its free heap pages back
"""

from __future__ import annotations

import ctypes
import mmap
import sys


def page_buffer(nbytes: int) -> mmap.mmap:
    """A writable, zero-filled buffer of ``nbytes`` (at least 1) bytes of its own pages."""
    return mmap.mmap(-1, max(1, nbytes))


def release_free_heap() -> bool:
    """Return malloc's free heap pages to the kernel; False where there is no ``malloc_trim``
    (not Linux, or a C library without it)."""
    if sys.platform != "linux":
        return False
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
