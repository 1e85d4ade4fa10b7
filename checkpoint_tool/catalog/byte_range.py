"""Read one byte range of a local file with ``os.preadv``: no torch, no mmap, no whole file.

Example::

    read_range("model-00001-of-00002.safetensors", 4096, 4104)   # b'\\x00\\x01...' (8 bytes)
"""

from __future__ import annotations

import os

from checkpoint_tool.errors import InputError


def read_range(path: os.PathLike[str] | str, begin: int, end: int) -> bytes:
    """Read ``[begin, end)`` of a file, raising ``InputError`` on a short read."""
    n = end - begin
    buf = bytearray(n)
    view = memoryview(buf)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})") from exc
    try:
        got = 0
        while got < n:
            chunk = os.preadv(fd, [view[got:]], begin + got)
            if chunk == 0:
                raise InputError(
                    f"{path}: file ends at byte {begin + got}, expected data up to {end}; "
                    "the shard is truncated, re-download it"
                )
            got += chunk
    except OSError as exc:
        raise InputError(f"{path}: read error at byte {begin} ({exc.strerror})") from exc
    finally:
        os.close(fd)
    return bytes(buf)
