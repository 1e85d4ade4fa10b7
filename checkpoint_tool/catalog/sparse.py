"""Which bytes of a local file range hold data, and which are holes (read as zeros).

A sparse file (``ckpt synth --sparse``, a partly preallocated download) stores runs of zero
bytes as holes; ``lseek(SEEK_DATA / SEEK_HOLE)`` finds them without reading. A value scan
can count a hole's elements as zeros instead of reading them: the result is the same, the
cost is a few system calls. Where the file system cannot tell, the whole range is data.

Example::

    pieces(fd, 4096, 1_052_672, elem=4)
    # [(4096, 8192, True), (8192, 1_052_672, False)]   (start, stop, is_data)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

from checkpoint_tool.errors import InputError

Piece = tuple[int, int, bool]


def read_runs(
    path: os.PathLike[str] | str, begin: int, end: int, elem: int, step: int
) -> Iterator[memoryview | int]:
    """``[begin, end)`` of a local file in order: data as chunks of at most ``step`` bytes
    (whole elements), read into one reused buffer (use each chunk before the next), and each
    hole as an ``int``, its length in bytes, not read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})") from exc
    try:
        buf = memoryview(bytearray(min(step, max(end - begin, 0))))
        for start, stop, is_data in pieces(fd, begin, end, elem):
            if not is_data:
                yield stop - start
                continue
            pos = start
            while pos < stop:
                n = min(step, stop - pos)
                _read_exact(fd, path, buf[:n], pos)
                yield buf[:n]
                pos += n
    finally:
        os.close(fd)


def _read_exact(fd: int, path: os.PathLike[str] | str, view: memoryview, pos: int) -> None:
    got = 0
    try:
        while got < len(view):
            n = os.preadv(fd, [view[got:]], pos + got)
            if n == 0:
                raise InputError(
                    f"{path}: file ends at byte {pos + got}, expected data up to "
                    f"{pos + len(view)}; the shard is truncated, re-download it"
                )
            got += n
    except OSError as exc:
        raise InputError(f"{path}: read error at byte {pos} ({exc.strerror})") from exc


def pieces(fd: int, begin: int, end: int, elem: int = 1) -> list[Piece]:
    """``[begin, end)`` as ``(start, stop, is_data)`` runs, holes cut to whole elements of
    ``elem`` bytes counted from ``begin`` (a partly holed element is read as data)."""
    raw = _raw_pieces(fd, begin, end)
    out: list[Piece] = []
    for start, stop, is_data in raw:
        if not is_data:
            a = begin + -(-(start - begin) // elem) * elem
            b = begin + (stop - begin) // elem * elem
            if b <= a:
                _add(out, start, stop, True)
                continue
            _add(out, start, a, True)
            _add(out, a, b, False)
            _add(out, b, stop, True)
        else:
            _add(out, start, stop, True)
    return out


def _add(out: list[Piece], start: int, stop: int, is_data: bool) -> None:
    if stop <= start:
        return
    if out and out[-1][2] == is_data and out[-1][1] == start:
        out[-1] = (out[-1][0], stop, is_data)
    else:
        out.append((start, stop, is_data))


def _raw_pieces(fd: int, begin: int, end: int) -> list[Piece]:
    seek_data = getattr(os, "SEEK_DATA", None)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return [(begin, end, True)]
    out: list[Piece] = []
    pos = begin
    try:
        while pos < end:
            try:
                data = min(os.lseek(fd, pos, seek_data), end)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no data from pos to the end of the file
                    raise
                data = end
            if data > pos:
                out.append((pos, data, False))
            if data >= end:
                break
            hole = min(os.lseek(fd, data, seek_hole), end)
            out.append((data, hole, True))
            pos = hole
    except OSError:  # the file system cannot tell: read it all
        return [(begin, end, True)]
    return out
