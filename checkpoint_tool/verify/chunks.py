"""Compare byte ranges of files a cache-sized chunk at a time (the lossless check's fast path).

``same_runs`` compares a range of a DST file with the expected bytes a segment lists as runs
(``verify.expected.Run``: source tensor byte ranges and fills). Each chunk is read with
``os.preadv`` into a buffer the thread reuses (the read releases the GIL; the kernel copies
from the page cache or the disk into a buffer that stays in cache) and compared as ``uint64``
words with numpy, which releases the GIL too, so every worker reads and compares at once.
Chunks of ``CHUNK`` bytes keep the Python loop to one iteration per MiB; the defaults are what
``benchmarks/bench_verify.py --sweep`` measured fastest against ``cat`` (docs/verify.md).

Example::

    files = Files()
    same_runs(files, seg.runs, lambda name: (Path("/src/model.safetensors"), 1024),
              Path("/out/model-00001-of-00002.safetensors"), 4096)   # True / False
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from checkpoint_tool.catalog.files import Files
from checkpoint_tool.verify.expected import Run

#: bytes compared per read of each side (two buffers per thread)
CHUNK = 1 << 20
#: how two chunks are compared: ``numpy`` (``uint64`` equality, releases the GIL: the threads
#: compare at once) or ``memcmp`` (``bytearray ==``, holds the GIL; also every ragged tail)
COMPARE = "numpy"

#: a source tensor name -> (its file, the offset of its first byte), None when not a local file
SourceRange = Callable[[str], tuple[Path, int] | None]

_local = threading.local()


def _buffers(n: int) -> tuple[bytearray, bytearray]:
    """This thread's two buffers of ``n`` bytes (kept for ``CHUNK``, fresh for a tail)."""
    if n != CHUNK:
        return bytearray(n), bytearray(n)
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = (bytearray(CHUNK), bytearray(CHUNK))
    return bufs


def _fill_chunk(fill: bytes, n: int) -> bytes:
    """``n`` bytes of ``fill`` repeated (cached per thread for full chunks)."""
    cache: dict[tuple[bytes, int], bytes] = getattr(_local, "fills", None) or {}
    _local.fills = cache
    hit = cache.get((fill, n))
    if hit is None:
        hit = (fill * (n // len(fill) + 1))[:n]
        if n == CHUNK:
            cache[(fill, n)] = hit
    return hit


def _equal(a: bytearray, b: bytearray) -> bool:
    if COMPARE == "numpy" and len(a) % 8 == 0:
        return bool(np.array_equal(np.frombuffer(a, np.uint64), np.frombuffer(b, np.uint64)))
    return a == b


def same_runs(
    files: Files, runs: Sequence[Run], source: SourceRange, dst: Path, begin: int
) -> bool | None:
    """Whether DST bytes from ``begin`` equal ``runs``; None when a run's source is not a local
    file (the caller builds the array). Read errors raise InputError naming the file."""
    ranges: list[tuple[Path, int] | None] = []
    for run in runs:
        if run.source is None:
            ranges.append(None)
            continue
        where = source(run.source)
        if where is None:
            return None
        ranges.append((where[0], where[1] + run.offset))
    pos = begin
    for run, src in zip(runs, ranges, strict=True):
        for off in range(0, run.length, CHUNK):
            n = min(CHUNK, run.length - off)
            want, got = _buffers(n)
            files.read_into(dst, got, pos + off)
            if src is None:
                if got != _fill_chunk(run.fill, n):
                    return False
                continue
            files.read_into(src[0], want, src[1] + off)
            if not _equal(want, got):
                return False
        pos += run.length
    return True
