"""``execute.pages``: buffers of their own pages, and the free heap handed back before a run."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import pytest

from checkpoint_tool.execute.pages import page_buffer, release_free_heap


def test_page_buffer_is_zeroed_and_writable():
    buf = page_buffer(3 << 20)
    view = memoryview(buf)
    assert len(view) == 3 << 20 and not any(view[-4096:])
    view[-3:] = b"abc"
    assert bytes(buf[-3:]) == b"abc"
    assert len(page_buffer(0)) == 1


def _resident() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text())[1]) << 10  # type: ignore[index]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_heap_pages_go_back_to_the_kernel():
    blocks = [bytearray(b"x" * 60_000) for _ in range(800)]  # ~48 MB below the mmap threshold
    blocks = blocks[-1:]  # the last one pins the heap's top: free() alone keeps the rest
    before = _resident()
    assert release_free_heap()
    assert before - _resident() > 16 << 20
    assert blocks
